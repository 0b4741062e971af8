"""Subject names of the event and command families, with builders and a parser.

heddle.evt.rollout.<rollout_id>.<kind>
heddle.evt.traj.<rollout_id>.<traj_id>.<kind>
heddle.evt.traj.<rollout_id>.<traj_id>.<kind>.<writer>   (a worker's step events, written
                                          under its role, worker-<id>; the control plane's failure
                                          of a trajectory, failed.control_plane: see below)
heddle.evt.worker.<worker_id>.<kind>
heddle.evt.weights.<weight_version>.<kind>
heddle.evt.weights.<weight_version>.<kind>.worker-<id>   (a worker's report: loaded, load_failed)
heddle.evt.tools.<executor_id>.<kind>      (tool executors: registered)
heddle.evt.deadletter.<role>                (a message a consumer of <role> refused)
heddle.cmd.worker.<worker_id>.<action>
heddle.cmd.worker.<worker_id>.<action>.<sent_by>   (a worker's command to its peer)
heddle.cmd.tool.<pool>
heddle.telemetry.worker.<worker_id>       (core NATS, not persisted)
heddle.out.<trainer>.<rollout_id>.<traj_id>.<kind>   (stream HEDDLE_OUT_<trainer>: each
                                          trajectory's terminal record, kind completed|failed)
heddle.out.<trainer>.<rollout_id>.<kind>  (the rollout's end, kind finished|cancelled)

``subject_mismatch`` says whether a decoded message belongs on the subject it came from.
Every Heddle publisher derives the subject from the message (``subject_for_event``,
``subject_for_command``), so a valid message on another subject (a hand-made publish, a bug,
a fuzzer) is refused: a consumer that took it would fold it under ids its subject does not
name (a trajectory event of rollout A delivered to a filter of rollout B). Runners dead-letter
such messages with the reason this module gives.

A trainer's delivery stream (``heddle.out.<trainer>.<rollout>[.<traj>].<kind>``) holds events the
control plane passed on as they were stored: the subject must name the event's rollout,
trajectory and kind; a trajectory's ``failed`` record may hold the ``Completed`` the control
plane built for the trainer from its failure.

Where who wrote an event matters, its subject names the writer's role, as its credential is
named (``heddle.deploy.roles``: ``control_plane``, ``worker-<id>``, ...), and only that role
may publish there:

- A worker's events of a trajectory (``WORKER_WRITTEN_KINDS``) go on
  ``heddle.evt.traj.<r>.<t>.<kind>.worker-<id>``, the worker the event names (``worker_id``;
  a move's source for ``migrated``). Worker ``w01``'s credential may publish only under
  ``worker-w01``, and an event that names another worker than its subject is refused: a
  worker cannot write in another's name. The event gate (``heddle.control.gate``) then
  refuses an event of a worker that does not hold the trajectory. Events stored before
  writers were named are on the bare ``heddle.evt.traj.<r>.<t>.<kind>``, which only the control
  plane's credential may still publish; they are read as before.
- A worker's report on a weight version (``weights.loaded``, ``weights.load_failed``) goes on
  ``heddle.evt.weights.<v>.<kind>.worker-<id>`` the same way; read one with ``weights_subjects``.
- A ``Failed`` naming no worker is the control plane's own verdict on a trajectory no worker
  holds (its submission was dead-lettered, or an operator aborted it before its placement): it
  goes on ``heddle.evt.traj.<r>.<t>.failed.control_plane``.
- Read every subject an event of one kind comes on with ``trajectory_subjects``.
- A dead letter goes on ``heddle.evt.deadletter.<role>`` (``DeadLettered.role``, the role whose
  consumer refused the message), each role only on its own; ``DEADLETTER_SUBJECT`` reads them
  all. Only the control plane's (``heddle.evt.deadletter.control_plane``) can end a
  trajectory whose submission it could not read. Dead letters written before roles were named
  (``role`` "") are on ``heddle.evt.deadletter``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import get_args

from heddle.events.base import Event
from heddle.events.commands import ToolCall, WorkerCommand
from heddle.events.rollout import RolloutEvent
from heddle.events.trajectory import (
    Completed,
    Failed,
    Generated,
    GenerationInterrupted,
    GenerationStarted,
    Migrated,
    Preempted,
    ToolCalled,
    TrajectoryEvent,
)
from heddle.events.weights import WeightsEvent, WeightsLoaded, WeightsLoadFailed
from heddle.events.worker import DeadLettered, ExecutorRegistered, WorkerEvent
from heddle.ids import check_token

EVENTS_STREAM = "HEDDLE_EVENTS"
EVENTS_SUBJECTS = "heddle.evt.>"
COMMANDS_STREAM = "HEDDLE_CMDS"
COMMANDS_SUBJECTS = "heddle.cmd.worker.>"
TOOLS_STREAM = "HEDDLE_TOOLS"
TOOLS_SUBJECTS = "heddle.cmd.tool.>"
DEADLETTER_PREFIX = "heddle.evt.deadletter"
DEADLETTER_SUBJECT = f"{DEADLETTER_PREFIX}.>"
"""Every role's dead letters (a filter: a dead letter is published on ``deadletter_subject``)."""
DELIVERY_PREFIX = "heddle.out"
DELIVERY_STREAM_PREFIX = "HEDDLE_OUT_"
TELEMETRY_PREFIX = "heddle.telemetry"

CONTROL_PLANE_ROLE = "control_plane"
"""The roles as their credentials are named (``heddle.deploy.roles.Identity.label``): the last
token of the subjects only that role may publish."""
LEDGER_PROJECTOR_ROLE = "ledger_projector"
TOOL_EXECUTOR_ROLE = "tool_executor"
OPERATOR_ROLE = "operator"


WorkerWritten = (
    GenerationStarted
    | Generated
    | GenerationInterrupted
    | ToolCalled
    | Preempted
    | Migrated
    | Completed
    | Failed
)
"""The trajectory events a worker writes, on subjects that name it (module docstring)."""
WORKER_WRITTEN_KINDS = tuple(event_type.kind_name() for event_type in get_args(WorkerWritten))
WorkerReport = WeightsLoaded | WeightsLoadFailed
"""A worker's report on a weight version, on a subject that names it."""
WORKER_REPORT_KINDS = tuple(event_type.kind_name() for event_type in get_args(WorkerReport))


def worker_role(worker_id: str) -> str:
    """The role of worker ``worker_id`` (one credential per worker)."""
    return f"worker-{check_token(worker_id, 'worker id')}"


def trainer_role(trainer: str) -> str:
    """The role of trainer ``trainer`` (one credential per trainer)."""
    return f"trainer-{check_token(trainer, 'trainer name')}"


def deadletter_subject(role: str) -> str:
    """``heddle.evt.deadletter.<role>``: the dead letters of ``role``'s consumers."""
    return f"{DEADLETTER_PREFIX}.{check_token(role, 'role')}"


def rollout_subject(rollout_id: str, kind: str = "*") -> str:
    return f"heddle.evt.rollout.{check_token(rollout_id, 'rollout id')}.{kind}"


def trajectory_subject(rollout_id: str, traj_id: str = "*", kind: str = "*") -> str:
    rollout = check_token(rollout_id, "rollout id") if rollout_id != "*" else "*"
    traj = check_token(traj_id, "trajectory id") if traj_id != "*" else "*"
    return f"heddle.evt.traj.{rollout}.{traj}.{kind}"


def trajectory_subjects(rollout_id: str, traj_id: str, kind: str) -> tuple[str, ...]:
    """Every subject an event of ``kind`` comes on: the bare one and, for a kind whose subject
    names its writer (``WORKER_WRITTEN_KINDS``), the one under any writer. (Every event of a
    trajectory: ``trajectory_subject(rollout_id, traj_id, ">")``.)"""
    return _with_writers(
        trajectory_subject(rollout_id, traj_id, kind), kind in WORKER_WRITTEN_KINDS
    )


def _with_writers(bare: str, is_named: bool) -> tuple[str, ...]:
    """``bare``, and ``bare`` under any writer when its kind's subject names one."""
    return (bare, f"{bare}.*") if is_named else (bare,)


def written_by(event: Event) -> str | None:
    """The role whose subject ``event`` goes on (module docstring): the worker it names, the
    control plane for a failure naming no worker; None for the other kinds, and for events
    stored before workers were named in them."""
    if isinstance(event, Failed) and not event.worker_id:
        return CONTROL_PLANE_ROLE
    if not isinstance(event, WorkerWritten | WorkerReport):
        return None
    worker_id = event.source_worker_id if isinstance(event, Migrated) else event.worker_id
    return worker_role(worker_id) if worker_id else None


def worker_event_subject(worker_id: str, kind: str = "*") -> str:
    return f"heddle.evt.worker.{check_token(worker_id, 'worker id')}.{kind}"


def weights_subject(weight_version: int | str, kind: str = "*") -> str:
    version = str(weight_version)
    if version != "*" and not (version.isdigit() and int(version) >= 0):
        raise ValueError(f"weight version {version!r} is not an integer >= 0")
    return f"heddle.evt.weights.{version}.{kind}"


def weights_subjects(weight_version: int | str, kind: str) -> tuple[str, ...]:
    """Every subject an event of ``kind`` comes on (``trajectory_subjects``, for weights)."""
    return _with_writers(weights_subject(weight_version, kind), kind in WORKER_REPORT_KINDS)


def executor_event_subject(executor_id: str, kind: str = "*") -> str:
    executor = check_token(executor_id, "executor id") if executor_id != "*" else "*"
    return f"heddle.evt.tools.{executor}.{kind}"


def worker_command_subject(worker_id: str, action: str = "*") -> str:
    return f"heddle.cmd.worker.{check_token(worker_id, 'worker id')}.{action}"


def peer_command_subject(worker_id: str, action: str, sent_by: str) -> str:
    """A command worker ``sent_by`` sends its peer ``worker_id`` (``WorkerCommand.sent_by``)."""
    return f"{worker_command_subject(worker_id, action)}.{check_token(sent_by, 'worker id')}"


def tool_subject(pool: str) -> str:
    return f"heddle.cmd.tool.{check_token(pool, 'tool pool')}"


def telemetry_subject(worker_id: str) -> str:
    return f"{TELEMETRY_PREFIX}.worker.{check_token(worker_id, 'worker id')}"


HEARTBEATS_SUBJECT = f"{TELEMETRY_PREFIX}.heartbeat.*"
"""Every worker's heartbeats (core NATS: no stream stores ``heddle.telemetry.>``)."""


def heartbeat_subject(worker_id: str) -> str:
    return f"{TELEMETRY_PREFIX}.heartbeat.{check_token(worker_id, 'worker id')}"


def delivery_stream(trainer: str) -> str:
    """The stream a trainer reads its rollouts' terminal records from (one per trainer, so a
    trainer's credential can be limited to its own stream's consumers)."""
    return f"{DELIVERY_STREAM_PREFIX}{check_token(trainer, 'trainer name')}"


def delivery_subject(
    trainer: str, rollout_id: str = "*", traj_id: str = "*", kind: str = "*"
) -> str:
    """``heddle.out.<trainer>.<rollout_id>.<traj_id>.<kind>`` (kind: completed or failed)."""
    rollout = check_token(rollout_id, "rollout id") if rollout_id != "*" else "*"
    traj = check_token(traj_id, "trajectory id") if traj_id != "*" else "*"
    return f"{DELIVERY_PREFIX}.{check_token(trainer, 'trainer name')}.{rollout}.{traj}.{kind}"


def rollout_delivery_subject(trainer: str, rollout_id: str, kind: str) -> str:
    """``heddle.out.<trainer>.<rollout_id>.<kind>`` (kind: finished or cancelled): the rollout's
    end, delivered after its trajectories' records."""
    rollout = check_token(rollout_id, "rollout id")
    return f"{DELIVERY_PREFIX}.{check_token(trainer, 'trainer name')}.{rollout}.{kind}"


def delivery_subjects(trainer: str) -> str:
    """Every subject of a trainer's delivery stream."""
    return f"{DELIVERY_PREFIX}.{check_token(trainer, 'trainer name')}.>"


def rollout_filter(rollout_id: str) -> list[str]:
    """Subjects holding every event of one rollout (for filtered replay)."""
    return [rollout_subject(rollout_id, ">"), trajectory_subject(rollout_id, "*", ">")]


def subject_for_event(event: Event) -> str:
    kind = type(event).kind_name()
    match event:
        case TrajectoryEvent():
            return _named(trajectory_subject(event.rollout_id, event.traj_id, kind), event)
        case RolloutEvent():
            return rollout_subject(event.rollout_id, kind)
        case WorkerEvent():
            return worker_event_subject(event.worker_id, kind)
        case WeightsEvent():
            return _named(weights_subject(event.weight_version, kind), event)
        case ExecutorRegistered():
            return executor_event_subject(event.executor_id, kind)
        case DeadLettered() if event.role:
            return deadletter_subject(event.role)
        case DeadLettered():
            return DEADLETTER_PREFIX
    raise TypeError(f"no subject for {type(event).__name__}")


def _named(subject: str, event: Event) -> str:
    writer = written_by(event)
    return subject if writer is None else f"{subject}.{writer}"


def subject_for_command(command: WorkerCommand | ToolCall) -> str:
    match command:
        case ToolCall():
            return tool_subject(command.pool)
        case WorkerCommand() if command.sent_by:
            return peer_command_subject(command.worker_id, type(command).action, command.sent_by)
        case WorkerCommand():
            return worker_command_subject(command.worker_id, type(command).action)
    raise TypeError(f"no subject for {type(command).__name__}")


@dataclass(frozen=True, slots=True)
class SubjectParts:
    """A parsed subject. Fields that the family does not have are None."""

    family: str
    kind: str | None = None
    rollout_id: str | None = None
    traj_id: str | None = None
    worker_id: str | None = None
    pool: str | None = None
    weight_version: int | None = None
    executor_id: str | None = None
    sent_by: str | None = None
    """Who wrote it, where the subject names it: a peer command's worker, a dead letter's
    role, a trajectory event's writer (``worker-<id>``, or ``control_plane`` for the control
    plane's failure of a trajectory)."""
    trainer: str | None = None


def parse_subject(subject: str) -> SubjectParts:
    """Split a Heddle subject into its parts; ``ValueError`` for anything else."""
    tokens = subject.split(".")
    match tokens:
        case ["heddle", "evt", "rollout", rollout_id, kind]:
            return SubjectParts("rollout", kind, rollout_id=rollout_id)
        case ["heddle", "evt", "traj", rollout_id, traj_id, kind]:
            return SubjectParts("traj", kind, rollout_id=rollout_id, traj_id=traj_id)
        case ["heddle", "evt", "traj", rollout_id, traj_id, kind, sent_by]:
            return SubjectParts(
                "traj", kind, rollout_id=rollout_id, traj_id=traj_id, sent_by=sent_by
            )
        case ["heddle", "evt", "worker", worker_id, kind]:
            return SubjectParts("worker", kind, worker_id=worker_id)
        case ["heddle", "evt", "weights", version, kind] if version.isdigit():
            return SubjectParts("weights", kind, weight_version=int(version))
        case ["heddle", "evt", "weights", version, kind, sent_by] if version.isdigit():
            return SubjectParts("weights", kind, weight_version=int(version), sent_by=sent_by)
        case ["heddle", "evt", "tools", executor_id, kind]:
            return SubjectParts("tools", kind, executor_id=executor_id)
        case ["heddle", "out", trainer, rollout_id, kind]:
            return SubjectParts("out", kind, rollout_id=rollout_id, trainer=trainer)
        case ["heddle", "out", trainer, rollout_id, traj_id, kind]:
            return SubjectParts(
                "out", kind, rollout_id=rollout_id, traj_id=traj_id, trainer=trainer
            )
        case ["heddle", "evt", "deadletter"]:
            return SubjectParts("deadletter")
        case ["heddle", "evt", "deadletter", role]:
            return SubjectParts("deadletter", sent_by=role)
        case ["heddle", "cmd", "worker", worker_id, action]:
            return SubjectParts("cmd.worker", action, worker_id=worker_id)
        case ["heddle", "cmd", "worker", worker_id, action, sent_by]:
            return SubjectParts("cmd.worker", action, worker_id=worker_id, sent_by=sent_by)
        case ["heddle", "cmd", "tool", pool]:
            return SubjectParts("cmd.tool", pool=pool)
        case ["heddle", "telemetry", "worker", worker_id]:
            return SubjectParts("telemetry", worker_id=worker_id)
    raise ValueError(f"not a Heddle subject: {subject!r}")


def subject_mismatch(subject: str, message: object) -> str | None:
    """Why ``message`` cannot have been published on ``subject``; None when it agrees (or is
    not a Heddle event or command)."""
    if subject.startswith(f"{DELIVERY_PREFIX}.") and isinstance(message, Event):
        return _delivered_mismatch(subject, message)
    try:
        if isinstance(message, Event):
            expected = subject_for_event(message)
        elif isinstance(message, WorkerCommand | ToolCall):
            expected = subject_for_command(message)
        else:
            return None
    except ValueError as exc:
        return f"message with invalid ids: {exc}"
    if expected == subject or _stored_before_writers(subject, expected, message):
        return None
    return f"wrong subject: published on {subject}, but the message belongs on {expected}"


def _stored_before_writers(subject: str, expected: str, message: object) -> bool:
    """Whether ``subject`` is the bare one a worker's event was stored on before its writer was
    named, ``expected`` without the worker (read as before; no worker's credential may publish
    it any more). The control plane's failure has had its own subject since it had one."""
    writer = written_by(message) if isinstance(message, Event) else None
    return writer not in (None, CONTROL_PLANE_ROLE) and subject == expected.removesuffix(
        f".{writer}"
    )


def _delivered_mismatch(subject: str, event: Event) -> str | None:
    try:
        parts = parse_subject(subject)
    except ValueError as exc:
        return str(exc)
    traj_id = event.traj_id if isinstance(event, TrajectoryEvent) else None
    kinds = {type(event).kind_name()} | ({"failed"} if isinstance(event, Completed) else set())
    if (parts.rollout_id, parts.traj_id) == (event.rollout_id, traj_id) and parts.kind in kinds:
        return None
    return f"wrong subject: delivered on {subject}, but the message is {event.event_id}"


def refused_submission(dead_letter: DeadLettered) -> tuple[str, str] | None:
    """(rollout id, trajectory id) of the submission a dead letter of the control plane refused
    (None: another role's dead letter, or one of anything but a trajectory's submission)."""
    if dead_letter.role != CONTROL_PLANE_ROLE:
        return None
    try:
        parts = parse_subject(dead_letter.subject)
    except ValueError:
        return None
    if parts.family != "traj" or parts.kind != "submitted" or not parts.traj_id:
        return None
    return parts.rollout_id or "", parts.traj_id
