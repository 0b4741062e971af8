"""The control plane's durable deleted mid-rollout, with real processes: while the control plane
runs (it notices, says so in its log and in ``heddle status``, and recreates the durable after
the last event whose outputs are stored), and while it is down (on restart it recreates the
durable from the position it recorded, not from the stream's end). Either way the rollout
completes, every step is routed once and the trainer gets every trajectory once."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from heddle.bus import Bus
from heddle.cli.apps import app
from heddle.config import Settings
from heddle.controlplane import read_status
from heddle.events import Completed, ContinueTrajectory
from heddle.events.subjects import EVENTS_STREAM
from heddle.rollout.deployment import LocalDeployment
from heddle.rollout.driver import RunHooks, run_rollout
from heddle.rollout.progress import ProgressState

from .test_recovery import NUM_TRAJECTORIES, Trainer, options, rollout_events, verify

pytestmark = pytest.mark.timeout(240)
DURABLE = "control-plane"


class DurableDeleter:
    """Deletes the control plane's durable once a quarter of the rollout completed (after
    stopping the control plane, with ``while_down``)."""

    def __init__(self, settings: Settings, *, while_down: bool) -> None:
        self.settings = settings
        self.while_down = while_down
        self.logs: list[Path] = []
        self.done = False

    async def __call__(self, state: ProgressState, deployment: LocalDeployment) -> None:
        if self.done or len(state.completed) < NUM_TRAJECTORIES // 4:
            return
        self.done = True
        control = deployment.control_plane
        assert control is not None
        self.logs.append(control.log_path)
        if self.while_down:
            control.kill()
            await control.process.wait()
        async with Bus(self.settings) as operator:
            assert await operator.delete_consumer(EVENTS_STREAM, DURABLE)
        if self.while_down:
            await asyncio.sleep(1.0)  # the data plane goes on publishing meanwhile
            self.logs.append((await deployment.restart_control_plane()).log_path)


async def run_with(settings: Settings, deleter: DurableDeleter) -> None:
    trainer = Trainer(settings)
    hooks = RunHooks(on_submitted=trainer.start, on_progress=deleter)
    result = await run_rollout(settings, options(num_workers=2), hooks)
    assert deleter.done, "the rollout ended before the durable was deleted"
    assert result.summary.num_completed == NUM_TRAJECTORIES
    assert result.summary.num_failed == 0
    received = await trainer.finish()
    assert sorted(received) == [f"t{i:06d}" for i in range(NUM_TRAJECTORIES)]  # once each
    events = await rollout_events(settings, result.rollout_id)
    assert set(Counter(e.traj_id for e in events if isinstance(e, Completed)).values()) == {1}
    continues = Counter(
        (e.traj_id, e.step)
        for e in events
        if isinstance(e, ContinueTrajectory) and ":fwd:" not in e.command_id
    )
    assert set(continues.values()) == {1}  # every step routed once, none skipped
    await verify(settings)


async def test_a_durable_deleted_under_a_running_control_plane_is_recreated(
    settings: Settings,
) -> None:
    deleter = DurableDeleter(settings, while_down=False)
    await run_with(settings, deleter)
    log = deleter.logs[0].read_text()
    assert f"durable {DURABLE} of {EVENTS_STREAM} disappeared while live" in log
    status = read_status(settings.data_dir)
    assert status is not None
    (report,) = [c for c in status.consumers if c.durable == DURABLE]
    assert report.num_durable_losses == 1 and report.recreated_after > 0
    shown = CliRunner().invoke(
        app, ["--data-dir", str(settings.data_dir), "status", "--no-nats"], terminal_width=200
    )
    assert shown.exit_code == 0, shown.output
    assert f"durable {DURABLE} disappeared 1 time(s)" in shown.output


async def test_a_durable_deleted_while_the_control_plane_is_down_resumes_where_it_stopped(
    settings: Settings,
) -> None:
    deleter = DurableDeleter(settings, while_down=True)
    await run_with(settings, deleter)
    restarted = deleter.logs[1].read_text()
    assert "disappeared while the control plane was down" in restarted
    assert "not at the stream's end" in restarted
