"""Temperature / top-p sampling with per-request, per-position seeds; token ids and logprobs.

Randomness is counter-based: the uniform draw for the token at position ``p`` of a request with
seed ``s`` is a hash of ``(s, p)`` (splitmix64). Nothing carries state from step to step, so a
request gives the same tokens whatever shares its batch, after a preemption, and on another engine
after a migration, provided its logits are the same. (Batched and unbatched matmuls may differ in
the last bits; greedy decoding at temperature 0 is where tests demand exact equality.)

Each row is sampled by inverse CDF over its top-p nucleus. The logprob returned is that of the
chosen token under the temperature-scaled distribution before top-p truncation (the policy's
distribution an RL trainer compares against); at temperature 0 it is under the raw logits.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import torch

GREEDY_TEMPERATURE = 1e-5
"""Temperatures at or below this decode greedily."""
_MASK64 = (1 << 64) - 1


@dataclass(frozen=True, slots=True)
class RowSampling:
    temperature: float
    top_p: float
    seed: int
    position: int
    """Absolute position of the token being sampled (its index in the trajectory context)."""

    @property
    def is_greedy(self) -> bool:
        return self.temperature <= GREEDY_TEMPERATURE


@dataclass(frozen=True, slots=True)
class Sampled:
    token_ids: list[int]
    logprobs: list[float]


def request_seed(seed: int | None, engine_seed: int, trajectory_id: str, num_prompt: int) -> int:
    """The request's seed: its own, or one derived from the engine seed and the request's place."""
    if seed is not None:
        return seed & _MASK64
    text = f"{engine_seed}:{trajectory_id}:{num_prompt}".encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "little")


def uniform(seed: int, position: int) -> float:
    """A float in [0, 1) from splitmix64 of (seed, position): the same inputs, the same draw."""
    state = (seed * 0x9E3779B97F4A7C15 + position + 1) & _MASK64
    state = ((state ^ (state >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    state = ((state ^ (state >> 27)) * 0x94D049BB133111EB) & _MASK64
    state ^= state >> 31
    return (state >> 11) / float(1 << 53)


def sample(logits: torch.Tensor, rows: Sequence[RowSampling]) -> Sampled:
    """One token per row of ``logits`` ``[B, vocab]`` (float32), with its logprob."""
    if logits.ndim != 2 or logits.shape[0] != len(rows):
        raise ValueError(f"logits of shape {tuple(logits.shape)} for {len(rows)} rows")
    device = logits.device
    temperatures = torch.tensor(
        [1.0 if row.is_greedy else row.temperature for row in rows], device=device
    )
    logprobs = torch.log_softmax(logits / temperatures[:, None], dim=-1)
    greedy_tokens = torch.argmax(logits, dim=-1)
    sampled_tokens = _sample_nucleus(logprobs, rows)
    is_greedy = torch.tensor([row.is_greedy for row in rows], device=device)
    tokens = torch.where(is_greedy, greedy_tokens, sampled_tokens)
    chosen = logprobs.gather(1, tokens[:, None])[:, 0]
    return Sampled(token_ids=tokens.tolist(), logprobs=chosen.tolist())


def _sample_nucleus(logprobs: torch.Tensor, rows: Sequence[RowSampling]) -> torch.Tensor:
    """Inverse-CDF draw over each row's top-p nucleus (the smallest set reaching ``top_p``).

    Without top-p (every row's ``top_p`` is 1) the draw runs over the vocabulary in its own order,
    which samples the same distribution and skips sorting a ``[B, vocab]`` tensor every step.
    """
    device = logprobs.device
    if all(row.top_p >= 1.0 for row in rows):
        cumulative = logprobs.exp().cumsum(dim=-1)
        draws = torch.tensor([uniform(row.seed, row.position) for row in rows], device=device)
        index = torch.searchsorted(cumulative, (draws * cumulative[:, -1])[:, None], right=True)
        return torch.clamp(index[:, 0], max=logprobs.shape[-1] - 1)
    probs, order = torch.sort(logprobs.exp(), dim=-1, descending=True)
    cumulative = probs.cumsum(dim=-1)
    top_p = torch.tensor([row.top_p for row in rows], device=device)
    # A token is kept while the mass before it is below top_p; the first token always is.
    kept = (cumulative - probs) < top_p[:, None]
    kept[:, 0] = True
    nucleus = torch.where(kept, probs, torch.zeros_like(probs)).cumsum(dim=-1)
    draws = torch.tensor([uniform(row.seed, row.position) for row in rows], device=device)
    targets = draws * nucleus[:, -1]
    index = torch.searchsorted(nucleus, targets[:, None], right=True)[:, 0]
    index = torch.minimum(index, kept.sum(dim=-1) - 1)
    return order.gather(1, index[:, None])[:, 0]
