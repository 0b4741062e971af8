"""A pure continuous-batching model of one inference worker (see ``model`` for the contract).

Used by the simulator on a virtual clock and, unchanged, by the live ``sim`` engine in scaled
real time. ``model`` holds the clock and the public API; ``scheduler`` the moves at a step
boundary (admission, prefill, preemption, finishing) and the prefix cache they fill (``cache``,
``radix``); ``queues``, ``victims`` and ``span`` the waiting and running sets, the choice of
preemption victims and the closed-form decode chunks; ``jobs`` the value types.
"""

from heddle.policy.batching.cache import (
    CACHE_KINDS,
    CacheKind,
    LruCache,
    PrefixCache,
    make_cache,
)
from heddle.policy.batching.jobs import (
    BatchingConfig,
    BatchLoad,
    CapacityError,
    FinishedGeneration,
    GenerationJob,
    JobState,
)
from heddle.policy.batching.model import BatchingModel
from heddle.policy.batching.radix import RadixCache
from heddle.policy.batching.span import Chunk, decode_span_s, plan_chunk, steps_covering

__all__ = [
    "CACHE_KINDS",
    "BatchLoad",
    "BatchingConfig",
    "BatchingModel",
    "CacheKind",
    "CapacityError",
    "Chunk",
    "FinishedGeneration",
    "GenerationJob",
    "JobState",
    "LruCache",
    "PrefixCache",
    "RadixCache",
    "decode_span_s",
    "make_cache",
    "plan_chunk",
    "steps_covering",
]
