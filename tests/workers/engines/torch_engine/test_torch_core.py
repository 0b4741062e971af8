"""The torch engine core on the tiny model: batching, preemption, prefix re-use, abort, budget.

Exactness: a sequence decoded at batch 1 computes bit-identical logits whether or not it was
preempted in between (its KV is copied out and back), so tokens and logprobs must be equal.
Where the batch composition or the prefill/decode split differs, matmuls may differ in the last
bits: those tests decode greedily and compare logprobs with a tolerance.
"""

from __future__ import annotations

import pytest

from heddle.events.base import SamplingParams
from heddle.workers.engines.base import GenerationRequest, GenerationResult
from heddle.workers.engines.torch_engine.core import EngineCore
from heddle.workers.engines.torch_engine.loading import LoadedModel
from heddle.workers.engines.torch_engine.options import TorchEngineOptions
from heddle.workers.engines.torch_engine.sequence import SeqStatus

SAMPLED = SamplingParams(temperature=0.9, top_p=0.95, seed=1234)
GREEDY = SamplingParams(temperature=0.0)


def _core(model: LoadedModel, **overrides: object) -> EngineCore:
    options = TorchEngineOptions(**{"max_running": 4, "max_kv_tokens": 4096, **overrides})  # type: ignore[arg-type]
    return EngineCore(model, options)


def _request(
    index: int,
    prompt: list[int],
    *,
    max_new: int = 12,
    priority: float = 0.0,
    sampling: SamplingParams = SAMPLED,
    trajectory: str | None = None,
    stop: tuple[int, ...] = (),
) -> GenerationRequest:
    return GenerationRequest(
        request_id=f"r{index:04d}",
        trajectory_id=trajectory or f"t{index:04d}",
        input_token_ids=prompt,
        max_new_tokens=max_new,
        priority=priority,
        sampling=sampling,
        stop_token_ids=stop,
    )


def _prompt(seed: int, length: int = 10) -> list[int]:
    return [(seed * 37 + index * 11) % 256 for index in range(length)]


def _drain(core: EngineCore, *, check: bool = True) -> dict[str, GenerationResult]:
    results: dict[str, GenerationResult] = {}
    while core.has_work():
        for result in core.step():
            results[result.request_id] = result
        if check:
            _check_invariants(core)
    return results


def _check_invariants(core: EngineCore) -> None:
    """Slots, parked blocks and the budget agree with the scheduler after every step."""
    running, waiting = core.scheduler.running, core.scheduler.waiting
    assert {id(seq) for seq in core.pool.owners} == {id(seq) for seq in running}
    assert len(running) <= core.options.max_running
    for seq in running:
        assert seq.status is SeqStatus.RUNNING and seq.num_kv_tokens == seq.kv_target
    parked = {seq.request_id: seq.num_kv_tokens for seq in waiting if seq.num_kv_tokens}
    assert {rid: block.num_tokens for rid, block in core.kv.parked.items()} == parked
    assert core.scheduler.num_used_tokens() <= core.options.max_kv_tokens


def _solo(model: LoadedModel, request: GenerationRequest) -> GenerationResult:
    core = _core(model)
    core.submit(request)
    return _drain(core)[request.request_id]


def test_batched_requests_match_their_solo_runs(tiny: LoadedModel) -> None:
    core = _core(tiny, max_running=3)
    requests = [
        _request(index, _prompt(index, 5 + 3 * index), max_new=6 + index, sampling=GREEDY)
        for index in range(5)
    ]
    for request in requests:
        core.submit(request)
    results = _drain(core)
    stats = core.stats()
    assert stats.num_decode_steps < sum(r.max_new_tokens for r in requests)  # batched
    assert sum(stats.num_decode_steps_by_batch.values()) == stats.num_decode_steps
    assert max(stats.num_decode_steps_by_batch) == 3  # max_running
    assert (
        sum(b * n for b, n in stats.num_decode_steps_by_batch.items()) == stats.num_decoded_tokens
    )
    for request in requests:
        batched, solo = results[request.request_id], _solo(tiny, request)
        assert batched.output_token_ids == solo.output_token_ids
        assert batched.output_logprobs == pytest.approx(solo.output_logprobs, abs=1e-4)
        assert batched.finish_reason == "length"
        assert len(batched.output_token_ids) == request.max_new_tokens


@pytest.mark.parametrize("park_on", ["device", "host"])
def test_preempted_request_resumes_with_kept_kv_and_identical_tokens(
    tiny: LoadedModel, park_on: str
) -> None:
    victim = _request(0, _prompt(0, 24), max_new=20)
    reference = _solo(tiny, victim)
    core = _core(tiny, max_running=1, preemption_threshold=1.0, park_on=park_on)
    core.submit(victim)
    for _ in range(5):
        core.step()
    core.submit(_request(1, _prompt(1), max_new=4, priority=5.0))
    results = _drain(core)
    resumed = results[victim.request_id]
    assert resumed.num_preemptions == 1 and resumed.num_recomputed_tokens == 0
    assert resumed.output_token_ids == reference.output_token_ids
    assert resumed.output_logprobs == reference.output_logprobs
    stats = core.stats()
    assert stats.num_preemptions == 1 and stats.num_recomputed_tokens == 0
    assert stats.num_restored_tokens >= 24 + 5  # prompt + the tokens fed before preemption


def test_explicit_preempt_then_resume_is_exact(tiny: LoadedModel) -> None:
    request = _request(0, _prompt(3, 16), max_new=15)
    reference = _solo(tiny, request)
    core = _core(tiny)
    core.submit(request)
    for _ in range(4):
        core.step()
    core.preempt(request.request_id)
    assert core.load().num_running == 0 and core.load().num_waiting == 1
    result = _drain(core)[request.request_id]
    assert result.num_preemptions == 1
    assert result.output_token_ids == reference.output_token_ids


def test_recompute_mode_prefills_again_and_counts_it(tiny: LoadedModel) -> None:
    victim = _request(0, _prompt(4, 20), max_new=12, sampling=GREEDY)
    reference = _solo(tiny, victim)
    core = _core(tiny, max_running=1, preemption_mode="recompute")
    core.submit(victim)
    for _ in range(3):
        core.step()
    core.submit(_request(1, _prompt(5), max_new=2, priority=9.0))
    resumed = _drain(core)[victim.request_id]
    assert resumed.num_preemptions == 1
    assert resumed.num_recomputed_tokens == 20 + 3  # prompt and the 3 fed tokens, again
    assert resumed.output_token_ids == reference.output_token_ids
    assert resumed.output_logprobs == pytest.approx(reference.output_logprobs, abs=1e-4)


def test_next_turn_prefills_only_its_new_tokens(tiny: LoadedModel) -> None:
    core = _core(tiny)
    first = _request(0, _prompt(6, 30), max_new=8, sampling=GREEDY, trajectory="traj")
    core.submit(first)
    turn1 = _drain(core)[first.request_id]
    prefilled_before = core.stats().num_prefilled_tokens
    tool_output = [5, 6, 7, 8]
    context = first.input_token_ids + turn1.output_token_ids + tool_output
    second = _request(1, context, max_new=6, sampling=GREEDY, trajectory="traj")
    core.submit(second)
    turn2 = _drain(core)[second.request_id]
    assert turn2.num_cached_tokens == 30 + 8 - 1  # all but the last output, never fed
    assert core.stats().num_prefilled_tokens - prefilled_before == 1 + len(tool_output)
    assert turn2.num_recomputed_tokens == 0
    fresh = _solo(tiny, _request(2, context, max_new=6, sampling=GREEDY))
    assert fresh.num_cached_tokens == 0
    assert turn2.output_token_ids == fresh.output_token_ids
    assert turn2.output_logprobs == pytest.approx(fresh.output_logprobs, abs=1e-4)


def test_evicted_prefix_is_recomputed_and_counted(tiny: LoadedModel) -> None:
    core = _core(tiny, max_kv_tokens=64)
    core.submit(_request(0, _prompt(7, 30), max_new=4, trajectory="a"))
    turn1 = _drain(core)["r0000"]
    core.submit(_request(1, _prompt(8, 40), max_new=4, trajectory="b"))  # evicts a's prefix
    _drain(core)
    assert core.stats().num_evictions == 1
    context = _prompt(7, 30) + turn1.output_token_ids + [1]
    core.submit(_request(2, context, max_new=2, trajectory="a"))
    turn2 = _drain(core)["r0002"]
    assert turn2.num_cached_tokens == 0 and turn2.num_recomputed_tokens == 30 + 4 - 1


def test_abort_returns_partial_output_and_keeps_the_prefix(tiny: LoadedModel) -> None:
    core = _core(tiny)
    request = _request(0, _prompt(9), max_new=50, trajectory="traj")
    core.submit(request)
    for _ in range(3):
        core.step()
    result = core.abort(request.request_id)
    assert result is not None and result.finish_reason == "abort"
    assert len(result.output_token_ids) == len(result.output_logprobs) == 4
    assert core.abort(request.request_id) is None and not core.has_work()
    exported = core.export_block("traj")
    assert exported is not None and exported.num_tokens == 10 + 4 - 1


def test_waiting_request_can_be_aborted_and_priority_changes_reorder(tiny: LoadedModel) -> None:
    core = _core(tiny, max_running=1)
    first, second, third = (_request(index, _prompt(index), max_new=3) for index in range(3))
    for request in (first, second, third):
        core.submit(request)
    core.step()
    waiting_abort = core.abort(second.request_id)
    assert waiting_abort is not None and waiting_abort.output_token_ids == []
    core.set_priority(third.request_id, 10.0)  # now preempts the first
    core.step()
    assert [seq.request_id for seq in core.scheduler.running] == [third.request_id]
    results = _drain(core)
    assert set(results) == {first.request_id, third.request_id}


def test_stop_token_and_prefill_only_requests(tiny: LoadedModel) -> None:
    core = _core(tiny)
    probe = _solo(tiny, _request(0, _prompt(10), max_new=5, sampling=GREEDY))
    stop_at = probe.output_token_ids[2]
    core.submit(_request(1, _prompt(10), max_new=5, sampling=GREEDY, stop=(stop_at,)))
    stopped = _drain(core)["r0001"]
    assert stopped.finish_reason == "stop"
    assert (
        stopped.output_token_ids
        == probe.output_token_ids[: probe.output_token_ids.index(stop_at) + 1]
    )
    core.submit(_request(2, _prompt(11, 12), max_new=0, trajectory="warm"))
    warmed = _drain(core)["r0002"]
    assert warmed.output_token_ids == [] and warmed.finish_reason == "length"
    block = core.export_block("warm")
    assert block is not None and block.num_tokens == 12


def test_bad_requests_are_refused_with_clear_errors(tiny: LoadedModel) -> None:
    core = _core(tiny, max_kv_tokens=32)
    bad = [
        (_request(0, []), "empty"),
        (_request(0, [1, 999]), r"token ids must be in \[0, 259\)"),
        (_request(0, [1] * 40), "exceed this engine's capacity"),
        (_request(0, [1], max_new=-1), "max_new_tokens"),
        (_request(0, [1], sampling=SamplingParams(top_p=0.0)), "top_p"),
    ]
    for request, message in bad:
        with pytest.raises(ValueError, match=message):
            core.submit(request)
    core.submit(_request(0, [1, 2], trajectory="x"))
    with pytest.raises(ValueError, match="already in flight"):
        core.submit(_request(0, [1, 2], trajectory="y"))
    with pytest.raises(ValueError, match="already has a request in flight"):
        core.submit(_request(1, [1, 2], trajectory="x"))


def test_kv_budget_is_never_exceeded_under_mixed_load(tiny: LoadedModel) -> None:
    core = _core(tiny, max_running=3, max_kv_tokens=70)
    requests = [
        _request(index, _prompt(index, 8 + index), max_new=12, priority=index) for index in range(8)
    ]
    results: dict[str, GenerationResult] = {}
    for request in requests:  # later arrivals have higher priority: they preempt
        core.submit(request)
        for _ in range(2):
            results.update({result.request_id: result for result in core.step()})
            _check_invariants(core)
    results.update(_drain(core, check=True))
    assert len(results) == 8
    for result in results.values():
        assert len(result.output_token_ids) == 12 and result.finish_reason == "length"
    stats = core.stats()
    assert stats.num_preemptions > 0
    assert stats.num_restored_tokens + stats.num_recomputed_tokens > 0


def test_returning_trajectory_finds_its_prefix_unless_lru_evicted_it(tiny: LoadedModel) -> None:
    # Budget 100: three 23-token prefixes fit; d, reserving 44, evicts the least recently used
    # (a). Returns in the order a, c, b, d: a's (reserving 28) evicts b, the oldest then; c finds
    # its prefix; b's evicts d (older than a and c now) and d's evicts a. Whoever was evicted
    # recomputes exactly its prefix, the others recompute nothing.
    core = _core(tiny, max_kv_tokens=100)
    turns: dict[str, list[int]] = {}
    for index, (name, length) in enumerate((("a", 20), ("b", 20), ("c", 20), ("d", 40))):
        request = _request(index, _prompt(index, length), max_new=4, trajectory=name)
        core.submit(request)
        turns[name] = request.input_token_ids + _drain(core)[request.request_id].output_token_ids
    assert core.kv.store.num_tokens <= 100 and "a" not in core.kv.store
    found: dict[str, tuple[int, int]] = {}
    for index, name in enumerate("acbd", start=10):
        request = _request(index, turns[name] + [1, 2], max_new=2, trajectory=name)
        core.submit(request)
        result = _drain(core)[request.request_id]
        found[name] = (result.num_cached_tokens, result.num_recomputed_tokens)
    prefix = {name: len(tokens) - 1 for name, tokens in turns.items()}  # the last output: unfed
    assert found == {
        "a": (0, prefix["a"]),
        "c": (prefix["c"], 0),
        "b": (0, prefix["b"]),
        "d": (0, prefix["d"]),
    }


def test_preemption_for_kv_keeps_the_victims_kv_and_its_tokens(tiny: LoadedModel) -> None:
    victim = _request(0, _prompt(0, 24), max_new=20)  # reserves 44 of 60
    reference = _solo(tiny, victim)
    core = _core(tiny, max_kv_tokens=60)
    core.submit(victim)
    for _ in range(5):
        core.step()
    # A free slot, but 24 tokens do not fit beside the victim's reservation: it yields its
    # unused reservation and keeps its 29 tokens of KV.
    core.submit(_request(1, _prompt(1, 20), max_new=4, priority=5.0))
    results = _drain(core)
    resumed = results[victim.request_id]
    assert resumed.num_preemptions == 1 and resumed.num_recomputed_tokens == 0
    assert resumed.output_token_ids == reference.output_token_ids
    assert resumed.output_logprobs == reference.output_logprobs
