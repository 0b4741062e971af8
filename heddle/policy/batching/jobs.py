"""Values of the batching model: its configuration, jobs, results and load."""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

from heddle.policy.batching.cache import CACHE_KINDS, CacheKind
from heddle.policy.scheduling.preemption import PreemptionConfig


class CapacityError(ValueError):
    """A job whose final context can never fit in the worker's KV cache."""


@dataclass(frozen=True, slots=True)
class BatchingConfig:
    max_running: int = 1024
    """Most jobs decoding at once (SGLang ``max_running_requests``); KV usually binds first."""
    preemptive: bool = False
    """Whether a higher-priority waiting job preempts lower running ones."""
    preemption: PreemptionConfig = PreemptionConfig()
    """When a waiting job beats a running one (``heddle.policy.scheduling.preemption``: a margin, so
    that wobbling predictions do not bounce jobs in and out of the batch)."""
    cache: CacheKind = "trajectory"
    """The prefix cache (``heddle.policy.batching.cache``): ``trajectory``, one record per
    trajectory evicted whole in LRU order (the torch engine), or ``radix``, SGLang's radix tree
    (shared group prompts, LRU leaves, partial prefix hits)."""
    page_tokens: int = 1
    """Radix eviction and match granularity in tokens. 1 is SGLang's default ``--page-size``
    (``ServerArgs.page_size`` is None and resolves to 1 unless the attention backend needs
    bigger pages, e.g. FlashMLA's 64); the trajectory cache ignores it."""
    preemption_keeps_kv: bool = True
    """A preempted job keeps its KV as a prefix-cache record (the torch engine). False: SGLang's
    retract: the KV of the tokens generated since the admission is freed and recomputed on
    resume; the context it was admitted with stays in the tree as evictable cache."""
    record_timeline: bool = False
    """Keep (time, num_running, num_waiting) after every membership change."""

    def __post_init__(self) -> None:
        if self.max_running < 1:
            raise ValueError(f"max_running must be >= 1, got {self.max_running}")
        if self.cache not in CACHE_KINDS:
            raise ValueError(f"cache must be one of {CACHE_KINDS}, got {self.cache!r}")
        if self.page_tokens < 1:
            raise ValueError(f"page_tokens must be >= 1, got {self.page_tokens}")


@dataclass(frozen=True, slots=True)
class GenerationJob:
    request_id: str
    traj_id: str
    num_context_tokens: int
    """The whole context this generation conditions on."""
    num_new_tokens: int
    """Tokens of the context the trajectory had never sent before (prompt or tool output)."""
    num_output_tokens: int
    """Tokens to generate (0: a prefill-only request, SGLang's ``max_new_tokens: 0``)."""
    priority: float = 0.0
    group_id: str = ""
    """Trajectories that share a prompt (a GRPO group); "" for none."""
    num_prompt_tokens: int = 0
    """The leading context tokens identical across the group (its shared prompt)."""

    def __post_init__(self) -> None:
        counts = (self.num_context_tokens, self.num_new_tokens, self.num_output_tokens)
        if min(*counts, self.num_prompt_tokens) < 0:
            raise ValueError(f"job {self.request_id}: token counts must be >= 0")
        if self.num_new_tokens > self.num_context_tokens:
            raise ValueError(f"job {self.request_id}: more new tokens than context tokens")
        if self.num_prompt_tokens > self.num_context_tokens:
            raise ValueError(f"job {self.request_id}: more prompt tokens than context tokens")
        if not math.isfinite(self.priority):
            raise ValueError(f"job {self.request_id}: priority must be finite")


@dataclass(frozen=True, slots=True)
class FinishedGeneration:
    """A completed job. ``queue_s + prefill_s + decode_s == finished_at - submitted_at``."""

    request_id: str
    traj_id: str
    num_output_tokens: int
    num_context_tokens: int
    """Context after the generation (what the prefix cache now holds)."""
    submitted_at: float
    finished_at: float
    queue_s: float
    prefill_s: float
    decode_s: float
    num_preemptions: int
    num_cached_tokens: int
    """Context tokens served from the prefix cache at the first admission."""
    num_recomputed_tokens: int
    """Tokens prefilled again because their KV had been lost (evicted or never transferred)."""


@dataclass(frozen=True, slots=True)
class BatchLoad:
    num_running: int
    num_waiting: int
    num_kv_tokens: int
    """KV in use: running jobs' contexts plus cached prefixes, a shared prompt counted once."""
    max_kv_tokens: int
    num_cached_trajectories: int

    @property
    def kv_usage(self) -> float:
        return self.num_kv_tokens / self.max_kv_tokens if self.max_kv_tokens else 0.0


class JobState(Enum):
    WAITING = "waiting"
    RUNNING = "running"
    DONE = "done"


class JobRecord:
    """Mutable bookkeeping of one job; owned by its ``BatchingModel``."""

    __slots__ = (
        "arrival",
        "cached",
        "context",
        "decode_s",
        "epoch",
        "finish_step",
        "generated",
        "job",
        "num_preemptions",
        "prefill_s",
        "prefill_tokens",
        "priority",
        "queue_s",
        "recomputed",
        "run_since",
        "shared",
        "start_step",
        "state",
        "submitted_at",
        "wait_since",
    )

    def __init__(self, job: GenerationJob, arrival: int, now: float, shared: int = 0) -> None:
        self.job = job
        self.shared = shared
        """Context tokens held in a shared prompt node while running (not by the job)."""
        self.arrival = arrival
        self.priority = job.priority
        self.state = JobState.WAITING
        self.epoch = 0
        self.generated = 0
        self.context = job.num_context_tokens
        """Context at the start of the current run segment (grows by ``generated``)."""
        self.start_step = 0
        self.finish_step = 0
        self.submitted_at = now
        self.wait_since = now
        self.run_since = now
        self.queue_s = self.prefill_s = self.decode_s = 0.0
        self.num_preemptions = 0
        self.cached = -1
        """Tokens served from cache at the first admission (-1: not admitted yet)."""
        self.prefill_tokens = 0
        self.recomputed = 0

    @property
    def final_context(self) -> int:
        return self.job.num_context_tokens + self.job.num_output_tokens

    @property
    def remaining(self) -> int:
        return self.job.num_output_tokens - self.generated
