"""Fuzzing a running deployment (control plane with its projector, two sim workers, a tool
executor): hypothesis-drawn malformed, wrong-schema, wrong-subject and oversized messages on
every subject family the system consumes are each dead-lettered, with a reason, by every
durable consumer listening on their subject, or refused at publish; no process stops, and a
rollout submitted afterwards completes with a ledger consistent with the stream."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from bus.fuzz_strategies import WORKER_IDS, Fuzzed, any_fuzzed
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from heddle.bus import Bus, PublishError, ReplayQuery
from heddle.config import Settings
from heddle.controlplane import ControlPlaneConfig, PredictorConfig
from heddle.controlplane.projector_gaps import subject_matches
from heddle.events import DeadLettered
from heddle.events.subjects import (
    COMMANDS_STREAM,
    DEADLETTER_SUBJECT,
    EVENTS_STREAM,
    TOOLS_STREAM,
)
from heddle.ledger import open_ledger, queries
from heddle.replay import open_replay
from heddle.rollout.deployment import LocalDeployment, WorkerPool
from heddle.rollout.driver import RunOptions, prepare, run_rollout
from heddle.rollout.submission import RolloutPlan, trace_specs
from heddle.workloads import generate

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]

TIME_SCALE = 300.0
NUM_TRAJECTORIES = 8
DEAD_LETTER_WAIT_S = 120.0


@pytest.fixture
def heddle_settings(nats_url: str, tmp_path: Path) -> Settings:
    return Settings(nats_url=nats_url, data_dir=tmp_path / "data")


def options(*, attach: bool) -> RunOptions:
    trace = generate("search", NUM_TRAJECTORIES, seed=7)
    return RunOptions(
        plan=RolloutPlan("heddle", trace_specs(trace), "workload:search", TIME_SCALE),
        pool=None
        if attach
        else WorkerPool(
            len(WORKER_IDS), "sim", {"model": "qwen3-8b", "time_scale": str(TIME_SCALE)}
        ),  # the plan's time scale: the control plane refuses another than the workers'
        num_tool_executors=0 if attach else 1,
        control_plane=None
        if attach
        else ControlPlaneConfig(cost_model="qwen3-8b", predictor=PredictorConfig("oracle")),
        timeout_s=150,
        show_progress=False,
    )


@dataclass(frozen=True, slots=True)
class Outcome:
    message: Fuzzed
    refused_at_publish: str = ""
    reasons: tuple[tuple[str, str], ...] = ()
    """(consumer, reason) of each dead letter."""
    expected_consumers: frozenset[str] = frozenset()


def stream_of(subject: str) -> str:
    if subject.startswith("heddle.cmd.worker."):
        return COMMANDS_STREAM
    if subject.startswith("heddle.cmd.tool."):
        return TOOLS_STREAM
    return EVENTS_STREAM


async def listeners(bus: Bus, stream: str, subject: str) -> frozenset[str]:
    """Durable consumers of ``stream`` whose filter takes ``subject``."""
    names = set()
    for info in await bus.js.consumers_info(stream):
        config = info.config
        filters = config.filter_subjects or (
            [config.filter_subject] if config.filter_subject else []
        )
        if config.durable_name and any(subject_matches(subject, f) for f in filters):
            names.add(config.durable_name)
    return frozenset(names)


class Fuzzer:
    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self.outcomes: list[Outcome] = []
        self._ids = itertools.count()
        self._dead_letters_from = 1

    async def send(self, message: Fuzzed) -> None:
        stream = stream_of(message.subject)
        expected = await listeners(self.bus, stream, message.subject)
        try:
            ack = await self.bus.publish_raw(
                message.subject, message.data, f"fuzz-{next(self._ids)}-{time.time_ns()}"
            )
        except (PublishError, ValueError) as exc:  # the server's or the client's size limit
            self.outcomes.append(Outcome(message, refused_at_publish=str(exc) or repr(exc)))
            return
        except Exception as exc:  # nats.errors.MaxPayloadError is not a ValueError
            self.outcomes.append(Outcome(message, refused_at_publish=repr(exc)))
            return
        reasons = await self._dead_letters(message.subject, ack.sequence, expected)
        self.outcomes.append(Outcome(message, "", reasons, expected))

    async def _dead_letters(
        self, subject: str, sequence: int, expected: frozenset[str]
    ) -> tuple[tuple[str, str], ...]:
        found: dict[str, str] = {}
        deadline = time.monotonic() + DEAD_LETTER_WAIT_S
        while time.monotonic() < deadline:
            query = ReplayQuery((DEADLETTER_SUBJECT,), start_sequence=self._dead_letters_from)
            async for record in self.bus.replay_events(query):
                letter = record.message
                assert isinstance(letter, DeadLettered)
                if (letter.subject, letter.stream_sequence) == (subject, sequence):
                    found[letter.consumer] = letter.reason
            if expected <= found.keys():
                break
            await asyncio.sleep(0.1)
        return tuple(sorted(found.items()))


def fuzz_from_thread(fuzzer: Fuzzer, loop: asyncio.AbstractEventLoop) -> None:
    """Hypothesis drives synchronous tests: run it in a thread, each example publishing on the
    test's event loop (so the deployment is started once, not per example)."""

    @settings(
        max_examples=10,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(st.lists(any_fuzzed, min_size=1, max_size=4))
    def example(messages: list[Fuzzed]) -> None:
        for message in messages:
            asyncio.run_coroutine_threadsafe(fuzzer.send(message), loop).result(120)

    example()


def unanswered(outcomes: list[Outcome]) -> Iterator[str]:
    for outcome in outcomes:
        message = outcome.message
        if outcome.refused_at_publish:
            continue
        consumers = {consumer for consumer, _ in outcome.reasons}
        missing = outcome.expected_consumers - consumers
        if not outcome.expected_consumers or missing or not all(r for _, r in outcome.reasons):
            yield f"{message.kind} on {message.subject}: missing {sorted(missing)}"


async def test_fuzzed_messages_are_dead_lettered_and_a_rollout_completes(
    heddle_settings: Settings, tmp_path: Path
) -> None:
    async with Bus(heddle_settings) as bus:
        deployment = LocalDeployment(bus, tmp_path / "logs")
        try:
            await prepare(bus, deployment, options(attach=False))
            fuzzer = Fuzzer(bus)
            await asyncio.to_thread(fuzz_from_thread, fuzzer, asyncio.get_running_loop())
            assert deployment.failed_children() == []
            result = await run_rollout(heddle_settings, options(attach=True))
            assert deployment.failed_children() == []
            await wait_projected(bus, heddle_settings)
        finally:
            await deployment.stop()
    outcomes = fuzzer.outcomes
    assert list(unanswered(outcomes)) == []
    kinds = {o.message.kind for o in outcomes}
    assert {"malformed", "wrong_schema", "oversized"} <= kinds, kinds
    assert all(o.refused_at_publish for o in outcomes if o.message.kind == "oversized")
    assert result.summary.num_completed == NUM_TRAJECTORIES
    async with open_replay(heddle_settings, live=True) as session:
        report = await session.verify()
    assert report.consistent, report.mismatches
    assert report.unprojected_messages == 0


async def wait_projected(bus: Bus, heddle_settings: Settings, timeout_s: float = 60) -> None:
    """Until the live projector has reached the end of the stream."""
    live = open_ledger(heddle_settings.ledger_url)
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            last = (await bus.stream_state()).last_sequence
            positions = {p.consumer: p.stream_sequence for p in queries.positions(live)}
            if positions.get("ledger", 0) >= last:
                return
            await asyncio.sleep(0.2)
    finally:
        live.close()
    raise AssertionError("the live projector did not catch up")
