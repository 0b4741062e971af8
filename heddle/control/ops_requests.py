"""Requests of the operations service and their validation into operator events (pure).

Each endpoint of the ``heddle`` NATS micro service (``heddle.controlplane.operations``) takes one of
these JSON objects. Decoding is strict: an unknown field, a wrong type or a missing field is
refused, as is a body over ``MAX_REQUEST_BYTES``. A steering request is then checked against the
control plane's view of the system (``heddle.control.operations.OperationsView``): unknown ids,
finished trajectories and rollouts, and workers that cannot take the action are refused with a
``RequestRefused`` (its ``code`` is the service error code: 400 bad request, 404 unknown, 409 the
state forbids it). A valid request becomes the operator event the service publishes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

import msgspec

from heddle.events import (
    OperatorEventT,
    RolloutCancelRequested,
    TrajectoryAbortRequested,
    TrajectoryReprioritizeRequested,
    WorkerDrainRequested,
    WorkerUndrainRequested,
)
from heddle.ids import check_token, derive_id

MAX_REQUEST_BYTES = 64 * 1024
"""Largest request body accepted (requests are a few fields)."""


class _Strict(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    pass


class StatusQuery(_Strict, frozen=True, kw_only=True):
    """``status``: every known rollout and worker (no fields)."""


class RolloutQuery(_Strict, frozen=True, kw_only=True):
    rollout_id: str


class TrajectoryQuery(_Strict, frozen=True, kw_only=True):
    rollout_id: str
    traj_id: str


class _Steering(_Strict, frozen=True, kw_only=True):
    reason: str = ""
    """Why (recorded in the operator event)."""
    operator: str = ""
    """Who, when the server does not authenticate users (an authenticated user wins)."""
    request_id: str = ""
    """Makes a retried request idempotent (default: the service draws one)."""


class DrainRequest(_Steering, frozen=True, kw_only=True):
    worker_id: str


class UndrainRequest(_Steering, frozen=True, kw_only=True):
    worker_id: str


class ReprioritizeRequest(_Steering, frozen=True, kw_only=True):
    rollout_id: str
    traj_id: str
    priority: float
    """Larger runs first."""
    pin: bool = False
    """Keep this priority: the priority policy no longer changes it."""


class AbortRequest(_Steering, frozen=True, kw_only=True):
    rollout_id: str
    traj_id: str


class CancelRequest(_Steering, frozen=True, kw_only=True):
    rollout_id: str


SteeringRequest = DrainRequest | UndrainRequest | ReprioritizeRequest | AbortRequest | CancelRequest
R = TypeVar("R", bound=_Strict)


@dataclass(frozen=True, slots=True)
class RequestRefused(Exception):
    """Why a request is refused; ``code`` is the ``Nats-Service-Error-Code``."""

    code: int
    message: str

    def __str__(self) -> str:
        return self.message


def decode_request(kind: type[R], data: bytes) -> R:
    """The request, strictly decoded; ``RequestRefused(400)`` naming what is wrong otherwise. An
    empty body is an empty object (``nats req`` sends none for ``status``)."""
    if len(data) > MAX_REQUEST_BYTES:
        raise RequestRefused(400, f"request of {len(data)} bytes exceeds {MAX_REQUEST_BYTES}")
    try:
        request = msgspec.json.decode(data.strip() or b"{}", type=kind)
    except msgspec.ValidationError as exc:
        raise RequestRefused(400, f"invalid request: {exc}") from None
    except msgspec.DecodeError as exc:
        raise RequestRefused(400, f"malformed JSON: {exc}") from None
    for name in ("rollout_id", "traj_id", "worker_id", "request_id"):
        if name not in kind.__struct_fields__:
            continue
        value = getattr(request, name)
        if value or name != "request_id":
            try:
                check_token(value, name.replace("_", " "))
            except ValueError as exc:
                raise RequestRefused(400, str(exc)) from None
    return request


def operator_event(
    request: SteeringRequest, *, operator: str, request_id: str, now_s: float
) -> OperatorEventT:
    """The operator event a valid request becomes (its id: the target, ``op`` and the request
    id, so a retried request stores one event)."""
    who, why = operator or request.operator or "anonymous", request.reason
    match request:
        case DrainRequest():
            return WorkerDrainRequested(
                event_id=derive_id(request.worker_id, "op", request_id, "drain"),
                occurred_at=now_s, worker_id=request.worker_id, operator=who, reason=why,
            )  # fmt: skip
        case UndrainRequest():
            return WorkerUndrainRequested(
                event_id=derive_id(request.worker_id, "op", request_id, "undrain"),
                occurred_at=now_s, worker_id=request.worker_id, operator=who, reason=why,
            )  # fmt: skip
        case ReprioritizeRequest():
            return TrajectoryReprioritizeRequested(
                event_id=derive_id(request.rollout_id, request.traj_id, "op", request_id, "prio"),
                rollout_id=request.rollout_id, occurred_at=now_s, traj_id=request.traj_id,
                priority=request.priority, pin=request.pin, operator=who, reason=why,
            )  # fmt: skip
        case AbortRequest():
            return TrajectoryAbortRequested(
                event_id=derive_id(request.rollout_id, request.traj_id, "op", request_id, "abort"),
                rollout_id=request.rollout_id, occurred_at=now_s, traj_id=request.traj_id,
                operator=who, reason=why,
            )  # fmt: skip
        case CancelRequest():
            return RolloutCancelRequested(
                event_id=derive_id(request.rollout_id, "op", request_id, "cancel"),
                rollout_id=request.rollout_id, occurred_at=now_s, operator=who, reason=why,
            )  # fmt: skip
