"""A local deployment: the control plane, worker agents and tool executors as child processes,
started in order and each waited for.

- ``start_control_plane`` runs ``heddle up`` (no workers of its own) and waits until its status
  file says ready (replayed, live, stale workers declared failed);
- ``start_workers`` runs one ``heddle worker`` per worker (so that one can die alone), or, with
  ``WorkerPool.workers_per_process`` above 1, ``heddle workers run N`` children that each hold
  several agents (a large simulated fleet on a small machine: one interpreter, event loop and
  bus connection for many sim engines), and waits for each worker's ``WorkerRegistered`` in the
  stream; a pool's workers may have different TP degrees (a resource plan);
- ``start_tools`` runs ``heddle tools serve`` executors of the default pool.

A child that exits while being waited for raises ``DeploymentError`` quoting its log.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from heddle.bus import Bus, ReplayQuery
from heddle.bus.server import free_port
from heddle.consumers import PLANE, ControlPlaneConfig, read_status
from heddle.consumers.filters import subject_of_kind
from heddle.control.control_plane import engine_config
from heddle.control.systems import system_spec
from heddle.errors import UserError
from heddle.events import WorkerRegistered
from heddle.events.subjects import EVENTS_STREAM, TOOLS_STREAM
from heddle.ledger import open_ledger
from heddle.policy.engine_models import DEFAULT_ENGINE_MODEL, engine_model
from heddle.rollout.processes import Child, Launcher, signal_name
from heddle.rollout.router import RouterProcess, RouterSpec
from heddle.workers.tools.executor import ExecutorConfig, tool_consumer_spec

_POLL_S = 0.2
SIM_WORKERS_PER_PROCESS = 16
"""Default agents per child process for sim engines (``heddle rollout run``): a sim engine is a
timer and a batching model, so many share an interpreter; one process per worker costs each an
interpreter's memory and start-up and the host's CPU in context switches. See
docs/benchmarks.md (rollout at scale) for the measurement behind the number."""


def default_workers_per_process(engine: str) -> int:
    """Agents per child process when the user gives none: many for ``sim``, else one (a real
    engine holds a GPU and should fail alone)."""
    return SIM_WORKERS_PER_PROCESS if engine == "sim" else 1


class DeploymentError(UserError):
    """A child process failed to start or died; the message quotes its log."""


@dataclass(frozen=True, slots=True)
class WorkerPool:
    """Worker agents to run locally, one process each."""

    num_workers: int
    engine: str = "sim"
    engine_options: Mapping[str, str] = field(default_factory=dict)
    """``--name value`` options of the engine (as ``heddle worker`` takes them)."""
    tp_degrees: tuple[int, ...] = ()
    """Per-worker ``--tp`` (a resource plan); empty: the engine options' for all."""
    heartbeat_s: float = 1.0
    id_prefix: str = "w"
    server_ports: tuple[int, ...] = ()
    """Per-worker ``--port`` of ``sglang --launch`` servers (``with_server_ports``)."""
    workers_per_process: int = 1
    """Most agents one child process holds (1: a process per worker, so one can die alone);
    consecutive workers with the same options share a process up to this many."""

    def __post_init__(self) -> None:
        if self.num_workers < 0:
            raise ValueError(f"num_workers must be >= 0, got {self.num_workers}")
        if self.workers_per_process < 1:
            raise ValueError(f"workers_per_process must be >= 1, got {self.workers_per_process}")
        if self.tp_degrees and len(self.tp_degrees) != self.num_workers:
            raise ValueError("give one TP degree per worker")
        if not self.heartbeat_s > 0:
            raise ValueError("heartbeat_s must be > 0")
        num_urls = len(self._urls())
        if self.engine == "sglang" and num_urls > 1 and num_urls != self.num_workers:
            raise ValueError(
                f"give one sglang --url per worker ({self.num_workers}), not {num_urls}"
            )

    @property
    def worker_ids(self) -> list[str]:
        return [f"{self.id_prefix}{index:02d}" for index in range(self.num_workers)]

    def for_policy(self, policy: str) -> WorkerPool:
        """The pool with its engines preempting as the simulator's do under ``policy``
        (``heddle.control.systems.engine_config``): ``sim`` engines on their engine model,
        ``sglang`` engines on the ``sglang`` model (a bundle that does not preempt where
        preemption drops KV runs them with ``preemptive false``). Options given explicitly
        win; other engines batch as they do."""
        if self.engine not in ("sim", "sglang"):
            return self
        given = {name.replace("-", "_"): value for name, value in self.engine_options.items()}
        model = (
            given.get("engine_model", DEFAULT_ENGINE_MODEL) if self.engine == "sim" else "sglang"
        )
        engine = engine_config(system_spec(policy), engine_model(model))
        options = {"preemptive": str(engine.preemptive).lower()}
        merged = {k: v for k, v in options.items() if k not in given}
        return replace(self, engine_options={**self.engine_options, **merged})

    def options_for(self, index: int) -> dict[str, str]:
        """Worker ``index``'s engine options: its TP degree, and for ``sglang`` its own server
        (the ``index``-th of a comma-separated ``url``, or its launch port)."""
        options = {name.replace("-", "_"): value for name, value in self.engine_options.items()}
        if self.tp_degrees:
            options["tp"] = str(self.tp_degrees[index])
        if self.engine == "sglang" and "," in options.get("url", ""):
            options["url"] = self._urls()[index]
        if self.server_ports:
            options["port"] = str(self.server_ports[index])
        return options

    def server_urls(self) -> tuple[str, ...]:
        """The ``sglang`` servers of the workers, one each (``--url`` or launched)."""
        if self.engine != "sglang":
            raise ValueError(f"{self.engine!r} workers have no SGLang servers")
        if self.server_ports:
            host = self.options_for(0).get("host", "127.0.0.1")
            return tuple(f"http://{host}:{port}" for port in self.server_ports)
        urls = self._urls()
        if len(urls) != self.num_workers:
            raise ValueError(
                f"give one sglang --url per worker ({self.num_workers}), comma-separated, "
                f"or --launch; got {len(urls)}"
            )
        return urls

    def with_server_ports(self) -> WorkerPool:
        """Launched ``sglang`` servers on ports chosen now (so a router can name them)."""
        given = {name.replace("-", "_") for name in self.engine_options}
        if self.engine != "sglang" or "url" in given or self.server_ports:
            return self
        return replace(self, server_ports=tuple(free_port() for _ in range(self.num_workers)))

    def with_router(self, router_url: str) -> WorkerPool:
        """Workers whose engines post their generations to ``router_url``."""
        return replace(self, engine_options={**self.engine_options, "router_url": router_url})

    def _urls(self) -> tuple[str, ...]:
        url = {k.replace("-", "_"): v for k, v in self.engine_options.items()}.get("url", "")
        return tuple(part.strip() for part in url.split(",") if part.strip())

    def process_groups(self) -> list[range]:
        """Worker indices per child process: runs of consecutive workers with equal options,
        cut at ``workers_per_process``."""
        groups: list[range] = []
        start = 0
        for index in range(1, self.num_workers + 1):
            is_cut = (
                index == self.num_workers
                or index - start >= self.workers_per_process
                or self.options_for(index) != self.options_for(start)
            )
            if is_cut:
                groups.append(range(start, index))
                start = index
        return groups


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
    """Remove the durable of an isolated control plane run (``<prefix>-plane``)."""
    await bus.delete_consumer(EVENTS_STREAM, f"{prefix}-{PLANE}")


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
                child = await self.launcher.start_worker(
                    ids[group.start], pool.engine, options, pool.heartbeat_s
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
        subjects = (subject_of_kind(WorkerRegistered),)
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
