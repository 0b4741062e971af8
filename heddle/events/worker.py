"""Events of rollout workers: ``heddle.evt.worker.<worker_id>.<kind>``; telemetry on core NATS."""

from __future__ import annotations

from typing import ClassVar

import msgspec

from heddle.events.base import Event


class WorkerEvent(Event, frozen=True, kw_only=True):
    family: ClassVar[str] = "worker"
    worker_id: str


class WorkerRegistered(WorkerEvent, frozen=True, kw_only=True, tag="worker.registered"):
    engine: str
    """Engine registry name: sim, torch, sglang."""
    model: str = ""
    tp_degree: int = 1
    max_running: int = 0
    """Most generations the engine runs at once (0: bounded only by KV capacity)."""
    max_kv_tokens: int = 0
    """KV cache capacity in tokens (0: unknown)."""
    can_export_kv: bool = False
    host: str = ""
    incarnation: str = ""
    """Distinguishes restarts of the same worker id."""
    time_scale: float = 1.0
    """Model seconds per wall second of the worker's engine (a sim engine runs faster than real
    time by this factor; 1.0 for real engines): a submission's time scale is the deployment's."""
    max_context_tokens: int = 0
    """The longest context the worker's model takes (prompt and everything after it); 0:
    unknown. The operations service refuses a prompt that does not fit it."""
    node: str = ""
    """The machine whose GPUs the worker's engine runs on (a TP group never spans two): a
    re-shard merges workers of one node only. "": unknown (the worker is never re-sharded)."""
    gpu_ids: list[int] = []
    """The node's GPUs the engine uses (``CUDA_VISIBLE_DEVICES``); empty: unknown."""


class WorkerHeartbeat(WorkerEvent, frozen=True, kw_only=True, tag="worker.heartbeat"):
    sequence: int
    num_running: int = 0
    num_waiting: int = 0
    num_trajectories: int = 0
    kv_usage: float = 0.0


class WorkerDrained(WorkerEvent, frozen=True, kw_only=True, tag="worker.drained"):
    pass


class WorkerFailed(WorkerEvent, frozen=True, kw_only=True, tag="worker.failed"):
    reason: str
    trajectory_ids: list[str] = []
    """Trajectories the worker held; the control plane re-places them."""
    incarnation: str = ""
    """The incarnation declared failed ("" in older events): told so (``Rejoin``), a worker
    still running under it drops what it held and registers afresh."""


class ReshardRequested(WorkerEvent, frozen=True, kw_only=True, tag="worker.reshard_requested"):
    """The control plane's decision to merge workers of one node into one worker of a higher TP
    degree (``heddle.control.reshard``), on the subject of ``worker_id``, the worker that
    relaunches at ``tp_degree`` over ``gpu_ids``; the other ``member_worker_ids`` retire
    (``Retire``) and their trajectories move to it. The figures say why it was taken."""

    reshard_id: str
    member_worker_ids: list[str]
    """Every worker merged, ``worker_id`` first."""
    node: str
    tp_degree: int
    gpu_ids: list[int]
    num_trajectories: int = 0
    """Trajectories the members hosted when it was decided."""
    predicted_current_s: float = 0.0
    """Predicted seconds until the members' trajectories finish where they are."""
    predicted_resharded_s: float = 0.0
    """Predicted seconds until they finish on the merged worker, its switch cost included."""
    switch_cost_s: float = 0.0
    """The switch's own seconds: engines stopped and started, weights loaded, KV re-prefilled."""


class WorkerRetired(WorkerEvent, frozen=True, kw_only=True, tag="worker.retired"):
    """A worker stopped its engine for a re-shard (``Retire``) and hands its trajectories back:
    generations it was running were interrupted (``GenerationInterrupted`` keeps their output),
    and ``successor_worker_id`` takes them over. Unlike ``worker.failed`` this is expected; the
    worker's GPUs are free once this is stored."""

    reshard_id: str
    successor_worker_id: str
    trajectory_ids: list[str] = []
    gpu_ids: list[int] = []


WorkerEventT = (
    WorkerRegistered
    | WorkerHeartbeat
    | WorkerDrained
    | WorkerFailed
    | ReshardRequested
    | WorkerRetired
)
WORKER_EVENTS: tuple[type[WorkerEvent], ...] = (
    WorkerRegistered,
    WorkerHeartbeat,
    WorkerDrained,
    WorkerFailed,
    ReshardRequested,
    WorkerRetired,
)


class DeadLettered(Event, frozen=True, kw_only=True, tag="deadletter.recorded"):
    """A message a consumer could not process; published on ``heddle.evt.deadletter.<role>``
    (``heddle.events.subjects``)."""

    family: ClassVar[str] = "deadletter"
    consumer: str
    subject: str
    stream_sequence: int
    reason: str
    payload: str = ""
    """The offending payload, decoded as UTF-8 with replacement and truncated."""
    role: str = ""
    """The role whose consumer refused it, as its credential is named (``control_plane``,
    ``ledger_projector``, ``worker-<id>``, ...): the last token of its subject, which only that
    role may publish ("" in dead letters written before roles were named)."""


class ExecutorRegistered(Event, frozen=True, kw_only=True, tag="tools.registered"):
    """A tool executor started serving a pool, on ``heddle.evt.tools.<executor_id>.registered``.

    ``isolation`` is the sandbox level in force (``namespace``, ``bwrap``, or ``process``:
    unisolated, only when the executor was started with ``--allow-unisolated``)."""

    family: ClassVar[str] = "tools"
    executor_id: str
    pool: str
    isolation: str
    isolation_detail: str = ""
    """What enforces it, in words (``bubblewrap 0.8.0, rootless``)."""
    host: str = ""
    max_procs: int = 0


class WorkerTelemetry(msgspec.Struct, frozen=True, kw_only=True):
    """Best-effort load report on ``heddle.telemetry.worker.<worker_id>`` (not persisted)."""

    worker_id: str
    sent_at: float
    num_running: int
    num_waiting: int
    kv_usage: float = 0.0
    tokens_per_s: float = 0.0
    running_traj_ids: list[str] = []
