"""A rollout's measured pace: generation seconds per output token (PPS's tokens-to-time rate)."""

from __future__ import annotations

from dataclasses import dataclass

from heddle.events import Generated


@dataclass(slots=True)
class Pace:
    """Generation seconds (prefill + decode) and output tokens of a rollout's ``Generated``."""

    generation_s: float = 0.0
    num_tokens: int = 0

    def add(self, event: Generated) -> None:
        self.generation_s += event.prefill_s + event.decode_s
        self.num_tokens += len(event.output_token_ids)

    def seconds_per_token(self, prior_s: float, min_tokens: int) -> float:
        """The measured rate once ``min_tokens`` were generated, ``prior_s`` before."""
        if self.num_tokens < max(1, min_tokens):
            return prior_s
        return self.generation_s / self.num_tokens
