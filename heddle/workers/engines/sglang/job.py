"""One generation as the ``sglang`` engine runs it: a sequence of SGLang requests (segments).

A generation usually takes one segment. A preemption aborts the running segment (SGLang answers
an aborted request with its partial output) and later resubmits the rest as a new segment whose
input is the original input plus every token generated so far, with the remaining token budget.
The result joins the segments, so a caller never sees the seam.
"""

from __future__ import annotations

import asyncio
import enum
from dataclasses import dataclass, field

from heddle.events.base import FinishReason
from heddle.workers.engines.base import EngineError, GenerationRequest, GenerationResult
from heddle.workers.engines.sglang.protocol import GenerateBody, GenerateOutput, SamplingParamsWire


class JobPhase(enum.Enum):
    WAITING = "waiting"
    """In the local admission queue."""
    RUNNING = "running"
    """Holds a slot: its segment is being (or about to be) submitted."""
    DRAINING = "draining"
    """Preempted: its segment's abort is in flight; it still holds its slot."""
    DONE = "done"

    @property
    def holds_slot(self) -> bool:
        return self in (JobPhase.RUNNING, JobPhase.DRAINING)


_FINISH_TYPES: dict[str, FinishReason] = {"stop": "stop", "length": "length", "abort": "abort"}


def finish_reason_of(output: GenerateOutput) -> FinishReason:
    """Our finish reason for SGLang's ``meta_info.finish_reason.type`` (unknown types: error)."""
    reason = output.meta_info.finish_reason
    if reason is None:
        return "abort"
    return _FINISH_TYPES.get(reason.type, "error")


@dataclass(slots=True)
class Job:
    """Mutable state of one generation; only the engine that owns it touches it."""

    request: GenerationRequest
    enqueued_at_s: float
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    phase: JobPhase = JobPhase.WAITING
    rid: str | None = None
    """SGLang rid of the segment in flight (None between segments)."""
    abort_requested: bool = False
    output_ids: list[int] = field(default_factory=list)
    output_logprobs: list[float] = field(default_factory=list)
    num_segments: int = 0
    num_preemptions: int = 0
    num_cached_tokens: int = 0
    num_recomputed_tokens: int = 0
    queue_s: float = 0.0
    prefill_s: float = 0.0
    decode_s: float = 0.0

    @property
    def request_id(self) -> str:
        return self.request.request_id

    @property
    def budget_tokens(self) -> int:
        """Tokens the whole generation may produce (the trace's length when one is dictated)."""
        target = self.request.target_output_tokens
        return self.request.max_new_tokens if target is None else target

    @property
    def remaining_tokens(self) -> int:
        return max(0, self.budget_tokens - len(self.output_ids))

    def segment_body(
        self, rid: str, *, priority: int | None, return_logprob: bool, extra_key: str | None
    ) -> GenerateBody:
        """The next segment's request: the original context plus all output so far as input,
        the remaining token budget as ``max_new_tokens``."""
        request = self.request
        dictated = request.target_output_tokens is not None
        seed = request.sampling.seed
        sampling = SamplingParamsWire(
            max_new_tokens=self.remaining_tokens,
            temperature=request.sampling.temperature,
            top_p=request.sampling.top_p,
            # A dictated length (trace replay) ignores EOS and stop tokens.
            stop_token_ids=None if dictated else list(request.stop_token_ids) or None,
            ignore_eos=dictated,
            # A resumed segment must not replay the first segment's random draws.
            sampling_seed=None if seed is None else seed + len(self.output_ids),
        )
        return GenerateBody(
            input_ids=[*request.input_token_ids, *self.output_ids],
            sampling_params=sampling,
            rid=rid,
            priority=priority,
            return_logprob=return_logprob,
            extra_key=extra_key,
        )

    def absorb(self, output: GenerateOutput, *, with_logprobs: bool) -> None:
        """Add a finished (or aborted) segment's output and counters."""
        if with_logprobs:
            logprobs = output.output_logprobs
            if len(logprobs) != len(output.output_ids):
                raise EngineError(
                    f"SGLang returned {len(logprobs)} logprobs for {len(output.output_ids)} "
                    f"output tokens (rid {output.meta_info.id or self.rid})"
                )
            self.output_logprobs.extend(logprobs)
        self.output_ids.extend(output.output_ids)
        meta = output.meta_info
        self.num_cached_tokens += meta.cached_tokens
        if self.num_segments > 0:
            # Everything a resumed segment prefills had been computed once before the preemption.
            self.num_recomputed_tokens += max(0, meta.prompt_tokens - meta.cached_tokens)
        self.num_preemptions += meta.num_retractions
        self.num_segments += 1

    def result(self, finish_reason: FinishReason) -> GenerationResult:
        return GenerationResult(
            request_id=self.request_id,
            output_token_ids=list(self.output_ids),
            output_logprobs=list(self.output_logprobs),
            finish_reason=finish_reason,
            num_prompt_tokens=len(self.request.input_token_ids),
            num_cached_tokens=self.num_cached_tokens,
            num_recomputed_tokens=self.num_recomputed_tokens,
            queue_s=self.queue_s,
            prefill_s=self.prefill_s,
            decode_s=self.decode_s,
            num_preemptions=self.num_preemptions,
        )
