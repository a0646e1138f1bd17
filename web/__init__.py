"""Relay's edge: the Flask app (HTTP API, /websocket, console), the gevent server and the CLI."""
