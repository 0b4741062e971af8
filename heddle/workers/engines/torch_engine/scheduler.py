"""Which requests decode next: priority order, preemption, and the KV token budget. No torch here.

Each engine step calls ``schedule()``, which moves sequences between ``waiting`` and ``running``
and returns what changed; the engine then moves the KV tensors accordingly (in the order of the
``SchedulerOutput`` fields) before running the forwards.

Budget. ``max_kv_tokens`` bounds all KV the engine holds: running sequences, waiting ones that
keep KV (preempted, or holding their trajectory's cached prefix) and idle cached prefixes. After
``schedule()``, every running sequence has room to grow by one token (the decode step) and every
admitted one room for its prefill. Room is made, in this order, by evicting idle prefixes (LRU),
by dropping the KV of lower-ordered waiting sequences (they will recompute it), and, for the
decode growth only, by preempting the lowest-ordered running sequences without their KV. A
running sequence that cannot grow even alone is truncated (it finishes with ``length``).

Priority. Waiting sequences are taken in order (priority descending, then arrival) while slots
(``max_running``) and budget allow. When slots are full, a waiting sequence whose priority exceeds
the lowest running one's by more than ``preemption_threshold`` preempts it (PPS, paper s.3.1);
the victim keeps its KV (``keep_kv_on_preemption``) and resumes later without recompute. The
first waiting sequence that cannot be admitted stops the pass (no overtaking), as in vLLM.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from heddle.workers.engines.torch_engine.prefix_store import PrefixStore
from heddle.workers.engines.torch_engine.sequence import SeqStatus, Sequence


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    max_running: int
    max_kv_tokens: int
    preemption_threshold: float = 0.0
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
        held = sum(seq.num_kv_tokens for seq in self.running) + sum(
            seq.num_kv_tokens for seq in self.waiting
        )
        return held + self.store.num_tokens

    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput()
        free = self._make_growth_room(out) - len(self.running)
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
        need = candidate.num_tokens_to_prefill + 1
        victim: Sequence | None = None
        gain = 0
        if len(self.running) >= self.config.max_running:
            victim = self._lowest_running()
            if victim is None or not self._beats(candidate, victim):
                return False, free
            # The victim no longer decodes this step; without its KV it frees all of it.
            keep = self.config.keep_kv_on_preemption
            gain = 1 + (0 if keep else victim.num_kv_tokens)
        droppable = self._ordered_after(candidate)
        if not self._can_make_room(need - free - gain, droppable):
            return False, free
        if victim is not None:
            self.preempt(victim, keep_kv=self.config.keep_kv_on_preemption)
            out.preempted.append(victim)
            free += gain
        free += self._make_room(need - free, droppable, out)
        self.waiting.remove(candidate)
        candidate.status = SeqStatus.RUNNING
        self.running.append(candidate)
        out.admitted.append(candidate)
        return True, free - need

    def _make_growth_room(self, out: SchedulerOutput) -> int:
        """Free tokens, after making room for one more token per running sequence."""
        free = self.config.max_kv_tokens - self.num_used_tokens()
        free += self._make_room(len(self.running) - free, self.waiting, out)
        while len(self.running) > free and len(self.running) > 1:
            victim = self._lowest_running()
            assert victim is not None
            free += victim.num_kv_tokens
            self.preempt(victim, keep_kv=False)
            out.preempted.append(victim)
        if len(self.running) > free:
            alone = self.running[0]
            self.remove(alone)
            alone.finish_reason = "length"
            out.truncated.append(alone)
        return free

    def _can_make_room(self, shortfall: int, droppable: Iterable[Sequence]) -> bool:
        if shortfall <= 0:
            return True
        return self.store.num_tokens + sum(seq.num_kv_tokens for seq in droppable) >= shortfall

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

    def _lowest_running(self) -> Sequence | None:
        return max(self.running, key=Sequence.order_key, default=None)

    def _beats(self, candidate: Sequence, victim: Sequence) -> bool:
        return candidate.priority > victim.priority + self.config.preemption_threshold
