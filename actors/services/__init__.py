"""The application services: the use cases the HTTP API and the console share (calling executors, workflow
actions). They raise domain errors only (actors/errors.py); web/problems.py maps them to HTTP."""
