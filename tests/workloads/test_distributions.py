import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from heddle.workloads import LogNormal

positive = st.floats(min_value=1e-3, max_value=1e6, allow_nan=False)


@given(median=positive, ratio=st.floats(min_value=1.0, max_value=50.0))
def test_from_median_p90_hits_both_quantiles(median: float, ratio: float) -> None:
    distribution = LogNormal.from_median_p90(median, median * ratio)
    assert math.isclose(distribution.quantile(0.5), median, rel_tol=1e-9)
    assert math.isclose(distribution.quantile(0.9), median * ratio, rel_tol=1e-9)


@given(low=positive, ratio=st.floats(min_value=1.0, max_value=1000.0))
def test_from_range_reads_the_range_as_p5_to_p95(low: float, ratio: float) -> None:
    distribution = LogNormal.from_range(low, low * ratio)
    assert math.isclose(distribution.quantile(0.05), low, rel_tol=1e-9)
    assert math.isclose(distribution.quantile(0.95), low * ratio, rel_tol=1e-9)


def test_samples_follow_the_quantiles() -> None:
    distribution = LogNormal.from_range(0.1, 2.0)
    draws = distribution.sample(np.random.default_rng(7), 200_000)
    assert np.mean((draws >= 0.1) & (draws <= 2.0)) == pytest.approx(0.90, abs=0.005)
    assert np.median(draws) == pytest.approx(distribution.median, rel=0.01)
    assert np.mean(draws) == pytest.approx(distribution.mean, rel=0.01)
    scaled = distribution.sample(np.random.default_rng(7), 10, scale=3.0)
    assert np.allclose(scaled, 3.0 * draws[:10])


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: LogNormal(0, 1), "median must be"),
        (lambda: LogNormal(1, -0.1), "sigma must be"),
        (lambda: LogNormal(float("nan"), 1), "median must be"),
        (lambda: LogNormal.from_median_p90(10, 5), "p90 >= median"),
        (lambda: LogNormal.from_range(2, 1), "high >= low"),
        (lambda: LogNormal(1, 1).quantile(1.0), "quantile must be"),
    ],
)
def test_bad_parameters_raise(make: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make()  # type: ignore[operator]
