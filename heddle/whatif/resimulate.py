"""Counterfactual re-simulation: a recorded rollout's step lengths under other policies.

The recording's trace (per trajectory: prompt, and per step output tokens, tool seconds and
observation tokens, as ``heddle replay --export-trace`` writes it) is simulated on the recorded
cluster, under the recorded policy (how well the simulator reproduces the recording) and under
each asked policy (what would have happened). All makespans are model seconds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from heddle.control.systems import SYSTEMS
from heddle.policy.prediction import PREDICTORS
from heddle.sim import SimConfig, SimResult, simulate
from heddle.traces import TraceTrajectory
from heddle.whatif.cluster import RecordedCluster

_DEFAULT_PREDICTOR = SimConfig().predictor


@dataclass(frozen=True, slots=True)
class Recording:
    """What a recorded rollout tells the simulator."""

    rollout_id: str
    policy: str
    makespan_s: float | None
    """Recorded makespan in model seconds (None: the rollout has not finished)."""
    num_trajectories: int
    trace: list[TraceTrajectory]
    cluster: RecordedCluster
    predictor: str = ""
    """Name of the predictor the recording's ``Predicted`` events carry ("" when none)."""


@dataclass(frozen=True, slots=True)
class WhatIfOptions:
    predictor: str | None = None
    """Simulated predictor (None: the recorded one if the simulator has it, else its default)."""
    seed: int = 0
    replan: bool = False
    """Let each policy plan TP degrees on the recorded GPUs (default: the recorded workers)."""


@dataclass(frozen=True, slots=True)
class WhatIfReport:
    recording: Recording
    predictor: str
    predictor_source: str
    results: dict[str, SimResult]
    """Simulated runs by policy; the recorded policy first when the simulator knows it."""

    @property
    def simulated_recorded_s(self) -> float | None:
        result = self.results.get(self.recording.policy)
        return result.makespan_s if result is not None else None

    def to_json(self) -> dict[str, object]:
        recorded = self.recording
        baseline = self.simulated_recorded_s
        return {
            "rollout_id": recorded.rollout_id,
            "recorded": {
                "policy": recorded.policy,
                "makespan_s": recorded.makespan_s,
                "num_trajectories": recorded.num_trajectories,
                "num_simulated_trajectories": len(recorded.trace),
            },
            "cluster": recorded.cluster.describe(),
            "predictor": self.predictor,
            "predictor_source": self.predictor_source,
            "simulated": {name: result.summary() for name, result in self.results.items()},
            "simulated_over_recorded": (
                baseline / recorded.makespan_s if baseline and recorded.makespan_s else None
            ),
            "makespan_over_simulated_recorded": {
                name: result.makespan_s / baseline
                for name, result in self.results.items()
                if baseline and name != recorded.policy
            },
        }


def choose_predictor(recorded: str, asked: str | None) -> tuple[str, str]:
    """(predictor name, where it comes from) for the simulation."""
    if asked is not None:
        if asked not in PREDICTORS:
            raise ValueError(f"unknown predictor {asked!r}; choose one of {sorted(PREDICTORS)}")
        return asked, "asked"
    if recorded in PREDICTORS:
        return recorded, "recorded"
    if recorded:
        return _DEFAULT_PREDICTOR, f"default (the recorded {recorded!r} is live-only)"
    return _DEFAULT_PREDICTOR, "default (no predictions recorded)"


def resimulate(
    recording: Recording, policies: Sequence[str], options: WhatIfOptions | None = None
) -> WhatIfReport:
    """Simulate the recording under its own policy (when known) and each of ``policies``."""
    options = options or WhatIfOptions()
    unknown = [name for name in policies if name not in SYSTEMS]
    if unknown:
        raise ValueError(f"unknown policy {unknown[0]!r}; choose from {', '.join(SYSTEMS)}")
    if not recording.trace:
        raise ValueError(f"rollout {recording.rollout_id!r} has no generated step to simulate")
    predictor, source = choose_predictor(recording.predictor, options.predictor)
    cluster = recording.cluster
    config = SimConfig(
        model=cluster.model,
        hardware=cluster.hardware,
        num_gpus=cluster.num_gpus,
        seed=options.seed,
        predictor=predictor,
        max_running=cluster.max_running,
    )
    names = [recording.policy] if recording.policy in SYSTEMS else []
    names += [name for name in policies if name not in names]
    tp_degrees = None if options.replan else cluster.tp_degrees
    results = {
        name: simulate(recording.trace, name, config, tp_degrees=tp_degrees) for name in names
    }
    return WhatIfReport(recording, predictor, source, results)
