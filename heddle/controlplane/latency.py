"""Cumulative latency histograms of the control plane (decision latency, consumer age).

The status file's per-batch windows (``ConsumerStats.batch_ms``) hold the last few thousand
batches: about a second of a busy control plane, fine for ``heddle status`` but not for a
benchmark's percentiles over minutes. ``LatencyHistogram`` counts every sample since the start in
log-spaced buckets (each ``RATIO`` times the previous, so a quantile read from it is within
``RATIO - 1`` = 2% of the exact one), a few hundred integers at most, cheap to add to (one
``log`` per sample) and to write out every second. A reader takes two snapshots and subtracts
them (``minus``) for the percentiles of the interval between.
"""

from __future__ import annotations

import math

import msgspec

RATIO = 1.02
FLOOR_MS = 0.001
"""Samples at or below this (and negative ones: clock skew) count in bucket 0."""
_LOG_RATIO = math.log(RATIO)


class HistogramReport(msgspec.Struct, frozen=True, kw_only=True):
    """A histogram as the status file carries it: bucket index -> samples (sparse)."""

    counts: dict[int, int] = {}
    num_samples: int = 0


class LatencyHistogram:
    """Counts of samples (milliseconds) per log-spaced bucket; see the module docstring."""

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}
        self.num_samples = 0

    def add(self, value_ms: float) -> None:
        bucket = bucket_of(value_ms)
        counts = self.counts
        counts[bucket] = counts.get(bucket, 0) + 1
        self.num_samples += 1

    def report(self) -> HistogramReport:
        return HistogramReport(counts=dict(self.counts), num_samples=self.num_samples)


def bucket_of(value_ms: float) -> int:
    """Bucket ``b`` holds samples in ``(FLOOR_MS * RATIO**(b-1), FLOOR_MS * RATIO**b]``."""
    if value_ms <= FLOOR_MS:
        return 0
    return max(1, math.ceil(math.log(value_ms / FLOOR_MS) / _LOG_RATIO))


def bucket_upper_ms(bucket: int) -> float:
    """The largest value bucket ``bucket`` holds (what a quantile in it reads as)."""
    return FLOOR_MS * RATIO**bucket


def minus(later: HistogramReport, earlier: HistogramReport | None) -> HistogramReport:
    """The samples added between two snapshots of one histogram."""
    if earlier is None:
        return later
    counts = {
        bucket: count - earlier.counts.get(bucket, 0)
        for bucket, count in later.counts.items()
        if count > earlier.counts.get(bucket, 0)
    }
    return HistogramReport(counts=counts, num_samples=sum(counts.values()))


def quantile_ms(histogram: HistogramReport, q: float) -> float:
    """The ``q`` quantile (the upper edge of its bucket: within 2% above the exact one); 0.0
    for an empty histogram. Ranks as ``sorted(samples)[int(q * n)]`` does."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile must be within [0, 1], got {q!r}")
    total = sum(histogram.counts.values())
    if total <= 0:
        return 0.0
    rank = min(total - 1, int(q * total))
    seen = 0
    for bucket in sorted(histogram.counts):
        seen += histogram.counts[bucket]
        if seen > rank:
            return bucket_upper_ms(bucket)
    return bucket_upper_ms(max(histogram.counts))
