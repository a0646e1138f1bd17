"""The console bench's pure helpers (bench/console.py): percentiles, Relay's CPU per answer, the verdict."""

from __future__ import annotations

from bench import console


def test_percentiles_are_nearest_rank() -> None:
    values = [float(v) for v in range(1, 11)]
    assert console.pct(values, 50) == 5.0 and console.pct(values, 95) == 10.0 and console.pct([3.0], 95) == 3.0


def test_cpu_per_answer_takes_the_background_out() -> None:
    assert console.cpu_per_answer(1.2, 2.0, 0.1, 10) == 100.0  # (1.2 s - 0.2 s at rest) / 10
    assert console.cpu_per_answer(0.1, 2.0, 0.1, 10) == 0.0


def test_a_page_meets_the_targets_or_says_what_it_missed() -> None:
    row = {"status": 200, "p95_ms": 120.0, "bytes": 40_000}
    assert console.verdict(row) == "met"
    assert console.verdict(row | {"p95_ms": 300.0, "bytes": 1_200_000}) == "missed: p95 ≥ 300 ms, ≥ 1 MB"
    assert console.verdict(row | {"status": 500}) == "missed: HTTP 500"
