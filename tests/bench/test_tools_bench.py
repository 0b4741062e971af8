"""The sandbox benchmark's statistics and the `heddle bench tools` command."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

import heddle.cli.bench_tools  # noqa: F401  (registers the command)
from heddle.bench.tools import percentile
from heddle.cli.apps import app


@given(
    st.lists(st.floats(0, 1e6), min_size=1, max_size=50),
    st.floats(0, 1),
)
def test_percentile_is_the_nearest_rank(values: list[float], fraction: float) -> None:
    ordered = sorted(values)
    result = percentile(ordered, fraction)
    # The smallest value with at least `fraction` of the values at or below it.
    at_or_below = sum(value <= result for value in ordered)
    assert at_or_below >= fraction * len(ordered) - 1e-9
    smaller = [value for value in ordered if value < result]
    assert len(smaller) < max(fraction * len(ordered), 1)


def test_bench_tools_prints_cold_and_warm_figures() -> None:
    result = CliRunner().invoke(
        app,
        [
            "bench",
            "tools",
            "--num-calls",
            "3",
            "--concurrency",
            "2",
            "--min-warm",
            "1",
            "--gap-s",
            "0",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    for mode in ("cold", "warm"):
        for phase in ("sequential", "concurrent"):
            stats = report[mode][phase]
            assert stats["num_calls"] == 3
            assert stats["num_failed"] == 0
            assert 0 < stats["p50_ms"] <= stats["p99_ms"]
    assert report["sequential_p50_speedup"] > 0
    for name in ("python_sequential", "python_concurrent", "trace_sequential"):
        assert report["nats"][name]["num_calls"] == 3
        assert report["nats"][name]["num_failed"] == 0
