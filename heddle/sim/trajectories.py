"""A simulated trajectory: the trace it replays, where it is, and where its time went; and the
simulated trajectories of a trace (``build_trajectories``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from heddle.events import MigrateOut, TrajectoryPhase, TrajectorySpec, TrajectoryTimings
from heddle.ids import group_id, trajectory_id
from heddle.sim.accounting import Column, TimeAccount, waiting_column
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
    epoch: int = 0
    """The hosting it runs under (``StartTrajectory.epoch``, a migration's ``target_epoch``),
    written into its events as a live worker does."""
    step: int = 0
    """The step it runs next (or is running)."""
    num_announced: int = 0
    """Steps whose ``GenerationStarted`` was published (a recorded run announces each once)."""
    context_tokens: int = 0
    """Prompt + every generation + every observation so far."""
    new_tokens: int = 0
    """Context tokens never sent to an engine yet (the prompt, then each observation)."""
    priority: float = 0.0
    request_id: str = ""
    num_requests: int = 0
    tool_duration_s: float = 0.0
    """The current tool call's duration (trace time plus any cold start)."""
    tool_cold_start_s: float = 0.0
    """The part of it spent waiting for an executor."""
    weights_reported_s: float = 0.0
    """Its ``weights`` column when its last ``Generated`` was published."""
    num_commands_in_flight: int = 0
    """Commands to run it (start, continue) sent by the control plane, not yet arrived."""
    tool_returned_at: float = 0.0
    has_tool_returned: bool = False
    """During a migration: the tool result is back and the step waits for the transfer."""
    wants_next_step: bool = False
    """During a migration: the control plane already asked for the next step."""
    pending_migration: MigrateOut | None = None
    """A migration asked while generating; it starts at the next tool gap."""
    migration_target: str = ""
    migration_target_epoch: int = 0
    migration_tokens: int = 0
    migration_kv_version: int = 0
    """The weight version its moving KV was computed under (the source's at the export)."""
    warmup_request_id: str = ""
    """A migration without KV transfer: the target's prefill-only request, while it runs."""
    migration_started_at: float = 0.0
    worker_history: list[str] = field(default_factory=list)
    finished_at: float = 0.0
    account: TimeAccount = field(default_factory=TimeAccount)
    """Where its time went, column by column (``heddle.sim.accounting``)."""
    num_output_tokens: int = 0
    num_preemptions: int = 0
    num_recomputed_tokens: int = 0
    num_migrations: int = 0
    weight_versions: list[int] = field(default_factory=list)
    """The weight versions its generations ran on, in the order first used."""
    is_waiting_for_weights: bool = False
    """Its next step waits for its worker's weight load (``heddle.sim.weight_loads``)."""
    interrupted_tokens: int = 0
    """Output of the current step produced before a re-shard stopped its engine (already in
    ``context_tokens`` and ``num_output_tokens``): the step generates only the rest."""
    is_waiting_for_reshard: bool = False
    """Its next step waits for a re-shard: its engine stopped or relaunches
    (``heddle.sim.reshards``)."""

    @property
    def is_last_step(self) -> bool:
        return self.step == len(self.trace.steps) - 1

    def move_to(self, worker_id: str) -> None:
        self.worker_id = worker_id
        if not self.worker_history or self.worker_history[-1] != worker_id:
            self.worker_history.append(worker_id)

    @property
    def queue_s(self) -> float:
        return self.account.of(Column.QUEUE)

    @property
    def prefill_s(self) -> float:
        return self.account.of(Column.PREFILL)

    @property
    def decode_s(self) -> float:
        return self.account.of(Column.DECODE)

    @property
    def tool_s(self) -> float:
        """Its tool calls' own time (what ``ToolReturned.duration_s`` says; waits for an
        executor are ``tool_queue``)."""
        return self.account.of(Column.TOOL)

    @property
    def migration_s(self) -> float:
        """Time a ready step waited for its trajectory's move (exposed migration time)."""
        return self.account.of(Column.MIGRATION)

    def file_wait(self, now: float) -> None:
        """Re-file it, if it is ready but not generating (``heddle.sim.accounting``)."""
        if self.phase not in (TrajectoryPhase.PENDING, TrajectoryPhase.READY):
            return
        column = waiting_column(
            has_started=self.phase is TrajectoryPhase.READY,
            is_waiting_for_weights=self.is_waiting_for_weights,
            has_command=self.num_commands_in_flight > 0,
            is_waiting_for_reshard=self.is_waiting_for_reshard,
        )
        self.account.enter(column, now)

    def take_weights_wait_s(self) -> float:
        """Seconds it waited for weight swaps since its last ``Generated`` (the generation's
        ``weights_wait_s``)."""
        waited = self.account.of(Column.WEIGHTS) - self.weights_reported_s
        self.weights_reported_s += waited
        return waited

    def file_cold_start(self) -> None:
        """Its tool call's cold start was a wait for an executor, not the tool running."""
        self.account.move(self.tool_cold_start_s, Column.TOOL, Column.TOOL_QUEUE)
        self.tool_cold_start_s = 0.0

    def timings(self) -> TrajectoryTimings:
        return TrajectoryTimings(
            queue_s=self.queue_s,
            prefill_s=self.prefill_s,
            decode_s=self.decode_s,
            tool_s=self.tool_s,
            migration_s=self.migration_s,
            total_s=self.finished_at,
        )


def build_trajectories(trace: Sequence[TraceTrajectory]) -> dict[str, SimTrajectory]:
    """Simulated trajectories with ids ``t000000...`` in trace order; trajectories of one group
    share one prompt token list (GRPO samples share their prompt). A trajectory's group id is
    its trace group (the prompt: earlier rollouts of the same prompts, the predictors' history,
    name it alike), or a fresh ``g00000...`` for one without a group."""
    prompts: dict[tuple[str, int], list[int]] = {}
    groups: dict[str, str] = {}
    trajectories: dict[str, SimTrajectory] = {}
    for index, trajectory in enumerate(trace):
        group = trajectory.group or groups.setdefault(trajectory.id, group_id(len(groups)))
        prompt = prompts.setdefault(
            (group, trajectory.prompt_tokens), [0] * trajectory.prompt_tokens
        )
        spec = TrajectorySpec(
            group_id=group,
            index=index,
            environment="trace",
            task=_task_of(trajectory),
            prompt_token_ids=prompt,
            max_steps=len(trajectory.steps),
        )
        traj_id = trajectory_id(index)
        trajectories[traj_id] = SimTrajectory(
            traj_id,
            trajectory,
            spec,
            context_tokens=trajectory.prompt_tokens,
            new_tokens=trajectory.prompt_tokens,
        )
    return trajectories


def _task_of(trajectory: TraceTrajectory) -> dict[str, object]:
    """The trace task: its id, and its steps' texts when it has any (the prediction decider
    reads them as it does a live ``trace`` task's, ``heddle.control.prediction``)."""
    if not trajectory.has_text:
        return {"trace_id": trajectory.id}
    steps = [{"output_text": s.output_text, "tool_text": s.tool_text} for s in trajectory.steps]
    return {"trace_id": trajectory.id, "steps": steps}
