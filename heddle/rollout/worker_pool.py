"""The workers a local deployment starts (``WorkerPool``): their ids, each worker's engine
options (its TP degree, its own SGLang server or launch port, a router, its GPUs), the engines'
preemption under a policy, and how consecutive workers with equal options share child
processes (``process_groups``, at most ``workers_per_process`` each).

With ``gpus_per_node`` the workers are packed into nodes of that many GPUs in order
(``heddle.policy.resources.nodes``): each registers its node and GPUs, so the control plane may
re-shard them (``heddle.control.reshard``); without, they register none and never are.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from heddle.bus.server import free_port
from heddle.control.bundle import engine_config
from heddle.control.systems import system_spec
from heddle.policy.engine_models import DEFAULT_ENGINE_MODEL, engine_model
from heddle.policy.resources.nodes import GpuAssignment, pack_nodes

SIM_WORKERS_PER_PROCESS = 16
"""Default agents per child process for sim engines (``heddle rollout run``): a sim engine is a
timer and a batching model, so many share an interpreter; one process per worker costs each an
interpreter's memory and start-up and the host's CPU in context switches. See
docs/benchmarks.md (rollout at scale) for the measurement behind the number."""


def default_workers_per_process(engine: str) -> int:
    """Agents per child process when the user gives none: many for ``sim``, else one (a real
    engine holds a GPU and should fail alone)."""
    return SIM_WORKERS_PER_PROCESS if engine == "sim" else 1


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
    gpus_per_node: int = 0
    """Pack the workers into nodes of this many GPUs and tell each its node and GPUs (see the
    module docstring); 0: they register none."""

    def __post_init__(self) -> None:
        if self.num_workers < 0:
            raise ValueError(f"num_workers must be >= 0, got {self.num_workers}")
        if self.workers_per_process < 1:
            raise ValueError(f"workers_per_process must be >= 1, got {self.workers_per_process}")
        if self.tp_degrees and len(self.tp_degrees) != self.num_workers:
            raise ValueError("give one TP degree per worker")
        if not self.heartbeat_s > 0:
            raise ValueError("heartbeat_s must be > 0")
        if self.gpus_per_node < 0:
            raise ValueError(f"gpus_per_node must be >= 0, got {self.gpus_per_node}")
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

    def node_of(self, index: int) -> str:
        """Worker ``index``'s node ("" without ``gpus_per_node``: its host's name)."""
        return self._placements()[index].node if self.gpus_per_node else ""

    def _placements(self) -> list[GpuAssignment]:
        options = {name.replace("-", "_"): value for name, value in self.engine_options.items()}
        degrees = self.tp_degrees or (int(options.get("tp", "1")),) * self.num_workers
        return pack_nodes(degrees, sum(degrees), self.gpus_per_node)

    def options_for(self, index: int) -> dict[str, str]:
        """Worker ``index``'s engine options: its TP degree, its GPUs (with ``gpus_per_node``),
        and for ``sglang`` its own server (the ``index``-th of a comma-separated ``url``, or its
        launch port)."""
        options = {name.replace("-", "_"): value for name, value in self.engine_options.items()}
        if self.tp_degrees:
            options["tp"] = str(self.tp_degrees[index])
        if self.gpus_per_node:
            gpus = self._placements()[index].gpu_ids
            options["gpu_ids"] = ",".join(str(gpu) for gpu in gpus)
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
