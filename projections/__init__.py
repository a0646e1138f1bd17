"""Read models fed by the event log: one projector per view, rebuildable by replaying the log."""
