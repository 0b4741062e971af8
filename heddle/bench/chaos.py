"""`heddle bench chaos`: rollouts on a local deployment while processes are SIGKILLed at random.

The deployment: a control plane, the ledger projector (a process of its own), sim workers, tool
executors and a trainer (``heddle bench chaos-trainer``, ``heddle.bench.chaos_trainer``:
``HeddleClient.completions`` of every rollout, recording each trajectory it is handed). Rollouts
run one after another; during each, a seeded schedule SIGKILLs one process of a random kind at
random moments and restarts it as an operator would: the control plane, the projector, a tool
executor and the trainer with their previous arguments, a worker as a new worker (a fresh id: the
control plane replaces the dead one's trajectories once its heartbeats stop). The first kills cover
every kind once.

With ``num_zombies``, workers are also paused (SIGSTOP) past their failure and let run on
(SIGCONT), inside and past the duplicate window (``heddle.bench.chaos_zombies``); with
``num_forgeries``, forged, early and duplicate events are published about the running rollouts
(``heddle.bench.chaos_forgeries``).

At the end the trainer's record is counted against what was submitted: ``lost`` trajectories
never handed to the trainer, ``duplicates`` handed twice to one trainer process (the client
promises once per iteration), and ``redelivered_after_restart``: the trajectory a killed trainer
had in hand, handed again to its successor (the client documents this; ``traj_id`` dedupes it).
A plain durable consumer of the trainer's delivery stream counts the same where trainers read:
``consumer_duplicates`` (records beyond one per trajectory) and ``stuck`` (trajectories with no
terminal record when the run ends). ``forged_accepted``: forgeries the control plane or the
ledger did not refuse. The live ledger is verified against the stream as of its position
(``heddle replay --verify``).

Faults of the bus itself (``heddle.bench.chaos_faults``): ``num_nats_restarts`` restarts of the
nats-server, each down for ``nats_down_s``, spread over the rollouts after their kills; with
``disk_full``, the JetStream store's disk (a small tmpfs) filled right after the middle
rollout's submission and freed once the control plane reported the refusal; the report adds
``nats_restarts`` and ``disk_full``.
"""

from __future__ import annotations

import asyncio
import random
import secrets
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from heddle.bench.chaos_deliveries import delivered
from heddle.bench.chaos_faults import BusFaults, DiskFullReport
from heddle.bench.chaos_forgeries import Forger, refused_by_control_plane, refused_by_ledger
from heddle.bench.chaos_trainer import TRAINER_NAME, count_record
from heddle.bench.chaos_zombies import pause_worker, zombie_pause_s
from heddle.bench.waits import wait_finished, wait_projected
from heddle.bus import Bus, ReplayQuery
from heddle.config import Settings
from heddle.controlplane import ControlPlaneConfig, PredictorConfig
from heddle.events import Completed
from heddle.events.subjects import rollout_filter
from heddle.replay import open_replay
from heddle.rollout.deployment import LocalDeployment
from heddle.rollout.processes import Child
from heddle.rollout.submission import RolloutPlan, trace_specs
from heddle.rollout.submit import submit
from heddle.workloads import generate

KILLED_KINDS = ("control_plane", "projector", "worker", "tool_executor", "trainer")
_POLL_S = 0.2


@dataclass(frozen=True, slots=True)
class ChaosConfig:
    num_rollouts: int = 5
    num_kills: int = 30
    seed: int = 0
    num_trajectories: int = 16
    """Trajectories per rollout."""
    num_workers: int = 3
    num_tool_executors: int = 2
    workload: str = "search"
    time_scale: float = 10.0
    """Model seconds per wall second of the sim engine and the trace tools."""
    min_gap_s: float = 0.5
    max_gap_s: float = 2.5
    """Wall seconds between one restart and the next kill (uniform)."""
    max_restart_delay_s: float = 1.0
    """Wall seconds an operator takes to restart what died (uniform from 0)."""
    worker_timeout_s: float = 3.0
    heartbeat_s: float = 0.5
    rollout_timeout_s: float = 600.0
    num_nats_restarts: int = 0
    """Restarts of the nats-server, spread over the rollouts like the kills."""
    nats_down_s: float = 5.0
    """Wall seconds the nats-server stays down per restart (longer than the worker timeout)."""
    disk_full: bool = False
    """Fill the JetStream store's disk (a tmpfs, root only) right after the middle rollout's
    submission, before its kills and restarts."""
    disk_full_hold_s: float = 5.0
    """Wall seconds the disk stays full after the control plane reports it."""
    store_bytes: int = 256 << 20
    """Size of that tmpfs."""
    num_zombies: int = 0
    """Workers paused past their failure, then let run on (spread over the rollouts)."""
    zombie_long_pause_s: float = 130.0
    """Every second zombie's pause: past the 2-minute duplicate window (0: all short)."""
    num_forgeries: int = 0
    """Forged, early and duplicate events published about the running rollouts."""


@dataclass(frozen=True, slots=True)
class ChaosReport:
    rollouts: int
    kills: int
    completions_expected: int
    completions_received: int
    """Distinct trajectories the trainer was handed."""
    duplicates: int
    lost: int
    ledger_consistent: bool
    kills_by_kind: dict[str, int]
    redelivered_after_restart: int
    stream_duplicate_completions: int
    """Completed events beyond one per trajectory in the stream (the gate refuses them)."""
    ledger_sequence: int
    wall_s: float
    nats_restarts: int = 0
    disk_full: dict[str, Any] | None = None
    """``heddle.bench.chaos_faults.DiskFullReport`` (with ``--disk-full``)."""
    zombies: int = 0
    forgeries: int = 0
    forged_accepted: int = 0
    """Forgeries the control plane or the ledger did not refuse."""
    consumer_duplicates: int = 0
    """Records beyond one per trajectory on a plain durable consumer of the delivery stream."""
    stuck: int = 0
    """Trajectories with no terminal record on that consumer when the run ended."""

    def to_json(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


def kill_schedule(rng: random.Random, num_kills: int) -> list[str]:
    """Every kind once (shuffled) first, then kinds drawn uniformly."""
    first = list(KILLED_KINDS)
    rng.shuffle(first)
    rest = [rng.choice(KILLED_KINDS) for _ in range(max(0, num_kills - len(first)))]
    return (first + rest)[:num_kills]


def kills_per_rollout(num_kills: int, num_rollouts: int) -> list[int]:
    base, extra = divmod(num_kills, num_rollouts)
    return [base + (1 if index < extra else 0) for index in range(num_rollouts)]


@dataclass(slots=True)
class Cluster:
    """The deployment's processes and how an operator restarts each kind."""

    deployment: LocalDeployment
    config: ChaosConfig
    trainer_args: list[str]
    trainer: Child | None = None
    num_workers_started: int = 0
    kills: Counter[str] = field(default_factory=Counter)
    num_zombies: int = 0

    async def start(self) -> None:
        config = self.config
        control = ControlPlaneConfig(
            cost_model="qwen3-8b",
            predictor=PredictorConfig("noisy_oracle"),
            worker_timeout_s=config.worker_timeout_s,
        )
        await self.deployment.start_control_plane(control)
        for _ in range(config.num_workers):
            await self._start_worker()
        await self.deployment.start_tools(config.num_tool_executors, max_in_flight=256)
        self.trainer = await self.deployment.launcher.start("trainer", self.trainer_args)

    async def _start_worker(self) -> None:
        worker_id = f"w{self.num_workers_started:02d}"
        self.num_workers_started += 1
        options = {"time_scale": str(self.config.time_scale), "model": "qwen3-8b"}
        launcher = self.deployment.launcher
        child = await launcher.start_worker(worker_id, "sim", options, self.config.heartbeat_s)
        self.deployment.workers[worker_id] = child

    async def kill_and_restart(self, kind: str, rng: random.Random) -> None:
        victim = self._victim(kind, rng)
        victim.kill()
        await victim.process.wait()
        self.kills[kind] += 1
        await asyncio.sleep(rng.uniform(0.0, self.config.max_restart_delay_s))
        await self._restart(kind, victim)

    def _victim(self, kind: str, rng: random.Random) -> Child:
        deployment = self.deployment
        match kind:
            case "control_plane":
                assert deployment.control_plane is not None
                return deployment.control_plane
            case "projector":
                assert deployment.projector is not None
                return deployment.projector
            case "worker":
                return rng.choice([c for c in deployment.workers.values() if c.is_running])
            case "tool_executor":
                return rng.choice(deployment.tools)
            case "trainer":
                assert self.trainer is not None
                return self.trainer
        raise ValueError(f"unknown process kind {kind!r}")

    async def _restart(self, kind: str, victim: Child) -> None:
        deployment = self.deployment
        launcher = deployment.launcher
        nice = launcher.data_plane_nice
        match kind:
            case "control_plane":
                await deployment.restart_control_plane()
            case "projector":
                deployment.projector = await launcher.start(victim.name, victim.args, nice=nice)
            case "worker":
                deployment.workers = {
                    wid: c for wid, c in deployment.workers.items() if c is not victim
                }
                await self._start_worker()
            case "tool_executor":
                restarted = await launcher.start(victim.name, victim.args, nice=nice)
                deployment.tools = [restarted if c is victim else c for c in deployment.tools]
            case "trainer":
                self.trainer = await launcher.start(victim.name, victim.args)

    async def wait_trainer(self, timeout_s: float) -> None:
        """Until the trainer has iterated every rollout's completions and exited."""
        assert self.trainer is not None
        await asyncio.wait_for(self.trainer.process.wait(), timeout_s)
        if self.trainer.process.returncode != 0:
            raise RuntimeError(f"the trainer exited with {self.trainer.process.returncode}")


async def run_chaos(settings: Settings, config: ChaosConfig, work_dir: Path) -> ChaosReport:
    store_bytes = config.store_bytes if config.disk_full else None
    async with BusFaults(work_dir, settings.nats_store_dir, store_bytes) as faults:
        return await _run_chaos(settings, config, work_dir, faults)


async def _run_chaos(
    settings: Settings, config: ChaosConfig, work_dir: Path, faults: BusFaults
) -> ChaosReport:
    started = time.monotonic()
    rng = random.Random(config.seed)
    tag = secrets.token_hex(3)
    rollout_ids = [f"chaos{config.seed}-{tag}-{index:02d}" for index in range(config.num_rollouts)]
    record = work_dir / "trainer.record"
    trainer_args = ["bench", "chaos-trainer", "--record", str(record), *rollout_ids]
    schedule = kill_schedule(rng, config.num_kills)
    trace = generate(config.workload, config.num_trajectories, seed=config.seed)
    source = f"workload:{config.workload}"
    plan = RolloutPlan("heddle", trace_specs(trace), source, config.time_scale)
    disk_report: DiskFullReport | None = None
    async with Bus(settings) as bus:
        deployment = LocalDeployment(bus, work_dir / "logs")
        cluster = Cluster(deployment, config, trainer_args)
        try:
            await cluster.start()
            restarts = kills_per_rollout(config.num_nats_restarts, config.num_rollouts)
            forger = Forger(bus, rng)
            zombies = kills_per_rollout(config.num_zombies, config.num_rollouts)
            forgeries = kills_per_rollout(config.num_forgeries, config.num_rollouts)
            for index, (rollout_id, num_kills) in enumerate(
                zip(
                    rollout_ids,
                    kills_per_rollout(config.num_kills, config.num_rollouts),
                    strict=True,
                )
            ):
                await submit(bus, plan, rollout_id, trainer=TRAINER_NAME)
                if config.disk_full and index == config.num_rollouts // 2:
                    # Filled right after the submission: the rollout has everything still to
                    # write (filled after its kills and restarts, it could be over already).
                    hold_s, timeout_s = config.disk_full_hold_s, config.rollout_timeout_s
                    disk_report = await faults.disk_full(hold_s, timeout_s)
                for _ in range(num_kills):
                    await asyncio.sleep(rng.uniform(config.min_gap_s, config.max_gap_s))
                    await cluster.kill_and_restart(schedule.pop(0), rng)
                for _ in range(restarts[index]):
                    await asyncio.sleep(rng.uniform(config.min_gap_s, config.max_gap_s))
                    await faults.restart(config.nats_down_s)
                await _zombies(cluster, rng, zombies[index])
                await forger.forge(rollout_id, forgeries[index])
                await wait_finished(bus, rollout_id, config.rollout_timeout_s)
            await cluster.wait_trainer(config.rollout_timeout_s)
            finished_at = await wait_finished(bus, rollout_ids[-1], config.rollout_timeout_s)
            last = max([finished_at, *forger.sequences])
            await wait_projected(settings, last, config.rollout_timeout_s)
            stream_duplicates = await _stream_duplicate_completions(bus, rollout_ids)
            records = await delivered(bus, TRAINER_NAME, "chaos-plain")
            refused = await refused_by_control_plane(
                bus, "control-plane", last, config.rollout_timeout_s
            )
        finally:
            await deployment.stop()
    async with open_replay(settings, live=True) as session:
        verified = await session.verify()
        assert session.live is not None
        refused &= refused_by_ledger(session.live)
    counts = count_record(record)
    expected = config.num_rollouts * config.num_trajectories
    return ChaosReport(
        rollouts=config.num_rollouts,
        kills=sum(cluster.kills.values()),
        completions_expected=expected,
        completions_received=counts.distinct,
        duplicates=counts.duplicates,
        lost=expected - counts.distinct,
        ledger_consistent=verified.consistent,
        kills_by_kind={kind: cluster.kills[kind] for kind in KILLED_KINDS},
        redelivered_after_restart=counts.redelivered,
        stream_duplicate_completions=stream_duplicates,
        ledger_sequence=verified.sequence,
        wall_s=round(time.monotonic() - started, 1),
        nats_restarts=faults.num_restarts,
        disk_full=disk_report.to_json() if disk_report is not None else None,
        zombies=cluster.num_zombies,
        forgeries=len(forger.sequences),
        forged_accepted=len(set(forger.sequences) - refused),
        consumer_duplicates=sum(count - 1 for count in records.values()),
        stuck=expected - len(records),
    )


async def _zombies(cluster: Cluster, rng: random.Random, count: int) -> None:
    for _ in range(count):
        await asyncio.sleep(rng.uniform(cluster.config.min_gap_s, cluster.config.max_gap_s))
        config = cluster.config
        pause_s = zombie_pause_s(
            cluster.num_zombies, config.worker_timeout_s, config.zombie_long_pause_s
        )
        workers = list(cluster.deployment.workers.values())
        if await pause_worker(workers, rng, pause_s):
            cluster.num_zombies += 1


async def _stream_duplicate_completions(bus: Bus, rollout_ids: list[str]) -> int:
    extra = 0
    for rollout_id in rollout_ids:
        query = ReplayQuery(tuple(rollout_filter(rollout_id)))
        completed = Counter(
            [
                record.message.traj_id
                async for record in bus.replay_events(query)
                if isinstance(record.message, Completed)
            ]
        )
        extra += sum(count - 1 for count in completed.values())
    return extra
