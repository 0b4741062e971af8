"""The ``Engine`` protocol: what a rollout worker needs from an inference engine.

Three engines implement it: ``sim`` (the calibrated cost model in scaled real time), ``torch``
(real forward passes with continuous batching and KV export/import) and ``sglang`` (HTTP client
of a SGLang server). The worker agent only talks to this protocol.

Scheduling contract, shared by all engines:
- Requests are ordered by ``priority`` (larger first), then arrival. A waiting request whose
  priority exceeds the lowest running one by more than the engine's preemption threshold preempts
  it; a preempted request keeps its KV cache where the engine can, and resumes later.
- ``trajectory_id`` keys the prefix cache: a trajectory's next turn re-uses the KV of its previous
  turns and prefills only the new tokens, until ``release`` (or an eviction) drops it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

from heddle.events.base import FinishReason, SamplingParams


class EngineError(RuntimeError):
    """The engine failed; the worker marks the affected trajectories for re-placement."""


class CacheMismatchError(EngineError):
    """An imported KV cache belongs to another model, dtype or layout."""


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    request_id: str
    """Unique among in-flight requests of this engine, and never a prefix of another."""
    trajectory_id: str
    input_token_ids: list[int]
    """The whole context; the engine prefills only what its cache for the trajectory lacks."""
    max_new_tokens: int
    priority: float = 0.0
    sampling: SamplingParams = SamplingParams()
    stop_token_ids: tuple[int, ...] = ()
    target_output_tokens: int | None = None
    """For the sim engine: the environment dictates the output length (trace replay)."""
    group_id: str = ""
    """Trajectories sharing a prompt (a GRPO group; "" none): the sim engine's radix cache
    stores a group's prompt once, as SGLang's does."""
    num_prompt_tokens: int = 0
    """Leading tokens of ``input_token_ids`` shared by the group (its prompt)."""


@dataclass(frozen=True, slots=True)
class GenerationResult:
    request_id: str
    output_token_ids: list[int]
    output_logprobs: list[float]
    finish_reason: FinishReason
    num_prompt_tokens: int = 0
    num_cached_tokens: int = 0
    """Prefix tokens served from cache (not prefilled)."""
    num_recomputed_tokens: int = 0
    """Tokens prefilled again because a preemption or eviction lost their KV."""
    queue_s: float = 0.0
    prefill_s: float = 0.0
    decode_s: float = 0.0
    num_preemptions: int = 0


@dataclass(frozen=True, slots=True)
class EngineLoad:
    num_running: int
    num_waiting: int
    kv_usage: float = 0.0
    """Fraction of KV capacity in use (0..1)."""
    num_cached_trajectories: int = 0


@dataclass(frozen=True, slots=True)
class EngineCapabilities:
    name: str
    model: str = ""
    tp_degree: int = 1
    max_running: int = 0
    """Most concurrent generations (0: bounded by KV capacity only)."""
    max_kv_tokens: int = 0
    max_context_tokens: int = 0
    """The longest context the model takes (0: unknown or unbounded)."""
    can_export_kv: bool = False
    can_preempt: bool = True
    native_priority_update: bool = False
    """False: ``set_priority`` is emulated by abort and resubmit."""
    extras: dict[str, str] = field(default_factory=dict)
    time_scale: float = 1.0
    """Model seconds per wall second (the sim engine runs faster than real time); the worker
    reports timings in model time and asks tool executors to wait tool times scaled by it."""


@dataclass(frozen=True, slots=True)
class CacheSnapshot:
    """A trajectory's exported KV cache, ready to travel (bytes) to another worker."""

    trajectory_id: str
    num_tokens: int
    fingerprint: str
    """Model, dtype and layout identity; import refuses a mismatch."""
    payload: bytes
    num_kv_bytes: int = 0
    """Bytes of KV cache the snapshot stands for, when the payload is only a record of it (the
    sim engine); 0 means the payload itself is the cache."""

    @property
    def num_bytes(self) -> int:
        """The size a migration reports as moved."""
        return self.num_kv_bytes or len(self.payload)


EngineName = Literal["sim", "torch", "sglang"]


@runtime_checkable
class Engine(Protocol):
    @property
    def capabilities(self) -> EngineCapabilities: ...

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        """Run one generation to completion. Cancelling the awaiting task aborts the request."""
        ...

    async def abort(self, request_id: str) -> None: ...

    async def set_priority(self, request_id: str, priority: float) -> None:
        """Change the priority of a waiting or running request (may trigger preemption)."""
        ...

    async def preempt(self, request_id: str) -> None:
        """Move a running request back to the waiting queue, keeping its KV where possible."""
        ...

    async def load(self) -> EngineLoad: ...

    async def export_cache(self, trajectory_id: str) -> CacheSnapshot | None:
        """The trajectory's KV cache, or None when the engine cannot export it."""
        ...

    async def import_cache(self, snapshot: CacheSnapshot) -> None: ...

    async def release(self, trajectory_id: str) -> None:
        """Drop the trajectory's cached prefix (it completed or moved away)."""
        ...


@dataclass(frozen=True, slots=True)
class WarmUpResult:
    num_prompt_tokens: int
    num_cached_tokens: int
    """Tokens the engine already had cached; the rest were prefilled by the warm-up."""


@runtime_checkable
class CacheWarmer(Protocol):
    """An engine that cannot import a migrated KV cache but can rebuild it ahead of time (sglang):
    the worker calls ``warm_up`` on the migration target during the tool gap, so the next step
    hits the target's prefix cache instead of prefilling on the critical path."""

    async def warm_up(self, trajectory_id: str, input_token_ids: Sequence[int]) -> WarmUpResult:
        """Prefill ``input_token_ids`` into the prefix cache without generating."""
        ...


@runtime_checkable
class WeightLoader(Protocol):
    """An engine that swaps its model's weights in place, without a restart (the worker calls it
    when no generation runs: ``heddle.workers.agent.weights``)."""

    async def load_weights(self, path: str, *, weight_version: int, load_format: str = "") -> None:
        """Serve the weights at ``path`` from now on; ``EngineError`` when they cannot be loaded
        (the engine then still serves the previous ones). Cached prefixes computed with the
        old weights are dropped: the next generations prefill them again."""
        ...


@runtime_checkable
class Resharder(Protocol):
    """An engine that knows its GPUs and can relaunch over others at another TP degree (a
    re-shard: ``heddle.workers.agent.reshards``). An engine without this is never re-sharded:
    its worker registers no GPUs."""

    @property
    def gpu_ids(self) -> tuple[int, ...]:
        """The node's GPUs the engine runs on (empty: not known, never re-sharded)."""
        ...

    async def reshard(self, tp_degree: int, gpu_ids: Sequence[int]) -> None:
        """Stop (every generation in flight returns ``abort`` with its output so far), then
        start again at ``tp_degree`` over ``gpu_ids``, with no cached prefix;
        ``capabilities`` then say the new degree and capacity. ``EngineError`` when the new
        engine does not come up."""
        ...


def parse_gpu_ids(text: str) -> tuple[int, ...]:
    """``"0,1,2,3"`` as GPU ids (empty for ""); ``ValueError`` for anything else."""
    if not text.strip():
        return ()
    try:
        ids = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise ValueError(f"gpu ids must be comma-separated integers, got {text!r}") from None
    if any(gpu < 0 for gpu in ids) or len(set(ids)) != len(ids):
        raise ValueError(f"gpu ids must be distinct integers >= 0, got {text!r}")
    return ids
