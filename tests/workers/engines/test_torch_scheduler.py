"""The torch engine's pure scheduler: priority order, preemption and the KV budget.

A fake executor applies what the engine does to token counts (prefill to ``kv_target``, one
token per decode step), so invariants are checked after every step without torch.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from heddle.policy.scheduling.preemption import PreemptionConfig
from heddle.workers.engines.base import GenerationRequest
from heddle.workers.engines.torch_engine.prefix_store import CacheEntry, PrefixStore
from heddle.workers.engines.torch_engine.scheduler import (
    Scheduler,
    SchedulerConfig,
    SchedulerOutput,
)
from heddle.workers.engines.torch_engine.sequence import SeqStatus, Sequence


def _seq(index: int, *, prompt: int = 4, max_new: int = 4, priority: float = 0.0) -> Sequence:
    request = GenerationRequest(
        request_id=f"r{index:04d}",
        trajectory_id=f"t{index:04d}",
        input_token_ids=[1] * prompt,
        max_new_tokens=max_new,
        priority=priority,
    )
    return Sequence(request=request, arrival=index, seed=0, priority=priority)


def _scheduler(
    *, max_running: int = 2, max_kv_tokens: int = 10_000, threshold: float = 0.0, keep: bool = True
) -> Scheduler:
    config = SchedulerConfig(max_running, max_kv_tokens, PreemptionConfig(threshold), keep)
    return Scheduler(config, PrefixStore[Any]())


def _execute(scheduler: Scheduler, out: SchedulerOutput) -> list[Sequence]:
    """What the engine does with token counts after ``schedule()``; returns finished sequences."""
    finished = list(out.truncated)
    for seq in out.admitted:
        seq.num_kv_tokens = seq.kv_target
        if not seq.has_pending_token:
            _append(scheduler, seq, finished)
    for seq in list(scheduler.running):
        seq.num_kv_tokens += 1
        _append(scheduler, seq, finished)
    for seq in finished:
        tokens = tuple(seq.context[: seq.num_kv_tokens])
        scheduler.store.put(seq.trajectory_id, CacheEntry(tokens, None))
        seq.num_kv_tokens = 0
    return finished


def _append(scheduler: Scheduler, seq: Sequence, finished: list[Sequence]) -> None:
    seq.append(7, 0.0)
    seq.finish_reason = seq.finish_reason_after_token()
    if seq.finish_reason is not None:
        scheduler.remove(seq)
        finished.append(seq)


def _check_invariants(scheduler: Scheduler) -> None:
    config = scheduler.config
    assert len(scheduler.running) <= config.max_running
    assert scheduler.num_used_tokens() <= config.max_kv_tokens
    assert not set(map(id, scheduler.running)) & set(map(id, scheduler.waiting))
    assert all(seq.status is SeqStatus.RUNNING for seq in scheduler.running)
    assert all(seq.status is SeqStatus.WAITING for seq in scheduler.waiting)
    assert all(seq.has_pending_token for seq in scheduler.running)


def test_admits_in_priority_order_up_to_max_running() -> None:
    scheduler = _scheduler(max_running=2)
    low, high, mid = _seq(0, priority=1), _seq(1, priority=9), _seq(2, priority=5)
    for seq in (low, high, mid):
        scheduler.add(seq)
    out = scheduler.schedule()
    assert out.admitted == [high, mid]
    assert scheduler.waiting == [low]


def test_higher_priority_preempts_lowest_running_and_victim_keeps_kv() -> None:
    scheduler = _scheduler(max_running=1, threshold=2.0)
    victim = _seq(0, priority=1, max_new=100)
    scheduler.add(victim)
    _execute(scheduler, scheduler.schedule())
    kv_before = victim.num_kv_tokens
    scheduler.add(_seq(1, priority=3))  # within the threshold: no preemption
    assert scheduler.schedule().preempted == []
    winner = _seq(2, priority=3.5)
    scheduler.add(winner)
    out = scheduler.schedule()
    assert out.preempted == [victim] and out.admitted == [winner]
    assert victim.status is SeqStatus.WAITING and victim.num_preemptions == 1
    assert victim.num_kv_tokens == kv_before  # kept, not dropped


def test_recompute_mode_drops_the_victims_kv() -> None:
    scheduler = _scheduler(max_running=1, keep=False)
    victim = _seq(0, priority=0, max_new=100)
    scheduler.add(victim)
    _execute(scheduler, scheduler.schedule())
    scheduler.add(_seq(1, priority=5))
    out = scheduler.schedule()
    assert out.preempted == [victim] and victim.num_kv_tokens == 0
    assert victim.num_tokens_to_prefill == victim.kv_target


def test_budget_evicts_idle_prefixes_before_dropping_waiting_kv() -> None:
    scheduler = _scheduler(max_running=4, max_kv_tokens=20)
    scheduler.store.put("idle", CacheEntry(tuple(range(10)), None))
    seq = _seq(0, prompt=12)
    scheduler.add(seq)
    out = scheduler.schedule()
    assert out.admitted == [seq] and "idle" not in scheduler.store
    assert scheduler.store.num_lost_tokens("idle", list(range(10))) == 10


def test_admission_reserves_final_contexts_so_nothing_is_retracted_for_memory() -> None:
    # Budget 12: the first request reserves 4 + 6 = 10 tokens, so the second (4 + 6) waits
    # instead of being admitted now and retracted when the two outgrow the budget.
    scheduler = _scheduler(max_running=2, max_kv_tokens=12)
    first, second = _seq(0, prompt=4, max_new=6, priority=5), _seq(1, prompt=4, max_new=6)
    scheduler.add(first)
    scheduler.add(second)
    preempted: list[Sequence] = []
    finished: list[Sequence] = []
    for _ in range(20):
        out = scheduler.schedule()
        preempted += out.preempted
        assert scheduler.num_committed_tokens() <= 12
        finished += _execute(scheduler, out)
        _check_invariants(scheduler)
        if first in finished:
            assert second.status is not SeqStatus.WAITING or not scheduler.running
        else:
            assert scheduler.running == [first]
    assert preempted == [] and finished == [first, second]


def test_beaten_running_sequences_give_up_their_reservations_for_a_high_priority_one() -> None:
    scheduler = _scheduler(max_running=4, max_kv_tokens=30)
    low = _seq(0, prompt=4, max_new=20, priority=1)  # reserves 24 of 30
    scheduler.add(low)
    _execute(scheduler, scheduler.schedule())
    high = _seq(1, prompt=4, max_new=10, priority=9)  # needs 14: only a preemption makes room
    scheduler.add(high)
    out = scheduler.schedule()
    assert out.preempted == [low] and out.admitted == [high]
    assert low.num_kv_tokens == 5  # kept (prompt + one fed output); only its reservation went
    _execute(scheduler, out)
    _check_invariants(scheduler)


def test_a_sequence_that_cannot_grow_alone_is_truncated() -> None:
    scheduler = _scheduler(max_running=1, max_kv_tokens=8)
    seq = _seq(0, prompt=5, max_new=100)
    scheduler.add(seq)
    truncated: list[Sequence] = []
    for _ in range(5):
        out = scheduler.schedule()
        truncated += out.truncated
        _execute(scheduler, out)
    assert truncated == [seq] and seq.finish_reason == "length"
    # KV of 8 tokens (5 prompt + 3 fed outputs) fills the budget; the 4th output is pending.
    entry = scheduler.store.get(seq.trajectory_id)
    assert len(seq.output_token_ids) == 4 and entry is not None and entry.num_tokens == 8


_workloads = st.lists(
    st.tuples(
        st.integers(1, 12),  # prompt tokens
        st.integers(1, 10),  # max new tokens
        st.integers(0, 5),  # priority
        st.integers(0, 6),  # arrival step
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=120)
@given(
    workload=_workloads,
    max_running=st.integers(1, 4),
    max_kv_tokens=st.integers(24, 80),
    keep=st.booleans(),
    threshold=st.sampled_from([0.0, 1.5]),
)
def test_every_request_finishes_and_invariants_hold_after_each_step(
    workload: list[tuple[int, int, int, int]],
    max_running: int,
    max_kv_tokens: int,
    keep: bool,
    threshold: float,
) -> None:
    scheduler = _scheduler(
        max_running=max_running, max_kv_tokens=max_kv_tokens, threshold=threshold, keep=keep
    )
    seqs = [
        _seq(index, prompt=prompt, max_new=max_new, priority=priority)
        for index, (prompt, max_new, priority, _) in enumerate(workload)
    ]
    finished: list[Sequence] = []
    for step in range(400):
        for seq, (*_, arrival) in zip(seqs, workload, strict=True):
            if arrival == step:
                scheduler.add(seq)
        if step > 6 and not (scheduler.running or scheduler.waiting):
            break
        out = scheduler.schedule()
        _check_no_overtaking(scheduler, out)
        finished += _execute(scheduler, out)
        _check_invariants(scheduler)
    assert sorted(seq.arrival for seq in finished) == list(range(len(seqs)))
    for seq in finished:
        assert seq.finish_reason == "length"
        truncated_by_memory = len(seq.output_token_ids) < seq.request.max_new_tokens
        assert not truncated_by_memory or len(seq.context) >= max_kv_tokens


def _check_no_overtaking(scheduler: Scheduler, out: SchedulerOutput) -> None:
    """Every admitted sequence is ordered before every original waiter left waiting."""
    moved = set(map(id, out.preempted))
    left = [seq for seq in scheduler.waiting if id(seq) not in moved]
    for admitted in out.admitted:
        assert all(admitted.order_key() < seq.order_key() for seq in left)


@settings(max_examples=120)
@given(
    priorities=st.lists(st.integers(0, 6), min_size=1, max_size=10),
    late_priorities=st.lists(st.integers(0, 6), max_size=6),
    max_running=st.integers(1, 4),
)
def test_with_ample_memory_the_running_set_is_the_top_priorities(
    priorities: list[int], late_priorities: list[int], max_running: int
) -> None:
    """Brute-force reference: after each step, running holds the top-k priorities (k slots)."""
    scheduler = _scheduler(max_running=max_running)
    seqs = [_seq(index, max_new=1000, priority=p) for index, p in enumerate(priorities)]
    for seq in seqs:
        scheduler.add(seq)
    _execute(scheduler, scheduler.schedule())
    for offset, priority in enumerate(late_priorities):
        scheduler.add(_seq(len(seqs) + offset, max_new=1000, priority=priority))
        _execute(scheduler, scheduler.schedule())
        active = scheduler.running + scheduler.waiting
        top = sorted((seq.priority for seq in active), reverse=True)[:max_running]
        assert sorted((seq.priority for seq in scheduler.running), reverse=True) == top
        assert all(seq.num_kv_tokens > 0 for seq in scheduler.waiting if seq.num_preemptions)


_store_ops = st.lists(
    st.tuples(
        st.sampled_from(["put", "take", "drop", "evict"]),
        st.sampled_from(["a", "b", "c", "d"]),
        st.integers(0, 12),
    ),
    max_size=40,
)


@settings(max_examples=150)
@given(operations=_store_ops)
def test_prefix_store_matches_a_reference_lru(operations: list[tuple[str, str, int]]) -> None:
    """Brute force: an ordered list of (trajectory, tokens), least recently put first."""
    store: PrefixStore[None] = PrefixStore()
    reference: list[tuple[str, tuple[int, ...]]] = []
    lost: dict[str, tuple[int, ...]] = {}
    for operation, trajectory, size in operations:
        tokens = tuple(range(size))
        if operation == "put":
            reference = [entry for entry in reference if entry[0] != trajectory]
            reference.append((trajectory, tokens))
            lost.pop(trajectory, None)
            store.put(trajectory, CacheEntry(tokens, None))
        elif operation == "take":
            entry = store.take(trajectory)
            expected = next((t for name, t in reference if name == trajectory), None)
            assert (entry.token_ids if entry else None) == expected
            reference = [item for item in reference if item[0] != trajectory]
        elif operation == "drop":
            store.drop(trajectory)
            reference = [item for item in reference if item[0] != trajectory]
            lost.pop(trajectory, None)
        else:
            freed = 0
            while freed < size and reference:
                name, evicted = reference.pop(0)
                lost[name] = evicted
                freed += len(evicted)
            assert store.evict_lru(size) == freed
        assert store.num_tokens == sum(len(t) for _, t in reference)
        assert len(store) == len(reference)
        for name, tokens_lost in lost.items():
            assert store.num_lost_tokens(name, list(range(20))) == len(tokens_lost)
