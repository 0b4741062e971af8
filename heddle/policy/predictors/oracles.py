"""Predictors that know the truth: the oracle and the noisy oracle (see the package docstring)."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping

from heddle.policy.predictors.base import Outcome, PredictorOptions, Progress
from heddle.traces import TraceTrajectory


class OraclePredictor:
    """The true remaining output of each trajectory, from the trace."""

    name = "oracle"

    def __init__(self, trace: Mapping[str, TraceTrajectory]) -> None:
        self._suffix: dict[str, list[int]] = {}
        for traj_id, trajectory in trace.items():
            suffix = [0] * (len(trajectory.steps) + 1)
            for index in range(len(trajectory.steps) - 1, -1, -1):
                suffix[index] = suffix[index + 1] + trajectory.steps[index].output_tokens
            self._suffix[traj_id] = suffix

    def predict(self, progress: Progress) -> float:
        suffix = self._suffix.get(progress.traj_id)
        if suffix is None:
            raise ValueError(f"the oracle has no trace for trajectory {progress.traj_id!r}")
        return float(suffix[min(progress.num_steps, len(suffix) - 1)])

    def observe(self, outcome: Outcome) -> None:
        return None


class NoisyOraclePredictor:
    """The oracle times a deterministic lognormal error per (seed, trajectory, step)."""

    name = "noisy_oracle"

    def __init__(self, oracle: OraclePredictor, options: PredictorOptions) -> None:
        self._oracle = oracle
        self._seed = options.seed
        self._sigma = options.sigma
        self._decay = options.sigma_decay
        self._shared = math.sqrt(options.step_correlation)
        self._fresh = math.sqrt(1.0 - options.step_correlation)

    def predict(self, progress: Progress) -> float:
        truth = self._oracle.predict(progress)
        sigma = self._sigma * self._decay**progress.num_steps
        z = self._fresh * _normal(f"{self._seed}:{progress.traj_id}:{progress.num_steps}")
        if self._shared:
            z += self._shared * _normal(f"{self._seed}:{progress.traj_id}")
        return truth * math.exp(sigma * z)

    def observe(self, outcome: Outcome) -> None:
        return None


def _normal(key: str) -> float:
    """A standard normal draw that is a pure function of ``key``: two uniforms from a stable
    hash of the key, through Box-Muller (seeding a ``random.Random`` per draw is far slower)."""
    digest = hashlib.blake2b(key.encode(), digest_size=16).digest()
    first = (int.from_bytes(digest[:8], "big") + 1) / 2.0**64  # in (0, 1]
    second = int.from_bytes(digest[8:], "big") / 2.0**64
    return math.sqrt(-2.0 * math.log(first)) * math.cos(2.0 * math.pi * second)
