"""The operations service: the ``heddle`` NATS micro service of the control plane.

Served on the control plane's connection (``heddle.bus.micro``), it answers small JSON requests
on ``heddle.ops.<endpoint>`` (``OPS_ENDPOINTS``), found with ``nats micro ls`` / ``info``:

- queries, answered from the control plane's ``OperationsView`` (as far as it has folded the
  stream): ``status``, ``rollout.info {rollout_id}``, ``trajectory.info {rollout_id, traj_id}``;
- steering: ``worker.drain`` / ``worker.undrain {worker_id}``, ``trajectory.reprioritize
  {rollout_id, traj_id, priority, pin}``, ``trajectory.abort {rollout_id, traj_id}``,
  ``rollout.cancel {rollout_id}``, each with optional ``reason``, ``operator``, ``request_id``;
- trainers, on subjects that end with the trainer's name (its credential is bound to them):
  ``submit.<trainer>`` opens a rollout (``heddle.controlplane.submissions``: the only way one is
  opened), ``cancel.<trainer> {rollout_id}`` cancels one of the trainer's own rollouts, as
  ``rollout.cancel`` does (403 for another trainer's), ``summary.<trainer> {rollout_id}``
  answers the figures of one of its rollouts (``heddle.rollout.summary.RolloutSummary``, read
  from the stream as the gate accepts it: 404 before the view knows the rollout, 403 for
  another trainer's). A trainer's credential reads nothing else but its delivery stream.

A steering request is decoded strictly and checked against the view
(``heddle.control.ops_requests``, ``heddle.control.operations``); a refused one gets an error reply
(``Nats-Service-Error`` / ``Nats-Service-Error-Code``). An accepted one is published as an
operator event (``heddle.events.operator``) and the reply gives its id and stream sequence:
the deciders act when the event reaches them, so the event is on the stream, for the ledger and
any replay, before anything happens. A request retried with the same ``request_id`` gets the
first reply (its event is found on the stream: nothing is stored twice, and a target the first
request already finished is not refused). Who asked: the authenticated user when the server
shares it (``Nats-Request-Info``, on a service import with ``share: true``), else the request's
``operator``, else ``anonymous``; a trainer's cancel is the trainer's.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import msgspec

import heddle
from heddle.bus import Bus
from heddle.bus.micro import Endpoint, ServiceHandle, ServiceRefusal, serve_service
from heddle.control.operations import OperationsView
from heddle.control.ops_requests import (
    AbortRequest,
    CancelRequest,
    DrainRequest,
    ReprioritizeRequest,
    RequestRefused,
    RolloutQuery,
    StatusQuery,
    SteeringRequest,
    TrajectoryQuery,
    UndrainRequest,
    decode_request,
    operator_event,
)
from heddle.control.ops_views import RolloutView, TrajectoryState, WorkerView
from heddle.controlplane.gating import SummaryReply
from heddle.controlplane.submissions import Submissions, TaskCheck, trainer_of
from heddle.events import OperatorEventT, WorkerHeartbeat, decode_event
from heddle.events.subjects import EVENTS_STREAM, subject_for_event
from heddle.ids import check_token

OPS_SERVICE_NAME = "heddle"
OPS_PREFIX = "heddle.ops"
REQUEST_INFO_HEADER = "Nats-Request-Info"

STEERING: dict[str, type[SteeringRequest]] = {
    "worker.drain": DrainRequest,
    "worker.undrain": UndrainRequest,
    "trajectory.reprioritize": ReprioritizeRequest,
    "trajectory.abort": AbortRequest,
    "rollout.cancel": CancelRequest,
}
QUERIES = ("status", "rollout.info", "trajectory.info")
TRAINER_ENDPOINTS = ("submit", "cancel", "summary")
"""Endpoints whose subject ends with the trainer's name (``heddle.ops.submit.grpo``)."""
OPS_ENDPOINTS: tuple[str, ...] = (*QUERIES, *STEERING, *(f"{e}.*" for e in TRAINER_ENDPOINTS))
"""Endpoint names, as subjects under ``heddle.ops`` (``heddle.ops.worker.drain``)."""

_encode = msgspec.json.Encoder().encode


def ops_subject(endpoint: str) -> str:
    return f"{OPS_PREFIX}.{endpoint}"


def trainer_cancel_subject(trainer: str) -> str:
    """Where trainer ``trainer`` cancels its own rollouts."""
    return ops_subject(f"cancel.{check_token(trainer, 'trainer name')}")


def rollout_status(rollout_id: str, rollout: RolloutView) -> dict[str, Any]:
    return {
        "rollout_id": rollout_id,
        "policy": rollout.policy,
        "state": rollout.state.value,
        "num_trajectories": rollout.num_trajectories,
        **{f"num_{state.value}": rollout.count(state) for state in TrajectoryState},
        "reason": rollout.reason,
    }


def worker_summary(
    worker_id: str, worker: WorkerView, heartbeat: WorkerHeartbeat | None, now: float
) -> dict[str, Any]:
    """A worker as ``status`` answers it (``heddle status`` shows the same): its state and the
    trajectories placed on it from the view, its load from its latest heartbeat."""
    return {
        "worker_id": worker_id,
        "engine": worker.engine,
        "state": worker.state.value,
        "num_trajectories": len(worker.trajectories),
        "heartbeat_age_s": None if heartbeat is None else max(0.0, now - heartbeat.occurred_at),
        "num_running": heartbeat.num_running if heartbeat is not None else 0,
        "num_waiting": heartbeat.num_waiting if heartbeat is not None else 0,
        "kv_usage": heartbeat.kv_usage if heartbeat is not None else 0.0,
    }


class OperationsService:
    """The endpoints over one view and one bus (see the module docstring)."""

    def __init__(
        self,
        bus: Bus,
        view: Callable[[], OperationsView | None],
        *,
        check_task: TaskCheck,
        summary: SummaryReply | None = None,
        position: Callable[[], int] = lambda: 0,
        heartbeats: Callable[[], Mapping[str, WorkerHeartbeat]] = dict,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``view``: the control plane's current view (None until its deciders are live; a
        rebuilt consumer brings a new one); ``check_task``: whether a task fits its
        environment (``heddle.controlplane.submissions``); ``summary``: a rollout's summary, as
        a trainer gets it (None: 501); ``position``: the stream sequence
        folded so far; ``heartbeats``: each worker's latest heartbeat (worker liveness)."""
        self.bus = bus
        self._view = view
        self._position = position
        self._heartbeats = heartbeats
        self._clock = clock
        self._summary = summary
        self.submissions = Submissions(bus, lambda: self.view, check_task, clock)

    @property
    def view(self) -> OperationsView:
        view = self._view()
        if view is None:
            raise ServiceRefusal("503", "the control plane is starting: try again shortly")
        return view

    async def serve(self) -> ServiceHandle:
        handlers: dict[str, Callable[[bytes, Mapping[str, str]], Awaitable[bytes]]] = {
            "status": self.status,
            "rollout.info": self.rollout_info,
            "trajectory.info": self.trajectory_info,
        }
        endpoints = [
            Endpoint(name.replace(".", "_"), ops_subject(name), handlers[name]) for name in QUERIES
        ]
        endpoints += [
            Endpoint(name.replace(".", "_"), ops_subject(name), self._steer_with(kind))
            for name, kind in STEERING.items()
        ]
        endpoints += [
            Endpoint(
                "submit", ops_subject("submit.*"), is_concurrent=True,
                subject_handler=self.submissions.submit,
                description="a trainer opens a rollout (subject: heddle.ops.submit.<trainer>)",
            ),
            Endpoint(
                "trainer_cancel", ops_subject("cancel.*"), subject_handler=self.trainer_cancel,
                description="a trainer cancels its own rollout (heddle.ops.cancel.<trainer>)",
            ),
            Endpoint(
                "trainer_summary", ops_subject("summary.*"), is_concurrent=True,
                subject_handler=self.trainer_summary,
                description="the figures of a trainer's rollout (heddle.ops.summary.<trainer>)",
            ),
        ]  # fmt: skip
        description = "Heddle control plane: status, rollouts, trajectories, steering, submissions"
        return await serve_service(
            self.bus, OPS_SERVICE_NAME, heddle.__version__, description, endpoints
        )

    # ---- queries ------------------------------------------------------------------------------

    async def status(self, data: bytes, headers: Mapping[str, str]) -> bytes:
        _decode(StatusQuery, data)
        view = self.view
        heartbeats, now = self._heartbeats(), self._clock()
        return _encode(
            {
                "position": self._position(),
                "rollouts": [rollout_status(rid, r) for rid, r in view.rollouts.items()],
                "workers": [
                    worker_summary(worker_id, worker, heartbeats.get(worker_id), now)
                    for worker_id, worker in view.workers.items()
                ],
            }
        )

    async def rollout_info(self, data: bytes, headers: Mapping[str, str]) -> bytes:
        query = _decode(RolloutQuery, data)
        rollout = _answer(lambda: self.view.rollout(query.rollout_id))
        by_worker: dict[str, int] = {}
        for trajectory in rollout.trajectories.values():
            if trajectory.state is TrajectoryState.PLACED:
                by_worker[trajectory.worker_id] = by_worker.get(trajectory.worker_id, 0) + 1
        summary = rollout_status(query.rollout_id, rollout)
        return _encode({**summary, "submitted_at": rollout.submitted_at, "placed_on": by_worker})

    async def trajectory_info(self, data: bytes, headers: Mapping[str, str]) -> bytes:
        query = _decode(TrajectoryQuery, data)
        trajectory = _answer(lambda: self.view.trajectory(query.rollout_id, query.traj_id))
        return _encode(
            {
                "rollout_id": query.rollout_id,
                "traj_id": query.traj_id,
                "index": trajectory.index,
                "state": trajectory.state.value,
                "worker_id": trajectory.worker_id,
                "worker_history": trajectory.worker_history,
                "priority": trajectory.priority,
                "is_pinned": trajectory.is_pinned,
                "reason": trajectory.reason,
                "operator_actions": trajectory.operator_actions,
            }
        )

    # ---- steering -----------------------------------------------------------------------------

    def _steer_with(
        self, kind: type[SteeringRequest]
    ) -> Callable[[bytes, Mapping[str, str]], Awaitable[bytes]]:
        async def steer(data: bytes, headers: Mapping[str, str]) -> bytes:
            return await self.steer(kind, data, headers)

        return steer

    async def trainer_cancel(self, subject: str, data: bytes, headers: Mapping[str, str]) -> bytes:
        """A trainer cancels one of its own rollouts (checks and reply of ``rollout.cancel``)."""
        trainer = trainer_of(subject)
        request = _decode(CancelRequest, data)
        owner = _answer(lambda: self.view.rollout(request.rollout_id)).trainer
        if owner != trainer:
            raise ServiceRefusal(
                "403", f"rollout {request.rollout_id} is not trainer {trainer!r}'s to cancel"
            )
        return await self._steer(request, operator=f"trainer {trainer}")

    async def trainer_summary(self, subject: str, data: bytes, headers: Mapping[str, str]) -> bytes:
        """The summary of one of the trainer's own rollouts."""
        trainer = trainer_of(subject)
        query = _decode(RolloutQuery, data)
        owner = _answer(lambda: self.view.rollout(query.rollout_id)).trainer
        if owner != trainer:
            raise ServiceRefusal(
                "403", f"rollout {query.rollout_id} belongs to another trainer than {trainer!r}"
            )
        if self._summary is None:
            raise ServiceRefusal("501", "this control plane serves no rollout summaries")
        return await self._summary(self.bus, query.rollout_id)

    async def steer(
        self, kind: type[SteeringRequest], data: bytes, headers: Mapping[str, str]
    ) -> bytes:
        """Validate, publish the operator event, reply with where it is stored."""
        return await self._steer(_decode(kind, data), operator=_authenticated_user(headers))

    async def _steer(self, request: SteeringRequest, *, operator: str) -> bytes:
        event = operator_event(
            request,
            operator=operator,
            request_id=request.request_id or uuid.uuid4().hex[:16],
            now_s=self._clock(),
        )
        if request.request_id:
            first = await self._stored(event)
            if first is not None:  # a retry: the first reply, whatever happened since
                return _steering_reply(*first)
        _answer(lambda: self.view.check(request))
        ack = await self.bus.publish(event)
        return _steering_reply(event, ack.sequence)

    async def _stored(self, event: OperatorEventT) -> tuple[OperatorEventT, int] | None:
        """The event of that id, as stored, with its sequence (an operator event's subject
        holds the requests about one target: the latest is the one a retry follows)."""
        found = await self.bus.last_subject_message(EVENTS_STREAM, subject_for_event(event))
        if found is None:
            return None
        stored = decode_event(found[1])
        if stored.event_id != event.event_id:
            return None
        return stored, found[0]  # type: ignore[return-value]


def _steering_reply(event: OperatorEventT, sequence: int) -> bytes:
    return _encode(
        {
            "ok": True,
            "event": type(event).__struct_config__.tag,
            "event_id": event.event_id,
            "subject": subject_for_event(event),
            "stream_sequence": sequence,
            "operator": event.operator,
        }
    )


R = TypeVar("R", bound=msgspec.Struct)
T = TypeVar("T")


def _decode(kind: type[R], data: bytes) -> R:
    return _answer(lambda: decode_request(kind, data))  # type: ignore[type-var]


def _answer(compute: Callable[[], T]) -> T:
    """``compute()``, a ``RequestRefused`` turned into the service error reply."""
    try:
        return compute()
    except RequestRefused as refusal:
        raise ServiceRefusal(str(refusal.code), refusal.message) from None


def _authenticated_user(headers: Mapping[str, str]) -> str:
    """The user the server vouches for (``Nats-Request-Info`` of a shared service import)."""
    info = headers.get(REQUEST_INFO_HEADER)
    if not info:
        return ""
    try:
        parsed = json.loads(info)
    except ValueError:
        return ""
    user = parsed.get("user") or parsed.get("acc") if isinstance(parsed, dict) else ""
    return str(user or "")
