"""Weight swaps on a worker: a ``LoadWeights`` command, carried out at a safe point (through the
generations' ``generation.WeightGate``: every generation runs on exactly one version, the one the
gate yields to it, ``Generated.weight_version``). ``WeightLoading`` carries out the command:
it fetches an object-store source into the worker's weights folder, swaps through the gate and
records ``weights.loaded`` (or ``weights.load_failed`` with the reason; the engine then keeps the
previous weights). A version at or below the one served is reported loaded again, not reloaded.
"""

from __future__ import annotations

import hashlib
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from heddle.events import LoadWeights, WeightsLoaded, WeightsLoadFailed, WeightSource
from heddle.ids import derive_id
from heddle.workers.agent.generation import WeightGate
from heddle.workers.agent.ports import ObjectSource
from heddle.workers.agent.publisher import DurablePublisher
from heddle.workers.engines.base import Engine, EngineError, WeightLoader


class WeightLoading:
    """Carries out ``LoadWeights`` commands for one worker."""

    def __init__(
        self,
        *,
        worker_id: str,
        incarnation: str,
        engine: Engine,
        gate: WeightGate,
        publisher: DurablePublisher,
        objects: ObjectSource | None,
        clock: Callable[[], float] = time.time,
        folder: Path | None = None,
    ) -> None:
        self.worker_id = worker_id
        self.incarnation = incarnation
        self.engine = engine
        self.gate = gate
        self.publisher = publisher
        self.objects = objects
        self.clock = clock
        self.folder = folder or Path(tempfile.gettempdir()) / f"heddle-weights-{worker_id}"

    async def handle(self, command: LoadWeights, *, is_new: bool) -> None:
        """Load (``is_new``: a version above the one served; else it is reported loaded again)
        and record the outcome; returns once it is stored."""
        started = time.monotonic()
        version = command.weight_version
        if is_new:
            try:
                await self._load(command)
            except (EngineError, KeyError, OSError, ValueError) as exc:
                await self._publish_failure(version, f"{type(exc).__name__}: {exc}")
                return
        await self.publisher.publish(
            WeightsLoaded(
                event_id=derive_id("weights", version, self.worker_id, self.incarnation),
                occurred_at=self.clock(),
                weight_version=version,
                worker_id=self.worker_id,
                incarnation=self.incarnation,
                load_s=time.monotonic() - started,
            )
        )

    async def _load(self, command: LoadWeights) -> None:
        engine = self.engine
        if not isinstance(engine, WeightLoader):
            raise ValueError(f"engine {engine.capabilities.name!r} cannot load weights")
        path = await self._local_path(command.weight_version, command.source)
        fmt = command.source.load_format

        async def load() -> None:
            await engine.load_weights(path, weight_version=command.weight_version, load_format=fmt)

        await self.gate.swap(command.weight_version, load)

    async def _local_path(self, version: int, source: WeightSource) -> str:
        """The source as a path the engine reads (an object is fetched and checked first)."""
        if source.kind == "path":
            if not source.path:
                raise ValueError("a path source needs its path")
            return source.path
        if self.objects is None:
            raise ValueError("this worker has no object store to fetch weights from")
        data = await self.objects.get_object(source.bucket, source.name)
        if source.size and len(data) != source.size:
            raise ValueError(f"object {source.name!r}: {len(data)} bytes, not {source.size}")
        if source.sha256 and hashlib.sha256(data).hexdigest() != source.sha256:
            raise ValueError(f"object {source.name!r}: SHA-256 does not match")
        self.folder.mkdir(parents=True, exist_ok=True)
        target = self.folder / f"v{version}-{Path(source.name).name or 'weights'}"
        target.write_bytes(data)
        return str(target)

    async def _publish_failure(self, version: int, reason: str) -> None:
        await self.publisher.publish(
            WeightsLoadFailed(
                event_id=derive_id("weights", version, self.worker_id, self.incarnation, "failed"),
                occurred_at=self.clock(),
                weight_version=version,
                worker_id=self.worker_id,
                incarnation=self.incarnation,
                reason=reason,
            )
        )
