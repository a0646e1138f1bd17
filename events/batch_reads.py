"""The stored events of several aggregates in one query: what a batch of concurrent loads reads (events/log.py).

Part of the event log's I/O edge, like events/log.py. eventsourcing reads one aggregate per query
(`select_events`); in a connect storm every handshake loads its executor first, so thousands of loads queue for
the store's connections (PostgreSQL: a round trip each; SQLite: a query each on the gevent hub). Here the loads
waiting at the same time are answered by one query over the recorder's own table, with the library's retry on a
lost connection (eventsourcing 9.5.6: `stored_events`, `originator_id`/`originator_version`/`topic`/`state`;
tests/unit/test_group_commit.py reads through it against both stores)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import UUID

from eventsourcing.persistence import InterfaceError, OperationalError, StoredEvent
from eventsourcing.postgres import PostgresAggregateRecorder
from eventsourcing.sqlite import SQLiteAggregateRecorder
from eventsourcing.utils import retry
from psycopg.sql import SQL, Identifier

# SQLite's limit on a statement's parameters is 32,766 (3.32+); batches are far smaller (group_commit.MAX_BATCH).


@retry((InterfaceError, OperationalError), max_attempts=10, wait=0.2)
def select_events_of(recorder: Any, ids: Sequence[UUID]) -> dict[UUID, list[StoredEvent]]:
    """Every stored event of each aggregate of ``ids``, in version order (an aggregate without events: absent)."""
    out: dict[UUID, list[StoredEvent]] = {}
    if not ids:
        return out
    unique = list(dict.fromkeys(ids))
    if isinstance(recorder, PostgresAggregateRecorder):
        statement = SQL("SELECT originator_id, originator_version, topic, state FROM {schema}.{table} "
                        "WHERE originator_id = ANY(%s) ORDER BY originator_id, originator_version").format(
            schema=Identifier(recorder.datastore.schema), table=Identifier(recorder.events_table_name))
        with recorder.datastore.transaction(commit=False) as curs:
            curs.execute(statement, (unique,))
            rows = curs.fetchall()
        for row in rows:
            out.setdefault(row["originator_id"], []).append(StoredEvent(
                originator_id=row["originator_id"], originator_version=row["originator_version"],
                topic=row["topic"], state=bytes(row["state"])))
        return out
    if isinstance(recorder, SQLiteAggregateRecorder):
        marks = ", ".join("?" * len(unique))
        statement = (f"SELECT originator_id, originator_version, topic, state FROM {recorder.events_table_name} "  # noqa: S608
                     f"WHERE originator_id IN ({marks}) ORDER BY originator_id, originator_version")
        with recorder.datastore.transaction(commit=False) as curs:
            curs.execute(statement, [i.hex for i in unique])
            rows = curs.fetchall()
        for row in rows:
            originator = recorder.convert_originator_id(row["originator_id"])
            out.setdefault(originator, []).append(StoredEvent(
                originator_id=originator, originator_version=row["originator_version"], topic=row["topic"],
                state=row["state"]))
        return out
    for originator in unique:  # another recorder (the in-memory one of unit tests): one read each
        events = list(recorder.select_events(originator))
        if events:
            out[originator] = events
    return out
