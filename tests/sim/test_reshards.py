"""Re-shards in the simulator: a tail of long stragglers on TP1 workers is merged into one TP8
worker and finishes sooner; every trajectory completes once with its whole output (an
interrupted step keeps what it generated and produces only the rest); time stays accounted;
a switch too costly to pay is never taken; and the plan's workers sit in nodes."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sim_traces import trajectory

from heddle.control.gate import EventGate
from heddle.control.systems import system_spec
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
from heddle.policy.resources.nodes import pack_nodes
from heddle.sim import SimConfig, Simulator, simulate
from heddle.sim.run import control_for
from heddle.traces import TraceTrajectory

EIGHT_TP1 = [1] * 8


def tail_trace(num_long: int = 3, long_tokens: int = 16_000) -> list[TraceTrajectory]:
    """64 trajectories of 3 steps; the first ``num_long`` generate ``long_tokens`` in all."""
    return [
        trajectory(
            f"t{i}",
            1000,
            [((long_tokens if i < num_long else 600) // 3, 1.0, 200)] * 3,
        )
        for i in range(64)
    ]


def config(restart_s: float = 30.0) -> SimConfig:
    return SimConfig(
        model="qwen3-32b",
        num_gpus=8,
        predictor="oracle",
        engine_restart_s=restart_s,
        record_events=True,
    )


def run_events(trace: list[TraceTrajectory], system: str, sim: SimConfig) -> list[object]:
    control, degrees = control_for(trace, system_spec(system), sim, (), EIGHT_TP1)
    return list(Simulator(trace, control, degrees, sim).run().events)


def test_a_tail_of_stragglers_on_tp1_is_merged_into_tp8_and_ends_sooner() -> None:
    trace = tail_trace()
    resharded = simulate(trace, "heddle", config(), tp_degrees=EIGHT_TP1)
    kept = simulate(trace, "heddle-no-reshard", config(), tp_degrees=EIGHT_TP1)
    assert (resharded.num_reshards, kept.num_reshards) == (1, 0)
    assert resharded.makespan_s < 0.75 * kept.makespan_s
    for result in (resharded, kept):
        assert result.num_failed == 0
        assert result.num_output_tokens == sum(t.num_output_tokens for t in trace)
    slowest = resharded.slowest
    assert slowest.reshard_s > 30.0  # it waited for the relaunch: restart plus weight load
    assert sum(slowest.columns.values()) == pytest.approx(slowest.total_s, rel=1e-9)


def test_the_stream_tells_the_reshard_and_keeps_every_token() -> None:
    trace = tail_trace()
    events = run_events(trace, "heddle", config())
    (request,) = [e for e in events if isinstance(e, ReshardRequested)]
    assert (request.tp_degree, request.gpu_ids) == (8, list(range(8)))
    retired = {e.worker_id for e in events if isinstance(e, WorkerRetired)}
    assert retired == set(request.member_worker_ids) - {request.worker_id}
    again = [e for e in events if isinstance(e, WorkerRegistered) and e.occurred_at > 0]
    assert [(e.worker_id, e.tp_degree) for e in again] == [(request.worker_id, 8)]
    interrupted = [e for e in events if isinstance(e, GenerationInterrupted)]
    assert interrupted and all(e.output_token_ids for e in interrupted)
    completed = Counter(e.traj_id for e in events if isinstance(e, Completed))
    assert set(completed.values()) == {1} and len(completed) == len(trace)
    # Each step's Generated carries the step's whole output, the interrupted part first.
    generated: Counter[tuple[str, int]] = Counter()
    for event in events:
        if isinstance(event, Generated):
            generated[event.traj_id, event.step] += len(event.output_token_ids)
    by_id = {f"t{i:06d}": t for i, t in enumerate(trace)}
    for (traj_id, step), num_tokens in generated.items():
        assert num_tokens == by_id[traj_id].steps[step].output_tokens
    assert interrupted[0].occurred_at < again[0].occurred_at
    # The simulated hand-over passes the event gate: each worker writes under its hosting, and
    # the move to the leader (reason reshard) is a new one.
    gate = EventGate()
    verdicts = [(e, gate.admit(e)) for e in events if isinstance(e, Event)]
    assert [(e, v.refusal) for e, v in verdicts if not v.is_accepted] == []
    moved = [e for e in events if isinstance(e, TrajectoryPlaced) and e.reason == "reshard"]
    assert moved and all(e.epoch > 1 for e in moved)


def test_a_switch_too_costly_to_pay_is_never_taken() -> None:
    trace = tail_trace()
    slow = simulate(trace, "heddle", config(restart_s=1e5), tp_degrees=EIGHT_TP1)
    kept = simulate(trace, "heddle-no-reshard", config(restart_s=1e5), tp_degrees=EIGHT_TP1)
    assert slow.num_reshards == 0
    assert slow.makespan_s == kept.makespan_s


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    num_long=st.integers(1, 6),
    long_tokens=st.integers(3000, 24_000),
    restart_s=st.sampled_from([0.0, 5.0, 30.0]),
    degrees=st.sampled_from([EIGHT_TP1, [2, 2, 2, 2], [1, 1, 2, 4], [2, 1, 1, 2, 2]]),
)
def test_whatever_is_merged_every_trajectory_completes_with_its_whole_output(
    num_long: int, long_tokens: int, restart_s: float, degrees: list[int]
) -> None:
    trace = tail_trace(num_long, long_tokens)
    sim = config(restart_s)
    control, degrees = control_for(trace, system_spec("heddle"), sim, (), degrees)
    run = Simulator(trace, control, degrees, sim).run()
    assert len(run.trajectories) == len(trace)
    for t in run.trajectories:
        assert t.num_output_tokens == t.trace.num_output_tokens
        assert sum(t.account.columns().values()) == pytest.approx(t.finished_at, rel=1e-9)
    for worker in run.workers:
        for model in worker.models:
            assert model.invariant_violations() == []


def test_workers_are_packed_into_nodes_in_order() -> None:
    nodes = pack_nodes([4, 8, 2, 2], 16, 8)
    assert [(n.node, n.gpu_ids) for n in nodes] == [
        ("n00", (0, 1, 2, 3)),
        ("n01", (0, 1, 2, 3, 4, 5, 6, 7)),
        ("n00", (4, 5)),
        ("n00", (6, 7)),
    ]
    assert [n.node for n in pack_nodes([1, 1, 2], 12, 8)] == ["n00"] * 3
    with pytest.raises(ValueError, match="fits no node"):
        pack_nodes([8, 8], 12, 8)
