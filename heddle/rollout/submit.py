"""``submit``: a rollout plan sent to the operations service, the one door rollouts open through
(``heddle.controlplane.submissions``), and ``cancel``: a rollout cancelled through the same service.

The request goes on ``heddle.ops.submit.<trainer>``: inline when it is at most
``MAX_INLINE_BYTES``, else stored first as an object of the trainer's upload bucket (the object
store takes any size in 128 KiB chunks) and named by the request. A request that gets no reply,
or a reply that the control plane is starting or could not store it (503), is sent again under
the same rollout id until ``timeout_s``: the service completes the same rollout and answers as
the first time. A refusal raises ``SubmissionRefused`` with the service's reason.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import secrets
import time

import msgspec

from heddle.bus import Bus
from heddle.bus.micro import ServiceRefusal, ServiceUnavailable, request
from heddle.control.submit_requests import (
    MAX_INLINE_BYTES,
    UPLOAD_MAX_AGE_S,
    SubmitRequest,
    UploadRef,
    UploadRequest,
    encode_submission,
    upload_bucket,
)
from heddle.controlplane.operations import ops_subject, trainer_cancel_subject
from heddle.controlplane.submissions import submit_subject
from heddle.errors import UserError
from heddle.ids import check_token
from heddle.rollout.submission import RolloutPlan, new_rollout_id
from heddle.rollout.summary import RolloutSummary

log = logging.getLogger(__name__)

CLI_TRAINER = "cli"
"""The trainer name of submissions from the command line (``--trainer`` changes it)."""
_RETRY_S = 0.5
_NO_SERVICE_GRACE_S = 15.0
"""How long a submission waits for a control plane that does not answer at all (one restarting
comes back within it; none running: the error says to start one)."""


class SubmissionRefused(UserError, ValueError):
    """The operations service refused the request; ``code`` is its error code (400 bad input,
    403 not this trainer's, 404 unknown, 409 the deployment or the rollout forbids it)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"refused ({code}): {message}")
        self.code = code
        self.message = message


class SubmitReply(msgspec.Struct, frozen=True, kw_only=True):
    """The service's answer to a submission."""

    rollout_id: str
    num_trajectories: int
    policy: str
    time_scale: float
    """The time scale the rollout runs at (the deployment's)."""
    trainer: str
    event_id: str
    stream_sequence: int
    ok: bool = True


async def submit(
    bus: Bus,
    plan: RolloutPlan,
    rollout_id: str | None = None,
    *,
    trainer: str = CLI_TRAINER,
    timeout_s: float = 300.0,
) -> SubmitReply:
    """Open the plan's rollout through the operations service; its reply."""
    submission = SubmitRequest(
        rollout_id=rollout_id or new_rollout_id(),
        policy=plan.policy,
        trajectories=list(plan.specs),
        source=plan.source,
        time_scale=plan.time_scale,
        labels=dict(plan.labels),
    )
    body = encode_submission(submission)
    if len(body) > MAX_INLINE_BYTES:
        body = await _upload(bus, trainer, submission.rollout_id, body)
    reply = await _ask(bus, submit_subject(trainer), body, timeout_s)
    return msgspec.json.decode(reply, type=SubmitReply)


async def _upload(bus: Bus, trainer: str, name: str, body: bytes) -> bytes:
    """Store ``body`` in the trainer's upload bucket; the request that names it."""
    bucket = upload_bucket(trainer)
    await bus.put_expiring_object(bucket, name, body, UPLOAD_MAX_AGE_S)
    ref = UploadRef(name=name, size=len(body), sha256=hashlib.sha256(body).hexdigest())
    return encode_submission(UploadRequest(upload=ref))


async def cancel(
    bus: Bus,
    rollout_id: str,
    reason: str,
    *,
    trainer: str | None = None,
    request_id: str = "",
    timeout_s: float = 30.0,
) -> bytes:
    """Cancel a rollout through the operations service (``rollout.cancel``, or as ``trainer``
    one of its own rollouts); the reply. ``SubmissionRefused`` carries the service's reason
    (409 for a rollout that already ended, 404 for an unknown one)."""
    subject = ops_subject("rollout.cancel") if trainer is None else trainer_cancel_subject(trainer)
    # A request id makes the retries of _ask one request: a retry gets the first reply.
    body = {"rollout_id": rollout_id, "reason": reason, "request_id": request_id or _fresh_id()}
    return await _ask(bus, subject, msgspec.json.encode(body), timeout_s)


async def fetch_summary(
    bus: Bus, rollout_id: str, *, trainer: str, timeout_s: float = 60.0
) -> RolloutSummary:
    """The figures of one of ``trainer``'s rollouts, from the operations service
    (``heddle.ops.summary.<trainer>``). ``SubmissionRefused``: 404 for a rollout the control
    plane does not know (yet), 403 for another trainer's."""
    body = msgspec.json.encode({"rollout_id": rollout_id})
    subject = ops_subject(f"summary.{check_token(trainer, 'trainer name')}")
    reply = await _ask(bus, subject, body, timeout_s)
    return msgspec.json.decode(reply, type=RolloutSummary)


def _fresh_id() -> str:
    return secrets.token_hex(8)


async def _ask(bus: Bus, subject: str, body: bytes, timeout_s: float) -> bytes:
    """The reply, the request sent again while the service is unreachable or starting."""
    deadline = time.monotonic() + timeout_s
    started = time.monotonic()
    while True:
        left_s = deadline - time.monotonic()
        try:
            return await request(bus, subject, body, timeout_s=max(1.0, min(60.0, left_s)))
        except ServiceRefusal as refusal:
            if refusal.code != "503" or left_s <= 0:
                raise SubmissionRefused(_code(refusal.code), refusal.message) from None
            log.info("%s: %s; asking again", subject, refusal.message)
        except ServiceUnavailable as exc:
            waited_s = time.monotonic() - started
            if left_s <= 0 or ("no service" in str(exc) and waited_s > _NO_SERVICE_GRACE_S):
                raise UserError(
                    f"{exc}: no control plane answers (start `heddle up`, or drop --attach)"
                ) from None
            log.info("%s; asking again", exc)
        await asyncio.sleep(_RETRY_S)  # the same request: the same rollout, the first reply


def _code(code: str) -> int:
    try:
        return int(code)
    except ValueError:
        return 500
