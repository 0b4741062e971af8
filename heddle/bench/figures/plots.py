"""PNG charts for the figures (matplotlib's Agg canvas, no pyplot global state).

Three shapes cover the paper's figures: grouped bars (throughput per system, Fig. 12/15/16a),
stacked bars (where the slowest trajectory's time went, Fig. 14) and step lines (active
trajectories over time, Fig. 16b; makespan against predictor error).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

_PANEL_WIDTH_IN = 4.8
_PANEL_HEIGHT_IN = 3.4
# Reference lines get their own colours, distinct from the first series' default blue.
_REFERENCE_COLORS = ("tab:red", "tab:green", "tab:purple", "tab:gray", "tab:brown", "black")


@dataclass(frozen=True, slots=True)
class BarPanel:
    """One subplot: ``series[name][i]`` is the bar of series ``name`` in ``categories[i]``."""

    title: str
    categories: Sequence[str]
    series: Mapping[str, Sequence[float]]
    ylabel: str
    stacked: bool = False
    """Stack the series within one bar per category instead of grouping them side by side."""


@dataclass(frozen=True, slots=True)
class LinePanel:
    """One subplot of lines: ``series[name] = (xs, ys)``."""

    title: str
    series: Mapping[str, tuple[Sequence[float], Sequence[float]]]
    xlabel: str
    ylabel: str
    steps: bool = False
    """Draw as a step function (counts that change at events)."""
    hlines: Mapping[str, float] = field(default_factory=dict)
    """Labelled horizontal reference lines (e.g. the oracle's value)."""


def save_panels(path: Path, title: str, panels: Sequence[BarPanel | LinePanel]) -> Path:
    """Draw ``panels`` side by side under ``title`` into the PNG ``path``; returns ``path``."""
    figure = draw_panels(title, panels)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    return path


def draw_panels(title: str, panels: Sequence[BarPanel | LinePanel]) -> Figure:
    """A figure with ``panels`` side by side under ``title`` (one row of subplots)."""
    if not panels:
        raise ValueError("a figure needs at least one panel")
    # matplotlib takes ~0.9 s to import: only when a chart is drawn, not with the CLI.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(_PANEL_WIDTH_IN * len(panels), _PANEL_HEIGHT_IN), layout="tight")
    FigureCanvasAgg(figure)
    axes = figure.subplots(1, len(panels), squeeze=False)[0]
    for ax, panel in zip(axes, panels, strict=True):
        if isinstance(panel, BarPanel):
            _draw_bars(ax, panel)
        else:
            _draw_lines(ax, panel)
    figure.suptitle(title)
    return figure


def _draw_bars(ax: Axes, panel: BarPanel) -> None:
    positions = np.arange(len(panel.categories))
    names = list(panel.series)
    width = 0.8 if panel.stacked else 0.8 / max(1, len(names))
    bottoms = np.zeros(len(panel.categories))
    for index, name in enumerate(names):
        values = np.asarray(panel.series[name], dtype=float)
        if panel.stacked:
            ax.bar(positions, values, width, bottom=bottoms, label=name)
            # A new array: matplotlib keeps a reference to ``bottom`` for its data limits.
            bottoms = bottoms + np.nan_to_num(values)
        else:
            offset = (index - (len(names) - 1) / 2) * width
            ax.bar(positions + offset, values, width, label=name)
    ax.set_xticks(positions, list(panel.categories), rotation=20 if len(positions) > 4 else 0)
    ax.set_title(panel.title)
    ax.set_ylabel(panel.ylabel)
    ax.legend(fontsize="small")


def _draw_lines(ax: Axes, panel: LinePanel) -> None:
    for name, (xs, ys) in panel.series.items():
        if panel.steps:
            ax.step(xs, ys, where="post", label=name)
        else:
            ax.plot(xs, ys, marker="o", label=name)
    for (name, value), color in zip(panel.hlines.items(), _REFERENCE_COLORS, strict=False):
        ax.axhline(value, linestyle="--", color=color, linewidth=1.2, label=name)
    ax.set_title(panel.title)
    ax.set_xlabel(panel.xlabel)
    ax.set_ylabel(panel.ylabel)
    ax.legend(fontsize="small")
