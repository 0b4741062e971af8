"""The streams Heddle needs and idempotent provisioning of streams and durable consumers.

Deviation from the first design (docs/design.md): it put every command on one stream
``HEDDLE_CMDS`` (``heddle.cmd.>``)
with tool calls under work-queue retention. A stream has a single retention policy, and worker
commands must stay readable after they are acknowledged (audit, replay), so tool calls live on
their own stream ``HEDDLE_TOOLS`` (``heddle.cmd.tool.>``, work-queue retention: a call disappears
once an executor acks it) and ``HEDDLE_CMDS`` holds only ``heddle.cmd.worker.>`` (limits).
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal

from nats.js import JetStreamContext, api
from nats.js.errors import APIError, BadRequestError, NotFoundError

from heddle.bus.connection import PermissionDenied, Violation
from heddle.bus.transient import retry_transient
from heddle.errors import UserError
from heddle.events.subjects import (
    COMMANDS_STREAM,
    COMMANDS_SUBJECTS,
    EVENTS_STREAM,
    EVENTS_SUBJECTS,
    TOOLS_STREAM,
    TOOLS_SUBJECTS,
    delivery_stream,
    delivery_subjects,
)
from heddle.ids import check_token

_STREAM_CONFIG_CHANGED = 10058
"""JetStream error code: a stream of that name exists with another configuration."""
_START_SEQUENCE_CHANGED = 10012
"""JetStream error code: a consumer of that name exists with another start sequence."""
_MAX_RECREATE_ATTEMPTS = 3
_REPLICAS_UNAVAILABLE = (10074,)
"""JetStream error code: replicas > 1 on a single server."""

Retention = Literal["limits", "work_queue"]


@dataclass(frozen=True, slots=True)
class StreamSpec:
    """One JetStream stream (file storage)."""

    name: str
    subjects: tuple[str, ...]
    retention: Retention = "limits"
    duplicate_window_s: float = 120.0
    """Window in which a repeated ``Nats-Msg-Id`` is dropped as a duplicate."""
    max_age_s: float = 0.0
    """Oldest message kept; 0 keeps messages until deleted by an operator."""

    def config(self, num_replicas: int) -> api.StreamConfig:
        return api.StreamConfig(
            name=self.name,
            subjects=list(self.subjects),
            retention=(
                api.RetentionPolicy.WORK_QUEUE
                if self.retention == "work_queue"
                else api.RetentionPolicy.LIMITS
            ),
            storage=api.StorageType.FILE,
            max_age=self.max_age_s,
            duplicate_window=self.duplicate_window_s,
            num_replicas=num_replicas,
        )


DELIVERY_MAX_AGE_S = 7 * 24 * 3600.0
"""How long a trainer's delivery stream keeps a trajectory's record by default (7 days)."""
DELIVERY_DUPLICATE_WINDOW_S = 24 * 3600.0
"""A control plane that re-decides a batch after a restart re-delivers its records with the
same ids; JetStream drops them if the first delivery is younger than this (1 day)."""


def delivery_stream_spec(
    trainer: str,
    max_age_s: float = DELIVERY_MAX_AGE_S,
    duplicate_window_s: float = DELIVERY_DUPLICATE_WINDOW_S,
) -> StreamSpec:
    """``HEDDLE_OUT_<trainer>``: the terminal record of each trajectory the trainer owns."""
    return StreamSpec(
        delivery_stream(trainer),
        (delivery_subjects(trainer),),
        max_age_s=max_age_s,
        duplicate_window_s=min(duplicate_window_s, max_age_s) if max_age_s else duplicate_window_s,
    )


EVENTS = StreamSpec(EVENTS_STREAM, (EVENTS_SUBJECTS,))
COMMANDS = StreamSpec(COMMANDS_STREAM, (COMMANDS_SUBJECTS,))
TOOLS = StreamSpec(TOOLS_STREAM, (TOOLS_SUBJECTS,), retention="work_queue")
HEDDLE_STREAMS: tuple[StreamSpec, ...] = (EVENTS, COMMANDS, TOOLS)


class ReplicasMismatch(UserError):
    """An existing stream has another replica count than this process expects."""


async def provision_stream(
    js: JetStreamContext, spec: StreamSpec, num_replicas: int = 1, replicas_source: str = ""
) -> None:
    """Create ``spec``'s stream, or update it when its configuration changed (idempotent); a
    stream that is already as specified is left alone (no create permission needed).
    ``ReplicasMismatch`` when it exists with another replica count (``replicas_source`` says
    where ``num_replicas`` came from, for the message)."""
    config = spec.config(num_replicas)
    try:
        info = await js.stream_info(spec.name)
    except NotFoundError:
        info = None
    if info is not None:
        existing = info.config.num_replicas or 1
        if existing != num_replicas:
            raise ReplicasMismatch(
                f"stream {spec.name} has {existing} replica(s) but this process expects "
                f"{num_replicas}{f' ({replicas_source})' if replicas_source else ''}: pass "
                f"--nats-replicas {existing} (or HEDDLE_NATS_REPLICAS={existing}) to use it as it "
                f"is, or change it with `nats stream edit {spec.name} --replicas {num_replicas}`"
            )
        if _matches(info.config, config):
            return
    try:
        await js.add_stream(config)
    except BadRequestError as exc:
        if exc.err_code != _STREAM_CONFIG_CHANGED:
            raise
        await js.update_stream(config)
    except APIError as exc:
        if exc.err_code in _REPLICAS_UNAVAILABLE:
            raise ReplicasMismatch(
                f"cannot create stream {spec.name} with {num_replicas} replicas"
                f"{f' ({replicas_source})' if replicas_source else ''}: {exc.description}; "
                "a single server takes --nats-replicas 1"
            ) from None
        raise


async def provision_streams(
    js: JetStreamContext, num_replicas: int, replicas_source: str, violations: list[Violation]
) -> None:
    """Provision every stream of ``HEDDLE_STREAMS``; a timeout while the server reported
    permission ``violations`` is ``PermissionDenied`` naming the last one, any other transient
    error (a cluster electing leaders) is met by asking again for a while
    (``heddle.bus.transient``)."""

    async def provision(spec: StreamSpec) -> None:
        try:
            await provision_stream(js, spec, num_replicas, replicas_source)
        except TimeoutError:
            if violations:
                raise PermissionDenied(
                    f"cannot provision stream {spec.name}: "
                    f"{violations[-1].message()}; start a process whose role may "
                    "create streams (the control plane, `heddle up`) first"
                ) from None
            raise

    for spec in HEDDLE_STREAMS:
        await retry_transient(functools.partial(provision, spec), f"stream {spec.name}")


def _matches(existing: api.StreamConfig, wanted: api.StreamConfig) -> bool:
    return (
        sorted(existing.subjects or []) == sorted(wanted.subjects or [])
        and existing.retention == wanted.retention
        and existing.storage == wanted.storage
        and (existing.max_age or 0.0) == (wanted.max_age or 0.0)
        and (existing.duplicate_window or 0.0) == (wanted.duplicate_window or 0.0)
    )


@dataclass(frozen=True, slots=True)
class ConsumerSpec:
    """A durable pull consumer and how a runner drives it.

    With ``start_sequence`` set, provisioning (re)creates the durable so that it delivers from
    that stream sequence: a consumer that keeps its position elsewhere (the ledger projector
    keeps it in SQL) uses this to resume exactly there, whatever the server's ack state says.
    """

    durable: str
    stream: str
    filter_subjects: tuple[str, ...]
    role: str = field(kw_only=True)
    """The role reading it, as its credential is named (``heddle.events.subjects``:
    ``control_plane``, ``worker-<id>``, ...): its runner dead-letters on
    ``heddle.evt.deadletter.<role>``, the one dead-letter subject that role may publish."""
    batch_size: int = 256
    """Most messages handed to one batch handler call (or fetched at once)."""
    fetch_wait_s: float = 1.0
    """How long an idle fetch lingers for new messages before the runner checks for stop."""
    gather_s: float = 0.0
    """How long a fetch that got fewer than ``batch_size`` messages waits for more (0: hand
    over what came at once). For consumers that trade latency for fewer, larger batches."""
    max_ack_pending: int = 1024
    """Most delivered, unacknowledged messages; the server pauses delivery beyond it."""
    ack_wait_s: float = 30.0
    """Redelivery delay of a message neither acked nor nak'ed (a crashed consumer)."""
    max_deliver: int = 0
    """Deliveries of one message before the server gives up on it (0: unlimited)."""
    nak_delay_s: float = 1.0
    """Redelivery delay after a transient error."""
    ack_all: bool = False
    """AckPolicy.ALL: one ack per batch acknowledges everything before it. Only for consumers
    that handle messages strictly in order, one runner at a time."""
    start_sequence: int | None = None

    def __post_init__(self) -> None:
        if not self.durable or any(ch in self.durable for ch in ".*> \t"):
            raise ValueError(
                f"consumer name {self.durable!r} must be non-empty without . * > or spaces"
            )
        if not self.filter_subjects:
            raise ValueError(f"consumer {self.durable}: needs at least one filter subject")
        check_token(self.role, f"consumer {self.durable}: role")
        if self.batch_size < 1 or self.max_ack_pending < self.batch_size:
            raise ValueError(
                f"consumer {self.durable}: need 1 <= batch_size ({self.batch_size}) "
                f"<= max_ack_pending ({self.max_ack_pending})"
            )
        if self.start_sequence is not None and self.start_sequence < 1:
            raise ValueError(f"consumer {self.durable}: start_sequence must be >= 1")
        if self.gather_s < 0:
            raise ValueError(f"consumer {self.durable}: gather_s must be >= 0")
        if self.ack_wait_s <= 0:
            raise ValueError(f"consumer {self.durable}: ack_wait_s must be > 0")

    def config(self) -> api.ConsumerConfig:
        start = self.start_sequence
        return api.ConsumerConfig(
            name=self.durable,
            durable_name=self.durable,
            deliver_policy=(
                api.DeliverPolicy.ALL if start is None else api.DeliverPolicy.BY_START_SEQUENCE
            ),
            opt_start_seq=start,
            ack_policy=api.AckPolicy.ALL if self.ack_all else api.AckPolicy.EXPLICIT,
            ack_wait=self.ack_wait_s,
            max_deliver=self.max_deliver or -1,
            max_ack_pending=self.max_ack_pending,
            **_filters(self.filter_subjects),
            max_waiting=512,
        )


def _filters(subjects: tuple[str, ...]) -> dict[str, Any]:
    """One filter as ``filter_subject``: the client then names it in the create request's
    subject (``$JS.API.CONSUMER.CREATE.<stream>.<name>.<filter>``), which the server checks
    against the configuration, so a role's permissions can bound what its consumers read
    (heddle/deploy/roles.py). Several filters go in the body only."""
    if len(subjects) == 1:
        return {"filter_subject": subjects[0]}
    return {"filter_subjects": list(subjects)}


async def provision_consumer(js: JetStreamContext, spec: ConsumerSpec) -> None:
    """Create the durable or apply a changed configuration (``add_consumer`` updates in place);
    with ``spec.start_sequence``, recreate it so that delivery resumes at that sequence (twice
    more if another process recreated it at another sequence in between)."""
    if spec.start_sequence is None:
        await js.add_consumer(spec.stream, spec.config())
        return
    for attempt in range(_MAX_RECREATE_ATTEMPTS):
        with contextlib.suppress(NotFoundError):
            await js.delete_consumer(spec.stream, spec.durable)
        try:
            await js.add_consumer(spec.stream, spec.config())
            return
        except APIError as exc:
            if exc.err_code != _START_SEQUENCE_CHANGED or attempt + 1 == _MAX_RECREATE_ATTEMPTS:
                raise


def ephemeral_config(
    filter_subjects: tuple[str, ...],
    *,
    start_sequence: int | None = None,
    start_time: datetime.datetime | None = None,
    inactive_threshold_s: float = 30.0,
) -> api.ConsumerConfig:
    """An unacknowledged, in-memory consumer for reading a stream once (replay)."""
    if start_sequence is not None:
        policy, seq = api.DeliverPolicy.BY_START_SEQUENCE, start_sequence
    elif start_time is not None:
        policy, seq = api.DeliverPolicy.BY_START_TIME, None
    else:
        policy, seq = api.DeliverPolicy.ALL, None
    return api.ConsumerConfig(
        name=f"replay-{uuid.uuid4().hex}",  # named: its filter goes in the API subject
        deliver_policy=policy,
        opt_start_seq=seq,
        opt_start_time=start_time,
        ack_policy=api.AckPolicy.NONE,
        **_filters(filter_subjects),
        mem_storage=True,
        inactive_threshold=inactive_threshold_s,
        num_replicas=1,
    )
