"""The overview's long-range series is kept a minute, per application and range, bounded (series_cache.py)."""

from __future__ import annotations

from relay.web.console.series_cache import SeriesCache

ROWS = [{"group": {"status": "SUCCESS"}, "count": 3}]


def test_a_long_range_is_kept_until_it_is_a_minute_old() -> None:
    cache = SeriesCache(keep_s=60)
    cache.put("o", "a", "30d", ROWS, now=100.0)
    kept = cache.get("o", "a", "30d", now=159.0)
    assert kept is not None and kept.rows == ROWS and kept.age_s(159.0) == 59.0
    assert cache.get("o", "a", "30d", now=160.0) is None
    assert cache.get("o", "a", "7d", now=120.0) is None  # another range
    assert cache.get("o", "b", "30d", now=120.0) is None  # another application


def test_the_24_hour_range_is_never_kept() -> None:
    cache = SeriesCache()
    cache.put("o", "a", "24h", ROWS, now=0.0)
    assert cache.get("o", "a", "24h", now=0.0) is None


def test_the_least_recently_used_goes_first() -> None:
    cache = SeriesCache(keep_s=60, max_kept=2)
    cache.put("o", "a", "7d", ROWS, now=0.0)
    cache.put("o", "b", "7d", ROWS, now=0.0)
    assert cache.get("o", "a", "7d", now=1.0) is not None  # a is used: b is now the oldest
    cache.put("o", "c", "7d", ROWS, now=1.0)
    assert cache.get("o", "b", "7d", now=1.0) is None
    assert cache.get("o", "a", "7d", now=1.0) is not None and cache.get("o", "c", "7d", now=1.0) is not None
