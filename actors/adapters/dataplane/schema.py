"""Which system databases Relay's data plane reads (issue 15): the schema version recorded in the database,
read with the SDK's own functions, against the range the installed client supports. Relay never migrates an
application's database: an older schema is the application's to migrate (`dbos migrate`), a newer one needs a
newer Relay (its `dataplane` extra pins the client)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# The oldest schema the pinned client's queries run against: below it a table they read is missing (migration
# 109 adds workflow_input). tests/integration/test_dataplane_safety.py builds system databases at this version
# and the one before with the SDK's own migrations and holds both the client and this rule to it.
MIN_SCHEMA_VERSION = 109


@dataclass(frozen=True)
class SchemaCheck:
    version: int
    newest_known: int
    ok: bool
    detail: str


def judge(version: int, newest_known: int, client_release: str) -> SchemaCheck:
    """Pure: whether a recorded schema version is one this client reads, and what to do when it is not."""
    if version == 0:
        return SchemaCheck(version, newest_known, False,
                           "no DBOS system database here (no dbos_migrations table): check the URL and schema; "
                           "Relay does not create one")
    if version < MIN_SCHEMA_VERSION:
        return SchemaCheck(version, newest_known, False,
                           f"schema version {version} is older than the oldest this Relay reads "
                           f"({MIN_SCHEMA_VERSION}): upgrade the application's DBOS SDK or run `dbos migrate`; "
                           "Relay never migrates an application's database")
    if version > newest_known:
        return SchemaCheck(version, newest_known, False,
                           f"schema version {version} is newer than the newest the DBOS client of this Relay "
                           f"knows ({newest_known}, dbos {client_release}): upgrade Relay to a release whose "
                           "`dataplane` extra reads it (a newer schema may record what this client cannot show)")
    return SchemaCheck(version, newest_known, True, f"schema version {version} (this Relay reads "
                       f"{MIN_SCHEMA_VERSION} to {newest_known})")


def check(engine: Any, schema: str) -> SchemaCheck:
    """Read the recorded version with the SDK's own migration functions (no SQL of Relay's)."""
    from dbos import _migration  # noqa: PLC0415 (the optional extra)

    if engine.dialect.name == "sqlite":
        version, newest = _migration.get_sqlite_migration_versions(engine)
    else:
        version, newest = _migration.get_migration_versions(engine, schema, False)
    return judge(int(version), int(newest), client_release())


def client_release() -> str:
    from importlib.metadata import version  # noqa: PLC0415

    return version("dbos")


def foreign_application(engine: Any, schema: str, app: str) -> str | None:
    """The name of another application a workflow of this system database belongs to, if any: the SDK records
    each workflow's owner in workflow_status.application_name (migration 100; NULL: unclaimed, any application's).
    A read of one row, on the column's own table; an empty database, or one of unclaimed rows only, names none."""
    import sqlalchemy as sa  # noqa: PLC0415 (the optional extra)

    table = sa.table("workflow_status", sa.column("application_name"),
                     schema=None if engine.dialect.name == "sqlite" else schema)
    owner = table.c.application_name
    query = sa.select(owner).where(owner.is_not(None), owner != app).limit(1)
    with engine.connect() as connection:
        row = connection.execute(query).first()
    return None if row is None else str(row[0])
