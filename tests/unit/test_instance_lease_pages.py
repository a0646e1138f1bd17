"""The cluster page's bounded reads of the instances view (issue 33, point 6): leases counted per instance and
status in SQL, and one page of an instance's leases at a time, so the page's cost does not grow with the fleet."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from relay.projections.backend import StoreConfig, ViewStore
from relay.projections.instances import InstancesQueries, InstancesSchema


@pytest.fixture
def queries(tmp_path: Path) -> Iterator[InstancesQueries]:
    store = ViewStore(StoreConfig(data_dir=tmp_path, database_url=None), InstancesSchema())
    with store.transaction(commit=True) as sql:
        for n in range(250):
            sql.insert("relay_instance_leases", {"id": f"e{n}", "org": "acme" if n % 5 else "other", "app": "shop",
                                                 "executor_id": f"exec-{n:03d}", "instance": f"i{n % 2}",
                                                 "status": "DEAD" if n % 7 == 0 else "HEALTHY"})
        sql.insert("relay_instance_leases", {"id": "gone", "org": "acme", "app": "shop", "executor_id": "exec-gone",
                                             "instance": "i0", "status": "DELETED"})
    yield InstancesQueries(store)
    store.close()


def test_leases_are_counted_per_instance_and_status_without_the_deleted(queries: InstancesQueries) -> None:
    counts = queries.lease_counts()
    assert sum(counts["i0"].values()) == 125 and sum(counts["i1"].values()) == 125
    assert counts["i0"]["DEAD"] == len([n for n in range(0, 250, 2) if n % 7 == 0])
    assert sum(sum(c.values()) for c in queries.lease_counts("acme").values()) == 200


def test_pages_of_an_instance_cover_its_leases_once_in_order(queries: InstancesQueries) -> None:
    pages = [queries.lease_page("i1", 50, offset) for offset in (0, 50, 100, 150)]
    shown = [(lease["org"], lease["executor_id"]) for page in pages for lease in page]
    assert [len(page) for page in pages] == [50, 50, 25, 0]
    assert shown == sorted(("acme" if n % 5 else "other", f"exec-{n:03d}") for n in range(1, 250, 2))
    assert all(lease["org"] == "acme" for lease in queries.lease_page("i1", 500, org="acme"))
