"""What each Heddle identity may publish and subscribe to on NATS (docs/deploy.md, "Credentials").

An ``Identity`` is one credential: a shared role (the control plane, the ledger projector, the
tool executors, the weights publisher, operators) or one worker or one trainer, each with its own
name. ``role_for(identity, inbox)`` gives its permissions; ``inbox`` is where its reply inboxes
live (``heddle.bus.connection.inbox_prefix``: ``_INBOX.<its public key>``), the only inboxes it
may subscribe to, so no identity reads the replies or pull deliveries of another.

Subjects come from ``heddle.events.subjects``; JetStream API subjects are named per stream and,
where a role may hold only its own consumers, per consumer (a consumer name is one subject
token). A consumer whose filter is part of the create request's subject
(``$JS.API.CONSUMER.CREATE.<stream>.<name>.<filter>``, which the server checks against the
request) can be bounded to what it reads: a worker creates only ``worker-<id>`` filtered on its
own commands, and replays only trajectory events. Ordered replays name their consumers at
random (``replay-<uuid>``), so a role that replays may pull from any consumer of the stream but
those denied to it: the control plane's and the projector's durables are denied to every role
but theirs (``OWNED_DURABLES``). Object-store buckets are read, written (an object is never
replaced: ``Objects.put_once``) or also purged (deleting objects) by the roles that need it.

Where who wrote an event matters, the subject names the writer's role (its credential's
label) and only that role may publish it: each role dead-letters on
``heddle.evt.deadletter.<role>`` (only the control plane's end a submission), and a failure
naming no worker, the control plane's own, is on ``heddle.evt.traj.<r>.<t>.failed.control_plane``,
which no worker may publish (``heddle.events.subjects``).

Only the control plane and operators reach the whole JetStream API (create, edit, purge and
delete streams and consumers).
"""

from __future__ import annotations

from dataclasses import dataclass

from heddle.bus.objects import KV_BUCKET, PAYLOADS_BUCKET
from heddle.bus.streams import HEDDLE_STREAMS
from heddle.control.submit_requests import upload_bucket
from heddle.controlplane.host import PLANE
from heddle.controlplane.operations import OPS_PREFIX, TRAINER_ENDPOINTS
from heddle.controlplane.plane_config import HostConfig
from heddle.events.subjects import (
    COMMANDS_STREAM,
    CONTROL_PLANE_ROLE,
    EVENTS_STREAM,
    LEDGER_PROJECTOR_ROLE,
    OPERATOR_ROLE,
    TELEMETRY_PREFIX,
    TOOL_EXECUTOR_ROLE,
    TOOLS_STREAM,
    WORKER_REPORT_KINDS,
    WORKER_WRITTEN_KINDS,
    deadletter_subject,
    trainer_role,
    worker_role,
)
from heddle.ids import check_token
from heddle.ledger import LEDGER_CONSUMER
from heddle.weights import WEIGHTS_BUCKET

INBOX = "_INBOX"
"""The default inbox prefix (a credential whose public key is not known: docs, tests)."""
JS_ALL = "$JS.API.>"

CONTROL_PLANE = CONTROL_PLANE_ROLE
LEDGER_PROJECTOR = LEDGER_PROJECTOR_ROLE
WORKER = "worker"
TOOL_EXECUTOR = TOOL_EXECUTOR_ROLE
TRAINER = "trainer"
WEIGHTS_PUBLISHER = "weights_publisher"
OPERATOR = OPERATOR_ROLE
SHARED_KINDS = (CONTROL_PLANE, LEDGER_PROJECTOR, TOOL_EXECUTOR, WEIGHTS_PUBLISHER, OPERATOR)
"""One credential for every process of the kind."""
NAMED_KINDS = (WORKER, TRAINER)
"""One credential per worker id, per trainer name."""
ROLE_KINDS = (*SHARED_KINDS, *NAMED_KINDS)

CONTROL_DURABLE = HostConfig().durable(PLANE)
"""The control plane's durable on ``HEDDLE_EVENTS`` (``control-plane``)."""
OWNED_DURABLES = {CONTROL_DURABLE: CONTROL_PLANE, LEDGER_CONSUMER: LEDGER_PROJECTOR}
"""Durables of ``HEDDLE_EVENTS`` only their owner (and the control plane, which runs the
projector itself unless ``--no-ledger``, and operators) may create, delete, pull and ack."""
PEER_ACTIONS = ("run", "reprioritize", "preempt", "migrate_out", "migrate_in", "abort")
"""Commands a worker sends its peers: the ``MigrateIn`` of a hand-over, and the trajectory
commands it forwards to the worker it handed a trajectory to (heddle/workers/agent/commands.py)."""
STREAM_NAMES = tuple(spec.name for spec in HEDDLE_STREAMS)
OPERATOR_EVENT_SUBJECTS = (
    "heddle.evt.traj.*.*.reprioritize_requested",
    "heddle.evt.traj.*.*.abort_requested",
    "heddle.evt.rollout.*.cancel_requested",
    "heddle.evt.rollout.*.cancelled",
    "heddle.evt.worker.*.drain_requested",
)


@dataclass(frozen=True, slots=True)
class Identity:
    """One credential: a shared role (``name`` empty), a worker (its id) or a trainer."""

    kind: str
    name: str = ""

    def __post_init__(self) -> None:
        if self.kind not in ROLE_KINDS:
            raise ValueError(f"unknown role {self.kind!r}; known: {', '.join(ROLE_KINDS)}")
        if (self.kind in NAMED_KINDS) != bool(self.name):
            raise ValueError(
                f"role {self.kind} needs a name"
                if self.kind in NAMED_KINDS
                else f"role {self.kind} is shared: it takes no name"
            )
        if self.name:
            check_token(self.name, f"{self.kind} name")

    @property
    def label(self) -> str:
        """``worker-gpu0``, ``trainer-grpo``, ``control_plane``: its credential's file stem, and
        the role its consumers name (``heddle.events.subjects.worker_role``, ``trainer_role``)."""
        return f"{self.kind}-{self.name}" if self.name else self.kind


@dataclass(frozen=True, slots=True)
class Role:
    """One identity's permissions (NATS subjects, wildcards ``*`` and ``>``)."""

    identity: Identity
    description: str
    publish: tuple[str, ...]
    subscribe: tuple[str, ...]
    publish_deny: tuple[str, ...] = ()
    """Refused even where ``publish`` allows (NATS applies deny over allow)."""

    @property
    def name(self) -> str:
        return self.identity.label


# ---- building blocks ---------------------------------------------------------------------


def owned_consumer(stream: str, consumer: str) -> tuple[str, ...]:
    """Create (any filter), inspect, delete, pull from and acknowledge consumer ``consumer``."""
    api = "$JS.API.CONSUMER"
    return (
        f"{api}.CREATE.{stream}.{consumer}",
        f"{api}.CREATE.{stream}.{consumer}.>",
        f"{api}.DURABLE.CREATE.{stream}.{consumer}",
        f"{api}.INFO.{stream}.{consumer}",
        f"{api}.DELETE.{stream}.{consumer}",
        f"{api}.MSG.NEXT.{stream}.{consumer}",
        f"$JS.ACK.{stream}.{consumer}.>",
    )


def filtered_consumer(stream: str, consumer: str, filter_subject: str) -> tuple[str, ...]:
    """Consumer ``consumer``, created with ``filter_subject`` only (the create request names its
    filter in the subject: ``heddle.bus.streams.ConsumerSpec``)."""
    api = "$JS.API.CONSUMER"
    return (
        f"{api}.CREATE.{stream}.{consumer}.{filter_subject}",
        f"{api}.INFO.{stream}.{consumer}",
        f"{api}.DELETE.{stream}.{consumer}",
        f"{api}.MSG.NEXT.{stream}.{consumer}",
        f"$JS.ACK.{stream}.{consumer}.>",
    )


def replays(stream: str, *filter_subjects: str) -> tuple[str, ...]:
    """Ordered replays (``heddle.bus.replay``: unacknowledged consumers named ``replay-<uuid>``)
    of ``stream`` filtered on one of ``filter_subjects``."""
    api = "$JS.API.CONSUMER"
    return (
        *(f"{api}.CREATE.{stream}.*.{subject}" for subject in filter_subjects),
        f"{api}.MSG.NEXT.{stream}.*",
        f"{api}.DELETE.{stream}.*",
    )


def any_consumer(stream: str) -> tuple[str, ...]:
    """Every consumer of ``stream``: create, inspect, delete, pull, acknowledge."""
    api = "$JS.API.CONSUMER"
    return (
        f"{api}.CREATE.{stream}",
        f"{api}.CREATE.{stream}.>",
        f"{api}.DURABLE.CREATE.{stream}.*",
        f"{api}.INFO.{stream}.*",
        f"{api}.DELETE.{stream}.*",
        f"{api}.MSG.NEXT.{stream}.*",
        f"{api}.LIST.{stream}",
        f"{api}.NAMES.{stream}",
        f"$JS.ACK.{stream}.>",
    )


def stream_reads(stream: str) -> tuple[str, ...]:
    """Inspect ``stream`` and get its messages by sequence or subject."""
    return (
        f"$JS.API.STREAM.INFO.{stream}",
        f"$JS.API.STREAM.MSG.GET.{stream}",
        f"$JS.API.DIRECT.GET.{stream}",
        f"$JS.API.DIRECT.GET.{stream}.>",
    )


def bucket_reads(bucket: str) -> tuple[str, ...]:
    """Read objects of ``bucket`` (its stream ``OBJ_<bucket>``: the meta message by subject, the
    chunks through an ephemeral ordered consumer and its flow control; nats-py looks the
    stream up by the chunks' subject, ``STREAM.NAMES``, which lists stream names only)."""
    stream = f"OBJ_{bucket}"
    return (
        *stream_reads(stream),
        "$JS.API.STREAM.NAMES",
        f"$JS.API.CONSUMER.CREATE.{stream}",
        f"$JS.FC.{stream}.>",
    )


def bucket_writes(bucket: str) -> tuple[str, ...]:
    """Read and add objects (and create the bucket on first use); no purge, so no object of
    another writer disappears at once (a writer can still mark one deleted or point its meta
    elsewhere: readers check every payload's SHA-256 against the event's)."""
    return (*bucket_reads(bucket), f"$O.{bucket}.>", f"$JS.API.STREAM.CREATE.OBJ_{bucket}")


def bucket_owns(bucket: str) -> tuple[str, ...]:
    """Read, add, replace and delete objects (a replaced or deleted object's chunks are purged)."""
    return (*bucket_writes(bucket), f"$JS.API.STREAM.PURGE.OBJ_{bucket}")


def owned_durables_but(kind: str) -> tuple[str, ...]:
    """Deny every use of the ``HEDDLE_EVENTS`` durables ``kind`` does not own."""
    denied: list[str] = []
    api = "$JS.API.CONSUMER"
    for durable, owner in OWNED_DURABLES.items():
        if owner == kind:
            continue
        denied += [
            f"{api}.*.{EVENTS_STREAM}.{durable}",
            f"{api}.*.{EVENTS_STREAM}.{durable}.>",
            f"{api}.*.*.{EVENTS_STREAM}.{durable}",
            f"$JS.ACK.{EVENTS_STREAM}.{durable}.>",
        ]
    return tuple(denied)


def provision_checks() -> tuple[str, ...]:
    """What a ``Bus`` asks at start: account info, and whether Heddle's streams exist as
    specified (stream info, no create)."""
    return ("$JS.API.INFO", *(f"$JS.API.STREAM.INFO.{stream}" for stream in STREAM_NAMES))


def trainer_stream(trainer: str) -> str:
    """The stream of one trainer's terminal records, ``heddle.out.<trainer>.>``."""
    return f"HEDDLE_OUT_{check_token(trainer, 'trainer name')}"


# ---- the roles ---------------------------------------------------------------------------


def role_for(identity: Identity, inbox: str = INBOX) -> Role:
    """The permissions of ``identity``, whose reply inboxes are ``<inbox>.*``."""
    replies = f"{inbox}.>"
    match identity.kind:
        case "control_plane":
            return _control_plane(identity)
        case "operator":
            return _operator(identity)
        case "ledger_projector":
            return _projector(identity, replies)
        case "worker":
            return _worker(identity, replies)
        case "tool_executor":
            return _tool_executor(identity, replies)
        case "trainer":
            return _trainer(identity, replies)
        case "weights_publisher":
            return _weights_publisher(identity, replies)
    raise AssertionError(identity.kind)


def _control_plane(identity: Identity) -> Role:
    return Role(
        identity,
        "heddle up: the deciders, worker liveness, the operations service (and the ledger "
        "projector unless --no-ledger)",
        publish=(
            "heddle.>",
            JS_ALL,
            "$JS.ACK.>",
            "$JS.FC.>",
            "$O.>",
            "$KV.>",
            "$SRV.>",
            "_INBOX.>",
        ),
        subscribe=("heddle.>", "$SRV.>", "_INBOX.>"),
    )


def _operator(identity: Identity) -> Role:
    return Role(
        identity,
        "people and their tools (heddle ops, heddle status, the nats CLI): read everything, "
        "command and steer",
        publish=(
            "heddle.cmd.worker.>",
            *OPERATOR_EVENT_SUBJECTS,
            f"{OPS_PREFIX}.>",
            JS_ALL,
            "$JS.ACK.>",
            "$JS.FC.>",
            "$O.>",
            "$KV.>",
            "$SRV.>",
            deadletter_subject(OPERATOR),
            "_INBOX.>",
        ),
        subscribe=("heddle.>", "$SRV.>", "_INBOX.>"),
    )


def _projector(identity: Identity, replies: str) -> Role:
    return Role(
        identity,
        "heddle db project: the SQL ledger, a projection of HEDDLE_EVENTS on durable "
        f"{LEDGER_CONSUMER}",
        publish=(
            *provision_checks(),
            deadletter_subject(LEDGER_PROJECTOR),
            *owned_consumer(EVENTS_STREAM, LEDGER_CONSUMER),
            *stream_reads(EVENTS_STREAM),
            *bucket_reads(PAYLOADS_BUCKET),
        ),
        subscribe=(replies,),
        publish_deny=owned_durables_but(LEDGER_PROJECTOR),
    )


def _worker(identity: Identity, replies: str) -> Role:
    worker_id = identity.name
    role = worker_role(worker_id)
    return Role(
        identity,
        f"heddle worker --id {worker_id}: its commands, trajectory step events, its own worker "
        "events, tool calls, telemetry, hand-overs to its peers",
        publish=(
            *provision_checks(),
            deadletter_subject(role),
            *(f"heddle.evt.traj.*.*.{kind}.{role}" for kind in WORKER_WRITTEN_KINDS),
            *(
                f"heddle.evt.worker.{worker_id}.{kind}"
                for kind in ("registered", "drained", "failed", "retired")
            ),
            *(f"heddle.evt.weights.*.{kind}.{role}" for kind in WORKER_REPORT_KINDS),
            "heddle.cmd.tool.*",
            *(f"heddle.cmd.worker.*.{action}.{worker_id}" for action in PEER_ACTIONS),
            f"{TELEMETRY_PREFIX}.worker.{worker_id}",
            f"{TELEMETRY_PREFIX}.heartbeat.{worker_id}",
            *filtered_consumer(
                COMMANDS_STREAM, f"worker-{worker_id}", f"heddle.cmd.worker.{worker_id}.>"
            ),
            *replays(EVENTS_STREAM, "heddle.evt.traj.*.*.>"),
            *bucket_writes(PAYLOADS_BUCKET),
            *bucket_owns(KV_BUCKET),
            *bucket_reads(WEIGHTS_BUCKET),
        ),
        subscribe=(replies,),
        publish_deny=owned_durables_but(WORKER),
    )


def _tool_executor(identity: Identity, replies: str) -> Role:
    return Role(
        identity,
        "heddle tools serve: takes tool calls, publishes their results and its registration",
        publish=(
            *provision_checks(),
            deadletter_subject(TOOL_EXECUTOR),
            "heddle.evt.traj.*.*.tool_returned",
            "heddle.evt.tools.*.registered",
            *any_consumer(TOOLS_STREAM),
            *bucket_writes(PAYLOADS_BUCKET),
        ),
        subscribe=(replies,),
        publish_deny=owned_durables_but(TOOL_EXECUTOR),
    )


def _trainer(identity: Identity, replies: str) -> Role:
    trainer = identity.name
    stream = trainer_stream(trainer)
    return Role(
        identity,
        f"a training loop as trainer {trainer!r} (heddle.client): submits and cancels its "
        f"rollouts through the operations service (uploads to bucket {upload_bucket(trainer)}), "
        f"reads its records on {stream}",
        publish=(
            "$JS.API.INFO",
            deadletter_subject(trainer_role(trainer)),  # a record it cannot read
            *(f"{OPS_PREFIX}.{endpoint}.{trainer}" for endpoint in TRAINER_ENDPOINTS),
            *stream_reads(stream),
            *any_consumer(stream),
            *bucket_reads(PAYLOADS_BUCKET),
            *bucket_owns(upload_bucket(trainer)),
        ),
        subscribe=(replies,),
        publish_deny=owned_durables_but(TRAINER),
    )


def _weights_publisher(identity: Identity, replies: str) -> Role:
    return Role(
        identity,
        "a training loop's weights: publishes weight versions (bucket heddle-weights) and "
        "reads the workers' load reports",
        publish=(
            *provision_checks(),
            "heddle.evt.weights.*.published",
            *bucket_owns(WEIGHTS_BUCKET),
            *replays(EVENTS_STREAM, "heddle.evt.weights.*.>"),
        ),
        subscribe=(replies,),
        publish_deny=owned_durables_but(WEIGHTS_PUBLISHER),
    )
