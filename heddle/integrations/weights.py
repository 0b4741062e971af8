"""Publishing a trainer's weights to Heddle from inside the trainer (verl's rollout adapter,
slime's post-write hook): one call that publishes a folder as a weight version and, when asked,
waits until that many workers loaded it, so the next rollout's first generation runs on it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from heddle.client import HeddleClient
from heddle.config import load_settings


@dataclass(frozen=True)
class WeightSync:
    """Where and how a trainer publishes: its NATS (None: ``HEDDLE_NATS_URL``), its name, how
    many workers must load a version before training goes on (0: none), and for how long."""

    nats_url: str | None = None
    trainer: str = "trainer"
    wait_workers: int = 0
    wait_timeout_s: float = 600.0


async def publish_and_wait(sync: WeightSync, version: int, folder: Path) -> None:
    """Publish ``folder`` as weight version ``version``; then wait for ``sync.wait_workers``
    (``RuntimeError`` when a worker cannot load it, ``TimeoutError`` after the timeout)."""
    settings = load_settings(nats_url=sync.nats_url)
    async with HeddleClient(settings, trainer=sync.trainer) as client:
        await client.publish_weights(version, folder)
        if sync.wait_workers > 0:
            await client.wait_weights_loaded(version, sync.wait_workers, sync.wait_timeout_s)
