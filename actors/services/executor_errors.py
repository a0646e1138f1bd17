"""Which executor error_messages are the caller's fault: a pure table of the texts the SDKs really send.

An executor answers every failure with a free-text ``error_message`` (no code). Most are faults of the executor
or its database (ExecutorFailedError), but some say the request itself was wrong: an id that does not exist, a
filter the executor's system database cannot do, an import that is not an export. Those are the caller's
(TargetNotFoundError, TargetConflictError, TargetInvalidError), like the same mistake caught by Relay itself.
The texts below were read from each SDK's source and checked against real executors
(tests/integration/test_operations_python.py, test_sdk_executors.py; tests/unit/test_executor_calls.py keeps
them); an unrecognized text stays the executor's fault.

- Python (dbos 3.2.0): context, traceback, last line ``dbos._error.DBOSNonExistentWorkflowError: DBOS Error 5:
  Non-existent target workflow ID: a, b`` (``export`` instead of ``target`` on export);
  ``Filtering workflows by attributes is not supported on SQLite``; imports: ``binascii.Error``,
  ``gzip.BadGzipFile``, ``_pickle.UnpicklingError``, ``EOFError: Ran out of input``.
- TypeScript (5.2.x): ``Workflow a, b does not exist``; imports: zlib's ``incorrect header check``, JSON.parse's
  ``Unexpected token`` / ``is not valid JSON``, JSON of another shape ``Cannot read properties of undefined``.
- Go (v1.6): ``DBOS Error NonExistentWorkflow: workflow a does not exist`` (only ``NonExistentWorkflow`` in
  metadata-only mode); imports: ``Failed to create gzip reader`` / ``decompress workflow data`` / ``unmarshal
  workflow data``, JSON of another shape ``null value in column "workflow_uuid" ... violates not-null constraint``.
- Go and Java, fork from failure of a workflow without steps: ``workflow a has no steps``.
- Java (1.1): ``Workflow does not exist a``; imports: ``Not in GZIP format``, ``Unrecognized token``, JSON of
  another shape ``Cannot invoke ... because "status" is null``.
- Imports of a workflow still there, and forks to a ``newWorkflowId`` that already exists, every SDK: the
  database's unique violation (a conflict), e.g. Python ``sqlalchemy.exc.IntegrityError:
  (psycopg.errors.UniqueViolation) duplicate key value violates unique constraint "workflow_status_pkey"``
  (SQLite: ``UNIQUE constraint failed``), TypeScript the bare PostgreSQL message, Java
  ``org.postgresql.util.PSQLException: ERROR: duplicate key value ...``, Go ``failed to fork workflow: failed
  to insert forked workflow statuses: ERROR: duplicate key value ... (SQLSTATE 23505)``: no SDK checks the new
  id first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from relay.actors.errors import (
    CallerMistakeError,
    TargetConflictError,
    TargetInvalidError,
    TargetNotFoundError,
)

# The message types whose failure on an unknown id means "no such workflow" (never a fault of the executor).
_ON_WORKFLOWS = frozenset({
    "resume", "fork_workflow", "fork_from_failure", "rewind_workflow", "cancel", "delete", "export_workflow",
    "list_steps", "get_workflow_events", "get_workflow_notifications", "get_workflow_streams",
})
_FILTERING = frozenset({"list_workflows", "list_queued_workflows", "get_workflow_aggregates"})
_IMPORT = frozenset({"import_workflow"})


@dataclass(frozen=True)
class ClientError:
    """An executor error that is the caller's: its kind, and the request field it blames (if one)."""

    kind: type[CallerMistakeError]
    location: str | None
    explanation: str


@dataclass(frozen=True)
class _Rule:
    types: frozenset[str]
    pattern: re.Pattern[str]
    error: ClientError


_NOT_FOUND = ClientError(TargetNotFoundError, None, "no such workflow")
_ATTRIBUTES = ClientError(
    TargetInvalidError, "body.attributes",
    "the executors' system database cannot filter by attributes (SQLite); use PostgreSQL or drop the filter",
)
_NO_STEPS = ClientError(TargetInvalidError, "body.workflowIds", "a workflow has no step to fork from")
_NOT_AN_EXPORT = ClientError(TargetInvalidError, "body.serializedWorkflow",
                             "not a workflow exported by this application's SDK")
_ALREADY_THERE = ClientError(TargetConflictError, "body.serializedWorkflow",
                             "a workflow of this export already exists")
_FORK_ID_TAKEN = ClientError(TargetConflictError, "body.newWorkflowId",
                             "a workflow with this newWorkflowId already exists")
# The system database's unique violation (PostgreSQL, SQLite, psycopg's class name).
_UNIQUE_VIOLATION = re.compile(r"UNIQUE constraint failed|duplicate key value|UniqueViolation", re.IGNORECASE)

RULES: tuple[_Rule, ...] = (
    _Rule(_ON_WORKFLOWS, re.compile(
        r"DBOSNonExistentWorkflowError|Non-existent (?:target|export) workflow ID"  # Python
        r"|\bNonExistentWorkflow\b"  # Go
        # TypeScript "Workflow a, b does not exist", Go "workflow a does not exist" (a space after "workflow":
        # PostgreSQL's 'relation "workflow_status" does not exist' is a fault), Java "Workflow does not exist a".
        r"|\bworkflows? [^\s\"']+(?:, [^\s\"']+)* does not exist|\bworkflow does not exist",
        re.IGNORECASE,
    ), _NOT_FOUND),
    _Rule(_FILTERING, re.compile(r"by attributes is not supported", re.IGNORECASE), _ATTRIBUTES),
    # Go and Java: a workflow that never ran a step has no failure to fork from.
    _Rule(frozenset({"fork_from_failure"}), re.compile(r"\bworkflow \S+ has no steps\b", re.IGNORECASE), _NO_STEPS),
    _Rule(_IMPORT, re.compile(
        r"binascii\.Error|BadGzipFile|Not a gzipped file|UnpicklingError|EOFError|zlib\.error"  # Python
        r"|incorrect header check|unexpected end of file|Unexpected token|is not valid JSON"  # TypeScript
        r"|Unexpected end of JSON input"
        # Go names the stage (not its bare "unexpected EOF": a dropped database connection says that too).
        r"|Failed to (?:base64 decode serialized workflow|create gzip reader|decompress workflow data"
        r"|unmarshal workflow data)"
        r"|Not in GZIP format|Unrecognized token|JsonParseException"  # Java
        # JSON that is not an export: each SDK fails on the first field it misses.
        r"|Cannot read properties of (?:undefined|null)"  # TypeScript
        r"|violates not-null constraint"  # Go
        r"|because \"[^\"]+\" is null",  # Java
    ), _NOT_AN_EXPORT),
    _Rule(_IMPORT, _UNIQUE_VIOLATION, _ALREADY_THERE),
    # A fork writes one new workflow (and its copied steps, in the same transaction): a unique violation is its id.
    _Rule(frozenset({"fork_workflow"}), _UNIQUE_VIOLATION, _FORK_ID_TAKEN),
)


def classify(message_type: str, error_message: str) -> ClientError | None:
    """The client error an executor's answer to ``message_type`` reports, or None (a fault of the executor)."""
    for rule in RULES:
        if message_type in rule.types and rule.pattern.search(error_message):
            return rule.error
    return None
