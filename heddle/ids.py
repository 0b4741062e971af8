"""Identifiers and deterministic id derivation.

Ids appear as NATS subject tokens, so they are restricted to ``[A-Za-z0-9_-]``. Event and command
ids are *derived* from what they describe (rollout, trajectory, step, kind, ...) so that a retried
publish carries the same ``Nats-Msg-Id`` and JetStream drops the duplicate.
"""

from __future__ import annotations

import re

_TOKEN = re.compile(r"^[A-Za-z0-9_-]{1,128}$")


_VALID: set[str] = set()
"""Tokens already checked (every event's subject checks its ids: most repeat)."""
_MAX_VALID = 65_536


def check_token(value: str, what: str) -> str:
    """Return ``value`` if it can be a subject token, else raise ``ValueError`` naming ``what``."""
    if value in _VALID:
        return value
    if not _TOKEN.fullmatch(value):
        raise ValueError(
            f"{what} {value!r} is not a valid id: "
            "use 1-128 characters of letters, digits, '_' or '-'"
        )
    if len(_VALID) >= _MAX_VALID:
        _VALID.clear()
    _VALID.add(value)
    return value


def trajectory_id(index: int) -> str:
    """The id of the ``index``-th trajectory of a rollout (fixed width, so ids never prefix)."""
    return f"t{index:06d}"


def trajectory_index(traj_id: str) -> int:
    """The index ``trajectory_id`` made ``traj_id`` from (0 for an id it did not make)."""
    digits = traj_id[1:7]
    return int(digits) if traj_id.startswith("t") and digits.isdigit() else 0


def resubmission_id(traj_id: str, attempt: int) -> str:
    """The id under which a trajectory's slot runs afresh for the ``attempt``-th time (a stale
    trajectory resubmitted: ``t000003`` -> ``t000003-r1`` -> ``t000003-r1-r2``)."""
    return check_token(f"{traj_id}-r{attempt}", "resubmitted trajectory id")


def group_id(index: int) -> str:
    return f"g{index:05d}"


def derive_id(*parts: object) -> str:
    """A readable deterministic id: the parts joined by ':' (None parts are skipped).

    The same logical event always yields the same id, which JetStream uses for de-duplication.
    """
    return ":".join(str(part) for part in parts if part is not None)


def epoch_part(epoch: int) -> str | None:
    """The id part that tells one hosting of a trajectory from another (``e3``; None for the
    unnumbered hostings of older streams, whose ids stay as they were)."""
    return f"e{epoch}" if epoch else None
