"""What ``heddle bench engine`` measures (``heddle.bench.engine``): its configuration and the
figures it returns, without torch (a cheap import for the CLI)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class EngineBenchConfig:
    batch_sizes: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
    context_tokens: int = 128
    """Prompt tokens of each decode-benchmark request."""
    decode_tokens: int = 64
    """Output tokens of each decode-benchmark request."""
    prefill_tokens: int = 512
    resume_context_tokens: int = 512
    migration_context_tokens: int = 512
    repeats: int = 5

    def __post_init__(self) -> None:
        if not self.batch_sizes or min(self.batch_sizes) < 1:
            raise ValueError("batch sizes must be >= 1")
        numbers = (self.context_tokens, self.decode_tokens, self.prefill_tokens, self.repeats)
        if min(numbers) < 1 or self.decode_tokens < 2:
            raise ValueError("token counts and repeats must be >= 1 (decode tokens >= 2)")
        if min(self.resume_context_tokens, self.migration_context_tokens) < 2:
            raise ValueError("resume and migration contexts must be >= 2 tokens")

    @property
    def mean_context_tokens(self) -> int:
        return self.context_tokens + self.decode_tokens // 2


@dataclass(frozen=True, slots=True)
class DecodePoint:
    batch_size: int
    itl_ms: float
    """Median time of one decode step at this batch size (every sequence gets one token)."""
    tokens_per_s: float
    interference: float
    """F(b) = ITL(b) / ITL(smallest measured batch)."""


@dataclass(frozen=True, slots=True)
class ResumeCost:
    context_tokens: int
    kept_kv_ms: float
    """Park + restore copies of the victim's KV."""
    recompute_ms: float
    """Prefilling the victim's context again."""
    speedup: float


@dataclass(frozen=True, slots=True)
class MigrationCost:
    context_tokens: int
    payload_bytes: int
    export_ms: float
    import_ms: float
    reprefill_ms: float
    speedup: float
    """reprefill / (export + import): how much cheaper moving the KV is than recomputing it."""


@dataclass(frozen=True, slots=True)
class EngineBenchResult:
    model: str
    device: str
    dtype: str
    decode: list[DecodePoint]
    prefill_tokens_per_s: float
    resume: ResumeCost
    migration: MigrationCost
    max_kv_tokens: int
    mean_context_tokens: int

    def to_dict(self) -> dict[str, object]:
        return dataclasses.asdict(self)
