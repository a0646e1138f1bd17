"""What console pages ask the registry about an application (issue 33, point 6): the versions its HEALTHY executors
run, its executors' languages, whether any is HEALTHY, each one query rather than a read of every executor's row."""

from __future__ import annotations

from pathlib import Path

from relay.projections.backend import StoreConfig, ViewStore
from relay.projections.registry import RegistryQueries, RegistrySchema


def test_versions_of_healthy_executors_and_languages_of_live_ones(tmp_path: Path) -> None:
    store = ViewStore(StoreConfig(data_dir=tmp_path, database_url=None), RegistrySchema())
    rows = [("HEALTHY", "v2", "python", "3.2.0"), ("HEALTHY", "v1", "python", "3.2.0"),
            ("DEAD", "v0", "typescript", "3.1.0"), ("DELETED", "v9", "go", "0.9"), ("HEALTHY", "", "", None)]
    with store.transaction(commit=True) as sql:
        for n, (status, version, language, dbos) in enumerate(rows * 3):
            sql.insert("relay_executors", {"id": f"e{n}", "org": "acme", "app": "shop", "executor_id": f"x{n}",
                                           "status": status, "app_version": version, "language": language,
                                           "dbos_version": dbos})
        sql.insert("relay_executors", {"id": "other", "org": "acme", "app": "else", "executor_id": "y",
                                       "status": "HEALTHY", "app_version": "v7", "language": "java",
                                       "dbos_version": "1.0"})
    queries = RegistryQueries(store)
    try:
        assert queries.running_versions("acme", "shop") == {"v1": 3, "v2": 3}
        assert queries.any_healthy("acme", "shop") and not queries.any_healthy("acme", "nothing")
        assert queries.languages("acme", "shop") == ["python 3.2.0", "typescript 3.1.0"]
    finally:
        store.close()
