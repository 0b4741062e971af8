"""Histories: other prompts share no group or id with the rollout, the same prompts share all of
them, none is empty; each is reproducible and another replication draws another."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from heddle.traces import TraceTrajectory
from heddle.workloads import generate
from heddle.workloads.history import (
    HISTORY_KINDS,
    OTHER_PROMPTS_SUFFIX,
    as_other_prompts,
    history_kind,
    make_history,
    other_prompts_seed,
)


def _sample(seed: int, epoch: int) -> list[TraceTrajectory]:
    return generate("coding", 24, seed, epoch=epoch)


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**40), replication=st.integers(0, 3))
def test_other_prompts_never_share_a_group_or_id_with_the_rollout(
    seed: int, replication: int
) -> None:
    rollout = _sample(seed, 2 * replication)
    history = make_history("other", _sample, seed, replication)
    assert len(history) == len(rollout)
    assert not {t.group for t in history} & {t.group for t in rollout}
    assert not {t.id for t in history} & {t.id for t in rollout}
    assert all(t.group.endswith(OTHER_PROMPTS_SUFFIX) for t in history)
    # Other prompts of the same distribution: another seed's prompts, renamed.
    drawn = _sample(other_prompts_seed(seed, replication), 0)
    assert [t.prompt_tokens for t in history] == [t.prompt_tokens for t in drawn]
    assert [t.steps for t in history] == [t.steps for t in drawn]
    assert make_history("other", _sample, seed, replication) == history


def test_the_same_prompts_are_the_next_epoch_of_the_rollout_s_groups() -> None:
    rollout = _sample(7, 2)
    history = make_history("same", _sample, 7, replication=1)
    assert history == _sample(7, 3)
    assert [(t.id, t.group, t.prompt_tokens) for t in history] == [
        (t.id, t.group, t.prompt_tokens) for t in rollout
    ]
    assert [t.steps for t in history] != [t.steps for t in rollout]


def test_no_history_is_empty_and_replications_draw_other_prompts() -> None:
    assert make_history("none", _sample, 7) == []
    first = make_history("other", _sample, 7, 0)
    second = make_history("other", _sample, 7, 1)
    assert [t.prompt_tokens for t in first] != [t.prompt_tokens for t in second]
    assert other_prompts_seed(7, 0) != 7 and other_prompts_seed(7, 0) < 2**63


def test_renaming_keeps_ungrouped_trajectories_ungrouped() -> None:
    lone = TraceTrajectory(id="t1", group="", prompt_tokens=3, steps=_sample(1, 0)[0].steps)
    (renamed,) = as_other_prompts([lone])
    assert (renamed.id, renamed.group) == ("t1" + OTHER_PROMPTS_SUFFIX, "")


def test_history_kinds_are_named() -> None:
    assert [history_kind(name) for name in HISTORY_KINDS] == list(HISTORY_KINDS)
    with pytest.raises(ValueError, match="unknown history 'yesterday'; choose one of other"):
        history_kind("yesterday")
