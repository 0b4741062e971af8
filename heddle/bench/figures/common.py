"""Small shared pieces of the experiments: ratio spans, labels, bar panels of throughput."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

from heddle.bench.figures.plots import BarPanel
from heddle.sim import SimResult


def speedup(heddle: SimResult | None, baseline: SimResult | None) -> float | None:
    """Throughput of ``heddle`` over ``baseline`` (same trace, so the inverse makespan ratio);
    None when either run failed."""
    if heddle is None or baseline is None:
        return None
    if baseline.throughput_tok_s <= 0:
        return math.inf
    return heddle.throughput_tok_s / baseline.throughput_tok_s


def span(ratios: Iterable[float | None]) -> str:
    """``1.12-1.48x`` (or ``1.12x`` for one value); failed runs (None) are left out."""
    values = sorted(r for r in ratios if r is not None)
    if not values:
        return "n/a"
    if len(values) == 1 or f"{values[0]:.2f}" == f"{values[-1]:.2f}":
        return f"{values[0]:.2f}x"
    return f"{values[0]:.2f}-{values[-1]:.2f}x"


def field_of(result: SimResult | None, name: str) -> float | None:
    """``result.<name>`` (a number), or None for a failed run."""
    return None if result is None else float(getattr(result, name))


def plotted(values: Iterable[float | None]) -> list[float]:
    """Values for a chart: failed runs become NaN (matplotlib leaves a gap)."""
    return [math.nan if v is None else v for v in values]


def throughput_panel(
    title: str,
    categories: Sequence[str],
    results: Mapping[str, Sequence[SimResult | None]],
) -> BarPanel:
    """Throughput bars: one series per system, one result per category."""
    return BarPanel(
        title=title,
        categories=categories,
        series={
            system: plotted(field_of(r, "throughput_tok_s") for r in per_category)
            for system, per_category in results.items()
        },
        ylabel="rollout throughput (output tok/s)",
    )


def short_model(model: str) -> str:
    """``qwen3-32b`` -> ``32B``."""
    return model.rsplit("-", 1)[-1].upper()
