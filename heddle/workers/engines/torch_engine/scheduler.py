"""Which requests decode next: priority order, preemption, and the KV token budget. No torch here.

Each engine step calls ``schedule()``, which moves sequences between ``waiting`` and ``running``
and returns what changed; the engine then moves the KV tensors accordingly (in the order of the
``SchedulerOutput`` fields) before running the forwards.

The rules are those of the simulator's engine model ``torch`` (``heddle.policy.engine_models``,
``heddle.policy.batching.model``), so that a simulated rollout predicts this engine:

Budget. ``max_kv_tokens`` bounds all KV the engine holds: running sequences, waiting ones that
keep KV (preempted, or holding their trajectory's cached prefix) and idle cached prefixes. A
running sequence *reserves* its final context (prompt + ``max_new_tokens``, at most the budget):
admission is SGLang's token reservation, as the model's, so a running sequence is never retracted
for memory while its request fits the budget. Room for an admission is made, in this order, by
evicting idle prefixes (least recently used first) and by dropping the KV of waiting sequences
ordered after the candidate (the lowest first; they will recompute it). Only a sequence whose
final context exceeds the whole budget can outgrow its reservation: room for it is made the same
way, then by preempting the lowest running sequences without their KV; alone, it is truncated
(it finishes with ``length``).

Priority. Waiting sequences are taken in the shared serving order
(``heddle.policy.scheduling.preemption.request_order``) while slots (``max_running``) and budget
allow. A waiting sequence that fits neither in a free slot nor in the budget may preempt running
ones that it beats (``PreemptionConfig.beats``, PPS, paper s.3.1), the lowest first and as few as
make it fit. A victim keeps its KV (``keep_kv_on_preemption``) and resumes later without recompute,
so it frees a slot and the reservation of the tokens it has yet to generate; in recompute mode it
frees its whole reservation. The first waiting sequence that cannot be admitted stops the pass (no
overtaking), as in vLLM and the model.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from heddle.policy.scheduling.preemption import PreemptionConfig
from heddle.workers.engines.torch_engine.prefix_store import PrefixStore
from heddle.workers.engines.torch_engine.sequence import SeqStatus, Sequence


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    max_running: int
    max_kv_tokens: int
    preemption: PreemptionConfig = PreemptionConfig()
    """When a waiting sequence beats a running one (the rule every engine shares)."""
    keep_kv_on_preemption: bool = True


@dataclass(slots=True)
class SchedulerOutput:
    dropped: list[Sequence] = field(default_factory=list)
    """Waiting sequences whose parked KV is dropped (``num_kv_tokens`` is already 0)."""
    preempted: list[Sequence] = field(default_factory=list)
    """Running -> waiting; park their KV if ``num_kv_tokens`` > 0, else just free the slot."""
    truncated: list[Sequence] = field(default_factory=list)
    """Finished with ``length``: no room to grow (or, waiting, to start) even alone."""
    admitted: list[Sequence] = field(default_factory=list)
    """Waiting -> running, in priority order: restore parked KV, prefill the rest."""


class Scheduler:
    def __init__(self, config: SchedulerConfig, store: PrefixStore[Any]) -> None:
        self.config = config
        self.store = store
        self.waiting: list[Sequence] = []
        self.running: list[Sequence] = []

    def add(self, seq: Sequence) -> None:
        seq.status = SeqStatus.WAITING
        self.waiting.append(seq)

    def remove(self, seq: Sequence) -> None:
        """Take a finishing or aborted sequence out of its queue."""
        queue = self.running if seq.status is SeqStatus.RUNNING else self.waiting
        queue.remove(seq)
        seq.status = SeqStatus.FINISHED

    def preempt(self, seq: Sequence, *, keep_kv: bool) -> None:
        """Running -> waiting; without ``keep_kv`` its KV is dropped (to be recomputed)."""
        self.running.remove(seq)
        seq.status = SeqStatus.WAITING
        seq.num_preemptions += 1
        if not keep_kv:
            seq.num_kv_tokens = 0
        self.waiting.append(seq)

    def num_used_tokens(self) -> int:
        """KV held now: running and waiting sequences' and the idle prefixes'."""
        held = sum(seq.num_kv_tokens for seq in self.running) + sum(
            seq.num_kv_tokens for seq in self.waiting
        )
        return held + self.store.num_tokens

    def num_committed_tokens(self) -> int:
        """KV held or reserved: running sequences count their reservations (``reserve``)."""
        running = sum(self.reserve(seq) for seq in self.running)
        return running + sum(seq.num_kv_tokens for seq in self.waiting) + self.store.num_tokens

    def reserve(self, seq: Sequence) -> int:
        """KV tokens a sequence reserves while running: its final context, capped at the budget,
        and always room for the next decode step."""
        final = seq.num_final_tokens
        if final <= self.config.max_kv_tokens:
            return final  # the common case: the next step's room is inside the final context
        return max(self.config.max_kv_tokens, seq.kv_target + 1)

    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput()
        free = self._make_growth_room(out)
        for candidate in sorted(self.waiting, key=Sequence.order_key):
            admitted, free = self._try_admit(candidate, free, out)
            if not admitted:
                break
        if not self.running and self.waiting and not out.admitted:
            # Nothing runs and the first in line cannot fit even with everything else evicted.
            first = min(self.waiting, key=Sequence.order_key)
            self.remove(first)
            first.finish_reason = "length"
            out.truncated.append(first)
        return out

    def _try_admit(self, candidate: Sequence, free: int, out: SchedulerOutput) -> tuple[bool, int]:
        need = self.reserve(candidate) - candidate.num_kv_tokens
        droppable = self._ordered_after(candidate)
        room = free + self._num_droppable(droppable)
        victims: list[Sequence] = []
        if len(self.running) >= self.config.max_running or need > room:
            found = self._victims_for(candidate, need - room)
            if found is None:
                return False, free
            victims = found
        for victim in victims:
            keep = self.config.keep_kv_on_preemption
            free += self.reserve(victim) - (victim.num_kv_tokens if keep else 0)
            self.preempt(victim, keep_kv=keep)
            out.preempted.append(victim)
        free += self._make_room(need - free, droppable, out)
        self.waiting.remove(candidate)
        candidate.status = SeqStatus.RUNNING
        self.running.append(candidate)
        out.admitted.append(candidate)
        return True, free - need

    def _victims_for(self, candidate: Sequence, shortfall: int) -> list[Sequence] | None:
        """The fewest running sequences, lowest first and each beaten by ``candidate``, whose
        preemption frees a slot (if none is free) and ``shortfall`` tokens; None if none do."""
        keep = self.config.keep_kv_on_preemption
        victims: list[Sequence] = []
        freed = 0
        for victim in sorted(self.running, key=Sequence.order_key, reverse=True):
            if not self.config.preemption.beats(candidate.priority, victim.priority):
                return None  # the rest rank higher still
            victims.append(victim)
            freed += self.reserve(victim) - (victim.num_kv_tokens if keep else 0)
            if freed >= shortfall:  # the first victim's slot is free too
                return victims
        return None

    def _make_growth_room(self, out: SchedulerOutput) -> int:
        """Free budget after every running sequence's reservation (a sequence larger than the
        budget takes room by preempting the lowest others, or is truncated alone)."""
        free = self.config.max_kv_tokens - self.num_committed_tokens()
        free += self._make_room(-free, self.waiting, out)
        while free < 0 and len(self.running) > 1:
            victim = max(self.running, key=Sequence.order_key)
            free += self.reserve(victim)
            self.preempt(victim, keep_kv=False)
            out.preempted.append(victim)
        if free < 0:
            alone = self.running[0]
            self.remove(alone)
            alone.finish_reason = "length"
            out.truncated.append(alone)
            free += self.reserve(alone) - alone.num_kv_tokens  # its KV stays as a cached prefix
        return free

    def _num_droppable(self, droppable: Iterable[Sequence]) -> int:
        return self.store.num_tokens + sum(seq.num_kv_tokens for seq in droppable)

    def _make_room(
        self, shortfall: int, droppable: Iterable[Sequence], out: SchedulerOutput
    ) -> int:
        """Evict idle prefixes, then drop waiting KV (lowest first); returns tokens freed."""
        if shortfall <= 0:
            return 0
        freed = self.store.evict_lru(shortfall)
        for seq in sorted(droppable, key=Sequence.order_key, reverse=True):
            if freed >= shortfall:
                break
            if seq.status is SeqStatus.WAITING and seq.num_kv_tokens > 0:
                freed += seq.num_kv_tokens
                seq.num_kv_tokens = 0
                out.dropped.append(seq)
        return freed

    def _ordered_after(self, candidate: Sequence) -> list[Sequence]:
        key = candidate.order_key()
        return [seq for seq in self.waiting if seq.order_key() > key]
