"""Predictors that know the truth: the oracle and the noisy oracle (see the package docstring)."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from typing import TypeVar

from heddle.policy.prediction.base import (
    Outcome,
    PredictorOptions,
    Progress,
    remaining_tool_s,
)
from heddle.traces import TraceTrajectory

_T = TypeVar("_T")


class OraclePredictor:
    """The true remaining output and tool time of each trajectory, from the trace."""

    name = "oracle"

    def __init__(self, trace: Mapping[str, TraceTrajectory]) -> None:
        self._suffix: dict[str, list[int]] = {}
        self._tool_suffix: dict[str, list[float]] = {}
        for traj_id, trajectory in trace.items():
            self._add(traj_id, trajectory)

    def _add(self, traj_id: str, trajectory: TraceTrajectory) -> None:
        steps = trajectory.steps
        suffix = [0] * (len(steps) + 1)
        for index in range(len(steps) - 1, -1, -1):
            suffix[index] = suffix[index + 1] + steps[index].output_tokens
        self._suffix[traj_id] = suffix
        self._tool_suffix[traj_id] = [remaining_tool_s(steps, k) for k in range(len(steps) + 1)]

    def predict(self, progress: Progress) -> float:
        suffix = self._known(self._suffix, progress.traj_id)
        return float(suffix[min(progress.num_steps, len(suffix) - 1)])

    def predict_tool_s(self, progress: Progress) -> float:
        suffix = self._known(self._tool_suffix, progress.traj_id)
        return suffix[min(progress.num_steps, len(suffix) - 1)]

    def _known(self, table: Mapping[str, list[_T]], traj_id: str) -> list[_T]:
        values = table.get(traj_id)
        if values is None:
            raise ValueError(f"the oracle has no trace for trajectory {traj_id!r}")
        return values

    def observe(self, outcome: Outcome) -> None:
        return None


class NoisyOraclePredictor:
    """The oracle times a deterministic lognormal error per (seed, trajectory, step)."""

    name = "noisy_oracle"

    def __init__(self, oracle: OraclePredictor, options: PredictorOptions) -> None:
        self._oracle = oracle
        self._seed = options.seed
        self._floor = min(options.sigma, options.sigma_floor)
        self._excess = options.sigma - self._floor
        self._decay = options.sigma_decay
        self._shared = math.sqrt(options.step_correlation)
        self._fresh = math.sqrt(1.0 - options.step_correlation)

    def predict(self, progress: Progress) -> float:
        return self._oracle.predict(progress) * self._error(progress, "")

    def predict_tool_s(self, progress: Progress) -> float:
        """The true remaining tool time times an error of the same law, drawn independently
        of the token error (a tool's duration is not what a length model reads)."""
        return self._oracle.predict_tool_s(progress) * self._error(progress, ":tool")

    def _error(self, progress: Progress, kind: str) -> float:
        sigma = self._floor + self._excess * self._decay**progress.num_steps
        key = f"{self._seed}:{progress.traj_id}"
        z = self._fresh * _normal(f"{key}:{progress.num_steps}{kind}")
        if self._shared:
            z += self._shared * _normal(f"{key}{kind}")
        return math.exp(sigma * z)

    def observe(self, outcome: Outcome) -> None:
        return None


def _normal(key: str) -> float:
    """A standard normal draw that is a pure function of ``key``: two uniforms from a stable
    hash of the key, through Box-Muller (seeding a ``random.Random`` per draw is far slower)."""
    digest = hashlib.blake2b(key.encode(), digest_size=16).digest()
    first = (int.from_bytes(digest[:8], "big") + 1) / 2.0**64  # in (0, 1]
    second = int.from_bytes(digest[8:], "big") / 2.0**64
    return math.sqrt(-2.0 * math.log(first)) * math.cos(2.0 * math.pi * second)
