"""Relay's own read-only query on an application's system database (issue 34, docs/adr/0009): workflow
aggregates as one GROUP BY, where folding the SDK client's list page by page took 93x as long.

What it may touch is narrow on purpose:
- only the schema versions it is tested on (`AGGREGATE_SCHEMA_VERSIONS`; tests/integration/
  test_dataplane_scale.py checks it against a direct GROUP BY on each); any other version returns None and the
  caller folds the client's list instead;
- the workflow filter is the SDK's own: the `list_workflows` statement the client would run, built and not run
  (`sdk_workflow_filter`), so every filter means here what it means to the SDK; Relay adds only the grouping;
- a read-only transaction (`SET TRANSACTION READ ONLY` on PostgreSQL, `PRAGMA query_only` on SQLite) under the
  data plane's statement timeout (the engine's `statement_timeout`, actors/adapters/dataplane/client.py).

The SDK internals it reads (``DBOSClient._sys_db``, ``SystemDatabase.list_workflows``'s
``_observability_query`` and ``tables``) are pinned to the installed dbos release by the same tests."""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator, Mapping
from typing import Any

from relay.actors.adapters.dataplane.schema import MIN_SCHEMA_VERSION
from relay.actors.policies.dataplane_aggregates import GROUPS, AggregateRequestError

# The schema versions the query is tested on: dbos 3.4.0's client reads 109 to 125.
AGGREGATE_SCHEMA_VERSIONS = range(MIN_SCHEMA_VERSION, 126)

# The WorkflowStatus attribute each group flag reads, as the workflow_status column it comes from.
_COLUMN_OF = {"status": "status", "name": "name", "queue_name": "queue_name", "executor_id": "executor_id",
              "app_version": "application_version", "application_name": "application_name"}
MEASURES = ("count", "min_created_at", "max_queue_wait_ms", "max_total_latency_ms")


class _Built(Exception):
    """Raised in place of running the SDK's statement once it is built."""


class _CapturingConnection:
    def __init__(self) -> None:
        self.statement: Any = None

    def execute(self, statement: object, *_: object, **__: object) -> Any:
        self.statement = statement
        raise _Built


def sdk_workflow_filter(client: Any, filters: Mapping[str, object]) -> Any:
    """The WHERE clause of the statement ``client.list_workflows(**filters)`` would run, without running it: a
    shallow copy of the client's system database builds it and hands it over instead of executing it."""
    builder = copy.copy(client._sys_db)
    connection = _CapturingConnection()

    @contextlib.contextmanager
    def capture(*_: object, **__: object) -> Iterator[_CapturingConnection]:
        yield connection

    builder._observability_query = capture
    with contextlib.suppress(_Built):
        builder.list_workflows(**filters, load_input=False, load_output=False)
    if connection.statement is None:
        raise RuntimeError("the DBOS client built no workflow list statement")
    return connection.statement.whereclause


# The newest workflows a substring search reads at most: a substring has no index (all of 1,000,000 took 1.4 s
# on a busy machine; the newest 100,000 still 270 ms).
SEARCH_SCOPE = 50_000


def supports(schema_version: int | None) -> bool:
    return schema_version is not None and schema_version in AGGREGATE_SCHEMA_VERSIONS


def workflow_aggregates(client: Any, filters: Mapping[str, object], body: Any) -> list[dict[str, Any]]:
    """Rows as an executor's get_workflow_aggregates answers them (actors/policies/dataplane_aggregates.py folds the
    same from a list): one GROUP BY over workflow_status, read-only."""
    import sqlalchemy as sa  # noqa: PLC0415 (the optional extra)

    groups = [(attr, key) for flag, attr, key in GROUPS if getattr(body, flag, False)]
    bucket = body.time_bucket_size_ms
    if not groups and bucket is None:
        raise AggregateRequestError("at least one group_by flag (or a time bucket) must be set")
    measures = [m for m in MEASURES if getattr(body, f"select_{m}", False)]
    if not measures:
        raise AggregateRequestError("at least one select_ flag must be set")
    sys_db = client._sys_db
    ws = sys_db.tables.workflow_status
    keyed = [(key, ws.c[_COLUMN_OF[attr]]) for attr, key in groups]
    if bucket is not None:
        keyed.append(("time_bucket", ws.c.created_at - ws.c.created_at % int(bucket)))
    columns = [column.label(f"g{i}") for i, (_, column) in enumerate(keyed)]
    selected = {
        "count": sa.func.count(), "min_created_at": sa.func.min(ws.c.created_at),
        "max_queue_wait_ms": sa.func.max(ws.c.started_at_epoch_ms - ws.c.created_at),
        "max_total_latency_ms": sa.func.max(ws.c.completed_at - ws.c.created_at),
    }
    statement = sa.select(*columns, *(selected[m].label(m) for m in measures)).select_from(ws)
    where = sdk_workflow_filter(client, filters)
    if where is not None:
        statement = statement.where(where)
    statement = statement.group_by(*(column for _, column in keyed))
    with read_only(sys_db.engine) as connection:
        rows = connection.execute(statement).fetchall()
    out = []
    for row in rows:
        group = {key: row[i] for i, (key, _) in enumerate(keyed)}
        if "time_bucket" in group and group["time_bucket"] is not None:
            group["time_bucket"] = str(int(group["time_bucket"]))
        out.append({"group": group, **{m: _int(row[len(keyed) + j]) for j, m in enumerate(measures)}})
    return out


def search_workflow_ids(client: Any, text: str, filters: Mapping[str, object], limit: int, offset: int,
                        scope: int = SEARCH_SCOPE) -> tuple[list[str], int | None]:
    """The ids of the workflows whose ID or name contains `text` (case-insensitive, `%` and `_` literal), newest
    first, within the SDK's own filter for `filters` (issue 36, point 6): the SDK's list matches prefixes and
    exact names only. A substring has no index, so the search reads at most the newest `scope` workflows the
    filter admits (issue 33, point 6: at 1,000,000 a rare text scanned them all); the second value is that scope
    when it cut the search short, None when every workflow the filter admits was searched. Read-only SELECTs of
    ids and times; the caller loads their records through the client."""
    import sqlalchemy as sa  # noqa: PLC0415 (the optional extra)

    sys_db = client._sys_db
    ws = sys_db.tables.workflow_status
    where = sdk_workflow_filter(client, filters) if filters else None
    # The creation time of the scope-th newest workflow (an index walk on created_at): the search's lower bound.
    oldest = sa.select(ws.c.created_at)
    if where is not None:
        oldest = oldest.where(where)
    oldest = oldest.order_by(ws.c.created_at.desc()).offset(scope - 1).limit(1)
    matches = sa.or_(ws.c.workflow_uuid.icontains(text, autoescape=True), ws.c.name.icontains(text, autoescape=True))
    statement = sa.select(ws.c.workflow_uuid).where(matches)
    if where is not None:
        statement = statement.where(where)
    with read_only(sys_db.engine) as connection:
        bound = connection.execute(oldest).scalar()
        if bound is not None:
            statement = statement.where(ws.c.created_at >= bound)
        statement = statement.order_by(ws.c.created_at.desc(), ws.c.workflow_uuid).limit(limit).offset(offset)
        return [str(row[0]) for row in connection.execute(statement)], None if bound is None else scope


@contextlib.contextmanager
def read_only(engine: Any) -> Iterator[Any]:
    import sqlalchemy as sa  # noqa: PLC0415 (the optional extra)

    with engine.connect() as connection:
        if engine.dialect.name == "sqlite":
            connection.exec_driver_sql("PRAGMA query_only = ON")
            try:
                yield connection
            finally:
                connection.rollback()
                connection.exec_driver_sql("PRAGMA query_only = OFF")
            return
        with connection.begin():
            connection.execute(sa.text("SET TRANSACTION READ ONLY"))
            yield connection



def _int(value: Any) -> int | None:
    return None if value is None else int(value)
