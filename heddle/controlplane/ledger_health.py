"""The ledger's health as its projector's keeper reports it
(``heddle.controlplane.ledger_recovery``) in ``<data_dir>/ledger-health.json``, for
``heddle status``: ``rebuilding`` (a damaged ledger set aside, a fresh one projected from the
stream), ``ok`` (with what happened, once rebuilt), or ``stopped`` (why, and what to do). No
file: nothing happened."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import msgspec

HEALTH_FILE = "ledger-health.json"

HealthState = Literal["ok", "rebuilding", "stopped"]


class LedgerHealth(msgspec.Struct, frozen=True, kw_only=True):
    state: HealthState
    ledger_url: str
    reason: str = ""
    """What was wrong with the ledger (the database's words), and for ``stopped`` what to do."""
    corrupt_copy: str = ""
    """Where the damaged file was moved (a rebuilt SQLite ledger)."""
    since: float
    """When the damage was met."""
    updated_at: float
    position: int = 0
    """The fresh ledger's position when this was written."""
    target_sequence: int = 0
    """The stream's last event when the damage was met: rebuilt once the position reaches it."""


def health_path(data_dir: Path) -> Path:
    return data_dir / HEALTH_FILE


def write_health(data_dir: Path, health: LedgerHealth) -> None:
    data_dir.mkdir(parents=True, exist_ok=True)
    path = health_path(data_dir)
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_bytes(msgspec.json.encode(health))
    temporary.replace(path)


def read_health(data_dir: Path) -> LedgerHealth | None:
    try:
        return msgspec.json.decode(health_path(data_dir).read_bytes(), type=LedgerHealth)
    except (OSError, msgspec.DecodeError):
        return None
