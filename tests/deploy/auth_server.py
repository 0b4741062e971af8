"""A real nats-server with ``heddle deploy auth``'s config, and a probe that asks it, one subject
at a time, what an identity may publish and subscribe to.

A probe publishes (or subscribes) on core NATS and flushes twice: the server answers a refused
operation with ``-ERR 'Permissions Violation ...'`` before the PONG of a PING sent after it, so
the verdict is known when the flushes return, with no timeout to wait out (nats-py writes a
flush's PING at once, possibly ahead of a publish still in its buffer: the second PING follows
it). The bus records the violations
(``Bus.violations``, the subject as the server wrote it).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from heddle.bus import Bus, BusOptions, EmbeddedNatsServer
from heddle.config import Settings
from heddle.deploy.auth import AUTH_CONFIG_NAME, Credential, credential_path, write_auth

WORKERS = ("w00", "w01")
TRAINERS = ("grpo", "ppo")


@dataclass(frozen=True)
class AuthServer:
    server: EmbeddedNatsServer
    auth_dir: Path
    data_dir: Path
    credentials: dict[str, Credential]
    """By identity label (``worker-w00``, ``operator``, ...)."""

    def path(self, label: str) -> Path:
        return credential_path(self.auth_dir, self.credentials[label].role.identity)

    def settings(self, label: str) -> Settings:
        return Settings(
            nats_url=self.server.url, data_dir=self.data_dir, nats_creds=self.path(label)
        )

    def credential_files(self) -> dict[str, Path]:
        """Every identity's credential file, by label (``LocalDeployment``'s mapping)."""
        return {label: self.path(label) for label in self.credentials}

    def bus(self, label: str, *, provision: bool = True) -> Bus:
        return Bus(self.settings(label), BusOptions(name=f"probe-{label}", provision=provision))


@contextmanager
def auth_server(tmp_path: Path) -> Iterator[AuthServer]:
    auth_dir = tmp_path / "auth"
    credentials = write_auth(auth_dir, workers=WORKERS, trainers=TRAINERS)
    # nats-server resolves an include relative to the including file: inline the block.
    authorization = (auth_dir / AUTH_CONFIG_NAME).read_text()
    with EmbeddedNatsServer(tmp_path / "nats", extra_config=authorization) as server:
        yield AuthServer(
            server,
            auth_dir,
            tmp_path / "data",
            {entry.role.name: entry for entry in credentials},
        )


async def may_publish(bus: Bus, subject: str) -> bool:
    """Whether the server lets ``bus``'s credential publish on ``subject`` (a core publish, an
    empty body: what a JetStream API subject would do with it is not asked)."""
    bus.violations.clear()
    await bus.client.publish(subject, b"")
    await _barrier(bus)
    return not _refused(bus, "publish", subject)


async def may_subscribe(bus: Bus, subject: str) -> bool:
    bus.violations.clear()
    subscription = await bus.client.subscribe(subject)
    await _barrier(bus)
    refused = _refused(bus, "subscription", subject)
    await subscription.unsubscribe()
    return not refused


async def _barrier(bus: Bus) -> None:
    await bus.client.flush()
    await bus.client.flush()


def _refused(bus: Bus, operation: str, subject: str) -> bool:
    return any(v.operation == operation and v.subject == subject for v in bus.violations)
