"""The regression corpus: workloads where Heddle lost, kept as small trace files in the package
(``heddle/data/corpus``), so that ``heddle sim sweep`` runs them beside the zoo (split
``corpus``) and robustness is judged by the worst cells found, not by the mean.

An entry is a folder named for it:

* ``cell.json``: the parameter record that made it (family, e.g. ``wide``, and every field), the
  seed, the cluster (model, GPUs, the target KV ratio, the trajectories per GPU asked for), the
  history kind it is judged with (``heddle.workloads.history``), the number of trajectories
  kept, and ``found``: where it came from and what was measured then (free-form, for people);
* ``trace.jsonl.gz``: the rollout (the trace format, ``heddle.traces``, gzip-compressed);
* ``history.jsonl.gz``: its history (absent for the history ``none``).

The stored traces are replication 0. Replication ``r`` >= 1 draws epoch ``2r`` of the same
parameters and seed (``heddle.experiments.hunt_space.GeneratedSource``), as the sweep's other cells
do: so ``--replications`` averages a corpus cell over epochs too. If the generators change,
replication 0 stays what was found and the others follow the new generators.

``heddle sim hunt --add-to-corpus K`` writes the hunter's K worst confirmed cells here.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from heddle.experiments.cells import Cell
from heddle.experiments.hunt_space import GeneratedSource, HuntPoint
from heddle.traces import TraceTrajectory, read_trace, write_trace
from heddle.workloads.history import HistoryKind, history_kind
from heddle.workloads.zoo import WIDE, LeafParams, leaf_params_type

CORPUS_DIR = Path(__file__).resolve().parents[1] / "data" / "corpus"
CELL_FILE = "cell.json"
TRACE_FILE = "trace.jsonl.gz"
HISTORY_FILE = "history.jsonl.gz"


class CorpusEntryError(ValueError):
    """A corpus entry that cannot be read; the message names the folder and the problem."""


@dataclass(frozen=True, slots=True)
class CorpusEntry:
    name: str
    family: str
    params: LeafParams
    seed: int
    model: str
    num_gpus: int
    kv_ratio: float
    """The target KV ratio (``heddle.experiments.kv_pressure`` reaches it from the stored
    traces)."""
    history: HistoryKind
    num_trajectories: int
    """Trajectories of the stored rollout (and of the other replications')."""
    trajectories_per_gpu: float
    """Asked for when it was found (the rollout may have been cut to the hunter's steps)."""
    directory: str
    found: dict[str, Any] = field(default_factory=dict)

    def source(self) -> CorpusSource:
        return CorpusSource(
            self.directory,
            GeneratedSource(self.family, self.params, self.num_trajectories, None),
        )


@dataclass(frozen=True, slots=True)
class CorpusSource:
    """A corpus cell's traces: the stored ones for replication 0, drawn ones after."""

    directory: str
    drawn: GeneratedSource

    def traces(
        self, cell: Cell, replication: int
    ) -> tuple[list[TraceTrajectory], list[TraceTrajectory]]:
        if replication > 0:
            return self.drawn.traces(cell, replication)
        folder = Path(self.directory)
        if cell.history == "none":
            return read_trace(folder / TRACE_FILE), []
        if not (folder / HISTORY_FILE).is_file():
            raise CorpusEntryError(f"{folder}: the history {cell.history!r} has no {HISTORY_FILE}")
        return read_trace(folder / TRACE_FILE), read_trace(folder / HISTORY_FILE)


def corpus_cells(directory: Path, first_index: int) -> list[Cell]:
    """The sweep's cells of the entries under ``directory`` (numbered from ``first_index``):
    each entry's settings, its history, its stored traces."""
    return [
        Cell(
            index=first_index + offset,
            family=entry.name,
            draw_seed=entry.seed,
            model=entry.model,
            num_gpus=entry.num_gpus,
            kv_ratio=entry.kv_ratio,
            split="corpus",
            history=entry.history,
            source=entry.source(),
        )
        for offset, entry in enumerate(read_corpus(directory))
    ]


def read_corpus(directory: Path = CORPUS_DIR) -> list[CorpusEntry]:
    """Every entry under ``directory``, by name (none when it does not exist)."""
    if not directory.is_dir():
        return []
    return [read_entry(folder) for folder in sorted(directory.iterdir()) if folder.is_dir()]


def read_entry(folder: Path) -> CorpusEntry:
    try:
        document = json.loads((folder / CELL_FILE).read_text())
        params_type = leaf_params_type(document["family"])
        if params_type is None:
            raise CorpusEntryError(
                f"{folder}: family {document['family']!r} has no parameter record"
            )
        return CorpusEntry(
            name=folder.name,
            family=document["family"],
            params=params_type(**document["params"]),
            seed=int(document["seed"]),
            model=document["model"],
            num_gpus=int(document["num_gpus"]),
            kv_ratio=float(document["kv_ratio"]),
            history=history_kind(document["history"]),
            num_trajectories=int(document["num_trajectories"]),
            trajectories_per_gpu=float(document["trajectories_per_gpu"]),
            directory=str(folder),
            found=document.get("found", {}),
        )
    except (OSError, KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, CorpusEntryError):
            raise
        raise CorpusEntryError(
            f"{folder}: not a corpus entry ({type(exc).__name__}: {exc})"
        ) from None


def write_entry(
    directory: Path,
    name: str,
    point: HuntPoint,
    num_gpus: int,
    traces: tuple[list[TraceTrajectory], list[TraceTrajectory]],
    found: dict[str, Any],
) -> CorpusEntry:
    """A new entry ``name`` under ``directory`` from a hunt point, the GPUs its cell ran on and
    its (replication 0) traces; ``FileExistsError`` if the entry exists."""
    folder = directory / name
    folder.mkdir(parents=True, exist_ok=False)
    trace, history = traces
    document = {
        "family": WIDE,
        "params": asdict(point.params),
        "seed": point.seed,
        "model": point.model,
        "num_gpus": num_gpus,
        "kv_ratio": point.kv_ratio,
        "history": point.history,
        "num_trajectories": len(trace),
        "trajectories_per_gpu": point.trajectories_per_gpu,
        "found": found,
    }
    (folder / CELL_FILE).write_text(json.dumps(document, indent=1) + "\n")
    write_trace(folder / TRACE_FILE, trace)
    if point.history != "none":
        write_trace(folder / HISTORY_FILE, history)
    return read_entry(folder)
