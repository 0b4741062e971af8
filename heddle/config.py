"""Where Heddle finds its services. The only place that reads ``HEDDLE_*`` environment variables.

With nothing set, Heddle runs self-contained: an embedded ``nats-server`` on a free port with its
JetStream store under the data dir, and a SQLite ledger file in the data dir.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import platformdirs

DEFAULT_DATA_DIR = Path(platformdirs.user_data_dir("heddle"))
DEFAULT_MAX_EVENT_BYTES = 256 * 1024


@dataclass(frozen=True, slots=True)
class Settings:
    nats_url: str | None = None
    """NATS server URL (``HEDDLE_NATS_URL``); None starts an embedded server."""
    database_url: str | None = None
    """Ledger SQLAlchemy URL (``HEDDLE_DATABASE_URL``); None uses ``<data_dir>/ledger.db``."""
    data_dir: Path = DEFAULT_DATA_DIR
    """Root of local state (``HEDDLE_DATA_DIR``): embedded JetStream store, SQLite ledger, plots."""
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES
    """Largest event or command JSON published inline (``HEDDLE_MAX_EVENT_BYTES``); a larger
    one moves its biggest number arrays to the object store (``heddle.bus.payloads``). Well
    under NATS's default 1 MiB ``max_payload``."""

    @property
    def ledger_url(self) -> str:
        return self.database_url or f"sqlite:///{self.embedded_ledger_path}"

    @property
    def embedded_ledger_path(self) -> Path:
        """The SQLite ledger file used when no database URL is configured."""
        return self.data_dir / "ledger.db"

    @property
    def nats_store_dir(self) -> Path:
        return self.data_dir / "jetstream"

    @property
    def uses_embedded_nats(self) -> bool:
        return self.nats_url is None


def load_settings(
    *,
    nats_url: str | None = None,
    database_url: str | None = None,
    data_dir: Path | None = None,
) -> Settings:
    """Settings from explicit values (CLI flags) over ``HEDDLE_*`` variables over defaults."""
    env_data_dir = os.environ.get("HEDDLE_DATA_DIR")
    env_max_event_bytes = os.environ.get("HEDDLE_MAX_EVENT_BYTES")
    return Settings(
        nats_url=nats_url or os.environ.get("HEDDLE_NATS_URL") or None,
        database_url=database_url or os.environ.get("HEDDLE_DATABASE_URL") or None,
        data_dir=data_dir or (Path(env_data_dir) if env_data_dir else DEFAULT_DATA_DIR),
        max_event_bytes=(
            int(env_max_event_bytes) if env_max_event_bytes else DEFAULT_MAX_EVENT_BYTES
        ),
    )
