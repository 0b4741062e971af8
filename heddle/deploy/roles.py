"""What each Heddle process may publish and subscribe to on NATS: one role per kind of process.

Subjects come from ``heddle.events.subjects`` (docs/design.md, "Subjects"). Besides its own
subjects, every role needs the JetStream API subjects of what it reads (``$JS.API.CONSUMER.*``
of its streams, acknowledgements ``$JS.ACK.<stream>.>``, flow control ``$JS.FC.>`` of ordered
replay), stream info (``$JS.API.STREAM.INFO.>``: a process checks the streams exist as
specified before it starts), the object-store bucket of large payloads (``$O.heddle-payloads.>``
and its stream ``OBJ_heddle-payloads``), the dead-letter subject (every consumer dead-letters
what it cannot decode), and reply inboxes (``_INBOX.>``: publish acknowledgements, API replies).

Only the control plane and the operator reach the whole JetStream API (create, edit, delete,
purge streams and consumers: ``$JS.API.>``); the others cannot remove or rewrite what the
stream holds.
"""

from __future__ import annotations

from dataclasses import dataclass

from heddle.bus.objects import KV_BUCKET, PAYLOADS_BUCKET
from heddle.consumers.operations import OPS_PREFIX
from heddle.events.subjects import (
    COMMANDS_STREAM,
    DEADLETTER_SUBJECT,
    EVENTS_STREAM,
    TELEMETRY_PREFIX,
    TOOLS_STREAM,
)
from heddle.weights import WEIGHTS_BUCKET

INBOX = "_INBOX.>"
JS_ALL = "$JS.API.>"


@dataclass(frozen=True, slots=True)
class Role:
    """One kind of process and the subjects its credential may use."""

    name: str
    description: str
    publish: tuple[str, ...]
    subscribe: tuple[str, ...]


def traj_kinds(*kinds: str) -> tuple[str, ...]:
    return tuple(f"heddle.evt.traj.*.*.{kind}" for kind in kinds)


def worker_kinds(*kinds: str) -> tuple[str, ...]:
    return tuple(f"heddle.evt.worker.*.{kind}" for kind in kinds)


def rollout_kinds(*kinds: str) -> tuple[str, ...]:
    return tuple(f"heddle.evt.rollout.*.{kind}" for kind in kinds)


def reads(stream: str) -> tuple[str, ...]:
    """The JetStream API subjects that create, inspect and pull from consumers of ``stream``
    and get its messages, and its acknowledgements."""
    return (
        f"$JS.API.CONSUMER.CREATE.{stream}",
        f"$JS.API.CONSUMER.CREATE.{stream}.>",
        f"$JS.API.CONSUMER.DURABLE.CREATE.{stream}.>",
        f"$JS.API.CONSUMER.INFO.{stream}.>",
        f"$JS.API.CONSUMER.DELETE.{stream}.>",
        f"$JS.API.CONSUMER.MSG.NEXT.{stream}.>",
        f"$JS.API.STREAM.MSG.GET.{stream}",
        f"$JS.API.DIRECT.GET.{stream}",
        f"$JS.API.DIRECT.GET.{stream}.>",
        f"$JS.ACK.{stream}.>",
    )


def bucket(name: str) -> tuple[str, ...]:
    """Read, write and create the object-store bucket ``name`` (its stream ``OBJ_<name>``; a
    put purges the object's older chunks)."""
    stream = f"OBJ_{name}"
    return (
        *reads(stream),
        f"$O.{name}.>",
        f"$JS.API.STREAM.CREATE.{stream}",
        f"$JS.API.STREAM.PURGE.{stream}",
    )


COMMON_PUBLISH: tuple[str, ...] = (
    "$JS.API.INFO",
    "$JS.API.STREAM.INFO.>",
    "$JS.FC.>",
    DEADLETTER_SUBJECT,
    *bucket(PAYLOADS_BUCKET),
)
COMMON_SUBSCRIBE: tuple[str, ...] = (INBOX,)

WORKER_TRAJECTORY_KINDS = (
    "generation_started",
    "generated",
    "tool_called",
    "preempted",
    "migrated",
    "completed",
    "failed",
)
OPERATOR_EVENTS = (
    *traj_kinds("reprioritize_requested", "abort_requested"),
    *rollout_kinds("cancel_requested", "cancelled"),
    *worker_kinds("drain_requested"),
)

ROLES: tuple[Role, ...] = (
    Role(
        "control_plane",
        "heddle up: the deciders, worker liveness (and the ledger projector unless --no-ledger)",
        publish=("heddle.>", JS_ALL, "$JS.ACK.>", "$JS.FC.>", "$O.>", "$SRV.>", INBOX),
        subscribe=("heddle.>", "$SRV.>", INBOX),
    ),
    Role(
        "ledger_projector",
        "heddle db project: the SQL ledger, a projection of HEDDLE_EVENTS",
        publish=(*COMMON_PUBLISH, *reads(EVENTS_STREAM)),
        subscribe=COMMON_SUBSCRIBE,
    ),
    Role(
        "worker",
        "heddle worker: trajectory step events and its own worker events, tool calls, telemetry",
        publish=(
            *COMMON_PUBLISH,
            *traj_kinds(*WORKER_TRAJECTORY_KINDS),
            *worker_kinds("registered", "drained", "failed"),
            "heddle.evt.weights.*.loaded",
            "heddle.evt.weights.*.load_failed",
            "heddle.cmd.tool.>",
            f"{TELEMETRY_PREFIX}.>",
            *reads(COMMANDS_STREAM),
            *reads(EVENTS_STREAM),
            *bucket(KV_BUCKET),
            *bucket(WEIGHTS_BUCKET),
        ),
        subscribe=COMMON_SUBSCRIBE,
    ),
    Role(
        "tool_executor",
        "heddle tools serve: takes tool calls, publishes their results and its registration",
        publish=(
            *COMMON_PUBLISH,
            *traj_kinds("tool_returned"),
            "heddle.evt.tools.*.registered",
            *reads(TOOLS_STREAM),
        ),
        subscribe=COMMON_SUBSCRIBE,
    ),
    Role(
        "trainer",
        "a training loop (heddle.client): submits rollouts, reads completions and outcomes",
        publish=(
            *COMMON_PUBLISH,
            *rollout_kinds("submitted"),
            *traj_kinds("submitted"),
            "heddle.evt.weights.*.published",
            *reads(EVENTS_STREAM),
            *bucket(WEIGHTS_BUCKET),
        ),
        subscribe=COMMON_SUBSCRIBE,
    ),
    Role(
        "operator",
        "people and their tools (heddle ops, nats CLI): reads everything, commands, steers",
        publish=(
            "heddle.cmd.worker.>",
            *OPERATOR_EVENTS,
            f"{OPS_PREFIX}.>",
            JS_ALL,
            "$JS.ACK.>",
            "$JS.FC.>",
            "$O.>",
            "$SRV.>",
            DEADLETTER_SUBJECT,
            INBOX,
        ),
        subscribe=("heddle.>", "$SRV.>", INBOX),
    ),
)
ROLE_NAMES = tuple(role.name for role in ROLES)


def role(name: str) -> Role:
    """The role called ``name``; ``KeyError`` naming the known ones otherwise."""
    for candidate in ROLES:
        if candidate.name == name:
            return candidate
    raise KeyError(f"unknown role {name!r}; known: {', '.join(ROLE_NAMES)}")
