"""Where Heddle finds its services. The only place that reads ``HEDDLE_*`` environment variables.

With nothing set, Heddle runs self-contained: an embedded ``nats-server`` on a free port with its
JetStream store under the data dir, and a SQLite ledger file in the data dir.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import platformdirs

from heddle.errors import UserError

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
    nats_creds: Path | None = None
    """NATS credential file (``HEDDLE_NATS_CREDS``): a ``.creds`` file (user JWT and nkey seed,
    as ``nsc`` writes) or an nkey seed file (as ``heddle deploy auth`` writes). A user and
    password can instead go in the URL (``nats://user:password@host:4222``)."""
    nats_tls_ca: Path | None = None
    """CA certificate (PEM) that the NATS server's TLS certificate must chain to
    (``HEDDLE_NATS_TLS_CA``); set, the connection uses TLS."""
    nats_replicas: int | None = None
    """Replicas of the streams and buckets this process creates (``HEDDLE_NATS_REPLICAS``);
    None asks the server: 1 on a single server, 3 on a cluster."""
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
    nats_creds: Path | None = None,
    nats_tls_ca: Path | None = None,
    nats_replicas: int | None = None,
) -> Settings:
    """Settings from explicit values (CLI flags) over ``HEDDLE_*`` variables over defaults."""
    env_data_dir = os.environ.get("HEDDLE_DATA_DIR")
    env_max_event_bytes = os.environ.get("HEDDLE_MAX_EVENT_BYTES")
    env_replicas = os.environ.get("HEDDLE_NATS_REPLICAS")
    return Settings(
        nats_url=nats_url or os.environ.get("HEDDLE_NATS_URL") or None,
        nats_creds=nats_creds or _env_path("HEDDLE_NATS_CREDS"),
        nats_tls_ca=nats_tls_ca or _env_path("HEDDLE_NATS_TLS_CA"),
        nats_replicas=nats_replicas or (_replicas(env_replicas) if env_replicas else None),
        database_url=database_url or os.environ.get("HEDDLE_DATABASE_URL") or None,
        data_dir=data_dir or (Path(env_data_dir) if env_data_dir else DEFAULT_DATA_DIR),
        max_event_bytes=(
            int(env_max_event_bytes) if env_max_event_bytes else DEFAULT_MAX_EVENT_BYTES
        ),
    )


def _env_path(name: str) -> Path | None:
    value = os.environ.get(name)
    return Path(value) if value else None


def _replicas(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 5:
        raise UserError(f"HEDDLE_NATS_REPLICAS={text!r}: give a whole number from 1 to 5")
    return int(text)


def child_variables(settings: Settings) -> dict[str, str | None]:
    """The ``HEDDLE_*`` variables that hand ``settings`` to a child process (None: unset)."""
    return {
        "HEDDLE_NATS_URL": settings.nats_url,
        "HEDDLE_DATABASE_URL": settings.database_url,
        "HEDDLE_NATS_CREDS": str(settings.nats_creds) if settings.nats_creds else None,
        "HEDDLE_NATS_TLS_CA": str(settings.nats_tls_ca) if settings.nats_tls_ca else None,
        "HEDDLE_NATS_REPLICAS": str(settings.nats_replicas) if settings.nats_replicas else None,
    }


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    """What a training run keeps in the stream (``heddle.lifecycle.retention``): the newest
    ``keep_rollouts`` rollouts (``HEDDLE_RETENTION_KEEP_ROLLOUTS``) and those ended less than
    ``keep_days`` ago (``HEDDLE_RETENTION_KEEP_DAYS``); None: no such bound. Expired rollouts
    are archived under ``archive_dir`` (``HEDDLE_ARCHIVE_DIR``) before they are purged."""

    keep_rollouts: int | None = None
    keep_days: float | None = None
    archive_dir: Path | None = None

    def __post_init__(self) -> None:
        if self.keep_rollouts is not None and self.keep_rollouts < 0:
            raise UserError(f"keep_rollouts must be >= 0, not {self.keep_rollouts}")
        if self.keep_days is not None and self.keep_days < 0:
            raise UserError(f"keep_days must be >= 0, not {self.keep_days}")

    @property
    def is_set(self) -> bool:
        return self.keep_rollouts is not None or self.keep_days is not None


def load_retention(
    *,
    keep_rollouts: int | None = None,
    keep_days: float | None = None,
    archive_dir: Path | None = None,
) -> RetentionPolicy:
    """A retention policy from explicit values (CLI flags) over ``HEDDLE_RETENTION_*`` and
    ``HEDDLE_ARCHIVE_DIR``."""
    rollouts = os.environ.get("HEDDLE_RETENTION_KEEP_ROLLOUTS")
    days = os.environ.get("HEDDLE_RETENTION_KEEP_DAYS")
    try:
        return RetentionPolicy(
            keep_rollouts=keep_rollouts if keep_rollouts is not None else (
                int(rollouts) if rollouts else None),
            keep_days=keep_days if keep_days is not None else (float(days) if days else None),
            archive_dir=archive_dir or _env_path("HEDDLE_ARCHIVE_DIR"),
        )  # fmt: skip
    except ValueError as exc:
        raise UserError(f"HEDDLE_RETENTION_*: {exc}") from None
