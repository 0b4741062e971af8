"""Forged, duplicated, early and late events fed into real rollouts (in one process: the control
plane with its projector, two sim workers, a tool executor; a high time scale): the real
trajectories complete exactly once, and the trainer's records and the ledger equal a clean
run's, whatever hypothesis injects and when.

Each example runs one rollout of the same trace and injects its disturbances at three moments:
once the trajectories are placed (early), after the first completion (mid) and after the
rollout finished (late). A disturbance is one of the chaos bench's forgeries
(``heddle.bench.chaos_forgeries``: unknown ids, stale hostings, a writer that holds nothing, a
result for a future step, a step again, an unread version, a negative count, extra submissions,
a stored event written again under another id). What a run yields is compared without what
varies between runs of the same trace (ids of the rollout, wall times, the sim engine's
pseudo-token values: their counts and masks are compared).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from waiting import until

from heddle.bench.chaos_forgeries import FORGERIES, Seen, seen_of
from heddle.bench.waits import wait_finished, wait_projected
from heddle.bus import Bus
from heddle.bus.server import EmbeddedNatsServer
from heddle.client import HeddleClient
from heddle.config import Settings
from heddle.controlplane import ControlPlaneConfig, PredictorConfig
from heddle.events import Completed
from heddle.ledger import open_ledger, queries
from heddle.rollout.inprocess import InProcessDeployment, InProcessOptions
from heddle.traces import TraceStep, TraceTrajectory

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

TIME_SCALE = 2000.0
MOMENTS = ("early", "mid", "late")
TRACE = [
    TraceTrajectory(
        id=f"x{index}",
        group=f"p{index // 2}",
        prompt_tokens=12 + index,
        steps=[
            TraceStep(output_tokens=20 + 4 * index, tool_s=1.0, tool_output_tokens=5),
            TraceStep(output_tokens=9),
        ],
    )
    for index in range(4)
]


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a rollout yields that does not vary between runs of the same trace."""

    records: tuple[tuple[object, ...], ...]
    """The trainer's records, by trajectory."""
    rows: tuple[tuple[object, ...], ...]
    """The ledger's trajectory rows, by trajectory."""
    rollout: tuple[object, ...]
    """The ledger's rollout row."""


@dataclass(slots=True)
class Live:
    loop: asyncio.AbstractEventLoop
    settings: Settings
    clean: Outcome
    rollouts_before: frozenset[str]


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    folder = tmp_path_factory.mktemp("forged")
    loop = asyncio.new_event_loop()
    with EmbeddedNatsServer(folder / "nats") as server:
        settings = Settings(nats_url=server.url, data_dir=folder / "data")
        control = ControlPlaneConfig(predictor=PredictorConfig("oracle"), worker_timeout_s=30.0)
        options = InProcessOptions(
            num_workers=2, engine_options={"time_scale": str(TIME_SCALE)}, control_plane=control
        )
        deployment = InProcessDeployment(settings, options)
        loop.run_until_complete(deployment.__aenter__())
        try:
            clean = loop.run_until_complete(run(settings, {}))
            live = Live(loop, settings, clean, frozenset(ledger_rollouts(settings)))
            yield live
        finally:
            loop.run_until_complete(deployment.__aexit__(None, None, None))
            loop.close()


Disturbances = dict[str, list[tuple[int, int]]]
"""Moment -> (forgery kind, seed) of each event injected then."""

disturbances = st.dictionaries(
    st.sampled_from(MOMENTS),
    st.lists(
        st.tuples(st.integers(0, len(FORGERIES) - 1), st.integers(0, 2**16)),
        min_size=1,
        max_size=6,
    ),
    min_size=1,
)


async def run(settings: Settings, injected: Disturbances) -> Outcome:
    """One rollout of ``TRACE``, the disturbances injected at their moments."""
    async with HeddleClient(settings) as client:
        bus = client.bus
        rollout_id = await client.submit(trace=TRACE, time_scale=TIME_SCALE)
        forged: list[int] = []
        await until_placed(bus, rollout_id)
        forged += await inject(bus, rollout_id, injected.get("early", []))
        records: list[Completed] = []
        async with asyncio.timeout(120):
            async for trajectory in client.completions(rollout_id):
                records.append(trajectory)
                if len(records) == 1:
                    forged += await inject(bus, rollout_id, injected.get("mid", []))
        finished = await wait_finished(bus, rollout_id, 60)
        forged += await inject(bus, rollout_id, injected.get("late", []))
        await wait_projected(settings, max([finished, *forged]), 60)
    return outcome(settings, rollout_id, records)


async def until_placed(bus: Bus, rollout_id: str) -> None:
    async def is_placed() -> bool:
        return len((await seen_of(bus, rollout_id)).holders) == len(TRACE)

    await until(is_placed, "every trajectory placed", 60)


async def inject(bus: Bus, rollout_id: str, kinds: list[tuple[int, int]]) -> list[int]:
    """Publish the forgeries about the rollout as it stands; their stream sequences."""
    seen: Seen = await seen_of(bus, rollout_id)
    sequences = []
    for number, (kind, seed) in enumerate(kinds):
        event = FORGERIES[kind](seen, random.Random(seed), f"forged-{rollout_id}-{number}")
        sequences.append((await bus.publish(event)).sequence)
    return sequences


def outcome(settings: Settings, rollout_id: str, records: list[Completed]) -> Outcome:
    ledger = open_ledger(settings.ledger_url)
    try:
        rows = queries.trajectories(ledger, rollout_id)
        summary = queries.rollout_totals(ledger, rollout_id)
    finally:
        ledger.close()
    assert summary is not None and summary.rollout is not None
    row = summary.rollout
    return Outcome(
        records=tuple(
            sorted(
                (
                    t.traj_id, t.group_id, t.index, t.num_steps, t.num_output_tokens,
                    len(t.prompt_token_ids), len(t.response_token_ids), tuple(t.loss_mask),
                    t.reward, t.finish_reason, t.worker_id != "",
                )
                for t in records
            )
        ),
        rows=tuple(
            sorted(
                (
                    r.traj_id, r.status, r.num_steps, r.num_output_tokens, r.num_tool_calls,
                    r.num_prompt_tokens, r.reward, r.finish_reason,
                )
                for r in rows
            )
        ),
        rollout=(row.status, row.num_trajectories, row.num_completed, row.num_failed,
                 row.num_output_tokens),
    )  # fmt: skip


def ledger_rollouts(settings: Settings) -> list[str]:
    ledger = open_ledger(settings.ledger_url)
    try:
        return queries.rollout_ids(ledger)
    finally:
        ledger.close()


@settings(
    max_examples=4,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(injected=disturbances)
def test_forged_early_and_late_events_change_nothing(live: Live, injected: Disturbances) -> None:
    before = set(ledger_rollouts(live.settings))
    disturbed = live.loop.run_until_complete(run(live.settings, injected))
    assert disturbed == live.clean
    assert len(disturbed.records) == len(TRACE)  # each real trajectory once
    # No phantom rollout: only the one this example submitted is new in the ledger.
    assert len(set(ledger_rollouts(live.settings)) - before) == 1


def test_the_clean_run_completes_every_trajectory(live: Live) -> None:
    assert len(live.clean.records) == len(TRACE)
    assert live.clean.rollout[:4] == ("finished", len(TRACE), len(TRACE), 0)
    assert Path(live.settings.data_dir).exists()
