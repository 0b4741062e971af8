"""Drawing a ``Timeline`` as per-worker Gantt lanes into a PNG (matplotlib, Agg backend).

Each worker is a horizontal lane; inside it, every visit of a trajectory (its consecutive
segments on that worker) gets a row, packed so that rows are few (``layout.pack_rows``). Colours
tell the segment kinds apart (``heddle.timeline.segments``: holds, control, weights, queueing,
prefill, decode, tool queueing, tool calls, migrations). The figure is built on a bare
``Figure`` with the Agg canvas: no pyplot global state, safe in any process or thread.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from heddle.timeline.layout import pack_rows
from heddle.timeline.segments import Segment, SegmentKind, Timeline

COLOURS = {
    SegmentKind.ADMISSION: "#cbd5e0",
    SegmentKind.HELD: "#a0aec0",
    SegmentKind.CONTROL: "#805ad5",
    SegmentKind.WEIGHTS: "#4a5568",
    SegmentKind.QUEUE: "#f2b134",
    SegmentKind.PREFILL: "#63b3ed",
    SegmentKind.DECODE: "#2b6cb0",
    SegmentKind.TOOL_QUEUE: "#c6f6d5",
    SegmentKind.TOOL: "#7cc47f",
    SegmentKind.MIGRATION: "#d64545",
}
_LANE_FILL = 0.9
"""Share of a lane's height its rows fill (the rest separates lanes)."""


@dataclass(frozen=True, slots=True)
class Visit:
    """Consecutive segments of one trajectory on one worker."""

    traj_id: str
    worker_id: str
    segments: tuple[Segment, ...]

    @property
    def start_s(self) -> float:
        return self.segments[0].start_s

    @property
    def end_s(self) -> float:
        return max(segment.end_s for segment in self.segments)


def visits(timeline: Timeline) -> list[Visit]:
    """Each trajectory's segments in time order, cut wherever the worker changes."""
    by_traj: dict[str, list[Segment]] = defaultdict(list)
    for segment in timeline.segments:
        by_traj[segment.traj_id].append(segment)
    found: list[Visit] = []
    for traj_id, segments in by_traj.items():
        segments.sort(key=lambda s: (s.start_s, s.end_s))
        current: list[Segment] = []
        for segment in segments:
            if current and segment.worker_id != current[-1].worker_id:
                found.append(Visit(traj_id, current[-1].worker_id, tuple(current)))
                current = []
            current.append(segment)
        found.append(Visit(traj_id, current[-1].worker_id, tuple(current)))
    return found


def _rectangles(timeline: Timeline) -> dict[SegmentKind, list[list[tuple[float, float]]]]:
    """Polygons per kind: lane i spans y in [i, i + _LANE_FILL], rows split it evenly."""
    lanes = {worker_id: index for index, worker_id in enumerate(timeline.worker_ids)}
    by_worker: dict[str, list[Visit]] = defaultdict(list)
    for visit in visits(timeline):
        by_worker[visit.worker_id].append(visit)
    polygons: dict[SegmentKind, list[list[tuple[float, float]]]] = defaultdict(list)
    for worker_id, worker_visits in by_worker.items():
        rows = pack_rows([(v.start_s, v.end_s) for v in worker_visits])
        height = _LANE_FILL / (max(rows) + 1)
        for visit, row in zip(worker_visits, rows, strict=True):
            bottom = lanes[worker_id] + row * height
            top = bottom + height * 0.85
            for s in visit.segments:
                polygons[s.kind].append(
                    [(s.start_s, bottom), (s.end_s, bottom), (s.end_s, top), (s.start_s, top)]
                )
    return polygons


def draw_timeline(timeline: Timeline, path: Path, *, dpi: int = 110) -> Path:
    """Write the Gantt chart of ``timeline`` to ``path`` (PNG); returns ``path``."""
    if not timeline.segments:
        raise ValueError(f"rollout {timeline.rollout_id!r} has no recorded steps to draw")
    workers = timeline.worker_ids
    figure = Figure(figsize=(14, max(3.0, 0.55 * len(workers) + 1.6)), dpi=dpi)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    for kind, polygons in _rectangles(timeline).items():
        axes.add_collection(PolyCollection(polygons, facecolors=COLOURS[kind], linewidths=0))
    axes.axvline(timeline.makespan_s, color="black", linestyle="--", linewidth=1)
    axes.set_xlim(0, max(timeline.makespan_s, max(s.end_s for s in timeline.segments)) * 1.01)
    axes.set_ylim(len(workers), -0.1)
    axes.set_yticks([index + _LANE_FILL / 2 for index in range(len(workers))], workers)
    axes.set_xlabel("model seconds since submission")
    axes.set_title(
        f"rollout {timeline.rollout_id or '?'} ({timeline.policy or 'unknown policy'}): "
        f"makespan {timeline.makespan_s:.1f} s",
        loc="left",
    )
    handles = [Patch(color=colour, label=kind.value) for kind, colour in COLOURS.items()]
    axes.legend(
        handles=handles,
        loc="lower right",
        bbox_to_anchor=(1.0, 1.0),
        ncols=5,
        fontsize="small",
        frameon=False,
    )
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="png")
    return path
