"""The radix prefix cache against a reference radix tree over explicit token sequences, and the
batching model on it: shared group prompts, partial hits, retract-on-preempt, prefill-only."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from heddle.policy.batching import (
    BatchingConfig,
    BatchingModel,
    CacheKind,
    FinishedGeneration,
    GenerationJob,
    RadixCache,
)
from heddle.policy.cost.model import preset

from .radix_reference import Node, ReferenceRadixTree, Token
from .test_batching import SmallKv, drain

COST = preset("qwen3-32b", "h200", 1)
PROMPTS = {0: 7, 1: 12}
"""Prompt tokens of groups g0 (trajectories 0, 2) and g1 (1, 3); 4 and 5 have no group."""


def _group(traj: int) -> tuple[str, int]:
    return (f"g{traj % 2}", PROMPTS[traj % 2]) if traj < 4 else ("", 0)


def _tokens(traj: int, num_tokens: int) -> list[Token]:
    """The trajectory's context: its group's prompt (distinct tokens), then its own."""
    _, prompt = _group(traj)
    shared = [("prompt", traj % 2, i) for i in range(min(prompt, num_tokens))]
    return shared + [("own", traj, i) for i in range(num_tokens - len(shared))]


@dataclass
class Harness:
    """The cache under test and the reference, driven by the same operations."""

    page: int
    cache: RadixCache = field(init=False)
    tree: ReferenceRadixTree = field(init=False)
    known: dict[int, int] = field(default_factory=dict)
    """Each trajectory's context length."""
    running: dict[int, tuple[int, Node]] = field(default_factory=dict)
    """Running trajectory -> (admitted context, the node its lock sits on)."""

    def __post_init__(self) -> None:
        self.cache = RadixCache(self.page)
        self.tree = ReferenceRadixTree(self.page)

    def prompt_tokens(self, traj: int) -> int:
        group_id, prompt = _group(traj)
        return prompt // self.page * self.page if group_id else 0

    def take(self, traj: int, num_new: int) -> None:
        group_id, prompt = _group(traj)
        context = max(self.known.get(traj, 0), prompt, 1) + num_new
        seq = _tokens(traj, context)
        hit = self.cache.take(f"t{traj}", group_id, prompt)
        self.cache.end_batch()
        expected, _ = self.tree.match(seq)
        assert hit == expected
        if group_id:
            self.tree.insert(seq[:prompt])  # the prefill puts the prompt in the tree
        _, lock_node = self.tree.match(seq[: max(expected, self.prompt_tokens(traj))])
        self.tree.lock(lock_node, +1)
        self.running[traj] = (context, lock_node)
        self.known[traj] = context

    def put(self, traj: int, num_generated: int, retract: bool) -> None:
        group_id, prompt = _group(traj)
        admitted, lock_node = self.running.pop(traj)
        final = admitted + num_generated
        kept = admitted if retract else final
        self.cache.put(f"t{traj}", group_id, prompt, kept, admitted)
        if group_id:
            self.cache.unlock(group_id, prompt)
        seq = _tokens(traj, final)
        self.tree.insert(seq[:admitted])  # SGLang's cache_unfinished_req after the prefill
        self.tree.insert(seq[:kept])  # ... and cache_finished_req (a retract inserts nothing)
        self.tree.lock(lock_node, -1)
        self.known[traj] = final

    def import_(self, traj: int, extra: int) -> None:
        group_id, prompt = _group(traj)
        num_tokens = max(prompt, 1) + extra
        self.cache.put(f"t{traj}", group_id, prompt, num_tokens)
        self.tree.remove_chain(traj)  # an import replaces the trajectory's record
        seq = _tokens(traj, num_tokens)
        if group_id:
            self.tree.insert(seq[:prompt])
        self.tree.insert(seq)
        self.known[traj] = max(self.known.get(traj, 0), num_tokens)

    def release(self, traj: int) -> None:
        self.cache.pop(f"t{traj}")
        self.tree.remove_chain(traj)

    def check(self) -> None:
        cache, tree = self.cache, self.tree
        running_own = sum(
            tree.match(_tokens(traj, context), touch=False)[0] - self.prompt_tokens(traj)
            for traj, (context, _) in self.running.items()
        )
        assert cache.total_tokens + running_own == tree.total_tokens()
        assert cache.total_tokens == cache.recount()
        locked_groups = {_group(traj) for traj in self.running if _group(traj)[0]}
        locked = sum(prompt // self.page * self.page for _, prompt in locked_groups)
        assert cache.locked_tokens == locked
        for traj, context in self.known.items():
            if traj in self.running:
                continue
            group_id, prompt = _group(traj)
            expected, _ = tree.match(_tokens(traj, context), touch=False)
            assert cache.match(f"t{traj}", group_id, prompt) == expected


radix_operations = st.lists(
    st.one_of(
        st.tuples(st.just("take"), st.integers(0, 5), st.integers(0, 20)),
        st.tuples(st.just("put"), st.integers(0, 5), st.integers(0, 20), st.booleans()),
        st.tuples(st.just("import"), st.integers(0, 5), st.integers(0, 30)),
        st.tuples(st.just("release"), st.integers(0, 5)),
        st.tuples(st.just("evict"), st.integers(1, 3)),
    ),
    max_size=60,
)


@settings(max_examples=300)
@given(ops=radix_operations, page=st.sampled_from([1, 1, 4]))
def test_the_radix_cache_matches_a_reference_radix_tree(ops: list[tuple], page: int) -> None:
    harness = Harness(page)
    for op in ops:
        match op:
            case ("take", traj, new) if traj not in harness.running:
                harness.take(traj, new)
            case ("put", traj, generated, retract) if traj in harness.running:
                harness.put(traj, generated, retract)
            case ("import", traj, extra) if traj not in harness.running:
                harness.import_(traj, extra)
            case ("release", traj) if traj not in harness.running:
                harness.release(traj)
            case ("evict", count):
                for _ in range(count):
                    assert harness.cache.evict_one() == harness.tree.evict_one()
        harness.check()


def test_eviction_trims_the_least_recent_trajectory_from_its_tail() -> None:
    cache = RadixCache()
    cache.take("a", "g", 100)  # turn 1 of two samples of one prompt
    cache.end_batch()
    cache.take("b", "g", 100)
    cache.put("a", "g", 100, 300, 100)  # a generated 200
    cache.unlock("g", 100)
    cache.put("b", "g", 100, 250, 100)
    cache.unlock("g", 100)
    assert (cache.total_tokens, cache.get("a"), cache.get("b")) == (100 + 200 + 150, 300, 250)
    cache.take("a", "g", 100)  # turn 2 of a: 300 + 50 of tool output
    cache.put("a", "g", 100, 400, 350)
    cache.unlock("g", 100)
    assert cache.evict_one() == 150  # b is the least recent: its one node goes whole
    assert cache.match("b", "g", 100) == 100  # ... and its next turn still hits the prompt
    assert [cache.evict_one() for _ in range(3)] == [50, 50, 200]  # a's nodes, tail first
    assert (cache.evict_one(), cache.evict_one(), cache.total_tokens) == (100, 0, 0)


# ---- the batching model on the radix cache -----------------------------------------------------


def grpo_job(
    rid: str, traj: str, ctx: int, out: int, *, new: int | None = None, prompt: int = 1000
) -> GenerationJob:
    return GenerationJob(
        request_id=rid,
        traj_id=traj,
        num_context_tokens=ctx,
        num_new_tokens=ctx if new is None else new,
        num_output_tokens=out,
        group_id="g" if prompt else "",
        num_prompt_tokens=prompt,
    )


def test_a_group_s_shared_prompt_is_cached_once() -> None:
    model = BatchingModel(COST, BatchingConfig(cache="radix"))
    model.submit(grpo_job("a", "ta", 1000, 100), 0.0)
    model.submit(grpo_job("b", "tb", 1000, 100), 0.0)  # same prefill batch: both compute it
    model.submit(grpo_job("c", "tc", 1000, 100), 0.5)  # a later batch hits it
    done = {d.request_id: d for d in drain(model)}
    assert [done[r].num_cached_tokens for r in "abc"] == [0, 0, 1000]
    assert model.load().num_kv_tokens == 1000 + 3 * 100  # the prompt once, each output once
    model.release("ta")
    assert model.load().num_kv_tokens == 1000 + 2 * 100  # the prompt stays for the others


@pytest.mark.parametrize(("cache", "survives"), [("radix", 1600), ("trajectory", 0)])
def test_a_returning_trajectory_hits_what_survives_of_its_prefix(
    cache: CacheKind, survives: int
) -> None:
    model = BatchingModel(SmallKv(COST, 4000), BatchingConfig(cache=cache))
    model.submit(grpo_job("a1", "ta", 1000, 500), 0.0)
    drain(model)
    model.submit(grpo_job("a2", "ta", 1600, 400, new=100), 10.0)  # + 100 tool tokens
    drain(model)  # radix: ta's chain is prompt 1000 | 500 | 100 | 400
    model.submit(grpo_job("big", "tz", 100, 2000, prompt=0), 20.0)  # a stranger
    drain(model)
    # 2100 live + 2000 cached > 4000: radix trims ta's last node; trajectory evicts it whole.
    assert model.cached_tokens("ta") == survives
    model.submit(grpo_job("a3", "ta", 2100, 10, new=100), 100.0)
    (again,) = drain(model)
    assert (again.num_cached_tokens, again.num_recomputed_tokens) == (survives, 2000 - survives)


def _preempted_low(keeps_kv: bool) -> tuple[BatchingModel, int]:
    """A long job preempted ~1 s in by a high-priority one; the model and what it had cached."""
    config = BatchingConfig(
        max_running=1, preemptive=True, cache="radix", preemption_keeps_kv=keeps_kv
    )
    model = BatchingModel(COST, config)
    model.submit(GenerationJob("low", "tl", 1000, 1000, 2000), 0.0)
    model.advance(1.0)
    model.submit(GenerationJob("high", "th", 100, 100, 10, priority=5.0), 1.0)
    model.next_event_time()  # the admission (and the preemption) happen when someone looks
    assert model.num_preemptions == 1
    return model, model.cached_tokens("tl")


def test_retract_frees_the_generated_kv_and_recomputes_it_on_resume() -> None:
    kept, kept_tokens = _preempted_low(keeps_kv=True)
    retracted, retracted_tokens = _preempted_low(keeps_kv=False)
    generated = kept_tokens - 1000
    assert generated > 0 and retracted_tokens == 1000  # only the admitted context survives
    for model, recomputed in ((kept, 0), (retracted, generated)):
        done: dict[str, FinishedGeneration] = {d.request_id: d for d in drain(model)}
        assert done["low"].num_preemptions == 1
        assert done["low"].num_recomputed_tokens == recomputed
        assert done["low"].num_output_tokens == 2000
        assert model.num_recomputed_tokens == recomputed


def test_a_retracted_victim_frees_its_whole_reservation() -> None:
    """Under retract the victim's live KV counts as freed: a head that fits only without the
    victim's KV preempts it; were the KV kept, it waits."""
    for keeps_kv in (True, False):
        config = BatchingConfig(preemptive=True, cache="radix", preemption_keeps_kv=keeps_kv)
        model = BatchingModel(SmallKv(COST, 3000), config)
        model.submit(GenerationJob("low", "tl", 1000, 1000, 600), 0.0)
        model.advance(1.0)  # ~50 tokens generated: 1050 live, 1600 reserved
        model.submit(GenerationJob("high", "th", 2490, 2490, 10, priority=9.0), 1.0)
        model.next_event_time()
        assert model.invariant_violations() == []
        assert model.num_preemptions == (0 if keeps_kv else 1)
        assert len(drain(model)) == 2


@pytest.mark.parametrize("cache", ["radix", "trajectory"])
def test_a_prefill_only_job_finishes_with_its_context_cached(cache: CacheKind) -> None:
    model = BatchingModel(COST, BatchingConfig(cache=cache))
    model.submit(GenerationJob("warm", "t", 800, 800, 0), 5.0)
    (done,) = drain(model)
    assert (done.num_output_tokens, done.num_context_tokens) == (0, 800)
    assert done.finished_at == pytest.approx(5.0 + COST.prefill_s(800))
    assert done.decode_s == 0.0 and model.cached_tokens("t") == 800
    model.submit(GenerationJob("turn", "t", 850, 50, 20), 10.0)
    (turn,) = drain(model)
    assert (turn.num_cached_tokens, turn.num_recomputed_tokens) == (800, 0)


def test_grouped_jobs_keep_the_model_s_invariants_at_page_granularity() -> None:
    model = BatchingModel(SmallKv(COST, 5000), BatchingConfig(cache="radix", page_tokens=16))
    for index in range(4):
        model.submit(grpo_job(f"r{index}", f"t{index}", 1030, 300, prompt=1030), index * 0.3)
    drain(model)
    for index in range(4):
        turn = grpo_job(f"s{index}", f"t{index}", 1380, 200, new=50, prompt=1030)
        model.submit(turn, 100.0 + index * 0.3)
    done = drain(model)
    assert model.invariant_violations() == []
    assert model.cached_tokens("t0") % 16 == 0
    # Each turn re-prefills the unaligned tail its first turn left (1330 % 16 = 2 tokens).
    assert all(d.num_recomputed_tokens % 16 == 2 for d in done)


def test_a_retracted_victim_s_prompt_node_counts_as_freed_when_it_held_it_alone() -> None:
    """A victim that alone holds its group's prompt frees it too (it becomes evictable cache):
    here only that makes room for the head."""
    for keeps_kv in (True, False):
        config = BatchingConfig(preemptive=True, cache="radix", preemption_keeps_kv=keeps_kv)
        model = BatchingModel(SmallKv(COST, 3000), config)
        model.submit(grpo_job("low", "tl", 1000, 500), 0.0)  # 1000 shared + 500 reserved
        model.advance(1.0)
        model.submit(GenerationJob("high", "th", 2400, 2400, 10, priority=9.0), 1.0)
        model.next_event_time()
        assert model.invariant_violations() == []
        assert model.num_preemptions == (0 if keeps_kv else 1)
        done = {d.request_id: d for d in drain(model)}
        assert set(done) == {"low", "high"}
        assert (done["high"].finished_at < done["low"].finished_at) == (not keeps_kv)


def test_a_grouped_job_decodes_over_its_whole_context() -> None:
    """The shared prompt's KV is the cache's, but attention still reads it: the decode steps
    cost what they cost for the whole context."""
    model = BatchingModel(COST, BatchingConfig(cache="radix"))
    model.submit(grpo_job("a", "ta", 1200, 700), 10.0)
    (done,) = drain(model)
    solo = COST.prefill_s(1200) + sum(COST.decode_step_s(1, 1200 + j) for j in range(700))
    assert done.finished_at - 10.0 == pytest.approx(solo, rel=1e-9)
    assert model.load().num_kv_tokens == 1900
