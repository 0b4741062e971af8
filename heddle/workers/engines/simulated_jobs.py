"""How the ``sim`` engine translates between the ``Engine`` API and its ``BatchingModel``.

``request_generation_job`` makes a request a job: the output length is ``target_output_tokens``
(trace replay) capped by ``max_new_tokens``, and only the context tokens the engine has not seen
from this trajectory count as new (a shorter context than known starts over). ``generation_result``
makes a finished (or aborted) job a result with deterministic pseudo-tokens: ids and logprobs depend
only on (trajectory id, context length, seed), so a step re-run after a crash produces the same
tokens. A KV "export" is a small record (trajectory, cached tokens) under the engine's fingerprint
(``cache_snapshot``; ``cache_record`` reads it back, ``CacheMismatchError`` for another engine's).
"""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import dataclass
from typing import Literal

import msgspec
import numpy as np

from heddle.policy.batching import FinishedGeneration, GenerationJob
from heddle.workers.engines.base import (
    CacheMismatchError,
    CacheSnapshot,
    GenerationRequest,
    GenerationResult,
)

_MEAN_NEG_LOGPROB = 0.8
"""Mean of -logprob of a sampled token (assumption: typical of temperature-1 sampling)."""


def pseudo_tokens(
    trajectory_id: str, num_context_tokens: int, seed: int, count: int, vocab_size: int
) -> tuple[list[int], list[float]]:
    """Deterministic token ids and logprobs for a generation at this point of a trajectory.

    Vectorised (numpy): in scaled real time every millisecond spent here is ``time_scale``
    milliseconds of model time by which the result arrives late."""
    digest = hashlib.blake2b(
        f"{trajectory_id}:{num_context_tokens}:{seed}".encode(), digest_size=8
    ).digest()
    rng = np.random.default_rng(int.from_bytes(digest, "big"))
    ids = rng.integers(0, vocab_size, size=count)
    logprobs = -np.minimum(rng.exponential(_MEAN_NEG_LOGPROB, size=count), 30.0)
    # float32, as real engines return them: the wire carries logprobs as float32.
    return ids.tolist(), logprobs.astype(np.float32).tolist()


@dataclass(slots=True)
class Pending:
    """A submitted generation waiting for its job to finish."""

    request: GenerationRequest
    num_output_tokens: int
    finish_reason: Literal["stop", "length"]
    """"length" when max_new_tokens cut the wanted output short (or no target was given)."""
    future: asyncio.Future[GenerationResult]

    @classmethod
    def of(
        cls,
        request: GenerationRequest,
        job: GenerationJob,
        future: asyncio.Future[GenerationResult],
    ) -> Pending:
        wanted = request.target_output_tokens
        is_capped = wanted is None or wanted > request.max_new_tokens
        return cls(request, job.num_output_tokens, "length" if is_capped else "stop", future)


def request_generation_job(request: GenerationRequest, num_known_tokens: int) -> GenerationJob:
    """The job of ``request``; ``num_known_tokens``: context tokens the trajectory sent before."""
    wanted = request.target_output_tokens
    count = request.max_new_tokens if wanted is None else min(wanted, request.max_new_tokens)
    num_context = len(request.input_token_ids)
    known = num_known_tokens
    num_new = num_context - known if known <= num_context else num_context
    return GenerationJob(
        request_id=request.request_id,
        traj_id=request.trajectory_id,
        num_context_tokens=num_context,
        num_new_tokens=num_new,
        num_output_tokens=max(0, count),
        priority=request.priority,
        group_id=request.group_id,
        num_prompt_tokens=min(request.num_prompt_tokens, num_context),
    )


def generation_result(
    request: GenerationRequest,
    num_output_tokens: int,
    finish_reason: Literal["stop", "length", "abort"],
    done: FinishedGeneration | None,
    *,
    default_seed: int,
    vocab_size: int,
) -> GenerationResult:
    """The result of ``request`` with ``num_output_tokens`` pseudo-tokens; the timings and cache
    counts of ``done`` (None: an aborted job, zeros)."""
    seed = request.sampling.seed if request.sampling.seed is not None else default_seed
    ids, logprobs = pseudo_tokens(
        request.trajectory_id, len(request.input_token_ids), seed, num_output_tokens, vocab_size
    )
    return GenerationResult(
        request_id=request.request_id,
        output_token_ids=ids,
        output_logprobs=logprobs,
        finish_reason=finish_reason,
        num_prompt_tokens=len(request.input_token_ids),
        num_cached_tokens=done.num_cached_tokens if done else 0,
        num_recomputed_tokens=done.num_recomputed_tokens if done else 0,
        queue_s=done.queue_s if done else 0.0,
        prefill_s=done.prefill_s if done else 0.0,
        decode_s=done.decode_s if done else 0.0,
        num_preemptions=done.num_preemptions if done else 0,
    )


class CacheRecord(msgspec.Struct, frozen=True):
    trajectory_id: str
    num_tokens: int


def cache_snapshot(
    trajectory_id: str, num_tokens: int, fingerprint: str, num_kv_bytes: int
) -> CacheSnapshot:
    payload = msgspec.json.encode(CacheRecord(trajectory_id, num_tokens))
    return CacheSnapshot(
        trajectory_id=trajectory_id,
        num_tokens=num_tokens,
        fingerprint=fingerprint,
        payload=payload,
        num_kv_bytes=num_kv_bytes,
    )


def cache_record(snapshot: CacheSnapshot, fingerprint: str) -> CacheRecord:
    """The record in ``snapshot``; ``CacheMismatchError`` when another engine made it."""
    if snapshot.fingerprint != fingerprint:
        raise CacheMismatchError(
            f"cache of {snapshot.trajectory_id} was made by {snapshot.fingerprint!r}; "
            f"this engine is {fingerprint!r}"
        )
    return msgspec.json.decode(snapshot.payload, type=CacheRecord)
