"""A DBOS system database with many workflows, made fast (issue 34): the schema is the SDK's own (dbos 3.4.0's
migrations, run by the SDK, or applied up to a given version the way the SDK applies them), and the rows go in
with COPY into the SDK's own workflow_status and operation_outputs tables, shaped as the SDK writes them (an
inserted workflow reads back through DBOSClient like one the SDK enqueued: tests/integration/
test_dataplane_scale.py compares). Used by that test (tens of thousands of rows) and by bench/dataplane.py
(181,346, the scale run of issue 34).

Needs dbos 3.4.0 (the data plane's pin): run by .venv-relay's interpreter, `python -m tests.support.sysdb_fill
URL COUNT APP [VERSION] [+ URL COUNT APP [VERSION] ...]` (the harness has dbos 3.2.0): several databases in one
process, which starts (and imports the SDK) once. URL: postgresql://... or sqlite:////absolute/path."""

from __future__ import annotations

import base64
import pickle
import sqlite3
import sys
from collections.abc import Iterator
from typing import Any

import psycopg

STATUSES = ("SUCCESS", "SUCCESS", "SUCCESS", "ERROR", "PENDING", "ENQUEUED", "CANCELLED")
NAMES = tuple(f"workflow_{i}" for i in range(7))
QUEUES = (None, "orders", "emails")
EXECUTORS = ("exec-a", "exec-b", "exec-c")
VERSIONS = ("v1", "v2", "v3", "v4")
BASE_MS = 1_780_000_000_000
STEP_WORKFLOW = "wf-steps"  # the one workflow with steps
STEPS = 5


def _pickled(value: Any) -> str:
    return base64.b64encode(pickle.dumps(value)).decode("ascii")


INPUTS = _pickled({"args": ("order-" + "x" * 120, 42), "kwargs": {"note": "y" * 60}})
OUTPUT = _pickled({"result": "z" * 150, "count": 7})


def _engine(url: str) -> Any:
    import sqlalchemy as sa

    return sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))


def migrate(url: str, version: int | None = None, schema: str = "dbos") -> int:
    """The SDK's schema in ``url``: every migration, or the first ``version`` ones, run by the SDK's own runner
    (its list is cut for this call, and restored after it). Returns the version recorded."""
    from dbos import _migration

    engine = _engine(url)
    every = _migration.get_dbos_migrations
    try:
        _migration.ensure_dbos_schema(engine, schema)
        if version is not None:  # the SDK's own runner, over its first `version` migrations
            _migration.get_dbos_migrations = lambda *args: every(*args)[:version]  # type: ignore[assignment]
        _migration.run_dbos_migrations(engine, schema, False)
        return int(_migration.get_migration_versions(engine, schema, False)[0])
    finally:
        _migration.get_dbos_migrations = every  # type: ignore[assignment]
        engine.dispose()


def _rows(count: int, app_name: str) -> Iterator[tuple[Any, ...]]:
    for i in range(count):
        status = STATUSES[i % len(STATUSES)]
        created = BASE_MS + i * 37
        started = None if status == "ENQUEUED" else created + (i * 7) % 500
        completed = created + 50 + (i * 13) % 5000 if status in ("SUCCESS", "ERROR", "CANCELLED") else None
        output = OUTPUT if status == "SUCCESS" else None
        error = _pickled(RuntimeError("failed")) if status == "ERROR" else None
        yield (f"wf-{i:08d}", status, NAMES[i % len(NAMES)], QUEUES[i % len(QUEUES)], EXECUTORS[i % 3],
               VERSIONS[(i // 11) % len(VERSIONS)], created, completed or created, started, completed, INPUTS,
               output, error, "py_pickle", app_name)


COLUMNS = ("workflow_uuid, status, name, queue_name, executor_id, application_version, created_at, updated_at, "
           "started_at_epoch_ms, completed_at, inputs, output, error, serialization, application_name")


def fill(url: str, count: int, app_name: str, schema: str = "dbos") -> None:
    """``count`` workflows (wf-00000000, ...) of varied status, name, queue, executor and version, and
    STEPS steps of STEP_WORKFLOW, by COPY."""
    with psycopg.connect(url, autocommit=True) as connection:
        with connection.cursor() as cursor:
            with cursor.copy(f'COPY "{schema}".workflow_status ({COLUMNS}) FROM STDIN') as copy:
                for row in _rows(count, app_name):
                    copy.write_row(row)
                copy.write_row((STEP_WORKFLOW, "SUCCESS", "with_steps", None, "exec-a", "v1", BASE_MS - 1000,
                                BASE_MS - 900, BASE_MS - 1000, BASE_MS - 900, INPUTS, OUTPUT, None, "py_pickle",
                                app_name))
            with cursor.copy(f'COPY "{schema}".operation_outputs (workflow_uuid, function_id, function_name, '
                             "output, started_at_epoch_ms, completed_at_epoch_ms, serialization) FROM STDIN") as copy:
                for step in range(STEPS):
                    copy.write_row((STEP_WORKFLOW, step, f"step_{step}", _pickled(step), BASE_MS - 1000 + step,
                                    BASE_MS - 999 + step, "py_pickle"))
        connection.execute(f'ANALYZE "{schema}".workflow_status')


def migrate_sqlite(path: str, version: int | None = None) -> int:
    """An SQLite system database at ``path`` with the SDK's migrations (all, or the first ``version``)."""
    from dbos import _migration

    migrations = _migration.sqlite_migrations if version is None else _migration.sqlite_migrations[:version]
    with sqlite3.connect(path) as db:
        for sql in migrations:
            if sql:
                db.executescript(sql)
        db.execute("CREATE TABLE IF NOT EXISTS dbos_migrations (version INTEGER NOT NULL PRIMARY KEY)")
        db.execute("DELETE FROM dbos_migrations")
        db.execute("INSERT INTO dbos_migrations VALUES (?)", (len(migrations),))
    return len(migrations)


def fill_sqlite(path: str, count: int, app_name: str) -> None:
    with sqlite3.connect(path) as db:
        marks = ", ".join("?" * len(COLUMNS.split(",")))
        db.executemany(f"INSERT INTO workflow_status ({COLUMNS}) VALUES ({marks})", _rows(count, app_name))


def main(argv: list[str]) -> None:
    job: list[str] = []
    for arg in [*argv, "+"]:
        if arg != "+":
            job.append(arg)
            continue
        make(job)
        job = []


def make(job: list[str]) -> None:
    """One database: URL COUNT APP [VERSION]."""
    url, count, app_name = job[0], int(job[1]), job[2]
    version = int(job[3]) if len(job) > 3 else None
    if url.startswith("sqlite:///"):
        path = url.removeprefix("sqlite:///")
        recorded = migrate_sqlite(path, version)
        fill_sqlite(path, count, app_name)
    else:
        recorded = migrate(url, version)
        fill(url, count, app_name)
    print(f"schema {recorded}, {count} workflows")


if __name__ == "__main__":
    main(sys.argv[1:])
