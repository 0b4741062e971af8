"""Sampling: seeded, batch-independent, inside the top-p nucleus, matching the softmax."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from heddle.workers.engines.torch_engine.sampler import RowSampling, request_seed, sample, uniform


def _row(
    seed: int, *, temperature: float = 1.0, top_p: float = 1.0, position: int = 0
) -> RowSampling:
    return RowSampling(temperature=temperature, top_p=top_p, seed=seed, position=position)


def test_uniform_draws_are_deterministic_and_spread_over_unit_interval() -> None:
    draws = [uniform(seed=3, position=index) for index in range(20_000)]
    assert draws == [uniform(seed=3, position=index) for index in range(20_000)]
    assert all(0.0 <= draw < 1.0 for draw in draws)
    assert abs(sum(draws) / len(draws) - 0.5) < 0.01
    deciles = [sum(1 for draw in draws if k / 10 <= draw < (k + 1) / 10) for k in range(10)]
    assert max(deciles) - min(deciles) < 0.1 * len(draws) / 10


def test_greedy_picks_the_argmax_with_its_logprob() -> None:
    logits = torch.tensor([[0.1, 2.0, -1.0, 1.9], [3.0, 0.0, 0.0, 0.0]])
    result = sample(logits, [_row(1, temperature=0.0), _row(2, temperature=0.0)])
    assert result.token_ids == [1, 0]
    expected = torch.log_softmax(logits, dim=-1)[[0, 1], [1, 0]]
    assert result.logprobs == pytest.approx(expected.tolist())


def test_frequencies_follow_the_tempered_softmax() -> None:
    logits = torch.tensor([[1.0, 0.5, 0.0, -1.0]])
    temperature = 0.7
    counts = [0, 0, 0, 0]
    num_draws = 4000
    for position in range(num_draws):
        token = sample(logits, [_row(11, temperature=temperature, position=position)]).token_ids[0]
        counts[token] += 1
    probs = torch.softmax(logits[0] / temperature, dim=-1).tolist()
    for count, prob in zip(counts, probs, strict=True):
        assert abs(count / num_draws - prob) < 0.03


@settings(max_examples=150)
@given(
    values=st.lists(st.floats(-5, 5), min_size=2, max_size=40),
    top_p=st.floats(0.05, 1.0),
    temperature=st.floats(0.1, 2.0),
    seed=st.integers(0, 2**63),
    position=st.integers(0, 10_000),
)
def test_sampled_token_is_in_the_top_p_nucleus(
    values: list[float], top_p: float, temperature: float, seed: int, position: int
) -> None:
    logits = torch.tensor([values])
    row = _row(seed, temperature=temperature, top_p=top_p, position=position)
    token = sample(logits, [row]).token_ids[0]
    probs = torch.softmax(logits[0] / temperature, dim=-1).tolist()
    ranked = sorted(range(len(probs)), key=lambda index: -probs[index])
    # Brute force nucleus: tokens in rank order while the mass before them is below top_p.
    nucleus, mass = set(), 0.0
    for index in ranked:
        if mass >= top_p and nucleus:
            break
        nucleus.add(index)
        mass += probs[index]
    tied = {index for index in ranked if math.isclose(probs[index], probs[token], rel_tol=1e-5)}
    assert token in nucleus or tied & nucleus


@settings(max_examples=60)
@given(seed=st.integers(0, 2**32), others=st.integers(1, 6))
def test_a_rows_token_does_not_depend_on_the_rest_of_the_batch(seed: int, others: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(others + 1, 50, generator=generator)
    rows = [
        _row(seed + index, temperature=0.9, top_p=0.9, position=7) for index in range(others + 1)
    ]
    batched = sample(logits, rows)
    alone = sample(logits[-1:], rows[-1:])
    assert batched.token_ids[-1] == alone.token_ids[0]
    assert batched.logprobs[-1] == alone.logprobs[0]


def test_request_seed_uses_the_given_seed_or_derives_a_stable_one() -> None:
    assert request_seed(42, engine_seed=0, trajectory_id="t1", num_prompt=3) == 42
    derived = request_seed(None, engine_seed=0, trajectory_id="t1", num_prompt=3)
    assert derived == request_seed(None, engine_seed=0, trajectory_id="t1", num_prompt=3)
    assert derived != request_seed(None, engine_seed=1, trajectory_id="t1", num_prompt=3)
    assert derived != request_seed(None, engine_seed=0, trajectory_id="t2", num_prompt=3)


def test_rejects_logits_that_do_not_match_the_rows() -> None:
    with pytest.raises(ValueError, match="for 1 rows"):
        sample(torch.zeros(2, 5), [_row(0)])
