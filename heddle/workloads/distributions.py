"""Lognormal distributions named by the quantiles that sources publish.

Published figures come as a median and a p90 (generation lengths, docs/calibration.md s.2) or as a
plain range "0.1-2 s" (tool times, docs/calibration.md s.2). ``LogNormal`` turns either into
``(median, sigma)``: a range is read as the 5th..95th percentile, so 90% of draws fall inside it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

_STANDARD_NORMAL = NormalDist()
Z_P90 = _STANDARD_NORMAL.inv_cdf(0.90)
Z_P95 = _STANDARD_NORMAL.inv_cdf(0.95)


@dataclass(frozen=True, slots=True)
class LogNormal:
    """``median * exp(sigma * Z)`` with Z standard normal."""

    median: float
    """The 50th percentile (also exp(mu))."""
    sigma: float
    """Standard deviation of the log; 0 makes the distribution a constant."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.median) and self.median > 0):
            raise ValueError(f"median must be a finite number > 0, got {self.median}")
        if not (math.isfinite(self.sigma) and self.sigma >= 0):
            raise ValueError(f"sigma must be a finite number >= 0, got {self.sigma}")

    @classmethod
    def from_median_p90(cls, median: float, p90: float) -> LogNormal:
        """The lognormal with the given median and 90th percentile (p90 >= median)."""
        if not p90 >= median > 0:
            raise ValueError(f"need p90 >= median > 0, got median={median}, p90={p90}")
        return cls(median, math.log(p90 / median) / Z_P90)

    @classmethod
    def from_range(cls, low: float, high: float) -> LogNormal:
        """The lognormal whose 5th and 95th percentiles are ``low`` and ``high``."""
        if not high >= low > 0:
            raise ValueError(f"need high >= low > 0, got low={low}, high={high}")
        return cls(math.sqrt(low * high), math.log(high / low) / (2 * Z_P95))

    @property
    def mean(self) -> float:
        return self.median * math.exp(self.sigma**2 / 2)

    def quantile(self, q: float) -> float:
        if not 0 < q < 1:
            raise ValueError(f"quantile must be in (0, 1), got {q}")
        return self.median * math.exp(self.sigma * _STANDARD_NORMAL.inv_cdf(q))

    def sample(self, rng: np.random.Generator, size: int, scale: float = 1.0) -> np.ndarray:
        """``size`` draws of ``scale`` times this distribution, as float64."""
        return scale * self.median * np.exp(self.sigma * rng.standard_normal(size))

    def sample_one(self, rng: np.random.Generator, scale: float = 1.0) -> float:
        return float(self.sample(rng, 1, scale)[0])
