"""Which running jobs a waiting one preempts to fit (PPS, paper s.4.2), and the KV that frees."""

from __future__ import annotations

from collections.abc import Callable

from heddle.policy.batching.cache import PrefixCache
from heddle.policy.batching.jobs import JobRecord
from heddle.policy.batching.queues import RunningBatch, job_order
from heddle.policy.scheduling.preemption import PreemptionConfig

Fits = Callable[[int, int], bool]
"""Whether the head fits once (this many slots, this many tokens) are freed."""


def choose_victims(
    head: JobRecord,
    batch: RunningBatch,
    cache: PrefixCache,
    preemption: PreemptionConfig,
    keeps_kv: bool,
    num_steps: int,
    fits: Fits,
) -> list[JobRecord] | None:
    """The fewest lowest-priority running jobs whose preemption lets ``head`` in, or None.

    A victim that keeps its KV frees only the room reserved for the tokens it has yet to
    generate: preempting to take its KV would only evict it. A retracted victim (``keeps_kv``
    False, SGLang) frees all it reserved: its generated KV is gone and the context it was admitted
    with becomes evictable cache, as does a shared prompt node once every job holding it is a
    victim (except the head's own prompt, which it takes over)."""
    lowest = batch.lowest()
    if lowest is None or not preemption.beats(head.priority, lowest.priority):
        return None  # the common case, without a scan of the batch
    own = (head.job.group_id, head.job.num_prompt_tokens)
    if keeps_kv:
        freed_by_all = batch.reserved_tokens - batch.kv_tokens
    else:
        head_lock = head.shared if cache.num_locks(*own) else 0
        freed_by_all = batch.reserved_tokens + cache.locked_tokens - head_lock
    if not fits(len(batch), freed_by_all):
        return None  # even preempting every running job would not make room
    candidates = sorted(
        (job for job in batch if preemption.beats(head.priority, job.priority)),
        key=job_order,
        reverse=True,  # the preemption order: the reverse of the serving order
    )
    freed_tokens = 0
    holders: dict[tuple[str, int], int] = {}
    for count, victim in enumerate(candidates, start=1):
        freed_tokens += victim.final_context - victim.shared
        if keeps_kv:
            freed_tokens -= victim.context - victim.shared + num_steps - victim.start_step
        elif victim.shared:
            key = (victim.job.group_id, victim.job.num_prompt_tokens)
            holders[key] = holders.get(key, 0) + 1
            if key != own and holders[key] == cache.num_locks(*key):
                freed_tokens += victim.shared  # its last holder goes: the prompt is evictable
        if fits(count, freed_tokens):
            return candidates[:count]
    return None
