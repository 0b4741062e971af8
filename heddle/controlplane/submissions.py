"""The door of the operations service: rollouts are submitted here, and only here.

A trainer sends its submission (``heddle.control.submit_requests.SubmitRequest``) as a request
on ``heddle.ops.submit.<trainer>``; the trainer's name is the subject's last token, which the
trainer's credential is bound to (docs/deploy.md), so it is recorded as the rollout's owner
(``RolloutSubmitted.trainer``) without taking the body's word for it. A submission larger than
``MAX_INLINE_BYTES`` is first stored whole in the trainer's upload bucket and the request names
it (``UploadRequest``: name, size, SHA-256, checked before it is read).

The service decodes it strictly, checks it against the deployment as the control plane sees it
(``heddle.control.submissions``: time scale, the models' context, numbers in range) and each
task against its environment (``TaskCheck``, given by the process that runs the service), and
only then publishes ``RolloutSubmitted`` and every ``TrajectorySubmitted`` itself. A refused
submission leaves nothing behind: its rollout never exists. The reply names the rollout, its
size, time scale and owner, and the stream sequence of its ``RolloutSubmitted``.

All or nothing: the control plane places a rollout only once every one of its trajectories is
stored, and the events' ids derive from the rollout id the trainer chose, so a request retried
after a failure (a timeout, a control plane that stopped half way) completes the same rollout:
it stores what is missing and gets the first reply. A rollout id another trainer owns is refused
(403), and so is a different submission under a rollout id already stored (409: another policy
or number of trajectories; a retry must send the same request).
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import msgspec

from heddle.bus import Bus, ObjectNotFound
from heddle.bus.micro import ServiceRefusal
from heddle.control.operations import OperationsView
from heddle.control.ops_requests import RequestRefused
from heddle.control.submissions import check_submission, submission_events
from heddle.control.submit_requests import (
    MAX_INLINE_BYTES,
    MAX_UPLOAD_BYTES,
    SubmitRequest,
    UploadRef,
    decode_submission,
    decode_uploaded,
    upload_bucket,
)
from heddle.events import RolloutSubmitted, decode_event
from heddle.events.subjects import EVENTS_STREAM, rollout_subject, trajectory_subject
from heddle.ids import check_token, trajectory_id

SUBMIT_PREFIX = "heddle.ops.submit"
T = TypeVar("T")

TaskCheck = Callable[[str, Mapping[str, Any]], None]
"""``(environment, task)``: raises ``ValueError`` naming the field when the task does not fit
its environment (or the environment is unknown)."""


def submit_subject(trainer: str) -> str:
    """Where trainer ``trainer`` submits its rollouts."""
    return f"{SUBMIT_PREFIX}.{check_token(trainer, 'trainer name')}"


def trainer_of(subject: str) -> str:
    """The trainer a request on ``heddle.ops.<action>.<trainer>`` came from."""
    trainer = subject.rsplit(".", 1)[-1]
    try:
        return check_token(trainer, "trainer name")
    except ValueError as exc:
        raise ServiceRefusal("400", str(exc)) from None


class Submissions:
    """The ``submit`` endpoint over one bus and the control plane's view."""

    def __init__(
        self,
        bus: Bus,
        view: Callable[[], OperationsView],
        check_task: TaskCheck,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``view``: the control plane's live view (raises ``ServiceRefusal`` 503 until it is)."""
        self.bus = bus
        self._view = view
        self._check_task = check_task
        self._clock = clock

    async def submit(self, subject: str, data: bytes, headers: Mapping[str, str]) -> bytes:
        trainer = trainer_of(subject)
        if len(data) > MAX_INLINE_BYTES:
            raise ServiceRefusal(
                "400", f"a request of {len(data)} bytes exceeds {MAX_INLINE_BYTES}: upload it "
                f"to bucket {upload_bucket(trainer)} and send {{\"upload\": ...}}"
            )  # fmt: skip
        request, upload = await self._request(trainer, data)
        stored = await self._stored(request.rollout_id)
        if stored is not None and await self._is_whole(stored[1], trainer, request):
            return _reply(stored[1], stored[0])
        time_scale = _answer(
            lambda: check_submission(
                request, self._view().limits(self.bus.settings.max_event_bytes)
            )
        )
        self._check_tasks(request)
        events = submission_events(
            request, trainer=trainer, time_scale=time_scale, now=self._clock()
        )
        try:
            acks = await self.bus.publish_many(events)
        except Exception as exc:  # the request may be retried: nothing is stored twice
            raise ServiceRefusal("503", f"not stored ({exc!r}): retry the same request") from None
        if upload is not None:
            with contextlib.suppress(ObjectNotFound):
                await self.bus.delete_bucket_object(upload_bucket(trainer), upload.name)
        opened = events[0]
        assert isinstance(opened, RolloutSubmitted)
        return _reply(opened, acks[0].sequence)

    async def _request(self, trainer: str, data: bytes) -> tuple[SubmitRequest, UploadRef | None]:
        request = _answer(lambda: decode_submission(data))
        if isinstance(request, SubmitRequest):
            return request, None
        raw = await self._upload(trainer, request.upload)
        return _answer(lambda: decode_uploaded(raw)), request.upload

    async def _upload(self, trainer: str, upload: UploadRef) -> bytes:
        """The uploaded submission, its size and digest checked."""
        bucket = upload_bucket(trainer)
        if upload.size > MAX_UPLOAD_BYTES:
            raise ServiceRefusal(
                "400", f"an upload of {upload.size} bytes exceeds {MAX_UPLOAD_BYTES}"
            )
        try:
            size = await self.bus.bucket_object_size(bucket, upload.name)
            if size != upload.size:
                raise ServiceRefusal(
                    "400", f"upload {upload.name} has {size} bytes, not {upload.size}"
                )
            raw = await self.bus.get_bucket_object(bucket, upload.name)
        except ObjectNotFound:
            raise ServiceRefusal("404", f"no upload {upload.name!r} in bucket {bucket}") from None
        if hashlib.sha256(raw).hexdigest() != upload.sha256.lower():
            raise ServiceRefusal("400", f"upload {upload.name} does not match its sha256")
        return raw

    async def _stored(self, rollout_id: str) -> tuple[int, RolloutSubmitted] | None:
        """The rollout's ``RolloutSubmitted`` and its sequence, when the stream holds one."""
        with contextlib.suppress(ValueError):
            subject = rollout_subject(rollout_id, "submitted")
            found = await self.bus.last_subject_message(EVENTS_STREAM, subject)
            if found is not None:
                event = decode_event(found[1])
                if isinstance(event, RolloutSubmitted):
                    return found[0], event
        return None

    async def _is_whole(
        self, stored: RolloutSubmitted, trainer: str, request: SubmitRequest
    ) -> bool:
        """Whether the rollout a retry names is stored whole (then it gets the first reply);
        ``ServiceRefusal`` when it is another trainer's or another submission."""
        if stored.trainer != trainer:
            raise ServiceRefusal(
                "403", f"rollout {stored.rollout_id} belongs to trainer {stored.trainer!r}"
            )
        if stored.num_trajectories != len(request.trajectories) or stored.policy != request.policy:
            raise ServiceRefusal(
                "409", f"rollout {stored.rollout_id} was submitted with {stored.num_trajectories} "
                f"trajectories under {stored.policy}: choose a new rollout id"
            )  # fmt: skip
        subjects = trajectory_subject(stored.rollout_id, "*", "submitted")
        num_stored = await self.bus.num_matching_messages(EVENTS_STREAM, subjects)
        return num_stored >= stored.num_trajectories  # resubmissions come only after all

    def _check_tasks(self, request: SubmitRequest) -> None:
        """Each distinct task once (a group's samples share theirs)."""
        checked: set[bytes] = set()
        for spec in request.trajectories:
            key = msgspec.json.encode((spec.environment, spec.task))
            if key in checked:
                continue
            try:
                self._check_task(spec.environment, spec.task)
            except ValueError as exc:
                where = f"trajectory {spec.index} ({trajectory_id(spec.index)})"
                raise ServiceRefusal("400", f"{where}: {exc}") from None
            checked.add(key)


def _reply(event: RolloutSubmitted, sequence: int) -> bytes:
    return msgspec.json.encode(
        {
            "ok": True,
            "rollout_id": event.rollout_id,
            "num_trajectories": event.num_trajectories,
            "policy": event.policy,
            "time_scale": event.time_scale,
            "trainer": event.trainer,
            "event_id": event.event_id,
            "stream_sequence": sequence,
        }
    )


def _answer(compute: Callable[[], T]) -> T:
    try:
        return compute()
    except RequestRefused as refusal:
        raise ServiceRefusal(str(refusal.code), refusal.message) from None
