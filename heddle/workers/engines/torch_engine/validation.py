"""What the torch engine accepts: ``check_request`` raises ``ValueError`` naming the request and
the first problem (empty input, a token id outside the vocabulary, a negative ``max_new_tokens``,
sampling outside temperature >= 0 and 0 < top_p <= 1, or a prompt that leaves no room for one
generated token within ``max_tokens``)."""

from __future__ import annotations

from heddle.workers.engines.base import GenerationRequest


def check_request(request: GenerationRequest, *, vocab_size: int, max_tokens: int) -> None:
    prompt = request.input_token_ids
    if not prompt:
        raise ValueError(f"request {request.request_id}: input_token_ids is empty")
    if min(prompt) < 0 or max(prompt) >= vocab_size:
        raise ValueError(f"request {request.request_id}: token ids must be in [0, {vocab_size})")
    if request.max_new_tokens < 0:
        raise ValueError(f"request {request.request_id}: max_new_tokens must be >= 0")
    sampling = request.sampling
    if sampling.temperature < 0 or not 0 < sampling.top_p <= 1:
        raise ValueError(f"request {request.request_id}: need temperature >= 0 and 0 < top_p <= 1")
    if len(prompt) + 1 > max_tokens:
        raise ValueError(
            f"request {request.request_id}: {len(prompt)} prompt tokens exceed this engine's "
            f"capacity of {max_tokens - 1} (max_kv_tokens / model context)"
        )
