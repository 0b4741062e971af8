"""Commands: ``heddle.cmd.worker.<worker_id>.<action>`` and ``heddle.cmd.tool.<pool>``.

Commands are JSON. Worker commands are internal: the control plane sends them; operators steer
through the operations service (``nats req heddle.ops.worker.drain '{"worker_id":"w00"}'``,
docs/trainer.md), which records who asked and routes the action to the right worker. A worker
sends commands to a peer only for trajectories it hands over (``MigrateIn``, and commands it
forwards to the trajectory's new holder); those name it in ``sent_by`` and in a last subject
token, ``heddle.cmd.worker.<worker_id>.<action>.<sent_by>``, which the server's per-worker
permissions tie to the sender's credential (docs/deploy.md).
"""

from __future__ import annotations

from typing import ClassVar, Literal

import msgspec

from heddle.events.base import Command
from heddle.events.trajectory import ToolReturned, TrajectorySpec
from heddle.events.weights import LoadPolicy, WeightSource, WeightVersion


class WorkerCommand(Command, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A command addressed to one rollout worker; ``action`` is the last subject token.

    Decoded strictly: a field the worker does not know is refused (dead-lettered), not ignored,
    so a mistyped hand-written command cannot pass for a valid one. Worker commands are
    internal (the control plane sends them); operators steer through the operations service.
    """

    action: ClassVar[str] = ""
    worker_id: str
    sent_by: str = ""
    """The worker that sent this command to its peer (a hand-over, or a command forwarded to
    the trajectory's new holder); empty when the control plane or an operator sent it. It is
    the subject's last token, so a worker's credential can only send it as itself."""


class StartTrajectory(WorkerCommand, frozen=True, kw_only=True, tag="cmd.start_trajectory"):
    """Host a trajectory. With ``resume`` the worker first rebuilds the trajectory's context and
    environment state from its events in the stream (after a re-placement or a migration)."""

    action: ClassVar[str] = "run"
    traj_id: str
    spec: TrajectorySpec
    priority: float = 0.0
    resume: bool = False
    cache_key: str = ""
    """Object-store key of an exported KV cache to import (migration with transfer)."""
    source_worker_id: str = ""
    epoch: int = 0
    """The hosting number (``TrajectoryPlaced.epoch``) the worker writes into the trajectory's
    events; a command of an older hosting than the stream's is stale and dropped."""


class ContinueTrajectory(WorkerCommand, frozen=True, kw_only=True, tag="cmd.continue_trajectory"):
    """Run the next step of a hosted trajectory, feeding it the result of its tool call."""

    action: ClassVar[str] = "run"
    traj_id: str
    step: int
    """The step to run next."""
    tool_result: ToolReturned
    priority: float = 0.0


class Reprioritize(WorkerCommand, frozen=True, kw_only=True, tag="cmd.reprioritize"):
    action: ClassVar[str] = "reprioritize"
    traj_id: str
    priority: float
    """Larger runs first."""


class Preempt(WorkerCommand, frozen=True, kw_only=True, tag="cmd.preempt"):
    """Move a running generation back to the waiting queue, keeping its KV cache."""

    action: ClassVar[str] = "preempt"
    traj_id: str
    by_traj_id: str = ""


class MigrateOut(WorkerCommand, frozen=True, kw_only=True, tag="cmd.migrate_out"):
    """Hand a trajectory to ``target_worker_id`` at its next tool gap (or now, if it is in one)."""

    action: ClassVar[str] = "migrate_out"
    traj_id: str
    target_worker_id: str
    migration_id: str
    transfer_kv: bool = True
    target_epoch: int = 0
    """The hosting number the target takes the trajectory under (``MigrateIn.epoch``)."""


class MigrateIn(WorkerCommand, frozen=True, kw_only=True, tag="cmd.migrate_in"):
    """Sent by the source worker to the target: take over a trajectory (see StartTrajectory).
    ``sent_by`` is ``source_worker_id`` (the target refuses one that differs)."""

    action: ClassVar[str] = "migrate_in"
    traj_id: str
    spec: TrajectorySpec
    source_worker_id: str
    migration_id: str
    cache_key: str = ""
    num_context_tokens: int = 0
    priority: float = 0.0
    epoch: int = 0
    """The target's hosting number (``MigrateOut.target_epoch``)."""


class Abort(WorkerCommand, frozen=True, kw_only=True, tag="cmd.abort"):
    action: ClassVar[str] = "abort"
    traj_id: str
    reason: str = ""


class Fence(WorkerCommand, frozen=True, kw_only=True, tag="cmd.fence"):
    """The trajectory's hosting ``epoch`` on this worker is over (an event of it was refused as
    stale: the trajectory was placed elsewhere since). The worker drops its work for the
    trajectory if it still holds it under that hosting or an older one, and publishes nothing
    more for it; a newer hosting of the same trajectory is left alone."""

    action: ClassVar[str] = "fence"
    traj_id: str
    epoch: int
    reason: str = ""


class Rejoin(WorkerCommand, frozen=True, kw_only=True, tag="cmd.rejoin"):
    """The control plane declared incarnation ``incarnation`` of this worker failed and placed
    what it held elsewhere. A worker still running under it (a paused process that resumed, a
    partition that healed) drops every trajectory it holds and registers again as a fresh
    incarnation; any other incarnation ignores it."""

    action: ClassVar[str] = "rejoin"
    incarnation: str
    reason: str = ""


class Drain(WorkerCommand, frozen=True, kw_only=True, tag="cmd.drain"):
    """Finish hosted trajectories, accept no new ones, then report ``worker.drained``; the
    worker stays up (heartbeating, drained) until undrained or stopped."""

    action: ClassVar[str] = "drain"


class Undrain(WorkerCommand, frozen=True, kw_only=True, tag="cmd.undrain"):
    """Accept new trajectories again after a drain."""

    action: ClassVar[str] = "undrain"


class Retire(WorkerCommand, frozen=True, kw_only=True, tag="cmd.retire"):
    """Leave for a re-shard: interrupt the generations in flight (publishing what each produced
    so far, ``GenerationInterrupted``), hand every hosted trajectory back, stop the engine so
    its GPUs are free, then publish ``WorkerRetired`` naming ``successor_worker_id`` and stop
    taking commands. Tool calls in flight go on: their results are routed to the successor."""

    action: ClassVar[str] = "retire"
    reshard_id: str
    successor_worker_id: str


class Reshard(WorkerCommand, frozen=True, kw_only=True, tag="cmd.reshard"):
    """Relaunch the engine at ``tp_degree`` over ``gpu_ids`` (the worker's own and those the
    retired members freed): interrupt the generations in flight (``GenerationInterrupted``),
    stop the engine, start it at the new degree, register again (``WorkerRegistered``, a new
    incarnation) and resume the hosted trajectories, each re-prefilling its context."""

    action: ClassVar[str] = "reshard"
    reshard_id: str
    tp_degree: int
    gpu_ids: list[int]


class LoadWeights(WorkerCommand, frozen=True, kw_only=True, tag="cmd.load_weights"):
    """Load weight version ``weight_version`` from ``source`` at a safe point (``load_policy``),
    then publish ``weights.loaded`` (or ``weights.load_failed``)."""

    action: ClassVar[str] = "load_weights"
    weight_version: WeightVersion
    source: WeightSource
    load_policy: LoadPolicy = "between_steps"


WorkerCommandT = (
    StartTrajectory
    | ContinueTrajectory
    | Reprioritize
    | Preempt
    | MigrateOut
    | MigrateIn
    | Abort
    | Drain
    | Undrain
    | LoadWeights
    | Retire
    | Reshard
    | Fence
    | Rejoin
)
WORKER_COMMANDS: tuple[type[WorkerCommand], ...] = (
    StartTrajectory,
    ContinueTrajectory,
    Reprioritize,
    Preempt,
    MigrateOut,
    MigrateIn,
    Abort,
    Drain,
    Undrain,
    LoadWeights,
    Retire,
    Reshard,
    Fence,
    Rejoin,
)


# ---- tool calls -------------------------------------------------------------------------------


class PythonTool(msgspec.Struct, frozen=True, kw_only=True, tag="python"):
    """Run model-written Python in the sandbox; the observation is its stdout (and stderr)."""

    code: str


class UnitTestTool(msgspec.Struct, frozen=True, kw_only=True, tag="unit_tests"):
    """Write ``files`` into a scratch dir and run ``test_code`` against them in the sandbox."""

    files: dict[str, str]
    test_code: str


class SearchTool(msgspec.Struct, frozen=True, kw_only=True, tag="search"):
    query: str
    top_k: int = 5
    corpus: str = ""
    """Corpus path or name known to the executor ("" = the executor's default corpus)."""


class TraceTool(msgspec.Struct, frozen=True, kw_only=True, tag="trace"):
    """Replay a recorded tool call: wait ``duration_s`` (model time), return pseudo-tokens."""

    duration_s: float
    num_output_tokens: int
    seed: int = 0


ToolRequest = PythonTool | UnitTestTool | SearchTool | TraceTool
ToolName = Literal["python", "unit_tests", "search", "trace"]


class ToolCall(Command, frozen=True, kw_only=True, tag="cmd.tool_call"):
    """A tool call, pulled by any executor of ``pool`` from ``heddle.cmd.tool.<pool>``."""

    traj_id: str
    step: int
    call_id: str
    pool: str = "default"
    request: ToolRequest
    timeout_s: float = 30.0
    time_scale: float = 1.0
    """Model seconds per wall second; a trace tool waits duration_s / time_scale."""
