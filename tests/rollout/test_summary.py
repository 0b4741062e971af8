"""The rollout summary: makespan in model seconds, throughput, the slowest trajectory's
breakdown, failures, re-placements with the tokens they re-prefilled; against brute force."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from heddle.events import (
    Completed,
    Event,
    Failed,
    Generated,
    Migrated,
    RolloutFinished,
    RolloutSubmitted,
    TrajectoryPlaced,
    TrajectoryTimings,
)
from heddle.rollout.summary import summarize_rollout


def submitted(num: int, at: float = 100.0, scale: float = 50.0) -> RolloutSubmitted:
    return RolloutSubmitted(
        event_id="r:s",
        rollout_id="r",
        occurred_at=at,
        policy="heddle",
        num_trajectories=num,
        time_scale=scale,
    )


def completed(traj: str, at: float, tokens: int, recomputed: int = 0) -> Completed:
    return Completed(
        event_id=f"r:{traj}:c",
        rollout_id="r",
        occurred_at=at,
        traj_id=traj,
        num_steps=3,
        num_output_tokens=tokens,
        timings=TrajectoryTimings(queue_s=1, prefill_s=2, decode_s=3, tool_s=4, total_s=10),
        worker_history=["w1", "w0"],
        num_recomputed_tokens=recomputed,
    )


def generated(traj: str, step: int, recomputed: int, warmed: int = 0) -> Generated:
    return Generated(
        event_id=f"r:{traj}:{step}:g",
        rollout_id="r",
        occurred_at=101.0,
        traj_id=traj,
        step=step,
        worker_id="w0",
        output_token_ids=[1],
        num_recomputed_tokens=recomputed,
        num_warmed_tokens=warmed,
    )


def migrated(traj: str, *, kv: bool = False) -> Migrated:
    return Migrated(
        event_id=f"r:{traj}:m:{kv}",
        rollout_id="r",
        occurred_at=101.5,
        traj_id=traj,
        source_worker_id="w0",
        target_worker_id="w1",
        kv_transferred=kv,
    )


def test_migration_re_prefill_is_split_into_warmed_up_and_not_hidden() -> None:
    """Without KV transfer the target warms up in the tool gap; what its next step still
    re-prefilled (the warm-up evicted, or none) is what the warm-up did not hide."""
    events: list[Event] = [
        submitted(2),
        generated("t0", 0, 0),
        migrated("t0"),
        generated("t0", 1, 40, warmed=900),  # 40 of the context evicted before the step
        generated("t0", 2, 7),  # a later preemption's recompute: not the migration's
        generated("t1", 0, 0),
        migrated("t1", kv=True),  # KV moved: nothing to warm up
        generated("t1", 1, 0),
    ]
    summary = summarize_rollout("r", events)
    assert (summary.warmed_up_tokens, summary.migration_recomputed_tokens) == (900, 40)
    assert summary.recomputed_tokens == 47 and summary.num_migrations == 2


def test_figures_of_a_rollout_with_a_failure_and_a_replacement() -> None:
    events: list[Event] = [
        submitted(3),
        TrajectoryPlaced(
            event_id="p",
            rollout_id="r",
            occurred_at=101,
            traj_id="t1",
            worker_id="w0",
            reason="replacement",
        ),
        generated("t1", 0, 0),
        generated("t1", 1, 700),
        generated("t0", 0, 30),
        completed("t0", 102.0, 100),
        Failed(
            event_id="f",
            rollout_id="r",
            occurred_at=103,
            traj_id="t2",
            step=0,
            reason="x",
            retryable=True,
        ),
        completed("t1", 104.0, 300),
        Failed(event_id="g", rollout_id="r", occurred_at=103, traj_id="t2", step=0, reason="x"),
        RolloutFinished(event_id="e", rollout_id="r", occurred_at=104.0, num_completed=2),
    ]
    summary = summarize_rollout("r", events)
    assert (summary.num_completed, summary.num_failed, summary.is_finished) == (2, 1, True)
    assert summary.wall_s == 4.0 and summary.makespan_s == 200.0  # x time scale 50
    assert summary.output_tokens == 400 and summary.throughput_tok_s == 2.0
    assert summary.num_replacements == 1
    assert (summary.recomputed_tokens, summary.replacement_recomputed_tokens) == (730, 700)
    slowest = summary.slowest
    assert slowest is not None and slowest.traj_id == "t1" and slowest.end_s == 200.0
    assert (slowest.queue_s, slowest.decode_s, slowest.tool_s) == (1, 3, 4)
    assert slowest.other_s == 10 - (1 + 2 + 3 + 4)  # the rest: routing and messaging
    assert summary.workers == ["w0", "w1"] and summary.events == len(events)


@settings(max_examples=50)
@given(
    ends=st.lists(st.tuples(st.floats(0, 1000), st.integers(0, 10_000)), min_size=1, max_size=20),
    scale=st.floats(0.5, 500),
)
def test_makespan_and_throughput_match_their_definitions(
    ends: list[tuple[float, int]], scale: float
) -> None:
    events: list[Event] = [submitted(len(ends), at=10.0, scale=scale)]
    events += [completed(f"t{i}", 10.0 + end, tokens) for i, (end, tokens) in enumerate(ends)]
    summary = summarize_rollout("r", events)
    makespan = max(end for end, _ in ends) * scale
    assert abs(summary.makespan_s - makespan) <= 1e-6 * max(1.0, makespan)
    tokens = sum(t for _, t in ends)
    assert summary.output_tokens == tokens and summary.is_finished
    if summary.makespan_s > 0:
        assert abs(summary.throughput_tok_s - tokens / summary.makespan_s) < 1e-9 * max(1, tokens)
