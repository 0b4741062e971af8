"""The training loop in the simulator: S steps of rollout and training, the stop-the-world loop
against partial rollout with a staleness bound (``heddle sim compare --async-steps``).

Step ``j`` rolls out batch ``j`` (one whole rollout of its trace through the simulated control
and data planes, on the same workers every step, a fresh control plane per rollout as a live
rollout gets); once the batch is complete and the trainer is free, the trainer trains on it for
``trainer_s`` and publishes version ``j + 1``. Version 0 is the initial weights; the trainer
trains batch ``j`` at version ``j``, so a trajectory of batch ``j`` whose oldest tokens came
from version ``o`` has staleness ``j - o``.

With ``max_staleness = k`` rollout ``j`` starts once rollout ``j - 1`` has finished and version
``j - k`` is published (at once when ``j - k <= 0``). ``k = 0`` is the stop-the-world loop:
each rollout waits for the previous step's training and its workers swap to the new weights
first. ``k >= 1`` is partial rollout: rollout ``j`` runs while the trainer trains batch
``j - 1``; when a version lands mid-rollout every worker drains and swaps
(``heddle.sim.weight_loads``) and the unfinished trajectories continue on the new weights,
re-prefilling their context. Batches are trained whole and in order and rollout ``j`` starts on
a version ``>= j - k``, so no trajectory can span more than ``k`` versions; the data plane checks
the bound at every generation all the same (a violator fails as stale and is counted).

The loop's time runs from the first rollout's start to the end of the last training step;
trajectories per hour count the completed trajectories of every step.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

from heddle.control.systems import SystemSpec, system_spec
from heddle.sim.config import SimConfig
from heddle.sim.run import control_for
from heddle.sim.simulator import Run, Simulator
from heddle.sim.weight_loads import WeightPlan
from heddle.traces import TraceTrajectory


@dataclass(frozen=True, slots=True)
class TrainerTime:
    """The trainer's time per step: ``seconds``, or ``fraction`` of the first rollout's makespan."""

    seconds: float | None = None
    fraction: float | None = None

    def __post_init__(self) -> None:
        if (self.seconds is None) == (self.fraction is None):
            raise ValueError("give exactly one of the trainer's seconds or fraction")
        if not (self.seconds or self.fraction or 0.0) >= 0:
            raise ValueError("the trainer's time must be >= 0")

    def resolve(self, first_makespan_s: float) -> float:
        if self.seconds is not None:
            return self.seconds
        return (self.fraction or 0.0) * first_makespan_s


@dataclass(frozen=True, slots=True)
class StepReport:
    step: int
    rollout_start_s: float
    rollout_end_s: float
    train_start_s: float
    train_end_s: float
    oldest_version: int
    """The oldest version a completed trajectory's tokens came from."""
    num_completed: int
    num_failed: int
    num_stale: int
    """Generations refused for the staleness bound (their trajectories failed)."""
    max_staleness: int
    """Over the batch's trajectories: the trainer's version (the step) minus the oldest version
    of its tokens."""
    max_versions_spanned: int
    """Over the batch's trajectories: newest minus oldest version of its tokens."""
    num_weight_loads: int
    weight_load_s: float
    """Worker-seconds paused swapping weights during the rollout."""
    drain_s: float
    """Worker-seconds from a load command to its swap (new generations held)."""
    num_invalidated_tokens: int
    """Cached tokens the swaps dropped."""
    num_recomputed_tokens: int
    """Tokens the rollout prefilled again (swaps, evictions, migrations)."""


@dataclass(frozen=True, slots=True)
class LoopReport:
    system: str
    max_staleness: int
    trainer_s: float
    steps: list[StepReport]

    @property
    def total_s(self) -> float:
        return self.steps[-1].train_end_s

    @property
    def trajectories_per_hour(self) -> float:
        return sum(s.num_completed for s in self.steps) * 3600.0 / self.total_s

    def summary(self) -> dict[str, object]:
        steps = self.steps
        return {
            "max_staleness": self.max_staleness,
            "trainer_s": self.trainer_s,
            "total_s": self.total_s,
            "trajectories_per_hour": self.trajectories_per_hour,
            "num_completed": sum(s.num_completed for s in steps),
            "num_failed": sum(s.num_failed for s in steps),
            "num_stale": sum(s.num_stale for s in steps),
            "max_staleness_seen": max(s.max_staleness for s in steps),
            "max_versions_spanned": max(s.max_versions_spanned for s in steps),
            "num_weight_loads": sum(s.num_weight_loads for s in steps),
            "weight_load_s": sum(s.weight_load_s for s in steps),
            "drain_s": sum(s.drain_s for s in steps),
            "num_invalidated_tokens": sum(s.num_invalidated_tokens for s in steps),
            "num_recomputed_tokens": sum(s.num_recomputed_tokens for s in steps),
            "steps": [asdict(s) for s in steps],
        }


StepProgress = Callable[[int, float], None]
"""Called after each rollout with the step and its makespan."""


def simulate_loop(
    traces: Sequence[Sequence[TraceTrajectory]],
    histories: Sequence[Sequence[TraceTrajectory]],
    system: str | SystemSpec,
    config: SimConfig,
    max_staleness: int,
    trainer: TrainerTime,
    *,
    progress: StepProgress | None = None,
) -> LoopReport:
    """``len(traces)`` training steps (step ``j`` rolls out ``traces[j]``, its predictors fitted
    on ``histories[j]``) under the schedule of the module docstring."""
    if not traces or len(traces) != len(histories):
        raise ValueError("give one trace and one history per step (at least one step)")
    if max_staleness < 0:
        raise ValueError(f"max_staleness must be >= 0, got {max_staleness}")
    spec = system if isinstance(system, SystemSpec) else system_spec(system)
    state = _LoopState()
    tp_degrees: list[int] | None = None
    trainer_s = 0.0
    steps: list[StepReport] = []
    for step, (trace, history) in enumerate(zip(traces, histories, strict=True)):
        control, tp_degrees = control_for(trace, spec, config, history, tp_degrees)
        gate = state.published.get(step - max_staleness, 0.0)
        start = max(state.rollout_end_s, gate) if step else 0.0
        run = Simulator(trace, control, tp_degrees, config, state.plan(start, max_staleness)).run()
        if step == 0:
            trainer_s = trainer.resolve(run.makespan_s)
        steps.append(state.finish_step(step, start, run, trainer_s))
        if progress is not None:
            progress(step, run.makespan_s)
    return LoopReport(spec.name, max_staleness, trainer_s, steps)


class _LoopState:
    """The loop between rollouts: the trainer, the versions published and what each worker
    serves or is loading (absolute times)."""

    def __init__(self) -> None:
        self.rollout_end_s = 0.0
        self.train_end_s = 0.0
        self.published: dict[int, float] = {}
        self.issued = 0
        """The newest version whose publication a rollout has seen."""
        self.versions: dict[str, int] = {}
        self.loading: dict[str, tuple[int, float]] = {}

    def plan(self, start: float, max_staleness: int) -> WeightPlan:
        """The next rollout's weights: loads still running at ``start`` and the publications
        it has not seen yet (those already due land at its start)."""
        versions = dict(self.versions)
        loading: dict[str, tuple[int, float]] = {}
        for worker_id, (version, ready_at) in self.loading.items():
            if ready_at <= start:
                versions[worker_id] = version
            else:
                loading[worker_id] = (version, ready_at - start)
        self.versions, self.loading = versions, {}
        publications = tuple(
            (max(0.0, at - start), version)
            for version, at in sorted(self.published.items())
            if version > self.issued
        )
        return WeightPlan(versions, loading, publications, max_staleness)

    def finish_step(self, step: int, start: float, run: Run, trainer_s: float) -> StepReport:
        self.rollout_end_s = start + run.makespan_s
        train_start = max(self.rollout_end_s, self.train_end_s)
        self.train_end_s = train_start + trainer_s
        run.weights.settle(run.makespan_s)
        workers = run.weights.workers
        for worker_id, weights in workers.items():
            self.versions[worker_id] = weights.version
            if weights.loading_version is not None:
                self.loading[worker_id] = (weights.loading_version, start + weights.ready_at)
            self.issued = max(self.issued, weights.loading_version or 0, weights.version)
        self.published[step + 1] = self.train_end_s
        done = [t for t in run.trajectories if t.num_output_tokens == t.trace.num_output_tokens]
        return StepReport(
            step=step,
            rollout_start_s=start,
            rollout_end_s=self.rollout_end_s,
            train_start_s=train_start,
            train_end_s=self.train_end_s,
            oldest_version=min((t.weight_versions[0] for t in done), default=0),
            num_completed=len(done),
            num_failed=len(run.trajectories) - len(done),
            num_stale=run.weights.num_stale,
            max_staleness=max((step - t.weight_versions[0] for t in done), default=0),
            max_versions_spanned=max(
                (t.weight_versions[-1] - t.weight_versions[0] for t in done), default=0
            ),
            num_weight_loads=sum(w.num_loads for w in workers.values()),
            weight_load_s=sum(w.load_s for w in workers.values()),
            drain_s=sum(w.drain_s for w in workers.values()),
            num_invalidated_tokens=sum(w.num_invalidated_tokens for w in workers.values()),
            num_recomputed_tokens=sum(t.num_recomputed_tokens for t in run.trajectories),
        )
