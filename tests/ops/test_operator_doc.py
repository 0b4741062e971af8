"""Every ``nats`` command of docs/trainer.md's operator section, run with the real NATS CLI
against a live Heddle (a nats-server, the control plane, two sim workers, a tool executor, the
ledger projector), in the doc's order, each with its effect checked.

The rollout: one short trajectory (done within a second: the watch commands have a completion
to show) and five long ones (thousands of tokens per step at time scale 1: still running while
the operator steers). Placeholders: ``<rid>`` the rollout, ``<tid>`` a long trajectory,
``<wid>`` the worker holding it when the commands start.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
import pytest
from waiting import until

from heddle.bus import Bus, ReplayQuery
from heddle.config import Settings
from heddle.controlplane import ControlPlaneConfig
from heddle.controlplane.operations import OPS_ENDPOINTS, ops_subject
from heddle.controlplane.projector import catch_up
from heddle.events import (
    Completed,
    Event,
    Failed,
    Reprioritize,
    RolloutCancelled,
    TrajectoryPlaced,
    WorkerDrained,
    WorkerFailed,
    decode_worker_command,
)
from heddle.events.subjects import COMMANDS_STREAM, worker_command_subject
from heddle.ledger import open_ledger, queries
from heddle.replay import open_replay
from heddle.rollout.deployment import LocalDeployment, WorkerPool
from heddle.rollout.driver import RunHooks, RunOptions, run_rollout
from heddle.rollout.submission import RolloutPlan, trace_specs
from heddle.traces import TraceStep, TraceTrajectory

from .natscli import NatsCli, Output, doc_commands, nats_binary, substitute

pytestmark = pytest.mark.timeout(420)

DOC = Path(__file__).parents[2] / "docs" / "trainer.md"
SECTION = "## Operators: watching and steering with the NATS CLI"
SHORT, LONG = "t000000", "t000003"


def trace() -> list[TraceTrajectory]:
    short = TraceTrajectory(id="short", prompt_tokens=16, steps=[TraceStep(output_tokens=4)])
    long = [
        TraceTrajectory(id=f"long{i}", prompt_tokens=64, steps=[TraceStep(output_tokens=6000)] * 4)
        for i in range(5)
    ]
    return [short, *long]


def options() -> RunOptions:
    return RunOptions(
        plan=RolloutPlan("heddle", trace_specs(trace()), "trace:operator-doc", 1.0),
        pool=WorkerPool(2, "sim", {"time_scale": "1", "model": "qwen3-8b"}, heartbeat_s=0.5),
        control_plane=ControlPlaneConfig(cost_model="qwen3-8b", worker_timeout_s=8.0),
        timeout_s=240,
        show_progress=False,
    )


@dataclass
class Operator:
    """Runs the doc's commands and checks each one's effect."""

    cli: NatsCli
    bus: Bus
    values: dict[str, str]
    sequences: dict[str, int] = field(default_factory=dict)
    """Stream sequence of each steering request's operator event, by endpoint."""

    @property
    def rid(self) -> str:
        return self.values["<rid>"]

    @property
    def wid(self) -> str:
        return self.values["<wid>"]

    async def ops(self, endpoint: str, body: dict[str, str] | None = None) -> dict[str, object]:
        reply = await self.bus.client.request(
            ops_subject(endpoint), json.dumps(body or {}).encode(), timeout=5
        )
        return dict(json.loads(reply.data))

    async def worker_state(self) -> str:
        workers = (await self.ops("status"))["workers"]
        assert isinstance(workers, list)
        return str(next(w["state"] for w in workers if w["worker_id"] == self.wid))

    async def trajectory(self) -> dict[str, object]:
        return await self.ops("trajectory.info", {"rollout_id": self.rid, "traj_id": LONG})

    async def events(self, *subjects: str) -> list[tuple[int, Event]]:
        query = ReplayQuery(filter_subjects=subjects)
        return [(r.stream_sequence, r.message) async for r in self.bus.replay_events(query)]

    async def commands(self) -> list[object]:
        query = ReplayQuery(filter_subjects=("heddle.cmd.worker.>",))
        reader = self.bus.replay(query, decode_worker_command, COMMANDS_STREAM)
        return [record.message async for record in reader]

    # ---- the commands -------------------------------------------------------------------------

    async def execute(self, argv: list[str]) -> None:
        argv = substitute(argv, self.values)
        line = " ".join(argv)
        for pattern, check in self.checks():
            if re.fullmatch(pattern, line):
                await check(argv)
                return
        raise AssertionError(f"docs/trainer.md has a command no test checks: {line}")

    def checks(self) -> list[tuple[str, Callable[[list[str]], Awaitable[None]]]]:
        return [
            (r"nats context add heddle --server \S+ --select", self.ran),
            (r"nats stream ls", self.expect("HEDDLE_EVENTS", "HEDDLE_CMDS", "HEDDLE_TOOLS")),
            (r"nats stream info HEDDLE_EVENTS", self.expect("heddle.evt.>")),
            (r"nats sub --stream HEDDLE_EVENTS heddle\.evt\.rollout\.>",
             self.watch('"kind":"rollout.submitted"')),
            (r"nats sub --stream HEDDLE_EVENTS heddle\.evt\.traj\.\S+\.\*\.completed\.\*",
             self.watch(f'"traj_id":"{SHORT}"')),
            (r"nats sub --stream HEDDLE_EVENTS heddle\.evt\.worker\.\*\.registered",
             self.watch('"kind":"worker.registered"')),
            (r"nats sub heddle\.telemetry\.worker\.>", self.watch('"running_traj_ids"')),
            (r"nats stream view HEDDLE_EVENTS --subject heddle\.evt\.traj\.\S+",
             self.view("traj.placed")),
            (r"nats stream view HEDDLE_CMDS --subject heddle\.cmd\.worker\.\S+",
             self.view("cmd.start_trajectory")),
            (r"nats consumer ls HEDDLE_EVENTS", self.expect("control-plane")),
            (r"nats consumer info HEDDLE_EVENTS control-plane", self.expect("control-plane")),
            (r"nats sub --stream HEDDLE_EVENTS heddle\.evt\.deadletter\.>",
             self.watch("unknown field `bogus`")),
            (r"nats micro ls", self.expect("heddle", "0.1.0")),
            (r"nats micro info heddle", self.expect(*map(ops_subject, OPS_ENDPOINTS))),
            (r"nats micro stats heddle", self.expect("status", "worker_drain")),
            (r"nats req heddle\.ops\.status ", self.reply(lambda r: self.rid in json.dumps(r))),
            (r"nats req heddle\.ops\.rollout\.info .*",
             self.reply(lambda r: r["state"] == "running")),
            (r"nats req heddle\.ops\.trajectory\.info .*",
             self.reply(lambda r: r["worker_id"] == self.wid)),
            (r"nats req heddle\.ops\.trajectory\.reprioritize .*", self.steer(self.reprioritized)),
            (r"nats req heddle\.ops\.trajectory\.abort .*", self.steer(self.aborted)),
            (r"nats req heddle\.ops\.worker\.drain .*", self.steer(self.draining)),
            (r"nats req heddle\.ops\.rollout\.cancel .*", self.steer(self.cancelled)),
            (r"nats req heddle\.ops\.worker\.undrain .*", self.steer(self.undrained)),
        ]  # fmt: skip

    async def ran(self, argv: list[str]) -> None:
        output = await self.cli.run(argv)
        assert output.returncode == 0, output.text

    def expect(self, *texts: str) -> Callable[[list[str]], Awaitable[None]]:
        async def check(argv: list[str]) -> None:
            output = await self.cli.run(argv)
            assert output.returncode == 0, output.text
            for text in texts:
                assert text in output.text, f"{' '.join(argv)}: no {text!r} in\n{output.text}"

        return check

    def view(self, text: str) -> Callable[[list[str]], Awaitable[None]]:
        async def check(argv: list[str]) -> None:
            output = await self.cli.on_terminal(argv, text)
            assert text in output.text, f"{' '.join(argv)}: no {text!r} in\n{output.text}"

        return check

    def watch(self, text: str) -> Callable[[list[str]], Awaitable[None]]:
        async def check(argv: list[str]) -> None:
            output = await self.cli.watch(argv, text)
            assert text in output.text, f"{' '.join(argv)}: no {text!r} in\n{output.text}"

        return check

    def reply(
        self, ok: Callable[[dict[str, object]], bool]
    ) -> Callable[[list[str]], Awaitable[None]]:
        async def check(argv: list[str]) -> None:
            output = await self.cli.run(argv)
            assert output.returncode == 0, output.text
            assert ok(json_reply(output)), output.text

        return check

    def steer(
        self, effect: Callable[[], Awaitable[None]]
    ) -> Callable[[list[str]], Awaitable[None]]:
        async def check(argv: list[str]) -> None:
            output = await self.cli.run(argv)
            assert output.returncode == 0, output.text
            reply = json_reply(output)
            assert reply["ok"] is True, output.text
            self.sequences[argv[2].removeprefix("heddle.ops.")] = int(str(reply["stream_sequence"]))
            await effect()

        return check

    # ---- the effects of the steering requests ---------------------------------------------------

    async def reprioritized(self) -> None:
        """The holding worker is told 1e9, the priority is pinned."""

        async def told() -> bool:
            info = await self.trajectory()
            return any(
                isinstance(c, Reprioritize) and c.traj_id == LONG and c.priority == 1e9
                and c.worker_id == info["worker_id"]
                for c in await self.commands()
            )  # fmt: skip

        await until(told, f"a cmd.reprioritize of {LONG} to 1e9 on its worker")
        info = await self.trajectory()
        assert (info["priority"], info["is_pinned"]) == (1e9, True)

    async def aborted(self) -> None:
        async def failed() -> bool:
            return (await self.trajectory())["state"] == "failed"

        await until(failed, f"{LONG} failed after its abort")
        events = await self.events(f"heddle.evt.traj.{self.rid}.{LONG}.>")
        [failure] = [e for _, e in events if isinstance(e, Failed)]
        assert "aborted by" in failure.reason and "stuck" in failure.reason
        assert not any(isinstance(e, Completed) for _, e in events)

    async def draining(self) -> None:
        async def is_draining() -> bool:
            return await self.worker_state() == "draining"

        await until(is_draining, f"{self.wid} draining")

    async def cancelled(self) -> None:
        """The rollout ends cancelled; the drained worker, its trajectories aborted, reports
        drained and stays registered as drained."""

        async def rollout_cancelled() -> bool:
            info = await self.ops("rollout.info", {"rollout_id": self.rid})
            return info["state"] == "cancelled"

        async def drained() -> bool:
            return await self.worker_state() == "drained"

        await until(rollout_cancelled, f"{self.rid} cancelled")
        await until(drained, f"{self.wid} drained")

    async def undrained(self) -> None:
        async def active() -> bool:
            return await self.worker_state() == "active"

        await until(active, f"{self.wid} active again")


def json_reply(output: Output) -> dict[str, object]:
    """The JSON body ``nats req`` printed (the last line that parses)."""
    for line in reversed(output.text.splitlines()):
        if line.startswith("{"):
            return dict(json.loads(line))
    raise AssertionError(f"no JSON reply in\n{output.text}")


BAD_REQUESTS = [
    ("worker.drain", "{not json", "400"),
    ("worker.drain", '{"worker_id":"w00","bogus":1}', "400"),
    ("worker.drain", '{"worker_id":"nosuch"}', "404"),
    ("trajectory.abort", '{"rollout_id":"<rid>","traj_id":"t999999"}', "404"),
    ("trajectory.abort", '{"rollout_id":"<rid>","traj_id":"' + LONG + '"}', "409"),
    ("trajectory.reprioritize", '{"rollout_id":"<rid>","traj_id":"t000001","priority":"high"}',
     "400"),
    ("rollout.cancel", '{"rollout_id":"nosuch"}', "404"),
]  # fmt: skip


async def test_every_operator_command_of_the_doc_works(settings: Settings, tmp_path: Path) -> None:
    cli = NatsCli(nats_binary(), tmp_path / "natscli")
    commands = doc_commands(DOC, SECTION)
    assert len(commands) >= 20, commands
    operator: list[Operator] = []

    async def operate(rollout_id: str, deployment: LocalDeployment) -> None:
        async with Bus(settings) as bus:
            op = Operator(cli, bus, {"<url>": bus.url, "<rid>": rollout_id, "<tid>": LONG})
            operator.append(op)
            await _wait_for_the_short_one(op)
            op.values["<wid>"] = str((await op.trajectory())["worker_id"])
            # A hand-written worker command with a field workers do not know: dead-lettered.
            await bus.publish_raw(
                worker_command_subject(op.wid, "drain"),
                msgspec.json.encode({"kind": "cmd.drain", "command_id": "bad-1",
                                     "issued_at": 0, "worker_id": op.wid, "bogus": 1}),
                "bad-1",
            )  # fmt: skip
            for argv in commands:
                await op.execute(argv)
            for endpoint, body, code in BAD_REQUESTS:
                body = substitute([body], op.values)[0]
                output = await cli.run(["nats", "req", ops_subject(endpoint), body])
                assert f"Nats-Service-Error-Code: {code}" in output.text, (endpoint, body, output)

    result = await run_rollout(settings, options(), RunHooks(on_submitted=operate))
    assert result.summary.num_completed == 1
    await _check_the_record(settings, operator[0])


async def _wait_for_the_short_one(op: Operator) -> None:
    async def done() -> bool:
        info = await op.ops("trajectory.info", {"rollout_id": op.rid, "traj_id": SHORT})
        return info["state"] == "completed"

    await until(done, f"{SHORT} completed", timeout_s=120)


async def _check_the_record(settings: Settings, op: Operator) -> None:
    """The stream and the ledger after the run: each action once, nothing placed on the
    draining worker, no completion after the cancellation, no false failure."""
    async with Bus(settings) as bus:
        op.bus = bus
        events = await op.events("heddle.evt.>")
    drain_at, undrain_at = op.sequences["worker.drain"], op.sequences["worker.undrain"]
    assert not [
        e for seq, e in events
        if drain_at < seq < undrain_at and isinstance(e, TrajectoryPlaced) and e.worker_id == op.wid
    ]  # fmt: skip
    [cancel_at] = [seq for seq, e in events if isinstance(e, RolloutCancelled)]
    assert not [e for seq, e in events if seq > cancel_at and isinstance(e, Completed)]
    assert any(isinstance(e, WorkerDrained) and e.worker_id == op.wid for _, e in events)
    # No false failure while drained (after the run, stopped workers may be declared failed
    # by a control plane still up: a shutdown order the test does not control).
    assert not [e for seq, e in events if seq < undrain_at and isinstance(e, WorkerFailed)]

    live = open_ledger(settings.ledger_url)
    try:
        async with Bus(settings) as bus:
            await catch_up(bus, live)  # the live ledger projected to the end first
    finally:
        live.close()
    async with open_replay(settings, live=True) as session:
        report = await session.verify()
    assert report.consistent, report.mismatches
    ledger = open_ledger(settings.ledger_url)
    try:
        kinds = sorted(a.kind for a in queries.operator_actions(ledger))
        summary = queries.rollout_totals(ledger, op.rid)
    finally:
        ledger.close()
    assert kinds == sorted(
        [
            "traj.reprioritize_requested",
            "traj.abort_requested",
            "worker.drain_requested",
            "rollout.cancel_requested",
            "worker.undrain_requested",
        ]
    )
    assert summary is not None and summary.rollout is not None
    assert summary.rollout.status == "cancelled"
