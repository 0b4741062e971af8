"""One ablation experiment's runs: each variant (label -> system) on each of the scale's ablation
workloads, the first variant being heddle's (Fig. 15 placement, Fig. 16 resources)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from heddle.bench.figures.common import speedup
from heddle.bench.figures.context import FigureRunner
from heddle.bench.figures.scale import FigureScale
from heddle.bench.figures.tables import TableCell
from heddle.sim import SimResult

RowOf = Callable[[str, str, SimResult | None, SimResult | None], list[TableCell]]
"""``(workload, label, result, heddle's result) -> table row``."""


def num_ablation_runs(scale: FigureScale, variants: Mapping[str, str]) -> int:
    return len(scale.ablation_workloads) * len(variants)


@dataclass(frozen=True, slots=True)
class AblationRuns:
    model: str
    results: dict[str, dict[str, SimResult | None]]
    """workload -> variant label -> result (None: the run failed)."""
    labels: tuple[str, ...]
    """The variants in order; the first is heddle's."""

    @property
    def heddle_label(self) -> str:
        return self.labels[0]

    @property
    def workloads(self) -> list[str]:
        return list(self.results)

    def rows(self, row_of: RowOf) -> list[list[TableCell]]:
        """One row per workload and variant, in order."""
        return [
            row_of(workload, label, result, by_label[self.heddle_label])
            for workload, by_label in self.results.items()
            for label, result in by_label.items()
        ]

    def gains(self) -> list[float | None]:
        """Heddle's speedup over every other variant, workload by workload."""
        return [
            speedup(by_label[self.heddle_label], result)
            for by_label in self.results.values()
            for label, result in by_label.items()
            if label != self.heddle_label
        ]

    def by_variant(self) -> dict[str, list[SimResult | None]]:
        """Each variant's results over the workloads (a throughput panel's series)."""
        return {label: [self.results[w][label] for w in self.workloads] for label in self.labels}


def run_ablation(runner: FigureRunner, title: str, variants: Mapping[str, str]) -> AblationRuns:
    """Simulate every variant on every ablation workload on the scale's ablation model."""
    scale = runner.scale
    runner.progress.start(title, num_ablation_runs(scale, variants))
    model = scale.ablation_model
    results = {
        workload: {label: runner.simulate(workload, model, s) for label, s in variants.items()}
        for workload in scale.ablation_workloads
    }
    return AblationRuns(model, results, tuple(variants))
