"""Rollout worker agents as Ray actors (``heddle workers run N --ray ADDRESS``, extra
``heddle[ray]``).

For users whose GPUs are already scheduled by Ray (verl, slime, AReaL, SkyRL): each worker
agent runs in its own Ray actor, placed in a placement group of its own sized to its TP degree
(one bundle of ``tp`` GPUs for GPU engines, CPUs only for ``sim``), so an SGLang server the
worker launches (``--launch``) sees exactly its GPUs. The control plane and NATS stay outside
Ray; the actors reach NATS at the configured URL, never an embedded server.

Supervision: an actor that dies (killed, its node lost, its process crashed) is replaced by a
new one with the same worker id in the same placement group. The new incarnation registers
again and resumes; the control plane has meanwhile declared the old incarnation failed and
re-placed what it held, so a rollout loses nothing (the same path as a worker process killed
outside Ray). An agent that returns (its engine failed, or it was stopped) is not restarted.

``ray`` is imported only when this module's functions run, never by ``heddle`` itself.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from heddle.config import Settings
from heddle.errors import UserError
from heddle.workers.agent.config import WorkerConfig

log = logging.getLogger(__name__)

CPU_ONLY_ENGINES = frozenset({"sim"})
"""Engines that need no GPU: their placement groups hold CPUs only."""


def import_ray() -> Any:
    """The ``ray`` module, or a ``UserError`` saying how to install it."""
    try:
        import ray
    except ImportError:
        raise UserError("--ray needs Ray: pip install 'heddle[ray]'") from None
    return ray


@dataclass(frozen=True, slots=True)
class ActorResources:
    """What one worker's placement group reserves (one bundle, packed on one node)."""

    num_cpus: float = 1.0
    num_gpus: int = 0

    def bundle(self) -> dict[str, float]:
        bundle = {"CPU": self.num_cpus}
        if self.num_gpus:
            bundle["GPU"] = float(self.num_gpus)
        return bundle


def resources_for(engine: str, options: dict[str, str], num_cpus: float) -> ActorResources:
    """GPUs = the engine's ``--tp`` (1 by default) unless the engine runs on CPUs."""
    try:
        tp = int(options.get("tp", "1"))
    except ValueError:
        raise UserError(f"--tp {options['tp']!r} is not an integer") from None
    if tp < 1 or num_cpus <= 0:
        raise UserError(f"need --tp >= 1 and CPUs per worker > 0, got {tp}, {num_cpus}")
    return ActorResources(num_cpus, 0 if engine in CPU_ONLY_ENGINES else tp)


class WorkerActorBody:
    """What runs inside one actor: one worker agent on its own bus connection."""

    def __init__(
        self, settings: Settings, config: WorkerConfig, engine: str, options: dict[str, str]
    ) -> None:
        self.settings = settings
        self.config = config
        self.engine = engine
        self.options = options
        self._stop = asyncio.Event()

    async def run(self) -> list[str]:
        """Serve until stopped; the ids of workers whose engine failed (this one or none)."""
        from heddle.workers.agent.transport import run_agents
        from heddle.workers.engines import create_engine

        engine = create_engine(self.engine, self.options)
        return await run_agents(self.settings, [self.config], lambda _: engine, self._stop)

    async def stop(self) -> None:
        self._stop.set()

    def pid(self) -> int:
        import os

        return os.getpid()


@dataclass(slots=True)
class _Slot:
    config: WorkerConfig
    placement_group: Any
    actor: Any = None
    run_ref: Any = None
    num_restarts: int = 0


@dataclass(slots=True)
class RayWorkerPool:
    """Worker agents as Ray actors, one placement group each; ``ray.init`` must have run."""

    settings: Settings
    configs: list[WorkerConfig]
    engine: str
    options: dict[str, str]
    resources: ActorResources
    on_restart: Callable[[str, int], None] | None = None
    """Called with (worker id, restarts so far) when a dead actor is replaced."""
    _slots: dict[str, _Slot] = field(default_factory=dict)
    _actor_class: Any = None

    def __post_init__(self) -> None:
        if self.settings.nats_url is None:
            raise UserError(
                "--ray needs a NATS server the Ray nodes can reach: set --nats-url or "
                "HEDDLE_NATS_URL (an embedded server lives and dies with this process)"
            )

    @property
    def num_restarts(self) -> dict[str, int]:
        return {worker_id: slot.num_restarts for worker_id, slot in self._slots.items()}

    def actor(self, worker_id: str) -> Any:
        """The live actor handle of ``worker_id`` (tests kill it)."""
        return self._slots[worker_id].actor

    async def start(self) -> None:
        """One placement group per worker (waits until each is placed), then its actor."""
        ray = import_ray()
        from ray.util.placement_group import placement_group

        self._actor_class = ray.remote(WorkerActorBody)
        for config in self.configs:
            group = placement_group([self.resources.bundle()], strategy="STRICT_PACK")
            await group.ready()
            slot = _Slot(config, group)
            self._slots[config.worker_id] = slot
            self._launch(slot)

    def _launch(self, slot: _Slot) -> None:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        strategy = PlacementGroupSchedulingStrategy(slot.placement_group, 0)
        slot.actor = self._actor_class.options(
            name=None,
            num_cpus=self.resources.num_cpus,
            num_gpus=self.resources.num_gpus,
            scheduling_strategy=strategy,
            max_restarts=0,
        ).remote(self.settings, slot.config, self.engine, self.options)
        slot.run_ref = slot.actor.run.remote()

    async def supervise(self, stop: asyncio.Event) -> list[str]:
        """Replace dead actors until ``stop`` is set or every agent returned; the ids of the
        workers whose engine failed."""
        ray = import_ray()
        failed: list[str] = []
        while not stop.is_set() and any(s.run_ref is not None for s in self._slots.values()):
            refs = {s.run_ref: s for s in self._slots.values() if s.run_ref is not None}
            done, _ = await asyncio.to_thread(ray.wait, list(refs), num_returns=1, timeout=0.5)
            for ref in done:
                failed += self._settle(ray, refs[ref], ref)
        return failed

    def _settle(self, ray: Any, slot: _Slot, ref: Any) -> list[str]:
        try:
            failed: list[str] = ray.get(ref)
        except ray.exceptions.RayActorError as exc:
            slot.num_restarts += 1
            log.warning("worker %s: actor died (%s); restarting", slot.config.worker_id, exc)
            if self.on_restart is not None:
                self.on_restart(slot.config.worker_id, slot.num_restarts)
            self._launch(slot)
            return []
        slot.run_ref = None
        return failed

    async def stop(self) -> None:
        """Stop every agent (its current work ends as on SIGTERM), then free the groups."""
        ray = import_ray()
        from ray.util.placement_group import remove_placement_group

        stops = [s.actor.stop.remote() for s in self._slots.values() if s.actor is not None]
        runs = [s.run_ref for s in self._slots.values() if s.run_ref is not None]
        await asyncio.to_thread(ray.wait, stops + runs, num_returns=len(stops + runs), timeout=30)
        for slot in self._slots.values():
            if slot.actor is not None:
                ray.kill(slot.actor)
            remove_placement_group(slot.placement_group)
        self._slots.clear()


def serve_on_ray(
    settings: Settings,
    configs: list[WorkerConfig],
    engine: str,
    options: dict[str, str],
    *,
    address: str,
    num_cpus: float,
) -> list[str]:
    """``heddle workers run --ray ADDRESS``: connect to Ray (``local`` starts one here),
    run the agents until SIGINT/SIGTERM, then stop them; the ids of workers whose engine
    failed."""
    import signal

    ray = import_ray()
    pool = RayWorkerPool(
        settings, configs, engine, options, resources_for(engine, options, num_cpus)
    )
    ray.init(address=None if address == "local" else address)

    async def main() -> list[str]:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for stop_signal in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(stop_signal, stop.set)
        await pool.start()
        log.warning("%d workers on Ray (%s), one placement group each: %s", len(configs),
                    address, pool.resources.bundle())  # fmt: skip
        try:
            return await pool.supervise(stop)
        finally:
            await pool.stop()

    try:
        return asyncio.run(main())
    finally:
        ray.shutdown()
