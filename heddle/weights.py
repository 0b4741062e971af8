"""Publishing weight versions and waiting for the workers to load them (the trainer's side).

``publish_weights`` stores a small model's bytes in the object store when given bytes (bucket
``heddle-weights``, object ``v<version>``, with size and SHA-256 for the workers to check) and
publishes ``heddle.evt.weights.<version>.published``; its event id derives from the version, so
a retried publish stores nothing twice. ``wait_weights_loaded`` reads the workers' reports.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from pathlib import Path

from heddle.bus import Bus, ReplayQuery
from heddle.events import WeightsLoaded, WeightsLoadFailed, WeightSource, WeightsPublished
from heddle.events.subjects import weights_subject
from heddle.ids import derive_id

WEIGHTS_BUCKET = "heddle-weights"


async def publish_weights(
    bus: Bus,
    weight_version: int,
    source: WeightSource | str | Path | bytes,
    *,
    publisher: str = "",
) -> WeightsPublished:
    """Publish version ``weight_version`` (see the module docstring); ``ValueError`` for a
    version below 1 or an empty source."""
    if weight_version < 1:
        raise ValueError(f"weight versions start at 1 (0 is the initial weights): {weight_version}")
    if isinstance(source, bytes):
        if not source:
            raise ValueError("no weight bytes to publish")
        name = f"v{weight_version}"
        await bus.put_bucket_object(WEIGHTS_BUCKET, name, source)
        source = WeightSource(
            kind="object_store",
            bucket=WEIGHTS_BUCKET,
            name=name,
            size=len(source),
            sha256=hashlib.sha256(source).hexdigest(),
        )
    elif isinstance(source, (str, Path)):
        if not str(source):
            raise ValueError("give the path of the weights")
        source = WeightSource(kind="path", path=_absolute(source))
    event = WeightsPublished(
        event_id=derive_id("weights", weight_version, "published"),
        occurred_at=time.time(),
        weight_version=weight_version,
        source=source,
        publisher=publisher,
    )
    await bus.publish(event)
    return event


async def weights_reports(
    bus: Bus, weight_version: int
) -> tuple[dict[str, WeightsLoaded], dict[str, WeightsLoadFailed]]:
    """The workers' ``weights.loaded`` and ``weights.load_failed`` of one version, by worker."""
    # One filter, so the weights publisher's role can bound its reads to weights events
    # (heddle/deploy/roles.py); the version's ``published`` comes along and is passed over.
    query = ReplayQuery(filter_subjects=(weights_subject(weight_version, ">"),), start_sequence=1)
    loaded: dict[str, WeightsLoaded] = {}
    failed: dict[str, WeightsLoadFailed] = {}
    async for record in bus.replay_events(query):
        match record.message:
            case WeightsLoaded() as report:
                loaded[report.worker_id] = report
            case WeightsLoadFailed() as failure:
                failed[failure.worker_id] = failure
    return loaded, failed


async def wait_weights_loaded(
    bus: Bus,
    weight_version: int,
    num_workers: int,
    timeout_s: float | None = None,
    poll_s: float = 0.1,
) -> dict[str, WeightsLoaded]:
    """Poll until ``num_workers`` workers loaded the version (``TimeoutError`` after
    ``timeout_s``; ``RuntimeError`` naming a worker that failed to load it)."""
    async with asyncio.timeout(timeout_s):
        while True:
            loaded, failed = await weights_reports(bus, weight_version)
            if failed:
                worker_id, failure = next(iter(failed.items()))
                raise RuntimeError(
                    f"worker {worker_id} cannot load weights {weight_version}: {failure.reason}"
                )
            if len(loaded) >= num_workers:
                return loaded
            await asyncio.sleep(poll_s)


def _absolute(path: str | Path) -> str:
    """The path as workers elsewhere read it (no ``~``, no relative part)."""
    return str(Path(path).expanduser().absolute())
