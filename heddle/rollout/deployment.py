"""A local deployment: the control plane, worker agents and tool executors as child processes,
started in order and each waited for.

- ``start_control_plane`` runs ``heddle up`` (no workers of its own) and waits until its status
  file says ready (replayed, live, stale workers declared failed);
- ``start_workers`` runs one ``heddle worker`` per worker (so that one can die alone), or, with
  ``WorkerPool.workers_per_process`` above 1, ``heddle workers run N`` children that each hold
  several agents (a large simulated fleet on a small machine: one interpreter, event loop and
  bus connection for many sim engines), and waits for each worker's ``WorkerRegistered`` in the
  stream; a pool's workers may have different TP degrees (a resource plan, ``worker_pool``);
- ``start_tools`` runs ``heddle tools serve`` executors of the default pool.

A child that exits while being waited for raises ``DeploymentError`` quoting its log.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from heddle.bus import Bus, ReplayQuery
from heddle.controlplane import PLANE, ControlPlaneConfig, read_status
from heddle.controlplane.filters import subjects_of_kind
from heddle.errors import UserError
from heddle.events import WorkerRegistered
from heddle.events.subjects import EVENTS_STREAM, TOOLS_STREAM
from heddle.ledger import open_ledger
from heddle.rollout.processes import Child, Launcher, signal_name
from heddle.rollout.router import RouterProcess, RouterSpec
from heddle.rollout.worker_pool import WorkerPool
from heddle.workers.tools.executor import ExecutorConfig, tool_consumer_spec

_POLL_S = 0.2


class DeploymentError(UserError):
    """A child process failed to start or died; the message quotes its log."""


def control_plane_args(config: ControlPlaneConfig) -> list[str]:
    """``heddle up`` flags that reproduce ``config`` in a child process."""
    predictor = config.predictor
    host = config.host
    args = [
        f"--cost-model={config.cost_model}",
        f"--hardware={config.hardware}",
        f"--predictor={predictor.name}",
        f"--sigma={predictor.sigma}",
        f"--seed={config.seed}",
        f"--worker-timeout-s={config.worker_timeout_s}",
        f"--engine-restart-s={config.engine_restart_s}",
        "--transfer-kv" if config.transfer_kv else "--no-transfer-kv",
        "--ledger" if config.project_ledger else "--no-ledger",
        "--learn-ledger" if config.learn_from_ledger else "--no-learn-ledger",
        f"--durable-prefix={host.durable_prefix}",
        f"--since={host.since_sequence}",
    ]
    args += [f"--history={path}" for path in config.history]
    return args


def _migrate(ledger_url: str) -> None:
    open_ledger(ledger_url).close()


async def delete_control_durables(bus: Bus, prefix: str) -> None:
    """Remove the durable of an isolated control plane run (``<prefix>-plane``) and the
    position it recorded (a later run of that prefix starts afresh)."""
    await bus.delete_consumer(EVENTS_STREAM, f"{prefix}-{PLANE}")
    await bus.positions.forget(f"{prefix}-{PLANE}")


class LocalDeployment:
    """Owns the children it starts; ``stop`` ends them (workers and tools first)."""

    def __init__(
        self, bus: Bus, log_dir: Path, credentials: Mapping[str, Path] | None = None
    ) -> None:
        """``credentials``: a NATS credential file per role for the children (see
        ``Launcher``); without, they connect as ``bus.settings`` says."""
        self.bus = bus
        self.launcher = Launcher(bus.settings, log_dir, credentials=credentials)
        self.control_plane: Child | None = None
        self.projector: Child | None = None
        self.workers: dict[str, Child] = {}
        self.tools: list[Child] = []
        self.router: RouterProcess | None = None

    async def start_control_plane(self, config: ControlPlaneConfig, timeout_s: float = 90) -> Child:
        """Start ``heddle up`` and wait until it is ready. The ledger projector, if the config
        asks for one, runs as a process of its own (``heddle db project``): its SQL work then
        never holds the deciders' event loop."""
        # Bring the ledger's schema up to date here, once: the projector and the control plane
        # would otherwise both migrate a fresh database at the same moment.
        await asyncio.to_thread(_migrate, self.bus.settings.ledger_url)
        if config.project_ledger:
            self.projector = await self.launcher.start(
                "projector",
                ["db", "project"],
                nice=self.launcher.data_plane_nice,
                role="ledger_projector",
            )
            config = replace(config, project_ledger=False)
        child = await self.launcher.start_control_plane(control_plane_args(config))
        self.control_plane = child
        await self.wait_control_plane_ready(timeout_s)
        return child

    async def restart_control_plane(self, timeout_s: float = 90) -> Child:
        """Start the control plane again with its previous arguments (after a crash)."""
        if self.control_plane is None:
            raise RuntimeError("no control plane was started")
        args = self.control_plane.args
        self.control_plane = await self.launcher.start("control-plane", args, role="control_plane")
        await self.wait_control_plane_ready(timeout_s)
        return self.control_plane

    async def wait_control_plane_ready(self, timeout_s: float) -> None:
        child = self.control_plane
        assert child is not None
        deadline = time.monotonic() + timeout_s
        data_dir = self.bus.settings.data_dir
        while True:
            status = read_status(data_dir)
            if status is not None and status.pid == child.pid and status.is_ready:
                return
            self._check_alive(child, "the control plane")
            if time.monotonic() > deadline:
                raise DeploymentError(
                    f"the control plane was not ready within {timeout_s:g} s; "
                    f"log {child.log_path}:\n{child.log_tail()}"
                )
            await asyncio.sleep(_POLL_S)

    async def start_workers(self, pool: WorkerPool, timeout_s: float = 90) -> list[Child]:
        """Start the pool's workers and wait until each has registered. ``workers`` maps each
        worker id to its child (workers sharing a process share the child)."""
        since = (await self.bus.stream_state()).last_sequence + 1
        started = []
        ids = pool.worker_ids
        for group in pool.process_groups():
            options = pool.options_for(group.start)
            if len(group) == 1:
                node = pool.node_of(group.start)
                child = await self.launcher.start_worker(
                    ids[group.start], pool.engine, options, pool.heartbeat_s, node=node
                )
            else:
                child = await self.launcher.start_worker_group(
                    pool.id_prefix, group.start, len(group), pool.engine, options,
                    pool.heartbeat_s,
                )  # fmt: skip
            self.workers.update({ids[index]: child for index in group})
            started.append(child)
        await self._wait_registered(ids, since, timeout_s)
        return started

    async def _wait_registered(
        self, worker_ids: Sequence[str], since: int, timeout_s: float
    ) -> None:
        missing = set(worker_ids)
        deadline = time.monotonic() + timeout_s
        subjects = subjects_of_kind(WorkerRegistered)
        query = ReplayQuery(filter_subjects=subjects, start_sequence=since)
        while missing:
            async for record in self.bus.replay_events(query):
                if isinstance(record.message, WorkerRegistered):
                    missing.discard(record.message.worker_id)
            for worker_id in sorted(missing):
                self._check_alive(self.workers[worker_id], f"worker {worker_id}")
            if missing and time.monotonic() > deadline:
                worker_id = min(missing)
                child = self.workers[worker_id]
                raise DeploymentError(
                    f"worker {worker_id} did not register within {timeout_s:g} s; "
                    f"log {child.log_path}:\n{child.log_tail()}"
                )
            if missing:
                await asyncio.sleep(_POLL_S)

    async def start_tools(
        self,
        num_executors: int,
        pool: str = "default",
        timeout_s: float = 90,
        max_in_flight: int = 64,
    ) -> list[Child]:
        """Start the executors and wait until one takes calls (pulls on the pool's durable):
        a rollout submitted before would see its first tool calls wait for an executor's
        start-up, seconds of wall time that a time-scaled run multiplies. Each executor handles
        ``max_in_flight`` calls at once (trace replays only wait: a rollout's executors should
        hold every trajectory's call, as the simulator's elastic tool pool does)."""
        started = []
        for _ in range(num_executors):
            index = len(self.tools)
            started.append(await self.launcher.start_tool_executor(index, pool, max_in_flight))
            self.tools.append(started[-1])
        if started:
            await self._wait_pulling(pool, started, timeout_s)
        return self.tools

    async def _wait_pulling(self, pool: str, children: Sequence[Child], timeout_s: float) -> None:
        durable = tool_consumer_spec(ExecutorConfig(pool=pool)).durable
        deadline = time.monotonic() + timeout_s
        while True:
            state = await self.bus.consumer_state(TOOLS_STREAM, durable)
            if state is not None and state.num_waiting > 0:
                return
            for child in children:
                self._check_alive(child, f"tool executor {child.name}")
            if time.monotonic() > deadline:
                raise DeploymentError(
                    f"no tool executor of pool {pool!r} took calls within {timeout_s:g} s; "
                    f"log {children[0].log_path}:\n{children[0].log_tail()}"
                )
            await asyncio.sleep(_POLL_S)

    async def start_router(self, spec: RouterSpec, timeout_s: float = 60) -> RouterProcess:
        """Start the ``sglang-router`` and wait until it lists every server healthy."""
        router = RouterProcess(spec, self.launcher.log_dir / "sglang-router.log")
        self.router = router
        await router.start(timeout_s)
        return router

    def failed_children(self) -> list[Child]:
        """Children that exited on their own (not stopped by us)."""
        return self.launcher.exited()

    async def stop(self, grace_s: float = 10.0) -> None:
        """Workers and executors first (they finish their current work), then the control
        plane (it acknowledges what they published)."""
        last = ("control-plane", "projector")
        others = [name for name in self.launcher.children if name not in last]
        await self.launcher.stop_all(others, grace_s)
        if self.router is not None:
            await self.router.stop(grace_s)
        await self.launcher.stop_all(["control-plane"], grace_s)
        await self.launcher.stop_all(["projector"], grace_s)

    @staticmethod
    def _check_alive(child: Child, what: str) -> None:
        if not child.is_running:
            raise DeploymentError(
                f"{what} exited ({signal_name(child.process.returncode)}); "
                f"log {child.log_path}:\n{child.log_tail()}"
            )
