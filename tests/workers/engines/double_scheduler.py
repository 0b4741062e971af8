"""The SGLang double's scheduler: what stock SGLang 0.5.x does with the flags Heddle launches it
with (``heddle.policy.engine_models.SGLANG``), which is what the simulator's ``sglang`` engine
model assumes. Pure (no I/O): the server drives it with ``schedule`` then ``decode`` per step.

- **Waiting order**: priority (larger first, or smaller with
  ``schedule_low_priority_values_first``; a request without one is the lowest) then arrival,
  with ``--enable-priority-scheduling``; arrival only without it.
- **KV-bounded admission** (``PrefillAdder.add_one_req``): a waiting request is admitted while a
  slot is free (``max_running``) and its uncached tokens plus a reserve for its output
  (``min(max_new_tokens left, 4096) * new_token_ratio``) fit in the pool's free tokens plus the
  evictable cache, minus what the running requests reserve; the first that does not fit stops
  the admission.
- **Radix cache** (``double_radix``): an admitted request's context is inserted and locked, so
  later requests hit it; a finished or aborted running request inserts its output too and
  unlocks. Tokens are freed by evicting whole unlocked leaves, least recently used first.
- **Priority preemption** (``PrefillAdder.preempt_to_schedule``): a request that does not fit
  preempts running requests whose priority it beats by more than
  ``priority_scheduling_preemption_threshold``, lowest first, if they free enough room.
- **Retraction** (``ScheduleBatch.retract_decode``): when a decode step finds no free token
  even after eviction, running requests are retracted, the shortest output (then the longest
  input) first, never the last one. Preempted and retracted requests go back to waiting with
  their output so far (re-prefilled on re-admission, minus what the cache still holds); their
  ``num_retractions`` counts it and the KV of what they generated is freed (their admitted
  context stays in the tree, evictable).
- **Prefill time**: ``schedule`` returns the tokens it prefilled; the server waits
  ``tokens / prefill_tokens_per_s`` before the decode step.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from double_radix import RadixNode, RadixTree

CLIP_MAX_NEW_TOKENS = 4096
"""SGLang's ``SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION``: the most output tokens one request
reserves at admission."""


@dataclass
class DoubleConfig:
    tokens_per_s: float = 500.0
    """Decode steps per second (each running request gains one token per step)."""
    prefill_tokens_per_s: float = 200_000.0
    max_running: int = 4
    max_queued: int = 256
    vocab_size: int = 1000
    eos_token_id: int | None = None
    context_length: int = 32768
    max_total_num_tokens: int = 200_000
    """KV pool size in tokens."""
    priority_scheduling: bool = True
    """``--enable-priority-scheduling``."""
    abort_on_priority_when_disabled: bool = True
    """``--abort-on-priority-when-disabled``: without priority scheduling, a request carrying a
    priority is refused (503). On here so a client that sends one to such a server fails."""
    schedule_low_priority_values_first: bool = False
    preemption_threshold: int = 10
    """``--priority-scheduling-preemption-threshold`` (SGLang's default 10)."""
    new_token_ratio: float = 0.7
    """Share of a request's remaining output reserved at admission (SGLang's initial ratio)."""
    radix_eviction_policy: str = "lru"
    page_size: int = 1
    incremental: bool = False
    legacy_abort_errors: bool = False
    """Answer an aborted request like older SGLang: HTTP 400, or an error frame in a stream."""
    legacy_paths: bool = False
    """Serve only the old names (``/get_server_info``; no ``/ready``), like older releases."""
    model_path: str = "heddle/sglang-double"
    tp_size: int = 1
    startup_delay_s: float = 0.0


class BadRequest(Exception):
    """An HTTP error answer: ``status`` with the JSON ``body`` SGLang sends."""

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        super().__init__(body)
        self.status, self.body = status, body


def error(message: str, status: int = 400) -> BadRequest:
    """SGLang's ``{"error": {"message"}}`` answer (400: a bad request)."""
    return BadRequest(status, {"error": {"message": message}})


def next_token(context: list[int], vocab_size: int, weights: int = 0) -> int:
    """The double's "model": depends only on the context (and on ``weights``, the number of
    weight updates it took), never on batching or resumption."""
    return (context[-1] * 31 + len(context) * 17 + 11 + 7 * weights) % vocab_size if context else 1


def token_logprob(token: int) -> float:
    return -(0.05 + (token % 17) / 10.0)


@dataclass
class Req:
    rid: str
    input_ids: list[int]
    max_new_tokens: int
    stop_token_ids: frozenset[int]
    ignore_eos: bool
    priority: int | None
    return_logprob: bool
    arrival: int
    created_s: float
    output_ids: list[int] = field(default_factory=list)
    finish_reason: dict[str, Any] | None = None
    cached_tokens: int = 0
    num_retractions: int = 0
    node: RadixNode | None = None
    """The locked tree node ending its admitted context (None unless running)."""
    num_tree_tokens: int = 0
    """Context tokens it had at admission (in the tree); later output is its own KV."""
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def own_tokens(self) -> int:
        return len(self.input_ids) + len(self.output_ids) - self.num_tree_tokens

    def output(self, *, since: int = 0) -> dict[str, Any]:
        meta: dict[str, Any] = {
            "id": self.rid, "finish_reason": self.finish_reason,
            "prompt_tokens": len(self.input_ids), "completion_tokens": len(self.output_ids),
            "cached_tokens": self.cached_tokens, "weight_version": "default",
            "e2e_latency": time.monotonic() - self.created_s,
            "num_retractions": self.num_retractions,
        }  # fmt: skip
        if self.return_logprob:
            meta["input_token_logprobs"] = []
            meta["output_token_logprobs"] = [
                [token_logprob(t), t, None] for t in self.output_ids[since:]
            ]
        ids = self.output_ids[since:]
        return {
            "text": "".join(chr(32 + t % 95) for t in ids),
            "output_ids": ids,
            "meta_info": meta,
        }


class DoubleScheduler:
    """Waiting queue, running batch, KV pool and radix cache (see the module docstring)."""

    def __init__(self, config: DoubleConfig) -> None:
        self.config = config
        self.waiting: list[Req] = []
        self.running: list[Req] = []
        self.in_flight: dict[str, Req] = {}
        self.tree = RadixTree()
        self.admission_log: list[str] = []
        self.num_arrivals = 0
        self.num_cache_hits = 0
        self.num_prefilled_tokens = 0
        self.num_retractions = 0
        self.weights = 0
        """Weight updates taken (``/update_weights_from_disk``): the "model" changes with it."""
        self._decoded: deque[tuple[float, int]] = deque()

    # ---- requests in and out -------------------------------------------------------------------

    def submit(self, req: Req) -> None:
        if req.rid in self.in_flight:
            raise error(f"Duplicate request ID detected: {req.rid}")
        if len(self.waiting) >= self.config.max_queued:
            raise BadRequest(503, {"detail": "The request queue is full."})
        self.in_flight[req.rid] = req
        self.waiting.append(req)

    def abort(self, rid: str, abort_all: bool) -> None:
        for req in list(self.in_flight.values()):
            if abort_all or req.rid.startswith(rid):
                where = "waiting queue" if req in self.waiting else "running batch"
                self.finish(req, {"type": "abort", "message": f"Abort in {where}"})

    def finish(self, req: Req, reason: dict[str, Any]) -> None:
        """End ``req``; a running one caches its whole context and unpins its path."""
        req.finish_reason = reason
        self.in_flight.pop(req.rid, None)
        if req in self.waiting:
            self.waiting.remove(req)
        if req in self.running:
            self.running.remove(req)
            self.tree.insert(req.input_ids + req.output_ids)
            self._unpin(req)
        req.changed.set()

    # ---- KV accounting -------------------------------------------------------------------------

    @property
    def used_tokens(self) -> int:
        return self.tree.total_tokens + sum(req.own_tokens for req in self.running)

    @property
    def free_tokens(self) -> int:
        return self.config.max_total_num_tokens - self.used_tokens

    def reserve(self, req: Req) -> int:
        left = max(0, req.max_new_tokens - len(req.output_ids))
        return int(min(left, CLIP_MAX_NEW_TOKENS) * self.config.new_token_ratio)

    def _room(self) -> int:
        """Tokens an admission may take: free, evictable, less the running reserve."""
        reserved = sum(self.reserve(req) for req in self.running)
        return self.free_tokens + self.tree.evictable_tokens - reserved

    def _take(self, num_tokens: int) -> None:
        if self.free_tokens < num_tokens:
            self.tree.evict(num_tokens - self.free_tokens)

    # ---- one step ------------------------------------------------------------------------------

    def schedule(self) -> int:
        """Admit what fits (preempting by priority where allowed); the tokens prefilled. The
        batch's contexts enter the tree after the batch (SGLang caches them after the
        forward), so two requests of one batch do not hit each other's tokens."""
        self.waiting.sort(key=self._rank)
        batch: list[tuple[Req, list[int], int, RadixNode]] = []
        num_pending = num_prefilled = 0  # the batch's tokens so far, with its output reserves
        while self.waiting:
            req = self.waiting[0]
            fill = req.input_ids + req.output_ids
            matched, prefix = self.tree.match(fill)
            hit = min(matched, len(fill) - 1)  # the last token is always computed
            need = num_pending + len(fill) - hit + self.reserve(req)
            self.tree.lock(prefix)  # its hit must survive the eviction that makes room
            if not (self._fits(need, len(batch)) or self._preempt_for(req, need, len(batch))):
                self.tree.unlock(prefix)
                break
            self.waiting.pop(0)
            batch.append((req, fill, hit, prefix))
            num_pending = need
            num_prefilled += len(fill) - hit
        for req, fill, hit, prefix in batch:
            self._admit(req, fill, hit)
            self.tree.unlock(prefix)
        return num_prefilled

    def decode(self, now_s: float) -> None:
        """One decode step: a token for every running request (retracting where KV is out)."""
        self._make_decode_room()
        for req in list(self.running):
            self._decode_one(req)
        self._decoded.append((now_s, len(self.running)))

    def gen_throughput(self, now_s: float, window_s: float = 1.0) -> float:
        while self._decoded and self._decoded[0][0] < now_s - window_s:
            self._decoded.popleft()
        return sum(n for _, n in self._decoded) / window_s

    @property
    def cache_hit_rate(self) -> float:
        total = self.num_cache_hits + self.num_prefilled_tokens
        return self.num_cache_hits / total if total else 0.0

    # ---- internals -----------------------------------------------------------------------------

    def _rank(self, req: Req) -> tuple[int, int]:
        if not self.config.priority_scheduling:
            return (0, req.arrival)
        return (-self._priority(req), req.arrival)

    def _priority(self, req: Req) -> int:
        """Larger runs first (the sign flipped for ``schedule_low_priority_values_first``)."""
        if req.priority is None:
            return -(2**62)
        return -req.priority if self.config.schedule_low_priority_values_first else req.priority

    def _fits(self, need: int, num_batch: int = 0) -> bool:
        """A free slot (``num_batch`` already taken this step) and ``need`` tokens of room."""
        num_used = len(self.running) + num_batch
        return num_used < self.config.max_running and need <= self._room()

    def _admit(self, req: Req, fill: list[int], hit: int) -> int:
        self.admission_log.append(req.rid)
        self._take(len(fill) - hit)
        req.node = self.tree.insert(fill)
        self.tree.lock(req.node)
        req.num_tree_tokens = len(fill)
        req.cached_tokens += hit
        self.num_cache_hits += hit
        self.num_prefilled_tokens += len(fill) - hit
        self.running.append(req)
        if req.max_new_tokens - len(req.output_ids) <= 0:
            self.finish(req, {"type": "length", "length": req.max_new_tokens})
        return len(fill) - hit

    def _preempt_for(self, req: Req, need: int, num_batch: int) -> bool:
        """Preempt the lowest running requests that ``req`` beats by more than the threshold,
        if together they make room for it; False (nothing done) otherwise."""
        config = self.config
        if not config.priority_scheduling:
            return False
        beaten = [
            running
            for running in sorted(self.running, key=lambda r: (self._priority(r), -r.arrival))
            if self._priority(req) - self._priority(running) > config.preemption_threshold
        ]
        chosen: list[Req] = []
        room, num_slots = self._room(), config.max_running - len(self.running) - num_batch
        for victim in beaten:
            if need <= room and num_slots > 0:
                break
            chosen.append(victim)
            room += victim.own_tokens + victim.num_tree_tokens + self.reserve(victim)
            num_slots += 1
        if not chosen or need > room or num_slots <= 0:
            return False
        for victim in chosen:
            self._retract(victim)
        return self._fits(need, num_batch)

    def _make_decode_room(self) -> None:
        short = len(self.running) - self.free_tokens
        if short > 0:
            self.tree.evict(short)
        # SGLang's order: retract the shortest output first, then the longest input.
        order = sorted(self.running, key=lambda r: (len(r.output_ids), -len(r.input_ids)))
        while self.free_tokens < len(self.running) and len(self.running) > 1:
            self._retract(order.pop(0))
            self.tree.evict(len(self.running) - self.free_tokens)

    def _retract(self, req: Req) -> None:
        """Back to waiting: its generated KV is freed, its admitted context stays cached."""
        self.running.remove(req)
        self._unpin(req)
        req.num_retractions += 1
        self.num_retractions += 1
        self.waiting.append(req)

    def _unpin(self, req: Req) -> None:
        if req.node is not None:
            self.tree.unlock(req.node)
        req.node, req.num_tree_tokens = None, 0

    def _decode_one(self, req: Req) -> None:
        token = next_token(req.input_ids + req.output_ids, self.config.vocab_size, self.weights)
        req.output_ids.append(token)
        req.changed.set()
        is_eos = token == self.config.eos_token_id and not req.ignore_eos
        if token in req.stop_token_ids or is_eos:
            self.finish(req, {"type": "stop", "matched": token})
        elif len(req.output_ids) >= req.max_new_tokens:
            self.finish(req, {"type": "length", "length": req.max_new_tokens})
