"""What every experiment shares: the scale, one trace per workload, the simulator, progress.

Each comparison runs all its systems on the same trace (``FigureRunner.trace``); the history that
learning predictors are fitted on is another epoch of the same prompts (``FigureRunner.history``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

from heddle.bench.figures.scale import FigureScale
from heddle.control.systems import SystemSpec
from heddle.sim import SimConfig, SimResult, SimulationError, simulate
from heddle.traces import TraceTrajectory
from heddle.workloads import generate


def sim_config(scale: FigureScale, model: str, **changes: object) -> SimConfig:
    """The simulator's configuration at ``scale`` for ``model``; ``changes`` edit its fields."""
    base = SimConfig(
        model=model,
        hardware=scale.hardware,
        num_gpus=scale.num_gpus,
        seed=scale.seed,
        engine_model=scale.engine_model,
    )
    return replace(base, **changes)  # type: ignore[arg-type]


class ProgressSink(Protocol):
    """Where experiments report progress (a rich bar on stderr in the CLI)."""

    def start(self, title: str, num_steps: int) -> None: ...

    def advance(self, label: str) -> None: ...


class SilentProgress:
    def start(self, title: str, num_steps: int) -> None:
        return None

    def advance(self, label: str) -> None:
        return None


@dataclass(slots=True)
class FigureRunner:
    """Runs the experiments' simulations at one scale, writing into ``out_dir``."""

    scale: FigureScale
    out_dir: Path
    progress: ProgressSink = field(default_factory=SilentProgress)
    failures: list[str] = field(default_factory=list)
    """Runs that did not finish, as 'workload model system: reason'."""
    _traces: dict[tuple[str, int], list[TraceTrajectory]] = field(default_factory=dict)

    def trace(self, workload: str) -> list[TraceTrajectory]:
        """The rollout every system of a comparison on ``workload`` runs (cached)."""
        return self._generate(workload, epoch=0)

    def history(self, workload: str) -> list[TraceTrajectory]:
        """The previous epoch of the same prompts: what learning predictors are fitted on."""
        return self._generate(workload, epoch=1)

    def _generate(self, workload: str, epoch: int) -> list[TraceTrajectory]:
        key = (workload, epoch)
        if key not in self._traces:
            self._traces[key] = generate(
                workload, self.scale.num_trajectories, seed=self.scale.seed, epoch=epoch
            )
        return self._traces[key]

    def config(self, model: str, **changes: object) -> SimConfig:
        return sim_config(self.scale, model, **changes)

    def simulate(
        self, workload: str, model: str, system: str | SystemSpec, **changes: object
    ) -> SimResult | None:
        """One rollout of ``workload``'s trace under ``system``; ``changes`` edit the
        ``SimConfig`` (predictor, sigma, ...). Advances the progress bar.

        A run the simulator cannot finish (``SimulationError``: trajectories left unfinished)
        returns None and is recorded in ``failures``, so one bad run costs one cell of a table,
        not the whole figure run."""
        name = system if isinstance(system, str) else system.name
        label = f"{workload} {model} {name}"
        try:
            result: SimResult | None = simulate(
                self.trace(workload),
                system,
                self.config(model, **changes),
                history=self.history(workload),
            )
        except SimulationError as exc:
            self.failures.append(f"{label}: {_shorten(str(exc))}")
            result = None
        self.progress.advance(label)
        return result

    def image_path(self, stem: str) -> Path:
        return self.out_dir / f"{stem}.png"


def _shorten(message: str, max_chars: int = 240) -> str:
    return message if len(message) <= max_chars else message[: max_chars - 3] + "..."
