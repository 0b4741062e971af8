"""The live projector against a real nats-server: catch-up, poison messages, and a projector
process SIGKILLed at random points that still ends with exactly the from-scratch ledger."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import sqlite3
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from waiting import until

from heddle.bus import Bus, EmbeddedNatsServer
from heddle.config import Settings
from heddle.controlplane.projector import Projector, ProjectorConfig, catch_up
from heddle.controlplane.projector_gaps import batch_start, subject_matches
from heddle.events import EventT
from heddle.events.subjects import EVENTS_STREAM, trajectory_subject
from heddle.ledger import Ledger, open_ledger, queries
from heddle.ledger.compare import compare_ledgers
from heddle.ledger.lean_decoder import decode_event_lean
from heddle.ledger.rows import DeadLetterRow
from heddle.replay import rebuild_ledger

from .lifecycle import everything, rollout_events, worker_events


@pytest.fixture
async def bus(nats_url: str, tmp_path: Path) -> AsyncIterator[Bus]:
    async with Bus(Settings(nats_url=nats_url, data_dir=tmp_path)) as connected:
        yield connected


async def rebuilt(bus: Bus, tmp_path: Path) -> Ledger:
    fresh = open_ledger(f"sqlite:///{tmp_path / 'rebuilt.db'}")
    await rebuild_ledger(bus, fresh)
    return fresh


async def test_catch_up_projects_everything_once(bus: Bus, ledger: Ledger, tmp_path: Path) -> None:
    events = everything()
    await bus.publish_many(events)
    config = ProjectorConfig(batch_size=16, fetch_wait_s=0.2)
    first = await catch_up(bus, ledger, config)
    assert (first.num_projected, first.position) == (len(events), len(events))
    await bus.publish_many(rollout_events("r9", num_trajectories=2))
    second = await catch_up(bus, ledger, config)
    assert second.num_projected == len(rollout_events("r9", num_trajectories=2))
    assert (await catch_up(bus, ledger, config)).num_projected == 0
    reference = await rebuilt(bus, tmp_path)
    assert compare_ledgers(ledger, reference).mismatches == []
    reference.close()


async def test_poison_messages_end_in_dead_letters(bus: Bus, ledger: Ledger) -> None:
    await bus.publish_many(worker_events())
    subject = trajectory_subject("r1", "t000000", "generated")
    await bus.publish_raw(subject, b'{"kind": "traj.generated"}', "incomplete")
    await bus.publish_many(rollout_events("r1"))
    stats = await catch_up(bus, ledger, ProjectorConfig(batch_size=8, fetch_wait_s=0.2))
    assert stats.num_dead_lettered == 1
    [letter] = queries.dead_letters(ledger)
    assert letter.consumer.startswith("ledger-catchup-") and letter.subject == subject
    assert "missing required field" in letter.reason
    summary = queries.rollout_totals(ledger, "r1")
    assert summary is not None and summary.num_trajectories == 3


@pytest.mark.parametrize("gather_s", [0.0, 1.0])
async def test_a_live_stream_is_written_in_batches_when_the_projector_gathers(
    bus: Bus, ledger: Ledger, tmp_path: Path, gather_s: float
) -> None:
    """Events published one at a time: a projector that gathers for ``gather_s`` writes them
    in a few transactions (a gather ends early with the pull request it waits on, which
    lingers ``fetch_wait_s``); every event is projected once either way. (How far it trails
    the stream is a figure of docs/benchmarks.md, not asserted here: a loaded machine
    stretches it.)"""
    events = rollout_events("live", num_trajectories=3, num_steps=3)
    projector = Projector(
        bus, ledger, ProjectorConfig(batch_size=len(events), fetch_wait_s=3.0, gather_s=gather_s)
    )
    running = asyncio.create_task(projector.run())
    await until(lambda: _has_durable(bus), "the projector's durable", 60)
    for event in events:
        await bus.publish(event)
        await asyncio.sleep(0.01)
    await until(lambda: _projected(ledger) >= len(events), "every event projected", 120)
    projector.stop()
    stats = await running
    assert stats.num_projected == len(events)
    if gather_s:
        # A few transactions (3 on an idle machine): far fewer than one per event, however
        # slowly a loaded machine publishes them.
        assert stats.num_batches <= len(events) // 4
    reference = await rebuilt(bus, tmp_path)
    assert compare_ledgers(ledger, reference).mismatches == []
    reference.close()


async def _has_durable(bus: Bus) -> bool:
    return await bus.consumer_state(EVENTS_STREAM, ProjectorConfig().consumer) is not None


def _projected(ledger: Ledger) -> int:
    return max((position.stream_sequence for position in queries.positions(ledger)), default=0)


def big_history(num_trajectories: int, num_steps: int) -> list[EventT]:
    events: list[EventT] = worker_events()
    for index in range(num_trajectories // 50):
        events += rollout_events(f"k{index}", num_trajectories=50, num_steps=num_steps)
    return events


@pytest.mark.slow
async def test_killed_projector_process_loses_and_repeats_nothing(tmp_path: Path) -> None:
    rng = random.Random(2024)
    ledger_url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with EmbeddedNatsServer(tmp_path / "nats") as server:
        settings = Settings(nats_url=server.url, data_dir=tmp_path)
        async with Bus(settings) as bus:
            events = big_history(num_trajectories=600, num_steps=8)
            assert len(events) >= 20_000
            await bus.publish_many(events)
            positions = []
            targets = sorted(rng.uniform(0.05, 0.9) * len(events) for _ in range(4))
            for target in targets:
                process = await _start_projector(server.url, ledger_url)
                await asyncio.to_thread(_wait_for_position, ledger_url, target, process.pid)
                await asyncio.sleep(rng.uniform(0.0, 0.05))
                process.send_signal(signal.SIGKILL)
                await process.wait()
                positions.append(_position(ledger_url))
            final = await _start_projector(server.url, ledger_url, until_idle=True)
            assert await asyncio.wait_for(final.wait(), 200) == 0
            live = open_ledger(ledger_url)
            reference = await rebuilt(bus, tmp_path)
            comparison = compare_ledgers(live, reference)
            [position] = queries.positions(live)
            live.close()
            reference.close()
    assert all(0 < seen < len(events) for seen in positions), positions
    assert comparison.mismatches == []
    assert position.stream_sequence == len(events)
    assert position.num_events == len(events)


async def _start_projector(
    nats_url: str, ledger_url: str, *, until_idle: bool = False
) -> asyncio.subprocess.Process:
    command = [
        sys.executable,
        "-m",
        "heddle.controlplane.projector_process",
        "--nats-url",
        nats_url,
        "--database-url",
        ledger_url,
        "--batch-size",
        "250",
    ]
    if until_idle:
        command.append("--until-idle")
    return await asyncio.create_subprocess_exec(
        *command,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
        env=os.environ.copy(),
    )


def _wait_for_position(ledger_url: str, target: float, pid: int) -> None:
    """Block until the projector has committed past ``target`` (or its process, when ``pid``
    is not 0, has exited)."""
    deadline = time.monotonic() + 150  # generous: the machine may be loaded
    while _position(ledger_url) < target and time.monotonic() < deadline:
        if pid and not Path(f"/proc/{pid}").exists():
            return
        time.sleep(0.01)


def _position(ledger_url: str) -> int:
    """The projector's committed position, read without touching the schema (the projector
    may be creating it)."""
    path = Path(ledger_url.removeprefix("sqlite:///"))
    if not path.exists():
        return 0
    with contextlib.closing(sqlite3.connect(path)) as connection:
        try:
            row = connection.execute("SELECT stream_sequence FROM consumer_positions").fetchone()
        except sqlite3.OperationalError:
            return 0
    return int(row[0]) if row else 0


async def test_two_projectors_at_once_still_project_everything_once(
    bus: Bus, ledger: Ledger, tmp_path: Path
) -> None:
    """Both take messages from the same durable and write through the same position: the
    compare-and-set, the writer's refusal of a batch that skips ahead and the runners'
    delivery-continuity check keep the ledger exact."""
    events = big_history(num_trajectories=150, num_steps=3)
    await bus.publish_many(events)
    reference = await rebuilt(bus, tmp_path)
    misses = await _race_two_projectors(bus, ledger, reference, len(events))
    reference.close()
    assert misses == []


@pytest.mark.benchmark  # 2-5 minutes: run with `pytest -m benchmark` (issue 14's repeat)
@pytest.mark.slow
async def test_two_projectors_race_fifty_times_without_a_miss(bus: Bus, tmp_path: Path) -> None:
    """The race of issue 2's closing note, repeated: a batch beyond the position committed
    first, and the batch in between then skipped as "already projected". 50 fresh ledgers
    (SQLite), each projected by two projectors sharing one durable."""
    events = big_history(num_trajectories=100, num_steps=2)
    await bus.publish_many(events)
    reference = await rebuilt(bus, tmp_path)
    misses: list[str] = []
    for attempt in range(50):
        ledger = open_ledger(f"sqlite:///{tmp_path / f'race-{attempt}.db'}")
        try:
            misses += [
                f"#{attempt}: {miss}"
                for miss in await _race_two_projectors(
                    bus, ledger, reference, len(events), batch_size=40
                )
            ]
        finally:
            ledger.close()
    reference.close()
    assert misses == []


async def _race_two_projectors(
    bus: Bus, ledger: Ledger, reference: Ledger, num_events: int, *, batch_size: int = 100
) -> list[str]:
    """Run two projectors on one durable until idle; what differs from ``reference``."""
    config = ProjectorConfig(batch_size=batch_size, fetch_wait_s=0.2, nak_delay_s=0.05)
    first, second = Projector(bus, ledger, config), Projector(bus, ledger, config)
    runs = asyncio.gather(first.run(until_idle=True), second.run(until_idle=True))
    await asyncio.wait_for(runs, 120)
    # Both stopped once the durable had nothing pending; a catch-up would hide a miss (it
    # resumes from the position), so the ledger is compared as the two left it.
    misses = compare_ledgers(ledger, reference).mismatches
    [position] = queries.positions(ledger)
    if (position.stream_sequence, position.num_events) != (num_events, num_events):
        misses.append(f"position {position.stream_sequence} after {position.num_events} events")
    return misses


async def test_projector_carries_on_across_a_nats_restart(tmp_path: Path) -> None:
    server = EmbeddedNatsServer(tmp_path / "nats").start()
    ledger_url = f"sqlite:///{tmp_path / 'ledger.db'}"
    ledger = open_ledger(ledger_url)
    try:
        async with Bus(Settings(nats_url=server.url, data_dir=tmp_path)) as bus:
            before = rollout_events("before", num_trajectories=20)
            await bus.publish_many(before)
            projector = Projector(bus, ledger, ProjectorConfig(batch_size=50, fetch_wait_s=0.2))
            running = asyncio.create_task(projector.run())
            await asyncio.to_thread(_wait_for_position, ledger_url, len(before), 0)
            await asyncio.to_thread(server.stop)
            server = EmbeddedNatsServer(tmp_path / "nats", port=server.port)
            await asyncio.to_thread(server.start)
            after = rollout_events("after", num_trajectories=20)
            await bus.publish_many(after)
            total = len(before) + len(after)
            await asyncio.to_thread(_wait_for_position, ledger_url, total, 0)
            projector.stop()
            stats = await asyncio.wait_for(running, 30)
    finally:
        ledger.close()
        server.stop()
    assert stats.position == total


async def test_a_gap_is_vouched_for_only_when_nothing_in_it_is_projectable(bus: Bus) -> None:
    """Deleted and undecodable messages may be skipped over; a valid event may not."""
    events = rollout_events("g1", num_trajectories=2)
    await bus.publish_many(events[:3])
    await bus.publish_raw(trajectory_subject("g1", "t000000", "generated"), b"{", "poison")
    await bus.publish_many(events[3:6])
    await bus.js.delete_msg("HEDDLE_EVENTS", 5)

    async def start(position: int, first_record: int) -> int:
        return await batch_start(
            bus,
            decode_event_lean,
            position=position,
            first_record=first_record,
            filter_subjects=("heddle.evt.>",),
        )

    assert await start(3, 6) == 4  # 4 undecodable, 5 deleted
    assert await start(2, 6) == 6  # 3 is a valid event never projected
    assert await start(3, 3) == 3  # a redelivery overlaps the position


async def test_batches_after_a_dead_letter_or_a_deleted_message_continue(
    bus: Bus, ledger: Ledger, tmp_path: Path
) -> None:
    """One-message batches: the poison message's batch never reaches the writer, so the next
    batch starts past the position and must be vouched for (not refused forever)."""
    events = rollout_events("g2", num_trajectories=3)
    await bus.publish_many(events[:4])
    await bus.publish_raw(trajectory_subject("g2", "t000000", "generated"), b"[1]", "poison")
    await bus.publish_many(events[4:])
    await bus.js.delete_msg("HEDDLE_EVENTS", 3)
    config = ProjectorConfig(batch_size=1, fetch_wait_s=0.2, nak_delay_s=0.05)
    stats = await asyncio.wait_for(Projector(bus, ledger, config).run(until_idle=True), 60)
    # The stream: the events, the poison message, then its DeadLettered event; one deleted.
    assert stats.num_dead_lettered == 1
    assert stats.position == len(events) + 2
    assert stats.num_projected == len(events) - 1 + 1
    letters = queries.dead_letters(ledger)
    [letter] = [row for row in letters if row.consumer == "ledger"]
    assert letter.stream_sequence == 5
    # The deleted message placed t000000: the gate refuses what its worker writes for it (and
    # so the rollout's end, which it never reached).
    refused = sorted((row for row in letters if row.consumer == "ledger-gate"), key=_sequence)
    assert "not placed" in refused[0].reason and "cannot finish" in refused[-1].reason


def _sequence(row: DeadLetterRow) -> int:
    return row.stream_sequence


def test_subject_matching_follows_nats_wildcards() -> None:
    assert subject_matches("heddle.evt.traj.r.t.generated", "heddle.evt.>")
    assert subject_matches("heddle.evt.rollout.r.submitted", "heddle.evt.*.r.>")
    assert not subject_matches("heddle.evt", "heddle.evt.>")
    assert not subject_matches("heddle.evt.rollout.r", "heddle.evt.*")
    assert subject_matches("heddle.evt.deadletter", "heddle.evt.*")
