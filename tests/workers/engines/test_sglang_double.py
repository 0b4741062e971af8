"""The SGLang double behaves as the ``sglang`` engine model says (so the adapter is tested against
what the simulator assumes): KV-bounded admission, retraction when decode runs out of KV,
priority preemption beyond the threshold only, whole-leaf LRU eviction of the radix cache, the
prefilled tokens of each step, figures in ``/v1/loads``, and SGLang's refusals."""

from __future__ import annotations

import pytest
from double_scheduler import DoubleConfig, DoubleScheduler, Req, next_token
from sglang_double import SglangDouble, parse_args

from heddle.workers.engines.sglang.client import SglangClient, SglangError
from heddle.workers.engines.sglang.protocol import GenerateBody, SamplingParamsWire

_arrivals = iter(range(10**9))


def req(input_ids: list[int], max_new: int, *, priority: int | None = None, rid: str = "") -> Req:
    arrival = next(_arrivals)
    return Req(
        rid=rid or f"r{arrival}", input_ids=list(input_ids), max_new_tokens=max_new,
        stop_token_ids=frozenset(), ignore_eos=True, priority=priority, return_logprob=False,
        arrival=arrival, created_s=0.0,
    )  # fmt: skip


def run(scheduler: DoubleScheduler, max_steps: int = 10_000) -> None:
    """Step until nothing is in flight, checking the KV pool after every step."""
    for step in range(max_steps):
        if not scheduler.in_flight:
            return
        scheduler.schedule()
        scheduler.decode(float(step))
        assert scheduler.used_tokens <= scheduler.config.max_total_num_tokens or (
            len(scheduler.running) == 1  # the last running request is never retracted
        )
    raise AssertionError("the scheduler did not drain")


def undisturbed(input_ids: list[int], max_new: int) -> list[int]:
    context = list(input_ids)
    for _ in range(max_new):
        context.append(next_token(context, DoubleConfig().vocab_size))
    return context[len(input_ids) :]


def test_admission_is_bounded_by_kv_including_the_output_reserve() -> None:
    scheduler = DoubleScheduler(DoubleConfig(max_running=8, max_total_num_tokens=400))
    for index in range(4):
        scheduler.submit(req([index + 1] * 100, 100))  # 100 to prefill + 70 reserved each
    scheduler.schedule()
    assert len(scheduler.running) == 2 and len(scheduler.waiting) == 2
    run(scheduler)
    assert len(scheduler.admission_log) == 4


def test_decode_out_of_kv_retracts_and_the_output_is_unchanged() -> None:
    config = DoubleConfig(max_running=4, max_total_num_tokens=300, new_token_ratio=0.0)
    scheduler = DoubleScheduler(config)
    requests = [req([10 * index + 1] * 50, 60) for index in range(4)]
    for request in requests:
        scheduler.submit(request)
    run(scheduler)
    assert scheduler.num_retractions > 0
    assert sum(r.num_retractions for r in requests) == scheduler.num_retractions
    for request in requests:
        assert request.output_ids == undisturbed(request.input_ids, 60)
        assert request.finish_reason == {"type": "length", "length": 60}


def test_a_retracted_request_re_prefills_only_what_the_cache_lost() -> None:
    config = DoubleConfig(max_running=2, max_total_num_tokens=10_000, new_token_ratio=0.0)
    scheduler = DoubleScheduler(config)
    victim = req([7] * 40, 30)
    scheduler.submit(victim)
    scheduler.schedule()
    for step in range(10):
        scheduler.decode(float(step))
    scheduler._retract(victim)  # what a KV shortfall does
    prefilled_before = scheduler.num_prefilled_tokens
    assert scheduler.schedule() == 10  # the 40 context tokens were cached; the 10 outputs not
    assert scheduler.num_prefilled_tokens - prefilled_before == 10
    assert victim.cached_tokens == 0 + 40


@pytest.mark.parametrize(("priority", "preempts"), [(100, True), (10, False), (5, False)])
def test_priority_preempts_only_beyond_the_threshold(priority: int, preempts: bool) -> None:
    scheduler = DoubleScheduler(DoubleConfig(max_running=1, preemption_threshold=10))
    low = req([1] * 10, 50, priority=0)
    scheduler.submit(low)
    scheduler.schedule()
    scheduler.decode(0.0)
    high = req([2] * 10, 5, priority=priority)
    scheduler.submit(high)
    scheduler.schedule()
    assert (high in scheduler.running) is preempts
    assert low.num_retractions == int(preempts)
    run(scheduler)
    assert low.output_ids == undisturbed(low.input_ids, 50)


def test_without_priority_scheduling_the_queue_is_fcfs() -> None:
    scheduler = DoubleScheduler(DoubleConfig(max_running=1, priority_scheduling=False))
    first, second = req([1] * 5, 3, priority=None), req([2] * 5, 3, priority=None)
    scheduler.submit(first)
    scheduler.submit(second)
    run(scheduler)
    assert scheduler.admission_log == [first.rid, second.rid]


def test_a_returning_request_hits_what_survives_of_its_prefix() -> None:
    """Whole-leaf LRU eviction: the group's shared prompt outlives one sample's own tokens."""
    config = DoubleConfig(max_running=4, max_total_num_tokens=200, new_token_ratio=0.0)
    scheduler = DoubleScheduler(config)
    prompt = list(range(100, 140))
    first, second = req([*prompt, 1], 20), req([*prompt, 2], 20)
    scheduler.submit(first)
    scheduler.schedule()
    scheduler.submit(second)
    run(scheduler)
    assert second.cached_tokens == len(prompt)  # the group's prompt is cached once
    scheduler.tree.match(second.input_ids + second.output_ids)  # second used last
    filler = req(list(range(500, 630)), 1)  # needs room: evicts the LRU leaf (first's) whole
    scheduler.submit(filler)
    run(scheduler)
    back = req(first.input_ids + first.output_ids + [3], 5)
    scheduler.submit(back)
    run(scheduler)
    # first's output (one leaf, cached when it finished) went whole; what it was admitted with
    # (the shared prompt and its own first token, cached at admission) stayed.
    assert back.cached_tokens == len(prompt) + 1


def test_requests_of_one_batch_do_not_hit_each_other() -> None:
    scheduler = DoubleScheduler(DoubleConfig())
    prompt = list(range(1, 30))
    first, second = req([*prompt, 1], 2), req([*prompt, 2], 2)
    scheduler.submit(first)
    scheduler.submit(second)
    assert scheduler.schedule() == 2 * (len(prompt) + 1)  # both computed the prompt
    assert first.cached_tokens == second.cached_tokens == 0
    assert scheduler.tree.total_tokens == len(prompt) + 2  # ... which is cached once


def test_a_prefill_only_request_warms_the_cache() -> None:
    scheduler = DoubleScheduler(DoubleConfig())
    context = list(range(1, 80))
    warm = req(context, 0)
    scheduler.submit(warm)
    assert scheduler.schedule() == len(context)
    assert warm.finish_reason is not None and warm.output_ids == []
    step = req([*context, 5, 6], 4)
    scheduler.submit(step)
    assert scheduler.schedule() == 2  # the two new tokens only
    assert step.cached_tokens == len(context)


def test_the_double_takes_sglangs_flags_and_refuses_others() -> None:
    args = parse_args(["--port", "1", "--enable-priority-scheduling",
                       "--priority-scheduling-preemption-threshold", "3",
                       "--radix-eviction-policy", "lru", "--max-total-tokens", "5000"])  # fmt: skip
    assert args.enable_priority_scheduling and args.priority_scheduling_preemption_threshold == 3
    with pytest.raises(SystemExit):
        parse_args(["--port", "1", "--radix-eviction-policy", "lfu"])
    with pytest.raises(SystemExit):
        parse_args(["--port", "1", "--enable-priority-scheduling", "--schedule-policy", "lpm"])


def body(input_ids: list[int], max_new: int, priority: int | None = None) -> GenerateBody:
    return GenerateBody(
        input_ids=input_ids,
        sampling_params=SamplingParamsWire(max_new_tokens=max_new, ignore_eos=True),
        rid=f"b{next(_arrivals):012d}",
        priority=priority,
    )


async def test_a_priority_without_priority_scheduling_is_refused() -> None:
    config = DoubleConfig(priority_scheduling=False, abort_on_priority_when_disabled=True)
    with SglangDouble(config) as server:
        async with SglangClient(server.url) as client:
            with pytest.raises(SglangError, match="priority is disabled") as refused:
                await client.generate(body([1, 2, 3], 2, priority=5))
            assert refused.value.status_code == 503  # not retried: a retry cannot change it
            assert len(server.bodies) == 0
            assert len((await client.generate(body([1, 2, 3], 2))).output_ids) == 2


async def test_an_input_the_kv_pool_cannot_hold_is_refused() -> None:
    with SglangDouble(DoubleConfig(max_total_num_tokens=50)) as server:
        async with SglangClient(server.url) as client:
            with pytest.raises(SglangError, match="exceeds the maximum allowed length"):
                await client.generate(body(list(range(60)), 2))


async def test_loads_report_throughput_and_cache_hits() -> None:
    with SglangDouble(DoubleConfig(tokens_per_s=400.0)) as server:
        async with SglangClient(server.url) as client:
            prompt = list(range(1, 50))
            await client.generate(body(prompt, 5))
            await client.generate(body(prompt, 40))
            load = (await client.loads()).loads[0]
    assert load.cache_hit_rate is not None and load.cache_hit_rate > 0.3
    assert load.gen_throughput is not None and load.gen_throughput > 0.0
    assert load.num_used_tokens == 0  # an idle server's cache is evictable: free
