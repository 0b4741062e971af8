"""What each experiment hands back, and the markdown files written from it.

Every experiment writes ``<key>.md`` (its table, the paper's figure, notes) and its PNGs into the
output folder; ``README.md`` indexes them with one headline per experiment next to the paper's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from heddle.bench.figures.tables import Table


@dataclass(frozen=True, slots=True)
class ExperimentReport:
    key: str
    """File stem, e.g. ``fig12_overall``."""
    title: str
    paper_claim: str
    """What the paper reports for this experiment (docs/paper.md, "Reported results")."""
    headline: str
    """Our result in one line, comparable with ``paper_claim``."""
    tables: tuple[tuple[str, Table], ...]
    """(caption, table) pairs; most experiments have one, with an empty caption."""
    images: tuple[Path, ...]
    notes: tuple[str, ...] = ()
    """How to read the table; where and why we differ from the paper."""

    def to_markdown(self, out_dir: Path) -> str:
        lines = [
            f"# {self.title}",
            "",
            f"Paper: {self.paper_claim}",
            "",
            f"Simulated: {self.headline}",
        ]
        for caption, table in self.tables:
            lines += ["", f"## {caption}", ""] if caption else [""]
            lines.append(table.to_markdown())
        lines += [f"![{image.stem}]({image.relative_to(out_dir)})\n" for image in self.images]
        lines += [f"- {note}" for note in self.notes]
        return "\n".join(lines).rstrip() + "\n"


def write_experiment(report: ExperimentReport, out_dir: Path) -> Path:
    path = out_dir / f"{report.key}.md"
    path.write_text(report.to_markdown(out_dir))
    return path


def write_index(
    reports: Sequence[ExperimentReport],
    out_dir: Path,
    scale_lines: Sequence[str],
    workloads: Table | None = None,
) -> Path:
    """``README.md``: the scale that ran, the workloads' shapes, then one row per experiment
    (paper vs simulated)."""
    lines = [
        "# The paper's experiments in simulation (`heddle sim figures`)",
        "",
        "Every comparison runs all its systems on the same generated trace, with the calibrated",
        "cost model of `docs/calibration.md`; throughput = output tokens / makespan.",
        "",
        "## Scale",
        "",
        *[f"- {line}" for line in scale_lines],
        "",
    ]
    if workloads is not None:
        lines += ["## Workloads (the generated rollouts)", "", workloads.to_markdown()]
    lines += [
        "## Results",
        "",
        "| experiment | paper | simulated | files |",
        "|---|---|---|---|",
    ]
    for report in reports:
        files = ", ".join(
            [f"[table]({report.key}.md)"]
            + [f"[{image.stem}]({image.relative_to(out_dir)})" for image in report.images]
        )
        lines.append(f"| {report.title} | {report.paper_claim} | {report.headline} | {files} |")
    path = out_dir / "README.md"
    path.write_text("\n".join(lines) + "\n")
    return path
