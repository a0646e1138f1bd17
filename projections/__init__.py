"""Read models fed by the event log: one projector per view, rebuildable by replaying the log."""

from relay.projections import pool_reconnect

pool_reconnect.install()
