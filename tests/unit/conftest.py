"""Fixtures of the unit tests that run against both stores (the store, projection and autoscaling tests).

- ``store_config``: parametrized over ``STORES``: the embedded SQLite store in ``tmp_data_dir``, or the same
  data dir with a fresh PostgreSQL database (that case is marked ``postgres``).
- ``relay_log``: a RelayLog over ``store_config``, closed after the test.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from relay.projections.backend import StoreConfig
from relay.projections.store.log import RelayLog
from tests.unit.store_cases import STORES, make_store_config, open_log


@pytest.fixture(params=STORES)
def store_config(request: pytest.FixtureRequest, tmp_data_dir: Path) -> StoreConfig:
    return make_store_config(request, tmp_data_dir)


@pytest.fixture
def relay_log(store_config: StoreConfig) -> Iterator[RelayLog]:
    with open_log(store_config) as opened:
        yield opened
