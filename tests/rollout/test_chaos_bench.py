"""`heddle bench chaos`: its kill schedule and record counting, and one short run end to end."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from ledger.lifecycle import rollout_events
from typer.testing import CliRunner

from heddle.bench.chaos import KILLED_KINDS, kill_schedule, kills_per_rollout
from heddle.bench.chaos_forgeries import FORGERIES, Seen, _unasked_failure, see
from heddle.bench.chaos_trainer import count_record
from heddle.bench.chaos_zombies import DUPLICATE_WINDOW_S, zombie_pause_s
from heddle.cli import app
from heddle.control.gate import EventGate
from heddle.events import (
    Completed,
    Failed,
    TrajectoryPlaced,
    TrajectorySubmitted,
)


@given(st.integers(0, 2**32), st.integers(len(KILLED_KINDS), 60))
def test_the_schedule_kills_every_kind(seed: int, num_kills: int) -> None:
    schedule = kill_schedule(random.Random(seed), num_kills)
    assert len(schedule) == num_kills and set(schedule) == set(KILLED_KINDS)


@given(st.integers(0, 100), st.integers(1, 10))
def test_kills_spread_over_the_rollouts(num_kills: int, num_rollouts: int) -> None:
    spread = kills_per_rollout(num_kills, num_rollouts)
    assert sum(spread) == num_kills and max(spread) - min(spread) <= 1


def test_zombies_pause_past_their_failure_and_every_second_past_the_duplicate_window() -> None:
    pauses = [zombie_pause_s(index, 3.0, 130.0) for index in range(4)]
    assert all(pause > 3.0 for pause in pauses)
    assert pauses[1] == pauses[3] > DUPLICATE_WINDOW_S > pauses[0] == pauses[2]
    assert zombie_pause_s(1, 3.0, 0.0) == pauses[0]


@given(st.integers(0, 2**32))
def test_every_forgery_is_refused_by_the_gate(seed: int) -> None:
    """Each kind of forgery, about a rollout running as the ledger tests record one, is wrong by
    what the stream holds before it."""
    running = [e for e in rollout_events("r1") if not isinstance(e, Completed | Failed)][:-1]
    gate, seen = EventGate(), Seen()
    for event in running:
        assert gate.admit(event).is_accepted, event
        see(seen, event)
    rng = random.Random(seed)
    for number, forge in enumerate(FORGERIES):
        forged = forge(seen, rng, f"forged-{number}")
        assert not gate.admit(forged).is_accepted, forged


@given(st.integers(0, 2**32))
def test_a_failure_naming_no_worker_of_an_unplaced_trajectory_is_refused(seed: int) -> None:
    """The forgery that no worker holds the trajectory to refuse for: one trajectory is still
    waiting for its placement."""
    running = [e for e in rollout_events("r1") if not isinstance(e, Completed | Failed)][:-1]
    waiting = next(e.traj_id for e in running if isinstance(e, TrajectoryPlaced))
    running = [
        e
        for e in running
        if getattr(e, "traj_id", None) != waiting or isinstance(e, TrajectorySubmitted)
    ]
    gate, seen = EventGate(), Seen()
    for event in running:
        assert gate.admit(event).is_accepted, event
        see(seen, event)
    assert seen.unplaced == {waiting}
    forged = _unasked_failure(seen, random.Random(seed), "forged")
    assert (forged.traj_id, forged.worker_id) == (waiting, "")
    assert not gate.admit(forged).is_accepted


def test_record_counts_duplicates_per_trainer_process(tmp_path: Path) -> None:
    record = tmp_path / "record"
    record.write_text(
        "1 r0 t000000\n1 r0 t000001\n1 r0 t000001\n"  # one duplicate within process 1
        "2 r0 t000001\n2 r0 t000002\n"  # t000001 again after a restart
        "2 r0 t0000"  # a line cut by SIGKILL
    )
    counts = count_record(record)
    assert (counts.distinct, counts.duplicates, counts.redelivered) == (3, 1, 1)


@pytest.mark.benchmark
@pytest.mark.slow
@pytest.mark.timeout(400)
def test_a_short_chaos_run_loses_nothing(tmp_path: Path) -> None:
    """One rollout of 8 trajectories, one kill of each kind."""
    options = ["--rollouts", "1", "--kills", "5", "--trajectories", "8", "--seed", "3"]
    result = CliRunner().invoke(
        app, ["--data-dir", str(tmp_path), "bench", "chaos", *options, "--json"]
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["kills_by_kind"] == {kind: 1 for kind in KILLED_KINDS}
    assert report["completions_received"] == report["completions_expected"] == 8
    assert (report["lost"], report["duplicates"]) == (0, 0)
    assert report["ledger_consistent"] is True
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("chaos-")] == []


@pytest.mark.benchmark
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_chaos_run_through_a_nats_restart_and_a_full_disk_loses_nothing(tmp_path: Path) -> None:
    """One rollout of 8 trajectories, the nats-server down 5 s once, its store's disk (a tmpfs:
    root only) filled until the control plane reports it, then freed."""
    if os.geteuid() != 0:
        pytest.skip("--disk-full mounts a tmpfs: root only")
    options = ["--rollouts", "1", "--kills", "0", "--trajectories", "8", "--nats-restarts", "1"]
    result = CliRunner().invoke(
        app, ["--data-dir", str(tmp_path), "bench", "chaos", *options, "--disk-full", "--json"]
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["nats_restarts"] == 1
    assert report["disk_full"]["refused_writes_seen"] is True
    assert report["disk_full"]["recovered_s"] is not None and report["disk_full"]["num_resets"] >= 1
    assert report["completions_received"] == report["completions_expected"] == 8
    assert (report["lost"], report["duplicates"]) == (0, 0)
    assert report["ledger_consistent"] is True


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_zombies_and_forgeries_deliver_each_trajectory_once(tmp_path: Path) -> None:
    """Two workers paused past their failure and resumed, and forgeries of every kind, in one
    rollout of 8: a plain durable consumer of the delivery stream gets each trajectory once,
    no forgery is accepted, nothing is stuck, the ledger verifies (the CI-sized zombie run)."""
    options = [
        "--rollouts", "1", "--kills", "0", "--trajectories", "8", "--seed", "3",
        "--zombies", "2", "--zombie-long-pause-s", "0", "--forgeries", "30",
    ]  # fmt: skip
    result = CliRunner().invoke(
        app, ["--data-dir", str(tmp_path), "bench", "chaos", *options, "--json"]
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert (report["zombies"], report["forgeries"]) == (2, 30)
    assert report["completions_received"] == report["completions_expected"] == 8
    assert (report["lost"], report["duplicates"], report["consumer_duplicates"]) == (0, 0, 0)
    assert (report["forged_accepted"], report["stuck"]) == (0, 0)
    assert report["ledger_consistent"] is True
