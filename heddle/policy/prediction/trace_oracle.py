"""The oracle for live runs: trajectories that carry their trace (the ``trace`` environment).

In the simulator the oracle knows the whole trace up front. A live control plane learns each
trace when its trajectory is submitted (the task of a ``trace`` trajectory is its trace line) and
serves several rollouts whose trajectory ids repeat (``t000000`` ...), so this oracle is keyed by
(rollout, trajectory) and answers for the rollout named by ``scope`` (the consumer sets it before
each event it hands to the prediction decider: ``Progress`` carries no rollout id).

Trajectories without a trace (a math or coding task) are answered by the ``fallback`` predictor,
which also observes every completion. ``LiveOracle`` is the predictor a control plane runs:
exact, or wrapped in ``NoisyOraclePredictor`` like the simulator's noisy oracle (same noise per
trajectory id and step, so live and simulated runs of one trace see the same prediction errors).
"""

from __future__ import annotations

from heddle.policy.prediction.base import (
    Outcome,
    Predictor,
    PredictorOptions,
    Progress,
    predict_tool_s,
    remaining_tool_s,
)
from heddle.policy.prediction.oracles import NoisyOraclePredictor, OraclePredictor
from heddle.traces import TraceTrajectory


class ScopedTraceOracle(OraclePredictor):
    name = "oracle"

    def __init__(self, fallback: Predictor) -> None:
        super().__init__({})
        self.fallback = fallback
        self._scope = ""
        self._by_rollout: dict[str, dict[str, list[int]]] = {}
        self._tools_by_rollout: dict[str, dict[str, list[float]]] = {}

    def scope(self, rollout_id: str) -> None:
        """Answer the next predictions for trajectories of ``rollout_id``."""
        self._scope = rollout_id

    def add(self, rollout_id: str, traj_id: str, trace: TraceTrajectory) -> None:
        """Learn a trajectory's trace (its suffix sums of output tokens and tool seconds)."""
        outputs = [step.output_tokens for step in trace.steps]
        suffix = [0] * (len(outputs) + 1)
        for index in range(len(outputs) - 1, -1, -1):
            suffix[index] = suffix[index + 1] + outputs[index]
        self._by_rollout.setdefault(rollout_id, {})[traj_id] = suffix
        tools = [remaining_tool_s(trace.steps, k) for k in range(len(outputs) + 1)]
        self._tools_by_rollout.setdefault(rollout_id, {})[traj_id] = tools

    def forget(self, rollout_id: str, traj_id: str) -> None:
        """Drop a finished trajectory's trace."""
        for table in (self._by_rollout, self._tools_by_rollout):
            traces = table.get(rollout_id)
            if traces is not None:
                traces.pop(traj_id, None)
                if not traces:
                    del table[rollout_id]

    def knows(self, rollout_id: str, traj_id: str) -> bool:
        return traj_id in self._by_rollout.get(rollout_id, {})

    def knows_in_scope(self, traj_id: str) -> bool:
        return traj_id in self._by_rollout.get(self._scope, {})

    def predict(self, progress: Progress) -> float:
        suffix = self._by_rollout.get(self._scope, {}).get(progress.traj_id)
        if suffix is None:
            return self.fallback.predict(progress)
        return float(suffix[min(progress.num_steps, len(suffix) - 1)])

    def predict_tool_s(self, progress: Progress) -> float:
        tools = self._tools_by_rollout.get(self._scope, {}).get(progress.traj_id)
        if tools is None:
            return predict_tool_s(self.fallback, progress)
        return tools[min(progress.num_steps, len(tools) - 1)]

    def observe(self, outcome: Outcome) -> None:
        self.fallback.observe(outcome)


class LiveOracle:
    """A live oracle predictor (``oracle``, or ``noisy_oracle`` with ``noise``): the scoped trace
    oracle for trajectories with a trace, ``fallback`` for the others; completions teach the
    fallback."""

    def __init__(self, fallback: Predictor, noise: PredictorOptions | None = None) -> None:
        self.oracle = ScopedTraceOracle(fallback)
        self.fallback = fallback
        self._noisy = NoisyOraclePredictor(self.oracle, noise) if noise is not None else None
        self.name = "noisy_oracle" if noise is not None else "oracle"

    def predict(self, progress: Progress) -> float:
        if not self.oracle.knows_in_scope(progress.traj_id):
            return self.fallback.predict(progress)
        if self._noisy is None:
            return self.oracle.predict(progress)
        return self._noisy.predict(progress)

    def predict_tool_s(self, progress: Progress) -> float:
        if not self.oracle.knows_in_scope(progress.traj_id):
            return predict_tool_s(self.fallback, progress)
        if self._noisy is None:
            return self.oracle.predict_tool_s(progress)
        return self._noisy.predict_tool_s(progress)

    def observe(self, outcome: Outcome) -> None:
        self.fallback.observe(outcome)
