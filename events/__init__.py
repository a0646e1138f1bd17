"""Relay's domain model: aggregates and their events. Pure: no I/O, no clock (time comes in as `at`)."""
