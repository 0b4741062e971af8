"""``heddle bench cluster``: one rollout on a single server, then on a 3-node JetStream cluster
(R3 streams) undisturbed, with a node SIGKILLed mid-rollout, and with the events stream's leader
SIGKILLed while the ledger projects.

Each run starts a fresh deployment of processes (control plane, ledger projector as its own
process, sim workers, tool executors, a trainer process reading ``HeddleClient.completions``)
on fresh servers, all given every node's URL. When a quarter of the trajectories have reached
the trainer (``kill_at_fraction``), the bench reads ``HEDDLE_EVENTS`` whole (the events
acknowledged so far: JetStream acknowledges a replicated publish once a majority stored it),
then kills the node (a run with a fault) and restarts it ``restart_after_s`` later on the same
store. After the rollout the stream is read again: ``lost`` counts acknowledged events that are
missing or changed (same sequence, subject and bytes expected). The trainer's record gives
``completions_received`` and ``duplicates``, ``heddle replay --verify``'s check gives
``ledger_consistent``, and a poller of the stream's leader counts ``leader_changes``.
Makespans are wall seconds from submission to ``RolloutFinished`` at the same time scale.
"""

from __future__ import annotations

import asyncio
import random
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from heddle.bench.chaos_trainer import count_record
from heddle.bench.stream_watch import LeaderWatcher, read_stream, wait_leader
from heddle.bench.waits import wait_finished, wait_projected
from heddle.bus import Bus, BusOptions, EmbeddedNatsServer
from heddle.bus.cluster import LoopbackCluster
from heddle.config import Settings
from heddle.controlplane import ControlPlaneConfig, PredictorConfig
from heddle.replay import open_replay
from heddle.rollout.deployment import LocalDeployment, WorkerPool
from heddle.rollout.processes import Child
from heddle.rollout.submission import RolloutPlan, trace_specs
from heddle.rollout.submit import submit
from heddle.workloads import generate

RunKind = Literal["single", "cluster", "node_kill", "leader_kill"]
RUN_KINDS: tuple[RunKind, ...] = ("single", "cluster", "node_kill", "leader_kill")
_POLL_S = 0.2


@dataclass(frozen=True, slots=True)
class ClusterBenchConfig:
    num_trajectories: int = 48
    num_workers: int = 3
    num_tool_executors: int = 2
    workload: str = "search"
    time_scale: float = 10.0
    """Model seconds per wall second of the sim engine and the trace tools."""
    seed: int = 0
    kill_at_fraction: float = 0.3
    """When the node dies: this share of the single-server run's makespan after submission
    (without a single-server run: once this share of the completions reached the trainer)."""
    restart_after_s: float = 3.0
    """Wall seconds the killed node stays down."""
    heartbeat_s: float = 0.5
    worker_timeout_s: float = 10.0
    """Longer than a client's fail-over to another node, so no worker is declared failed."""
    timeout_s: float = 600.0


@dataclass(frozen=True, slots=True)
class RunReport:
    run: RunKind
    num_replicas: int
    killed_node: str
    """Name of the SIGKILLed node ('' without a fault)."""
    acked_events: int
    """Events in ``HEDDLE_EVENTS`` when the node was killed (acknowledged to their publishers)."""
    events_in_stream_after: int
    """Of those, how many the stream holds unchanged after the rollout."""
    lost: int
    completions_expected: int
    completions_received: int
    duplicates: int
    ledger_consistent: bool
    leader_changes: int
    makespan_s: float
    """Wall seconds from submission to ``RolloutFinished``."""
    trainer_done_s: float
    """Wall seconds from submission until the trainer had every completion (a completion
    delivered to a connection that died comes again after the consumer's ack wait)."""
    events_total: int
    failed_processes: list[str]
    """Children that exited with an error during the run (none expected: a client rides out
    a node's death by reconnecting to another)."""

    def to_json(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


@dataclass(slots=True)
class _Servers:
    """The NATS of one run: a single embedded server or a loopback cluster."""

    single: EmbeddedNatsServer | None = None
    cluster: LoopbackCluster | None = None

    @property
    def url(self) -> str:
        if self.cluster is not None:
            return self.cluster.url
        assert self.single is not None
        return self.single.url

    def stop(self) -> None:
        if self.cluster is not None:
            self.cluster.stop()
        if self.single is not None:
            self.single.stop()


async def run_bench(
    config: ClusterBenchConfig, work_dir: Path, kinds: tuple[RunKind, ...] = RUN_KINDS
) -> dict[str, Any]:
    """Every run of ``kinds`` in order, and each cluster run's makespan over the single one's."""
    reports: list[RunReport] = []
    for kind in kinds:
        single = next((r for r in reports if r.run == "single"), None)
        kill_after_s = config.kill_at_fraction * single.makespan_s if single else None
        reports.append(await run_cluster_once(config, work_dir / kind, kind, kill_after_s))
    single = next((r for r in reports if r.run == "single"), None)
    ratios = {
        r.run: round(r.makespan_s / single.makespan_s, 3)
        for r in reports
        if single is not None and r.run != "single" and single.makespan_s > 0
    }
    return {
        "runs": [report.to_json() for report in reports],
        "makespan_ratio_vs_single": ratios,
        "config": {name: getattr(config, name) for name in config.__dataclass_fields__},
    }


async def run_cluster_once(
    config: ClusterBenchConfig, work_dir: Path, kind: RunKind, kill_after_s: float | None = None
) -> RunReport:
    """One run; the fault (and the read of the acknowledged events) comes ``kill_after_s``
    after submission, or, when None, once ``kill_at_fraction`` of the completions arrived."""
    servers = await asyncio.to_thread(_start_servers, work_dir, kind)
    try:
        settings = Settings(nats_url=servers.url, data_dir=work_dir / "data")
        async with Bus(settings, BusOptions(name="heddle-bench-cluster")) as bus:
            report = await _rollout(bus, config, work_dir, kind, servers.cluster, kill_after_s)
        async with open_replay(settings, live=True) as session:
            verified = await session.verify()
        return _with(report, ledger_consistent=verified.consistent)
    finally:
        await asyncio.to_thread(servers.stop)


def _start_servers(work_dir: Path, kind: RunKind) -> _Servers:
    if kind == "single":
        return _Servers(single=EmbeddedNatsServer(work_dir / "nats").start())
    return _Servers(cluster=LoopbackCluster(work_dir / "cluster").start())


@dataclass(slots=True)
class _Observed:
    acked: dict[int, tuple[str, bytes]]
    killed_node: str = ""


async def _rollout(
    bus: Bus,
    config: ClusterBenchConfig,
    work_dir: Path,
    kind: RunKind,
    cluster: LoopbackCluster | None,
    kill_after_s: float | None,
) -> RunReport:
    rollout_id = f"cluster-{kind.replace('_', '-')}-{secrets.token_hex(3)}"
    record = work_dir / "trainer.record"
    trace = generate(config.workload, config.num_trajectories, seed=config.seed)
    source = f"workload:{config.workload}"
    plan = RolloutPlan("heddle", trace_specs(trace), source, config.time_scale)
    deployment = LocalDeployment(bus, work_dir / "logs")
    watcher = LeaderWatcher(bus) if cluster is not None else None
    try:
        trainer = await _start(deployment, config, record, rollout_id)
        if watcher is not None:
            watcher.start()
        started = time.monotonic()
        await submit(bus, plan, rollout_id)
        if kill_after_s is not None:
            await asyncio.sleep(kill_after_s)
        else:
            threshold = max(1, round(config.kill_at_fraction * config.num_trajectories))
            await _wait_received(record, threshold, trainer, config.timeout_s)
        observed = _Observed(await read_stream(bus))
        if cluster is not None and kind in ("node_kill", "leader_kill"):
            observed.killed_node = await _kill_and_restart(bus, cluster, kind, config)
        finished_at = await wait_finished(bus, rollout_id, config.timeout_s)
        makespan_s = time.monotonic() - started
        await asyncio.wait_for(trainer.process.wait(), config.timeout_s)
        trainer_done_s = time.monotonic() - started
        await wait_projected(bus.settings, finished_at, config.timeout_s)
        after = await read_stream(bus)
        failed = [c.name for c in deployment.launcher.exited() if c.process.returncode != 0]
    finally:
        if watcher is not None:
            await watcher.stop()
        await deployment.stop()
    kept = sum(1 for seq, value in observed.acked.items() if after.get(seq) == value)
    counts = count_record(record)
    received, duplicates = counts.distinct, counts.duplicates + counts.redelivered
    return RunReport(
        run=kind,
        num_replicas=bus.num_replicas,
        killed_node=observed.killed_node,
        acked_events=len(observed.acked),
        events_in_stream_after=kept,
        lost=len(observed.acked) - kept,
        completions_expected=config.num_trajectories,
        completions_received=received,
        duplicates=duplicates,
        ledger_consistent=False,
        leader_changes=watcher.num_changes if watcher is not None else 0,
        makespan_s=round(makespan_s, 2),
        trainer_done_s=round(trainer_done_s, 2),
        events_total=len(after),
        failed_processes=failed,
    )


async def _start(
    deployment: LocalDeployment, config: ClusterBenchConfig, record: Path, rollout_id: str
) -> Child:
    control = ControlPlaneConfig(
        cost_model="qwen3-8b",
        predictor=PredictorConfig("noisy_oracle"),
        worker_timeout_s=config.worker_timeout_s,
    )
    await deployment.start_control_plane(control)
    options = {"time_scale": str(config.time_scale), "model": "qwen3-8b"}
    pool = WorkerPool(config.num_workers, "sim", options, heartbeat_s=config.heartbeat_s)
    await deployment.start_workers(pool)
    await deployment.start_tools(config.num_tool_executors, max_in_flight=256)
    args = ["bench", "chaos-trainer", "--record", str(record), rollout_id]
    return await deployment.launcher.start("trainer", args, role="trainer")


async def _kill_and_restart(
    bus: Bus, cluster: LoopbackCluster, kind: RunKind, config: ClusterBenchConfig
) -> str:
    """SIGKILL the events stream's leader (``leader_kill``) or a seeded other node, restart it
    after ``restart_after_s``; the node's name."""
    leader = await wait_leader(bus)
    if kind == "leader_kill":
        victim = cluster.index_of(leader)
    else:
        others = [index for index, name in enumerate(cluster.names) if name != leader]
        victim = random.Random(config.seed).choice(others)
    cluster.kill(victim)
    await asyncio.sleep(config.restart_after_s)
    await asyncio.to_thread(cluster.restart, victim)
    return cluster.names[victim]


async def _wait_received(record: Path, count: int, trainer: Child, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while count_record(record).distinct < count:
        if not trainer.is_running and count_record(record).distinct < count:
            raise RuntimeError(f"the trainer exited early; log {trainer.log_path}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"fewer than {count} completions within {timeout_s:g} s")
        await asyncio.sleep(_POLL_S)


def _with(report: RunReport, *, ledger_consistent: bool) -> RunReport:
    from dataclasses import replace

    return replace(report, ledger_consistent=ledger_consistent)
