"""Where the event classes of older logs live today.

Stored events name their class by topic (``module:Class.Event``). Until the redesign of December 2026 the
domain was installed as the top-level package ``events``; it is ``relay.events`` now. Registering the old
module names keeps every log written before then readable (tests/unit/test_event_log_fixture.py)."""

from __future__ import annotations

from types import ModuleType

from eventsourcing.utils import register_topic

from relay.events import alerting, application, executor, instance, organization, retention

# Module name in an older log -> the module of today (events/app.py became events/application.py).
MOVED_MODULES: dict[str, ModuleType] = {
    "events.alerting": alerting,
    "events.app": application,
    "events.executor": executor,
    "events.instance": instance,
    "events.organization": organization,
    "events.retention": retention,
}


def register_moved_topics() -> None:
    """Idempotent: registering the same module again is a no-op."""
    for old, module in MOVED_MODULES.items():
        register_topic(old, module)
