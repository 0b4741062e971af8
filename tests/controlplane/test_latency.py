"""The control plane's latency histograms against the exact quantiles of the same samples."""

from __future__ import annotations

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from heddle.controlplane.latency import (
    RATIO,
    HistogramReport,
    LatencyHistogram,
    minus,
    quantile_ms,
)

samples = st.lists(st.floats(min_value=-5.0, max_value=1e5, allow_nan=False), max_size=200)
quantiles = st.sampled_from([0.0, 0.5, 0.9, 0.99, 1.0])


def exact(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def histogram_of(values: list[float]) -> LatencyHistogram:
    histogram = LatencyHistogram()
    for value in values:
        histogram.add(value)
    return histogram


@settings(max_examples=200)
@given(values=samples, q=quantiles)
def test_a_quantile_is_the_exact_one_rounded_up_by_at_most_one_bucket(
    values: list[float], q: float
) -> None:
    report = histogram_of(values).report()
    assert report.num_samples == len(values)
    if not values:
        assert quantile_ms(report, q) == 0.0
        return
    truth = exact(values, q)
    read = quantile_ms(report, q)
    if truth <= 0.001:
        assert read == 0.001
    else:
        assert truth <= read * (1 + 1e-9) and read <= truth * RATIO * (1 + 1e-9)


@settings(max_examples=100)
@given(before=samples, after=samples, q=quantiles)
def test_the_difference_of_two_snapshots_is_the_histogram_of_the_samples_between(
    before: list[float], after: list[float], q: float
) -> None:
    histogram = histogram_of(before)
    earlier = histogram.report()
    for value in after:
        histogram.add(value)
    between = minus(histogram.report(), earlier)
    assert between.num_samples == len(after)
    assert quantile_ms(between, q) == quantile_ms(histogram_of(after).report(), q)


def test_a_report_survives_the_status_file() -> None:
    report = histogram_of([0.5, 3.0, 3.0, 250.0]).report()
    decoded = msgspec.json.decode(msgspec.json.encode(report), type=HistogramReport)
    assert decoded == report
    assert quantile_ms(decoded, 0.5) == quantile_ms(report, 0.5)
