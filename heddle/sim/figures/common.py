"""Small shared pieces of the experiments: ratio spans, labels, bar panels of throughput."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from heddle.sim import SimResult
from heddle.sim.figures.plots import BarPanel


def speedup(heddle: SimResult, baseline: SimResult) -> float:
    """Throughput of ``heddle`` over ``baseline`` (same trace, so the inverse makespan ratio)."""
    if baseline.throughput_tok_s <= 0:
        return float("inf")
    return heddle.throughput_tok_s / baseline.throughput_tok_s


def span(ratios: Iterable[float]) -> str:
    """``1.12-1.48x`` (or ``1.12x`` for one value)."""
    values = sorted(ratios)
    if not values:
        return "n/a"
    if len(values) == 1 or f"{values[0]:.2f}" == f"{values[-1]:.2f}":
        return f"{values[0]:.2f}x"
    return f"{values[0]:.2f}-{values[-1]:.2f}x"


def throughput_panel(
    title: str,
    categories: Sequence[str],
    results: Mapping[str, Sequence[SimResult]],
) -> BarPanel:
    """Throughput bars: one series per system, one result per category."""
    return BarPanel(
        title=title,
        categories=categories,
        series={
            system: [r.throughput_tok_s for r in per_category]
            for system, per_category in results.items()
        },
        ylabel="rollout throughput (output tok/s)",
    )


def short_model(model: str) -> str:
    """``qwen3-32b`` -> ``32B``."""
    return model.rsplit("-", 1)[-1].upper()
