"""What one run of ``heddle.bench.fidelity.engine`` measures: the model, the policies, the
workers' KV budget, the trace's size and the profile's repeats; shared by the run and by its
engine profile (``heddle.bench.fidelity.engine_profile``)."""

from __future__ import annotations

from dataclasses import dataclass

from heddle.bench.fidelity.engine_trace import engine_trace
from heddle.traces import TraceTrajectory


@dataclass(frozen=True, slots=True)
class EngineFidelityOptions:
    model: str = "tiny"
    """The torch engine's model (``tiny`` or a local folder)."""
    policies: tuple[str, ...] = ("heddle", "verl")
    kv_budget_tokens: int = 1536
    """Each worker's KV budget in tokens (``--max-kv-tokens``): the default makes the trace's
    KV footprint about three times what the workers hold, so prefixes are evicted."""
    num_trajectories: int = 32
    num_workers: int = 2
    max_running: int = 16
    seed: int = 0
    predictor: str = "oracle"
    """Live and simulated predictor (``oracle``: both know the trace, so both plan alike)."""
    control_model: str = "qwen3-8b"
    """Cost-model preset of the control plane, live and simulated (placement and plans)."""
    num_threads: int = 1
    """torch threads per worker: the workers share the machine's cores."""
    num_tool_executors: int = 2
    profile_repeats: int = 3
    timeout_s: float = 300.0

    def __post_init__(self) -> None:
        if len(self.policies) < 1 or self.num_trajectories < 1 or self.num_workers < 1:
            raise ValueError("need a policy, trajectories >= 1 and workers >= 1")
        if self.kv_budget_tokens < 2 or self.max_running < 1 or self.profile_repeats < 1:
            raise ValueError("need kv_budget_tokens >= 2, max_running >= 1, profile_repeats >= 1")

    def trace(self) -> list[TraceTrajectory]:
        return engine_trace(self.num_trajectories, self.seed)
