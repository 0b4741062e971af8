"""slime's rollout function against a real Heddle (sim engine). ``generate_rollout`` returns
slime's groups, each sample with tokens = prompt + response, the loss mask over the response
(0 on the tool's tokens), log-probs, reward, and its status from the finish reason: a complete
trace and one cut at ``max_steps`` (TRUNCATED). A group with a trajectory aborted by an operator
is never trained on: slime's loop takes another group instead, and with ``--partial-rollout``
the aborted group goes back to the data source, reset to its prompt (it runs again next time).
slime's dynamic filter, over-sampling, sample hooks, group reward model and its post-rollout
functions are called where slime calls them. slime's ``Sample`` and data source are the
test-only double of tests/integrations/slime_types.py; the user functions are
tests/integrations/slime_user_functions.py."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
import slime_user_functions as user
from integration_helpers import abort_when_started, expected_loss_mask, trace_task
from slime_types import DataSource, Sample

from heddle.config import Settings
from heddle.integrations.slime import STATUS_OF_FINISH_REASON, generate_rollout
from heddle.rollout.inprocess import InProcessDeployment

WHOLE = [10, 7]
CUT = [4, 4, 4, 4, 4]  # 5 generations; max_steps 3 cuts it


def slime_args(**more: Any) -> SimpleNamespace:
    return SimpleNamespace(
        rollout_batch_size=2,
        n_samples_per_prompt=2,
        rollout_max_response_len=300_000,
        rollout_temperature=1.0,
        heddle_environment="trace",
        heddle_max_steps=3,
        heddle_max_total_tokens=600_000,
        **more,
    )


def prompts(*tasks: dict[str, Any]) -> list[Sample]:
    return [Sample(prompt=t["id"], label=None, metadata={"heddle_task": t}) for t in tasks]


async def test_generate_rollout_returns_slime_groups_and_sends_aborted_ones_back(
    heddle: InProcessDeployment, settings: Settings
) -> None:
    held = trace_task("held", [200_000])
    source = DataSource(
        prompts(held, trace_task("whole", WHOLE), trace_task("cut", CUT)), n_samples_per_prompt=2
    )
    aborter = asyncio.create_task(abort_when_started(settings, ["t000000", "t000001"]))
    groups = await asyncio.to_thread(generate_rollout, slime_args(partial_rollout=True), 7, source)
    await aborter
    assert [[s.metadata["heddle_task"]["id"] for s in g] for g in groups] == [
        ["whole"] * 2, ["cut"] * 2
    ]  # fmt: skip
    assert [[s.status for s in g] for g in groups] == [
        [Sample.Status.COMPLETED] * 2, [Sample.Status.TRUNCATED] * 2
    ]  # fmt: skip
    for sample in [s for g in groups for s in g]:
        assert sample.metadata["heddle"]["traj_id"].startswith("t")
        assert len(sample.tokens) == 12 + sample.response_length
        assert len(sample.loss_mask) == len(sample.rollout_log_probs) == sample.response_length
        assert sample.metadata["heddle_metrics"]["rollout/dynamic_filter/drop_aborted"] == 1.0
    whole, cut = groups[0][0], groups[1][0]
    assert whole.loss_mask == expected_loss_mask(WHOLE)
    assert whole.response and cut.metadata["heddle"]["finish_reason"] == "max_steps"
    assert cut.loss_mask == expected_loss_mask(CUT[:3])[: cut.response_length]
    logprob_mask = whole.metadata["heddle"]["logprob_mask"]
    masked = [lp for lp, m in zip(whole.rollout_log_probs, logprob_mask, strict=True) if not m]
    assert masked == [0.0] * 5
    # The aborted group is back in slime's buffer, as its data source first gave it.
    assert len(source.buffer) == 1 and [s.index for s in source.buffer[0]] == [0, 1]
    for sample in source.buffer[0]:
        assert sample.status is Sample.Status.PENDING and sample.response_length == 0
        assert len(sample.tokens) == 12 and "heddle" not in sample.metadata


async def test_filter_oversampling_hooks_and_group_rm_run_where_slime_runs_them(
    heddle: InProcessDeployment, settings: Settings
) -> None:
    tasks = [trace_task(name, WHOLE) for name in ("tie0", "a", "tie1", "b", "c", "d")]
    source = DataSource(prompts(*tasks), n_samples_per_prompt=2)
    user.CALLS.clear()
    args = slime_args(
        over_sampling_batch_size=3,
        dynamic_sampling_filter_path="slime_user_functions.keep_nonzero_std",
        rollout_sample_hook_path=["slime_user_functions.tag_sample"],
        custom_rm_path="slime_user_functions.group_reward",
        group_rm=True,
        rollout_sample_filter_path="slime_user_functions.remove_truncated",
        rollout_all_samples_process_path="slime_user_functions.count_all",
    )
    groups = await asyncio.to_thread(generate_rollout, args, 4, source)
    kept = [g[0].metadata["heddle_task"]["id"] for g in groups]
    assert len(kept) == 2 and not any(name.startswith("tie") for name in kept)
    for group in groups:
        assert [s.reward for s in group] == [0.0, 1.0]  # the group rm's, not the environment's
        assert all(s.metadata["hooked_in_rollout"] == 4 for s in group)
    metrics = groups[0][0].metadata["heddle_metrics"]
    assert metrics["rollout/dynamic_filter/drop_zero_std_0.0"] >= 1.0
    # The first 3 groups are judged before more are taken: 2 dropped, 1 kept, then 3 more.
    assert set(user.CALLS["filter"][:3]) == {"tie0", "a", "tie1"} and "a" in kept
    assert len(user.CALLS["filter"]) >= 4
    assert set(user.CALLS["rm"]) == {2} and len(user.CALLS["hook"]) == 2 * len(user.CALLS["rm"])
    assert user.CALLS["sample_filter"] == [2] and user.CALLS["all_samples"][0] >= 3
    assert len(source.buffer) == 0  # without --partial-rollout, leftovers are dropped as slime does


def test_every_finish_reason_has_a_slime_status() -> None:
    from heddle.events.base import TerminalReason

    assert set(STATUS_OF_FINISH_REASON) == set(TerminalReason.__args__)
    assert {Sample.Status[name] for name in STATUS_OF_FINISH_REASON.values()} <= set(Sample.Status)


def test_evaluation_custom_generation_and_uneven_groups_are_refused() -> None:
    with pytest.raises(ValueError, match="eval-function-path"):
        generate_rollout(slime_args(), 0, DataSource([], 1), evaluation=True)
    with pytest.raises(ValueError, match="custom-generate-function-path"):
        generate_rollout(slime_args(custom_generate_function_path="x.y"), 0, DataSource([], 1))
    from heddle.integrations.slime import batch_request

    with pytest.raises(ValueError, match="same number"):
        batch_request(slime_args(), [[Sample()], [Sample(), Sample()]], 0)
