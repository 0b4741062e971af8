"""A request's state inside the engine (mutable, owned by the engine thread). No torch here.

Token bookkeeping. ``context`` is the prompt followed by the outputs so far. The last output
token is *pending*: it was sampled but its KV is not computed until the next decode step feeds
it. So a sequence needs KV for ``kv_target`` tokens before it can decode: the whole prompt before
its first token, ``len(context) - 1`` after. ``num_kv_tokens`` is how many it holds (in a slot
while running, parked while waiting); admission prefills the difference.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from heddle.events.base import FinishReason
from heddle.policy.scheduling.preemption import OrderKey, request_order
from heddle.workers.engines.base import GenerationRequest, GenerationResult


class SeqStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"

    @property
    def is_active(self) -> bool:
        return self is not SeqStatus.FINISHED


@dataclass(slots=True, eq=False)
class Sequence:
    request: GenerationRequest
    arrival: int
    """Submission order; breaks priority ties (earlier first)."""
    seed: int
    priority: float = 0.0
    status: SeqStatus = SeqStatus.WAITING
    num_kv_tokens: int = 0
    num_known_tokens: int = 0
    """Context tokens this engine computed before for this trajectory: prefilling them again is
    recomputation (after a preemption dropped KV or an eviction)."""
    output_token_ids: list[int] = field(default_factory=list)
    output_logprobs: list[float] = field(default_factory=list)
    num_cached_tokens: int | None = None
    """Prompt tokens served from cache, fixed at the first admission."""
    num_recomputed_tokens: int = 0
    num_preemptions: int = 0
    finish_reason: FinishReason | None = None
    submitted_at_s: float = 0.0
    first_admitted_at_s: float | None = None
    first_token_at_s: float | None = None
    prefill_s: float = 0.0
    num_final_tokens: int = field(init=False)
    """The context once every output is out (prompt + ``max_new_tokens``): what the engine
    reserves for it; fixed at creation (the scheduler reads it every step)."""

    def __post_init__(self) -> None:
        self.num_final_tokens = len(self.request.input_token_ids) + self.request.max_new_tokens

    @property
    def request_id(self) -> str:
        return self.request.request_id

    @property
    def trajectory_id(self) -> str:
        return self.request.trajectory_id

    @property
    def context(self) -> list[int]:
        return self.request.input_token_ids + self.output_token_ids

    @property
    def kv_target(self) -> int:
        """Tokens whose KV must exist before the next decode (all but the pending token)."""
        return len(self.request.input_token_ids) + max(0, len(self.output_token_ids) - 1)

    @property
    def num_tokens_to_prefill(self) -> int:
        return self.kv_target - self.num_kv_tokens

    @property
    def has_pending_token(self) -> bool:
        return bool(self.output_token_ids)

    @property
    def pending_position(self) -> int:
        """Position of the pending token (where the next decode writes KV)."""
        return len(self.request.input_token_ids) + len(self.output_token_ids) - 1

    def order_key(self) -> OrderKey:
        """The serving order every engine shares
        (``heddle.policy.scheduling.preemption.request_order``): higher priority first, then earlier
        arrival; the largest key is the first victim."""
        return request_order(self.priority, self.arrival, self.request_id)

    def append(self, token_id: int, logprob: float) -> None:
        self.output_token_ids.append(token_id)
        self.output_logprobs.append(logprob)

    def finish_reason_after_token(self) -> FinishReason | None:
        """``stop`` on a stop token, ``length`` at ``max_new_tokens``, else None (continue)."""
        if self.output_token_ids and self.output_token_ids[-1] in self.request.stop_token_ids:
            return "stop"
        if len(self.output_token_ids) >= self.request.max_new_tokens:
            return "length"
        return None

    def result(self, now_s: float) -> GenerationResult:
        admitted = self.first_admitted_at_s if self.first_admitted_at_s is not None else now_s
        first_token = self.first_token_at_s if self.first_token_at_s is not None else now_s
        return GenerationResult(
            request_id=self.request_id,
            output_token_ids=list(self.output_token_ids),
            output_logprobs=list(self.output_logprobs),
            finish_reason=self.finish_reason or "abort",
            num_prompt_tokens=len(self.request.input_token_ids),
            num_cached_tokens=self.num_cached_tokens or 0,
            num_recomputed_tokens=self.num_recomputed_tokens,
            queue_s=admitted - self.submitted_at_s,
            prefill_s=self.prefill_s,
            decode_s=max(0.0, now_s - first_token),
            num_preemptions=self.num_preemptions,
        )
