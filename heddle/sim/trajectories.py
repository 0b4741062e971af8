"""A simulated trajectory: the trace it replays, where it is, and where its time went."""

from __future__ import annotations

from dataclasses import dataclass, field

from heddle.events import MigrateOut, TrajectoryPhase, TrajectorySpec, TrajectoryTimings
from heddle.traces import TraceTrajectory


@dataclass(slots=True)
class SimTrajectory:
    """Mutable state of one trajectory, owned by the simulated data plane."""

    traj_id: str
    trace: TraceTrajectory
    spec: TrajectorySpec
    phase: TrajectoryPhase = TrajectoryPhase.PENDING
    """PENDING, READY, GENERATING, IN_TOOL, MIGRATING or DONE: the simulator's subset."""
    worker_id: str = ""
    step: int = 0
    """The step it runs next (or is running)."""
    context_tokens: int = 0
    """Prompt + every generation + every observation so far."""
    new_tokens: int = 0
    """Context tokens never sent to an engine yet (the prompt, then each observation)."""
    priority: float = 0.0
    request_id: str = ""
    num_requests: int = 0
    tool_duration_s: float = 0.0
    """The current tool call's duration (trace time plus any cold start)."""
    tool_returned_at: float = 0.0
    has_tool_returned: bool = False
    """During a migration: the tool result is back and the step waits for the transfer."""
    wants_next_step: bool = False
    """During a migration: the control plane already asked for the next step."""
    pending_migration: MigrateOut | None = None
    """A migration asked while generating; it starts at the next tool gap."""
    migration_target: str = ""
    migration_tokens: int = 0
    warmup_request_id: str = ""
    """A migration without KV transfer: the target's prefill-only request, while it runs."""
    migration_started_at: float = 0.0
    worker_history: list[str] = field(default_factory=list)
    finished_at: float = 0.0
    queue_s: float = 0.0
    prefill_s: float = 0.0
    decode_s: float = 0.0
    tool_s: float = 0.0
    migration_s: float = 0.0
    """Time a ready step waited for its trajectory's transfer (exposed migration time)."""
    num_output_tokens: int = 0
    num_preemptions: int = 0
    num_recomputed_tokens: int = 0
    num_migrations: int = 0
    weight_versions: list[int] = field(default_factory=list)
    """The weight versions its generations ran on, in the order first used."""
    is_waiting_for_weights: bool = False
    """Its next step waits for its worker's weight load (``heddle.sim.weight_loads``)."""

    @property
    def is_last_step(self) -> bool:
        return self.step == len(self.trace.steps) - 1

    def move_to(self, worker_id: str) -> None:
        self.worker_id = worker_id
        if not self.worker_history or self.worker_history[-1] != worker_id:
            self.worker_history.append(worker_id)

    def timings(self) -> TrajectoryTimings:
        return TrajectoryTimings(
            queue_s=self.queue_s,
            prefill_s=self.prefill_s,
            decode_s=self.decode_s,
            tool_s=self.tool_s,
            migration_s=self.migration_s,
            total_s=self.finished_at,
        )
