"""What each SDK release supports: the message types and bulk workflow ids per release (pure)."""

from __future__ import annotations

import functools
import re

# What each SDK release supports

_Version = tuple[int, int, int]
_Change = tuple[_Version, tuple[str, ...], tuple[str, ...]]  # (release, types added, types removed)

# Python (PyPI "dbos"): from the git tags of dbos-inc/dbos-transact-py (the types each release's
# _conductor/conductor.py dispatches on) and the wheels of 2.31.1, 3.0.0, 3.1.0 and 3.2.0.
_PYTHON: tuple[_Change, ...] = (
    ((0, 23, 0), ("executor_info", "recovery", "cancel", "resume", "restart", "list_workflows",
                  "list_queued_workflows", "get_workflow"), ()),
    ((0, 24, 0), ("exist_pending_workflows",), ()),
    ((0, 25, 0), ("list_steps",), ()),
    ((1, 0, 0), ("fork_workflow",), ()),
    ((1, 5, 0), ("retention",), ()),
    ((2, 6, 0), ("get_metrics",), ()),
    ((2, 9, 0), ("delete", "export_workflow", "import_workflow"), ()),
    ((2, 10, 0), ("alert",), ()),
    ((2, 13, 0), ("list_schedules", "get_schedule", "pause_schedule", "resume_schedule",
                  "backfill_schedule", "trigger_schedule"), ()),
    ((2, 14, 0), ("list_application_versions", "set_latest_application_version"), ()),
    ((2, 15, 0), ("get_workflow_events", "get_workflow_notifications", "get_workflow_streams"), ()),
    ((2, 16, 0), ("fork_from_failure", "get_workflow_aggregates"), ()),
    ((2, 20, 0), ("list_queues", "get_queue"), ()),
    ((2, 23, 0), ("get_step_aggregates",), ()),
    ((3, 0, 0), (), ("restart",)),
    ((3, 1, 0), ("rewind_workflow",), ()),
)  # fmt: skip

# TypeScript (npm "@dbos-inc/dbos-sdk"): from the vX.Y tags of dbos-inc/dbos-transact-ts (the cases of
# src/conductor/conductor.ts) and the packages 5.0.2, 5.1.10 and 5.2.11. Retention is absent at tag v2.10
# and present at v2.10.24 (patch releases in between not checked). restart is gone in 5.0.2 and
# rewind_workflow is present in 5.1.10 (earlier 5.0/5.1 patches not checked).
_TYPESCRIPT: tuple[_Change, ...] = (
    ((2, 6, 0), ("executor_info", "recovery", "cancel", "resume", "restart", "list_workflows",
                 "list_queued_workflows", "get_workflow", "exist_pending_workflows"), ()),
    ((2, 7, 0), ("list_steps",), ()),
    ((2, 9, 0), ("fork_workflow",), ()),
    ((2, 10, 24), ("retention",), ()),
    ((4, 5, 0), ("get_metrics",), ()),
    ((4, 7, 0), ("delete", "export_workflow", "import_workflow"), ()),
    ((4, 8, 0), ("alert",), ()),
    ((4, 9, 0), ("list_schedules", "get_schedule", "pause_schedule", "resume_schedule",
                 "backfill_schedule", "trigger_schedule"), ()),
    ((4, 10, 0), ("list_application_versions", "set_latest_application_version"), ()),
    ((4, 11, 0), ("get_workflow_events", "get_workflow_notifications", "get_workflow_streams"), ()),
    ((4, 12, 0), ("fork_from_failure", "get_workflow_aggregates"), ()),
    ((4, 17, 0), ("list_queues", "get_queue"), ()),
    ((4, 19, 0), ("get_step_aggregates",), ()),
    ((5, 0, 0), (), ("restart",)),
    ((5, 1, 0), ("rewind_workflow",), ()),
)  # fmt: skip

# Go (module github.com/dbos-inc/dbos-transact-golang): from each release's dbos/conductor_protocol.go in the
# module zips v0.6.0 (the oldest the Go proxy serves) to v1.6.0, and frames of a v1.6.0 executor
# (tests/unit/sdk_frames/go-v1.6.0.json). No release has restart. From v1.7.0 the client is in the vendor's
# proprietary module, so those releases are left unknown (they never connect to Relay unmodified).
_GO: tuple[_Change, ...] = (
    ((0, 6, 0), ("executor_info", "recovery", "cancel", "resume", "list_workflows", "list_queued_workflows",
                 "get_workflow", "exist_pending_workflows", "list_steps", "fork_workflow", "retention"), ()),
    ((0, 9, 0), ("get_metrics",), ()),
    ((0, 12, 0), ("alert", "delete", "export_workflow", "import_workflow"), ()),
    ((1, 0, 0), ("list_schedules", "get_schedule", "pause_schedule", "resume_schedule", "backfill_schedule",
                 "trigger_schedule", "list_application_versions", "set_latest_application_version",
                 "get_workflow_events", "get_workflow_notifications", "get_workflow_streams", "fork_from_failure",
                 "get_workflow_aggregates", "get_step_aggregates", "list_queues", "get_queue"), ()),
    ((1, 5, 0), ("rewind_workflow",), ()),
)  # fmt: skip

# Java (Maven "dev.dbos:transact"): 1.1.0-m6 is the only release read (the others are not served here), from
# its jar (dev.dbos.transact.conductor.protocol.MessageType and Conductor's handlers) and frames of a real
# executor (tests/unit/sdk_frames/java-1.1.0-m6.json): the 32 types and restart, no rewind_workflow. It reports
# dbos_version "1.1.0-m6": the milestone suffix is ignored, so the other 1.1.x releases are assumed alike.
_JAVA: tuple[_Change, ...] = (
    ((1, 1, 0), ("executor_info", "recovery", "cancel", "resume", "restart", "delete", "list_workflows",
                 "list_queued_workflows", "get_workflow", "exist_pending_workflows", "list_steps", "fork_workflow",
                 "fork_from_failure", "retention", "get_metrics", "alert", "export_workflow", "import_workflow",
                 "list_schedules", "get_schedule", "pause_schedule", "resume_schedule", "backfill_schedule",
                 "trigger_schedule", "list_application_versions", "set_latest_application_version",
                 "get_workflow_events", "get_workflow_notifications", "get_workflow_streams",
                 "get_workflow_aggregates", "get_step_aggregates", "list_queues", "get_queue"), ()),
)  # fmt: skip

# language -> (changes, newest release line read; anything newer is unknown)
_SUPPORT: dict[str, tuple[tuple[_Change, ...], tuple[int, int]]] = {
    "python": (_PYTHON, (3, 2)),
    "typescript": (_TYPESCRIPT, (5, 2)),
    "go": (_GO, (1, 6)),
    "java": (_JAVA, (1, 1)),
}

# workflow_ids (several workflows in one cancel/resume/delete), per type: the release that reads it (same
# sources as above; Go's delete had it before its cancel and resume did). Older releases ignore it and act
# on workflow_id alone.
_BULK_TYPES = ("cancel", "resume", "delete")
_BULK_IDS: dict[str, dict[str, _Version]] = {
    "python": dict.fromkeys(_BULK_TYPES, (2, 15, 0)),
    "typescript": dict.fromkeys(_BULK_TYPES, (4, 11, 0)),
    "go": {"delete": (0, 12, 0), "cancel": (1, 0, 0), "resume": (1, 0, 0)},
    "java": dict.fromkeys(_BULK_TYPES, (1, 1, 0)),
}

_VERSION = re.compile(r"\s*v?(\d+)\.(\d+)(?:\.(\d+))?")


def _parse_version(text: str | None) -> _Version | None:
    match = _VERSION.match(text) if isinstance(text, str) else None
    if match is None:
        return None
    major, minor, patch = match.groups()
    return int(major), int(minor), int(patch or 0)


def _known_release(language: str | None, dbos_version: str | None) -> tuple[str, _Version] | None:
    lang = language.strip().lower() if isinstance(language, str) else ""
    version = _parse_version(dbos_version)
    if lang not in _SUPPORT or version is None:
        return None
    changes, newest = _SUPPORT[lang]
    if version < changes[0][0] or version[:2] > newest:
        return None
    return lang, version


@functools.lru_cache(maxsize=256)
def supported_types(language: str | None, dbos_version: str | None) -> frozenset[str] | None:
    """Cached: routing asks for every executor on every call, and the answer is a pure function.
    The request types an executor of this SDK language/release answers, best effort; None if unknown
    (other languages, unparseable versions, releases before the SDK had a conductor client or newer
    than the ones read)."""
    known = _known_release(language, dbos_version)
    if known is None:
        return None
    lang, version = known
    types: set[str] = set()
    for release, added, removed in _SUPPORT[lang][0]:
        if release <= version:
            types.update(added)
            types.difference_update(removed)
    return frozenset(types)


def supports_bulk_ids(language: str | None, dbos_version: str | None, message_type: str | None = None) -> bool | None:
    """Whether ``message_type`` (cancel, resume or delete; None: all three) may carry several
    ``workflow_ids`` (older SDKs silently act on the first only); None if the release is unknown."""
    known = _known_release(language, dbos_version)
    if known is None:
        return None
    lang, version = known
    types = _BULK_TYPES if message_type is None else (message_type,)
    return all(t in _BULK_IDS[lang] and version >= _BULK_IDS[lang][t] for t in types)
