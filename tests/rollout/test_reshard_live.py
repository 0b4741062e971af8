"""A re-shard in a live rollout, with real processes over a real nats-server: four TP1 sim
workers of one node; once the short trajectories are done, the control plane merges the node
into one TP4 worker (three retire, the fourth relaunches), the stragglers' interrupted output is
kept and their steps end on the TP4 worker; every trajectory completes once, a trainer gets each
once, and the ledger verifies against a replay of the stream."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from heddle.bus import Bus, ReplayQuery
from heddle.client import HeddleClient
from heddle.config import Settings
from heddle.control.gate import EventGate
from heddle.controlplane import ControlPlaneConfig, PredictorConfig
from heddle.controlplane.projector import catch_up
from heddle.events import (
    Completed,
    Event,
    Generated,
    GenerationInterrupted,
    ReshardRequested,
    TrajectoryPlaced,
    WorkerRegistered,
    WorkerRetired,
)
from heddle.events.subjects import rollout_filter
from heddle.ledger import open_ledger
from heddle.replay import open_replay
from heddle.rollout.deployment import LocalDeployment, WorkerPool
from heddle.rollout.driver import RunHooks, RunOptions, run_rollout
from heddle.rollout.submission import RolloutPlan, trace_specs
from heddle.rollout.submit import CLI_TRAINER
from heddle.traces import TraceStep, TraceTrajectory

pytestmark = pytest.mark.timeout(300)

TIME_SCALE = 40.0
NUM_WORKERS = 4
NUM_LONG = 2


def trace() -> list[TraceTrajectory]:
    """Two long trajectories (6 steps of 4000 tokens) among ten short ones (3 steps of 150)."""
    trajectories = []
    for index in range(12):
        tokens, num_steps = (4000, 6) if index < NUM_LONG else (150, 3)
        steps = [TraceStep(output_tokens=tokens, tool_s=0.5, tool_output_tokens=50)] * num_steps
        trajectories.append(TraceTrajectory(id=f"t{index}", prompt_tokens=300, steps=steps))
    return trajectories


def options() -> RunOptions:
    return RunOptions(
        plan=RolloutPlan("heddle", trace_specs(trace()), "reshard", TIME_SCALE),
        pool=WorkerPool(
            NUM_WORKERS,
            "sim",
            {"time_scale": str(TIME_SCALE), "model": "qwen3-32b", "restart_s": "30"},
            gpus_per_node=NUM_WORKERS,
        ),
        control_plane=ControlPlaneConfig(
            cost_model="qwen3-32b", predictor=PredictorConfig("oracle")
        ),
        timeout_s=240,
        show_progress=False,
    )


class Trainer:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.traj_ids: list[str] = []
        self.task: asyncio.Task[None] | None = None

    async def start(self, rollout_id: str, deployment: LocalDeployment) -> None:
        self.task = asyncio.create_task(self._collect(rollout_id))

    async def _collect(self, rollout_id: str) -> None:
        async with HeddleClient(self.settings, trainer=CLI_TRAINER) as client:
            async for trajectory in client.completions(rollout_id):
                self.traj_ids.append(trajectory.traj_id)

    async def finish(self) -> list[str]:
        assert self.task is not None
        await asyncio.wait_for(self.task, 60)
        return self.traj_ids


async def stream(settings: Settings, rollout_id: str) -> list[Event]:
    async with Bus(settings) as bus:
        subjects = (*rollout_filter(rollout_id), "heddle.evt.worker.>")
        query = ReplayQuery(filter_subjects=subjects)
        return [record.message async for record in bus.replay_events(query)]


async def test_a_node_of_stragglers_is_merged_mid_rollout_and_nothing_is_lost(
    settings: Settings,
) -> None:
    trainer = Trainer(settings)
    result = await run_rollout(settings, options(), RunHooks(on_submitted=trainer.start))
    summary = result.summary
    assert summary.num_completed == 12 and summary.num_failed == 0
    assert sorted(await trainer.finish()) == [f"t{i:06d}" for i in range(12)]  # once each

    events = await stream(settings, result.rollout_id)
    (request,) = [e for e in events if isinstance(e, ReshardRequested)]
    assert request.tp_degree == NUM_WORKERS and request.gpu_ids == list(range(NUM_WORKERS))
    retired = {e.worker_id for e in events if isinstance(e, WorkerRetired)}
    assert retired == set(request.member_worker_ids) - {request.worker_id}
    relaunched = [
        e for e in events if isinstance(e, WorkerRegistered) and e.worker_id == request.worker_id
    ]
    assert [e.tp_degree for e in relaunched] == [1, NUM_WORKERS]
    completions = Counter(e.traj_id for e in events if isinstance(e, Completed))
    assert set(completions.values()) == {1} and len(completions) == 12
    # Every step's output is whole, interrupted or not (the trace's lengths), and the
    # stragglers' last steps ran on the merged worker.
    specs = {f"t{i:06d}": t for i, t in enumerate(trace())}
    for event in events:
        if isinstance(event, Generated):
            expected = specs[event.traj_id].steps[event.step].output_tokens
            assert len(event.output_token_ids) == expected
    last = {e.traj_id: e.worker_id for e in events if isinstance(e, Generated)}
    assert {last[f"t{i:06d}"] for i in range(NUM_LONG)} == {request.worker_id}
    interrupted = [e for e in events if isinstance(e, GenerationInterrupted)]
    t0 = min(e.occurred_at for e in events)
    for e in events:
        if getattr(e, "traj_id", "") in ("t000000", "t000001") or e.family == "worker":
            print(
                "EV",
                round(e.occurred_at - t0, 2),
                type(e).__name__,
                getattr(e, "traj_id", ""),
                getattr(e, "step", ""),
                getattr(e, "worker_id", ""),
                len(getattr(e, "output_token_ids", [])),
            )
    assert interrupted and all(e.output_token_ids for e in interrupted)
    # The hand-over passes the event gate: each member's interrupted output under the hosting
    # it held, the leader's events under the new hosting its re-shard placement granted.
    gate = EventGate()
    verdicts = [(e, gate.admit(e)) for e in events]
    assert [(e, v.refusal) for e, v in verdicts if not v.is_accepted] == []
    moved = [e for e in events if isinstance(e, TrajectoryPlaced) and e.reason == "reshard"]
    assert moved and all(e.epoch > 1 for e in moved)

    live = open_ledger(settings.ledger_url)
    try:
        async with Bus(settings) as bus:
            await catch_up(bus, live)
    finally:
        live.close()
    async with open_replay(settings, live=True) as session:
        report = await session.verify()
    assert report.consistent, report.mismatches
