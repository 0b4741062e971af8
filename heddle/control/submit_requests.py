"""The submission request of the operations service (``heddle.ops.submit.<trainer>``) and its
strict decoding (pure).

A trainer asks for a rollout with one JSON request: the rollout's id, policy and trajectory specs
(``SubmitRequest``, the specs as in ``TrajectorySubmitted.spec``, token arrays in either wire
form). A request larger than ``MAX_INLINE_BYTES`` goes in two steps: the trainer stores the same
JSON as an object of its own upload bucket (``upload_bucket(trainer)``, the JetStream object
store: 128 KiB chunks, any size) and sends ``UploadRequest`` naming it, with its size and SHA-256.

Decoding is strict: malformed JSON, a wrong type, a missing field or a field the schema does not
name (``max_stepz``) is refused with ``RequestRefused(400)`` naming it
(``heddle.events.strict``); the free-form fields are the extensions the schema names:
``labels``, and each spec's ``task`` (which its environment checks,
with its own ``meta`` for free-form data).
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

from heddle.control.ops_requests import RequestRefused
from heddle.events import TrajectorySpec
from heddle.events.arrays import dec_hook, pack_message
from heddle.events.codec import with_canonical_defaults
from heddle.events.strict import unknown_fields
from heddle.ids import check_token

MAX_INLINE_BYTES = 256 * 1024
"""Largest request sent inline; larger ones are uploaded (NATS's default ``max_payload`` is
1 MiB, and a busy connection should not carry megabyte messages)."""
MAX_UPLOAD_BYTES = 1024 * 1024 * 1024
"""Largest uploaded submission (1 GiB: 1,000 trajectories of 120k-token prompts fit in a
fraction of it, token ids being about 1.6 bytes each compressed)."""
R = TypeVar("R", bound=msgspec.Struct)
UPLOAD_BUCKET_PREFIX = "heddle-submit-"
UPLOAD_MAX_AGE_S = 24 * 3600.0
"""How long an upload stays when the service never took it (it deletes those it took)."""


def upload_bucket(trainer: str) -> str:
    """The object-store bucket a trainer uploads its large submissions to (its own: a trainer's
    credential reaches only its bucket, ``heddle.deploy.roles``)."""
    return f"{UPLOAD_BUCKET_PREFIX}{check_token(trainer, 'trainer name')}"


class SubmitRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A rollout to open: ``heddle.ops.submit.<trainer>``'s request (inline or uploaded)."""

    rollout_id: str
    """Chosen by the trainer (``r<date>-<time>-<hex>``), so that a retried request names the
    same rollout: a retry gets the first reply, nothing is stored twice."""
    policy: str = "heddle"
    trajectories: list[TrajectorySpec]
    """In index order: ``trajectories[i].index == i``."""
    source: str = ""
    """For humans: ``workload:coding``, ``trace:FILE``, ``tasks:FILE``."""
    time_scale: float | None = None
    """None: the deployment's (its workers' registrations); another value is refused."""
    labels: dict[str, str] = {}


class UploadRef(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    name: str
    """Object name in the trainer's upload bucket (the rollout id)."""
    size: int
    sha256: str
    """Hex SHA-256 of the object's bytes."""


class UploadRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A submission stored in the trainer's upload bucket (a ``SubmitRequest``'s JSON)."""

    upload: UploadRef


def encode_submission(request: SubmitRequest | UploadRequest) -> bytes:
    """The request's JSON, token arrays in their compact wire form."""
    if isinstance(request, UploadRequest):
        return msgspec.json.encode(request)
    specs = [pack_message(with_canonical_defaults(spec)) for spec in request.trajectories]
    return msgspec.json.encode(msgspec.structs.replace(request, trajectories=specs))


def decode_submission(data: bytes) -> SubmitRequest | UploadRequest:
    """The request, strictly decoded (``RequestRefused(400)`` naming what is wrong otherwise)."""
    raw = _json(data)
    if isinstance(raw, dict) and "upload" in raw:
        return _convert(raw, UploadRequest)
    return _convert(raw, SubmitRequest)


def decode_uploaded(data: bytes) -> SubmitRequest:
    """The ``SubmitRequest`` an upload holds, strictly decoded."""
    return _convert(_json(data), SubmitRequest)


def _json(data: bytes) -> Any:
    try:
        return msgspec.json.decode(data.strip() or b"{}")
    except msgspec.DecodeError as exc:
        raise RequestRefused(400, f"malformed JSON: {exc}") from None


def _convert(raw: Any, kind: type[R]) -> R:
    if not isinstance(raw, dict):
        raise RequestRefused(400, f"a submission is a JSON object, not {type(raw).__name__}")
    unknown = unknown_fields(raw, kind)
    if unknown:
        raise RequestRefused(
            400, f"unknown field{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}: "
            "not part of the submission schema (docs/trainer.md)"
        )  # fmt: skip
    try:
        return msgspec.convert(raw, kind, dec_hook=dec_hook)
    except msgspec.ValidationError as exc:
        raise RequestRefused(400, f"invalid submission: {exc}") from None
    except (TypeError, ValueError) as exc:  # a token array the decoder cannot read
        raise RequestRefused(400, f"invalid submission: {exc}") from None
