"""`heddle replay --verify` beside a live system: three verifications while a rollout runs on a
local deployment (control plane with its projector, sim workers) each answer consistent, and
the live projector loses nothing."""

from __future__ import annotations

import asyncio

import pytest

from heddle.bus import Bus, ReplayQuery
from heddle.config import Settings
from heddle.controlplane import ControlPlaneConfig, PredictorConfig
from heddle.controlplane.projector import catch_up
from heddle.events import RolloutFinished
from heddle.events.subjects import rollout_subject
from heddle.ledger import open_ledger, queries
from heddle.replay import VerifyReport, open_replay
from heddle.rollout.deployment import LocalDeployment, WorkerPool
from heddle.rollout.driver import RunHooks, RunOptions, run_rollout
from heddle.rollout.submission import RolloutPlan, trace_specs
from heddle.workloads import generate

pytestmark = pytest.mark.timeout(300)

TIME_SCALE = 8.0
NUM_TRAJECTORIES = 24
NUM_VERIFICATIONS = 3
VERIFY_DEADLINE_S = 60.0


def options() -> RunOptions:
    trace = generate("search", NUM_TRAJECTORIES, seed=5)
    return RunOptions(
        plan=RolloutPlan("heddle", trace_specs(trace), "workload:search", TIME_SCALE),
        pool=WorkerPool(2, "sim", {"time_scale": str(TIME_SCALE), "model": "qwen3-8b"}),
        control_plane=ControlPlaneConfig(
            cost_model="qwen3-8b", predictor=PredictorConfig("noisy_oracle")
        ),
        timeout_s=200,
        show_progress=False,
    )


async def verify_once(settings: Settings) -> VerifyReport:
    async with open_replay(settings, live=True) as session:
        return await session.verify()


class Verifier:
    """Verifies the live ledger ``NUM_VERIFICATIONS`` times, one after another, from the
    rollout's submission on (each within ``VERIFY_DEADLINE_S``)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.reports: list[VerifyReport] = []
        self.task: asyncio.Task[None] | None = None

    async def start(self, rollout_id: str, deployment: LocalDeployment) -> None:
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        for _ in range(NUM_VERIFICATIONS):
            await asyncio.sleep(1.0)
            report = await asyncio.wait_for(verify_once(self.settings), VERIFY_DEADLINE_S)
            self.reports.append(report)

    async def finish(self) -> list[VerifyReport]:
        assert self.task is not None
        await asyncio.wait_for(self.task, 3 * VERIFY_DEADLINE_S)
        return self.reports


async def finished_at(settings: Settings, rollout_id: str) -> int:
    """Stream sequence of the rollout's ``RolloutFinished``."""
    async with Bus(settings) as bus:
        query = ReplayQuery((rollout_subject(rollout_id, ">"),))
        records = [r async for r in bus.replay_events(query)]
    [finish] = [r.stream_sequence for r in records if isinstance(r.message, RolloutFinished)]
    return finish


@pytest.mark.slow
async def test_verify_beside_a_running_rollout_is_consistent(settings: Settings) -> None:
    verifier = Verifier(settings)
    result = await run_rollout(settings, options(), RunHooks(on_submitted=verifier.start))
    reports = await verifier.finish()
    assert result.summary.num_completed == NUM_TRAJECTORIES
    assert [report.consistent for report in reports] == [True] * NUM_VERIFICATIONS, [
        report.mismatches for report in reports
    ]
    sequences = [report.sequence for report in reports]
    finish = await finished_at(settings, result.rollout_id)
    # Each compared the live ledger as of a position the projector had reached mid-rollout.
    assert sequences[0] > 0 and all(sequence < finish for sequence in sequences), (
        sequences,
        finish,
    )
    assert sorted(sequences) == sequences
    # The live projector lost nothing: caught up, it equals a rebuild of the whole stream.
    live = open_ledger(settings.ledger_url)
    async with Bus(settings) as bus:
        await catch_up(bus, live)
        last = (await bus.stream_state()).last_sequence
    [position] = queries.positions(live)
    live.close()
    final = await verify_once(settings)
    assert final.consistent, final.mismatches
    assert final.sequence == last == position.stream_sequence
    assert position.num_events == final.events + final.skipped_messages
