"""One serving order and one preemption rule for every engine
(``heddle.policy.scheduling.preemption``).

The same arrivals and priority changes go to the simulator's batching model, the torch engine's
scheduler and the SGLang engine's admission queue, on two batch slots with KV to spare; after
each event the three must run the same requests. The table's rows are chosen at the rule's
edges: a 4% gap that the 5% relative margin refuses, a gap that beats it, equal priorities
broken by arrival (the latest yields first), and an absolute margin that binds.
"""

from __future__ import annotations

from typing import Any

import pytest

from heddle.policy.batching import BatchingConfig, BatchingModel, GenerationJob
from heddle.policy.cost.model import preset
from heddle.policy.scheduling.preemption import PreemptionConfig
from heddle.workers.engines.base import GenerationRequest
from heddle.workers.engines.sglang.local_queue import AdmissionQueue, PreemptJob
from heddle.workers.engines.torch_engine.prefix_store import PrefixStore
from heddle.workers.engines.torch_engine.scheduler import Scheduler, SchedulerConfig
from heddle.workers.engines.torch_engine.sequence import Sequence

NUM_SLOTS = 2
# (event, request, priority, requests running afterwards, in the serving order)
DEFAULT_RULE = PreemptionConfig()  # absolute 0, relative 5%
TABLE = [
    ("add", "a", 1.0, ["a"]),
    ("add", "b", 1.0, ["a", "b"]),
    ("add", "c", 1.04, ["a", "b"]),  # 4% above: within the relative margin, waits
    ("add", "d", 2.0, ["d", "a"]),  # beats both; b (equal to a, later) yields first
    ("add", "e", 0.5, ["d", "a"]),
    ("add", "f", 2.09, ["f", "d"]),  # beats a (1.0); c (1.04) still waits behind f
    ("add", "g", 2.05, ["f", "d"]),  # 2.5% above d: waits
    ("set", "c", 3.0, ["c", "f"]),  # c rises above d's margin: d yields
    ("set", "g", 2.2, ["c", "g"]),  # g now beats f (2.09 + 5%)
    ("set", "a", 0.1, ["c", "g"]),  # a waiting request falling changes nothing
]
ABSOLUTE_RULE = PreemptionConfig(min_priority_gap=0.5)
ABSOLUTE_TABLE = [
    ("add", "a", 1.0, ["a"]),
    ("add", "b", 2.0, ["b", "a"]),
    ("add", "c", 1.4, ["b", "a"]),  # 0.4 above a: the absolute margin refuses
    ("add", "d", 1.6, ["b", "d"]),  # 0.6 above a: preempts it
    ("set", "c", 2.6, ["c", "b"]),  # 0.6 above d (the lowest running): d yields
]


class SimulatedEngine:
    """The simulator's batching model on a clock that does not move (nothing finishes)."""

    def __init__(self, rule: PreemptionConfig) -> None:
        config = BatchingConfig(max_running=NUM_SLOTS, preemptive=True, preemption=rule)
        self.model = BatchingModel(preset("qwen3-8b", "h200", 1), config)

    def add(self, request_id: str, priority: float) -> None:
        job = GenerationJob(request_id, f"t-{request_id}", 16, 16, 10_000, priority)
        self.model.submit(job, 0.0)

    def set_priority(self, request_id: str, priority: float) -> None:
        self.model.set_priority(request_id, priority, 0.0)

    def running(self) -> list[str]:
        return self.model.running_ids()


class TorchEngine:
    """The torch engine's scheduler, with the engine's prefill reduced to token counts."""

    def __init__(self, rule: PreemptionConfig) -> None:
        config = SchedulerConfig(NUM_SLOTS, max_kv_tokens=1_000_000, preemption=rule)
        self.scheduler = Scheduler(config, PrefixStore[Any]())
        self.seqs: dict[str, Sequence] = {}

    def add(self, request_id: str, priority: float) -> None:
        request = GenerationRequest(
            request_id=request_id,
            trajectory_id=f"t-{request_id}",
            input_token_ids=[1] * 16,
            max_new_tokens=10_000,
            priority=priority,
        )
        seq = Sequence(request=request, arrival=len(self.seqs), seed=0, priority=priority)
        self.seqs[request_id] = seq
        self.scheduler.add(seq)

    def set_priority(self, request_id: str, priority: float) -> None:
        self.seqs[request_id].priority = priority

    def running(self) -> list[str]:
        out = self.scheduler.schedule()
        for seq in out.admitted:
            seq.num_kv_tokens = seq.kv_target
            if not seq.has_pending_token:
                seq.append(7, 0.0)
        return [seq.request_id for seq in sorted(self.scheduler.running, key=Sequence.order_key)]


class SglangEngine:
    """The SGLang engine's admission queue; a preemption's abort drains at once."""

    def __init__(self, rule: PreemptionConfig) -> None:
        self.queue = AdmissionQueue(max_running=NUM_SLOTS, preemption=rule)

    def add(self, request_id: str, priority: float) -> None:
        self.queue.add(request_id, priority)

    def set_priority(self, request_id: str, priority: float) -> None:
        self.queue.set_priority(request_id, priority)

    def running(self) -> list[str]:
        while decisions := self.queue.schedule():
            for decision in decisions:
                if isinstance(decision, PreemptJob):
                    self.queue.drained(decision.job_id)
        return [entry.job_id for entry in self.queue.running]


@pytest.mark.parametrize(
    ("rule", "table"), [(DEFAULT_RULE, TABLE), (ABSOLUTE_RULE, ABSOLUTE_TABLE)]
)
@pytest.mark.parametrize("engine_kind", [SimulatedEngine, TorchEngine, SglangEngine])
def test_every_engine_makes_the_tables_decisions(
    engine_kind: type[SimulatedEngine | TorchEngine | SglangEngine],
    rule: PreemptionConfig,
    table: list[tuple[str, str, float, list[str]]],
) -> None:
    engine = engine_kind(rule)
    for step, (event, request_id, priority, expected) in enumerate(table):
        if event == "add":
            engine.add(request_id, priority)
        else:
            engine.set_priority(request_id, priority)
        assert engine.running() == expected, f"row {step}: {event} {request_id} {priority}"
