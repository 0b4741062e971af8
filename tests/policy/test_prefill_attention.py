"""Prefill cost grows with the context its new tokens attend to (docs/calibration.md s.1,
"Prefill attention"): the pair count against brute force, chunking invariance, and the
constants from the model shapes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from heddle.policy.cost.model import MODELS, attended_pairs, preset


@given(num_tokens=st.integers(0, 300), num_cached=st.integers(0, 3000))
def test_pairs_count_every_new_token_s_attention(num_tokens: int, num_cached: int) -> None:
    brute = sum(num_cached + position + 1 for position in range(num_tokens))
    assert attended_pairs(num_tokens, num_cached) == brute


@given(
    first=st.integers(0, 20_000),
    second=st.integers(0, 20_000),
    cached=st.integers(0, 100_000),
    tp=st.sampled_from([1, 2, 4, 8]),
)
def test_a_prefill_split_in_two_costs_the_same(
    first: int, second: int, cached: int, tp: int
) -> None:
    """Chunked prefill computes the same FLOPs: the second chunk attends to the first."""
    model = preset("qwen3-32b", "h200", tp)
    whole = model.prefill_s(first + second, cached)
    chunked = model.prefill_s(first, cached) + model.prefill_s(second, cached + first)
    assert chunked == pytest.approx(whole, rel=1e-12, abs=1e-15)


def test_attention_constants_come_from_the_model_shapes() -> None:
    shape = MODELS["qwen3-32b"]
    assert shape.attention_flops_per_pair == 4 * 64 * 64 * 128
    model = preset("qwen3-32b", "h200", 1)
    per_token_s, per_pair_s = model.prefill_terms()
    assert per_pair_s / per_token_s == pytest.approx(shape.attention_flops_per_pair / 65.6e9)
    # A 1,000-token observation after 50k tokens of context: 2.6x its linear cost.
    assert model.prefill_s(1000, 50_000) / (1000 * per_token_s) == pytest.approx(2.61, abs=0.01)
    assert model.prefill_s(1000) < model.prefill_s(1000, 1) < model.prefill_s(1000, 50_000)
