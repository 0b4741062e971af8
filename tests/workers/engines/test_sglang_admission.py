"""The sglang engine's local admission queue: ordering, admission, preemption, invariants."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from heddle.policy.scheduling.preemption import PreemptionConfig
from heddle.workers.engines.sglang.local_queue import AdmissionQueue, AdmitJob, PreemptJob


def _margin(absolute: float, relative: float = 0.0) -> PreemptionConfig:
    return PreemptionConfig(min_priority_gap=absolute, min_relative_gap=relative)


def test_free_slots_go_to_the_highest_priority_then_the_earliest() -> None:
    queue = AdmissionQueue(max_running=2, preemption=_margin(0.0))
    for job_id, priority in (("a", 1.0), ("b", 5.0), ("c", 5.0), ("d", 9.0)):
        queue.add(job_id, priority)
    assert queue.schedule() == [AdmitJob("d"), AdmitJob("b")]
    assert [entry.job_id for entry in queue.waiting] == ["c", "a"]


def test_reprioritising_a_waiting_job_reorders_it_without_preemption() -> None:
    queue = AdmissionQueue(max_running=1, preemption=_margin(0.0))
    for job_id in ("run", "x", "y"):
        queue.add(job_id, 0.0)
    assert queue.schedule() == [AdmitJob("run")]
    queue.set_priority("y", 0.0)
    queue.set_priority("x", -1.0)
    assert [entry.job_id for entry in queue.waiting] == ["y", "x"]
    assert queue.schedule() == []  # equal priority does not preempt at threshold 0


def test_a_higher_priority_arrival_preempts_the_lowest_running_once() -> None:
    queue = AdmissionQueue(max_running=2, preemption=_margin(0.0))
    queue.add("low", 1.0)
    queue.add("mid", 2.0)
    assert queue.schedule() == [AdmitJob("mid"), AdmitJob("low")]
    queue.add("high", 10.0)
    assert queue.schedule() == [PreemptJob("low")]
    # The draining slot is reserved for "high": nothing else is preempted meanwhile.
    assert queue.schedule() == []
    queue.drained("low")
    assert queue.schedule() == [AdmitJob("high")]
    assert [entry.job_id for entry in queue.waiting] == ["low"]


def test_the_threshold_protects_running_jobs_from_small_priority_gaps() -> None:
    queue = AdmissionQueue(max_running=1, preemption=_margin(5.0))
    queue.add("running", 1.0)
    queue.schedule()
    queue.add("close", 6.0)
    assert queue.schedule() == []
    queue.set_priority("close", 6.5)
    assert queue.schedule() == [PreemptJob("running")]


def test_the_default_margin_is_the_shared_policys_relative_gap() -> None:
    queue = AdmissionQueue(max_running=1)  # PreemptionConfig(): 5 % of the running priority
    queue.add("running", 100.0)
    queue.schedule()
    queue.add("slightly_longer", 104.0)
    assert queue.schedule() == []
    queue.set_priority("slightly_longer", 106.0)
    assert queue.schedule() == [PreemptJob("running")]


def test_lowering_a_running_jobs_priority_can_preempt_it() -> None:
    queue = AdmissionQueue(max_running=1, preemption=_margin(0.0))
    queue.add("a", 5.0)
    queue.schedule()
    queue.add("b", 3.0)
    assert queue.schedule() == []
    queue.set_priority("a", 1.0)
    assert queue.schedule() == [PreemptJob("a")]


def test_a_preempted_job_keeps_its_arrival_rank_among_equals() -> None:
    queue = AdmissionQueue(max_running=1, preemption=_margin(0.0))
    queue.add("first", 1.0)
    queue.schedule()
    queue.add("second", 1.0)
    assert queue.preempt("first")
    queue.drained("first")
    assert [entry.job_id for entry in queue.waiting] == ["first", "second"]


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="max_running"):
        AdmissionQueue(max_running=0)
    with pytest.raises(ValueError, match="margins"):
        AdmissionQueue(max_running=1, preemption=_margin(-1.0))
    queue = AdmissionQueue(max_running=1, preemption=_margin(0.0))
    queue.add("a", 0.0)
    with pytest.raises(ValueError, match="already queued"):
        queue.add("a", 1.0)
    with pytest.raises(KeyError):
        queue.set_priority("nope", 1.0)
    assert not queue.preempt("a")  # waiting, not running


def _reference_decisions(
    queue: AdmissionQueue,
) -> tuple[set[str], set[str]]:
    """Brute force, one waiting job at a time, best first: take a free slot; else take a slot
    already being drained; else evict the lowest running job if it beats it by more than the
    threshold; else stop."""
    running = list(queue.running)
    num_free = queue.max_running - queue.num_slots_used
    num_reserved = len(queue.draining)
    admitted: set[str] = set()
    preempted: set[str] = set()
    for best in queue.waiting:
        if num_free > 0:
            num_free -= 1
            admitted.add(best.job_id)
        elif num_reserved > 0:
            num_reserved -= 1
        else:
            victim = min(running, key=lambda e: (e.priority, -e.arrival), default=None)
            if victim is None or not queue.preemption.beats(best.priority, victim.priority):
                break
            running.remove(victim)
            preempted.add(victim.job_id)
    return admitted, preempted


@settings(max_examples=200)
@given(
    max_running=st.integers(1, 4),
    threshold=st.sampled_from([0.0, 0.5, 3.0]),
    relative=st.sampled_from([0.0, 0.05, 0.5]),
    priorities=st.lists(st.integers(0, 6), min_size=1, max_size=12),
    num_first=st.integers(0, 12),
)
def test_schedule_matches_a_brute_force_reference(
    max_running: int, threshold: float, relative: float, priorities: list[int], num_first: int
) -> None:
    queue = AdmissionQueue(max_running=max_running, preemption=_margin(threshold, relative))
    for index, priority in enumerate(priorities):
        queue.add(f"j{index:02d}", float(priority))
        if index + 1 == num_first:
            queue.schedule()  # some jobs run (or drain) before the rest arrive
    expected = _reference_decisions(queue)
    decisions = queue.schedule()
    assert {d.job_id for d in decisions if isinstance(d, AdmitJob)} == expected[0]
    assert {d.job_id for d in decisions if isinstance(d, PreemptJob)} == expected[1]


class AdmissionMachine(RuleBasedStateMachine):
    """Random operation sequences; the queue's invariants hold after every step."""

    def __init__(self) -> None:
        super().__init__()
        self.queue = AdmissionQueue(max_running=3, preemption=_margin(1.0, 0.05))
        self.num_jobs = 0

    @rule(priority=st.integers(0, 10))
    def add(self, priority: int) -> None:
        self.queue.add(f"j{self.num_jobs:03d}", float(priority))
        self.num_jobs += 1
        self.queue.schedule()

    @precondition(lambda self: self.num_jobs > 0)
    @rule(data=st.data(), priority=st.integers(0, 10))
    def reprioritise(self, data: st.DataObject, priority: int) -> None:
        job_id = f"j{data.draw(st.integers(0, self.num_jobs - 1)):03d}"
        if job_id in self.queue:
            self.queue.set_priority(job_id, float(priority))
            self.queue.schedule()

    @rule()
    def drain_one(self) -> None:
        draining = self.queue.draining
        if draining:
            self.queue.drained(draining[0].job_id)
            self.queue.schedule()

    @rule(data=st.data())
    def finish_one(self, data: st.DataObject) -> None:
        running = self.queue.running
        if running:
            self.queue.remove(data.draw(st.sampled_from(running)).job_id)
            self.queue.schedule()

    @invariant()
    def slots_are_never_oversubscribed(self) -> None:
        assert self.queue.num_slots_used <= self.queue.max_running

    @invariant()
    def no_free_slot_while_jobs_wait(self) -> None:
        if self.queue.waiting:
            assert self.queue.num_slots_used == self.queue.max_running

    @invariant()
    def no_uncovered_waiting_job_beats_a_running_one(self) -> None:
        uncovered = self.queue.waiting[len(self.queue.draining) :]
        running = self.queue.running
        if uncovered and running:
            lowest = min(entry.priority for entry in running)
            assert not self.queue.preemption.beats(uncovered[0].priority, lowest)

    @invariant()
    def each_job_is_in_exactly_one_table(self) -> None:
        ids = [
            e.job_id
            for t in (self.queue.waiting, self.queue.running, self.queue.draining)
            for e in t
        ]
        assert len(ids) == len(set(ids))


TestAdmissionMachine = AdmissionMachine.TestCase
TestAdmissionMachine.settings = settings(max_examples=60, stateful_step_count=30)
