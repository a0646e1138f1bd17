"""Relay's own read-only reads of the SDK's tables for what the public ``DBOSClient`` does not read (issue 36,
docs/adr/0046): a workflow's events, the notifications sent to it and its streams, and every setting of a queue
(dbos 3.4.0's ``Queue`` has no ``priority_enabled``, and each of its properties reads the row again).

What they may touch is narrow on purpose:
- one workflow's rows (or the named queues' rows), at most `MAX_ROWS` of them (more is refused, never cut short);
- the columns every schema version Relay reads has (`SYSTEM_TABLE_SCHEMA_VERSIONS`, 109 to 125: dbos 3.4.0's
  migrations, PostgreSQL and SQLite), named here rather than taken from the SDK's table objects, so a column a
  newer migration adds (notifications.consumed_by_function_id, 121) is never asked of an older database;
- a read-only transaction (sql.py `read_only`) under the data plane's statement timeout (the engine's).

Values are stored serialized (the row's ``serialization``: the Python SDK's base64 pickle, ``portable_json``, or
another SDK's text) and are loaded as the client loads them, with the plain-data loader (values.py): what it will
not load stays the stored text, and `as_text` shows it as the other answers do. The records are the executor's
own: ``{key, value}``, ``{topic, message, created_at_epoch_ms, consumed}``, ``{key, values}`` and the queue record
of wire/client_records.py."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from relay.actors.adapters.dataplane.schema import MIN_SCHEMA_VERSION
from relay.actors.adapters.dataplane.sql import read_only
from relay.actors.adapters.dataplane.values import as_text
from relay.actors.errors import DataPlaneRefusedError
from relay.wire.json_types import JSONObject

# The schema versions these reads are tested on (tests/integration/test_dataplane_communications.py builds the
# oldest with the SDK's migrations; the SDK's apps write the newest): dbos 3.4.0 reads 109 to 125.
SYSTEM_TABLE_SCHEMA_VERSIONS = range(MIN_SCHEMA_VERSION, 126)

# At most this many rows of one workflow (events, notifications or stream entries) are answered from the database;
# a workflow with more is refused (422), so an answer is never a silent part of what the workflow holds.
MAX_ROWS = 10_000
QUEUE_NAMES_PER_READ = 500  # the named queues are read this many at a time (SQLite's bound parameters)

NULL_TOPIC = "__null__topic__"  # what the SDKs store for a message sent without a topic
STREAM_CLOSED = "__DBOS_STREAM_CLOSED__"  # the value a closed stream ends with (stored serialized, or raw: legacy)

QUEUE_COLUMNS = (
    "name", "concurrency", "worker_concurrency", "rate_limit_max", "rate_limit_period_sec", "priority_enabled",
    "partition_queue", "polling_interval_sec", "application_name", "partition_concurrency",
    "partition_worker_concurrency", "partition_rate_limit_max", "partition_rate_limit_period_sec",
)  # fmt: skip


def supports(schema_version: int | None) -> bool:
    return schema_version is not None and schema_version in SYSTEM_TABLE_SCHEMA_VERSIONS


def _table(engine: Any, schema: str, name: str, *columns: str) -> Any:
    import sqlalchemy as sa  # noqa: PLC0415 (the optional extra)

    return sa.table(name, *(sa.column(c) for c in columns), schema=None if engine.dialect.name == "sqlite" else schema)


def _rows(engine: Any, statement: Any, what: str, workflow_id: str) -> list[Any]:
    with read_only(engine) as connection:
        rows = connection.execute(statement.limit(MAX_ROWS + 1)).fetchall()
    if len(rows) > MAX_ROWS:
        raise DataPlaneRefusedError(f"workflow '{workflow_id}' has more than {MAX_ROWS} {what} in its system "
                                    "database: a connected executor answers it whole")
    return rows


def load(stored: str | None, serialization: str | None) -> object:
    """A stored value as the client loads it (the SDK's own dispatch on ``serialization``, with the plain-data
    pickle loader values.py installs); the stored text when it will not load."""
    from dbos._serialization import deserialize_value  # noqa: PLC0415 (the optional extra)

    from relay.actors.adapters.dataplane.values import install  # noqa: PLC0415 (imports dbos)

    if stored is None:
        return None
    try:
        return deserialize_value(stored, serialization, install())
    except Exception:  # not plain data, another SDK's format, not a pickle at all: shown as stored
        return stored


def events(engine: Any, schema: str, workflow_id: str) -> list[JSONObject]:
    """The workflow's events (its latest value of each key), by key."""
    import sqlalchemy as sa  # noqa: PLC0415 (the optional extra)

    t = _table(engine, schema, "workflow_events", "workflow_uuid", "key", "value", "serialization")
    statement = sa.select(t.c.key, t.c.value, t.c.serialization).where(t.c.workflow_uuid == workflow_id) \
        .order_by(t.c.key)
    return [{"key": key, "value": as_text(load(value, serialization))}
            for key, value, serialization in _rows(engine, statement, "events", workflow_id)]


def notifications(engine: Any, schema: str, workflow_id: str) -> list[JSONObject]:
    """The messages sent to the workflow, oldest first, consumed or not."""
    import sqlalchemy as sa  # noqa: PLC0415 (the optional extra)

    t = _table(engine, schema, "notifications", "destination_uuid", "message_uuid", "topic", "message",
               "serialization", "created_at_epoch_ms", "consumed")
    statement = sa.select(t.c.topic, t.c.message, t.c.serialization, t.c.created_at_epoch_ms, t.c.consumed) \
        .where(t.c.destination_uuid == workflow_id).order_by(t.c.created_at_epoch_ms, t.c.message_uuid)
    return [{"topic": None if topic == NULL_TOPIC else topic, "message": as_text(load(message, serialization)),
             "created_at_epoch_ms": None if created is None else int(created), "consumed": bool(consumed)}
            for topic, message, serialization, created, consumed
            in _rows(engine, statement, "notifications", workflow_id)]


def streams(engine: Any, schema: str, workflow_id: str) -> list[JSONObject]:
    """The workflow's streams by key, each its values in order up to where it was closed (the sentinel is not a
    value: read_stream ends there too)."""
    import sqlalchemy as sa  # noqa: PLC0415 (the optional extra)

    t = _table(engine, schema, "streams", "workflow_uuid", "key", "value", "offset", "serialization")
    statement = sa.select(t.c.key, t.c.value, t.c.serialization).where(t.c.workflow_uuid == workflow_id) \
        .order_by(t.c.key, t.c["offset"])
    found: dict[str, list[str | None]] = {}
    closed: set[str] = set()
    for key, stored, serialization in _rows(engine, statement, "stream entries", workflow_id):
        if key in closed:
            continue
        values = found.setdefault(key, [])
        value = load(stored, serialization)
        if STREAM_CLOSED in (stored, value):
            closed.add(key)
            continue
        values.append(as_text(value))
    return [{"key": key, "values": values} for key, values in found.items()]


def queue_rows(engine: Any, schema: str, names: Iterable[str]) -> dict[str, Mapping[str, Any]]:
    """The rows of the named queues (every column QUEUE_COLUMNS names), by name; a name without a row is left
    out."""
    t = _table(engine, schema, "queues", *QUEUE_COLUMNS)
    wanted = list(dict.fromkeys(names))
    found: dict[str, Mapping[str, Any]] = {}
    with read_only(engine) as connection:
        for start in range(0, len(wanted), QUEUE_NAMES_PER_READ):
            chunk = wanted[start:start + QUEUE_NAMES_PER_READ]
            for row in connection.execute(t.select().where(t.c.name.in_(chunk))):
                found[str(row.name)] = dict(row._mapping)
    return found
