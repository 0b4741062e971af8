"""slime's rollout function against a real Heddle (sim engine): ``generate_rollout`` returns
slime's groups, each sample with tokens = prompt + response, the loss mask over the response
(0 on the tool's tokens), log-probs, reward, and its status from the finish reason: a complete
trace, one cut at ``max_steps`` (TRUNCATED) and one aborted by an operator (ABORTED, untrained).
slime's ``Sample`` is the test-only double of tests/integrations/slime_types.py."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from integration_helpers import abort_when_started, expected_loss_mask, trace_task
from slime_types import DataSource, Sample

from heddle.config import Settings
from heddle.integrations.slime import STATUS_OF_FINISH_REASON, generate_rollout
from heddle.rollout.inprocess import InProcessDeployment

WHOLE = [10, 7]
CUT = [4, 4, 4, 4, 4]  # 5 generations; max_steps 3 cuts it


def slime_args() -> SimpleNamespace:
    return SimpleNamespace(
        rollout_batch_size=3,
        n_samples_per_prompt=2,
        rollout_max_response_len=300_000,
        rollout_temperature=1.0,
        heddle_environment="trace",
        heddle_max_steps=3,
        heddle_max_total_tokens=600_000,
    )


def prompts() -> list[Sample]:
    tasks = [trace_task("whole", WHOLE), trace_task("cut", CUT), trace_task("long", [200_000])]
    return [Sample(prompt=t["id"], label=None, metadata={"heddle_task": t}) for t in tasks]


async def test_generate_rollout_returns_slime_groups_with_status_and_masks(
    heddle: InProcessDeployment, settings: Settings
) -> None:
    source = DataSource(prompts(), n_samples_per_prompt=2)
    aborter = asyncio.create_task(abort_when_started(settings, ["t000004", "t000005"]))
    groups = await asyncio.to_thread(generate_rollout, slime_args(), 7, source)
    await aborter
    assert [[s.index for s in g] for g in groups] == [[0, 1], [2, 3], [4, 5]]
    assert [[s.status for s in g] for g in groups] == [
        [Sample.Status.COMPLETED] * 2, [Sample.Status.TRUNCATED] * 2, [Sample.Status.ABORTED] * 2
    ]  # fmt: skip
    for sample in [s for g in groups for s in g]:
        heddle_info = sample.metadata["heddle"]
        assert isinstance(sample, Sample) and heddle_info["traj_id"] == f"t{sample.index:06d}"
        assert len(sample.tokens) == 12 + sample.response_length
        assert len(sample.loss_mask) == len(sample.rollout_log_probs) == sample.response_length
        assert sample.metadata["heddle_metrics"]["heddle/num_trajectories"] == 6.0
    whole, cut, aborted = groups[0][0], groups[1][0], groups[2][0]
    assert whole.loss_mask == expected_loss_mask(WHOLE)
    assert cut.loss_mask == expected_loss_mask(CUT[:3])[: cut.response_length]
    assert cut.metadata["heddle"]["finish_reason"] == "max_steps"
    logprob_mask = whole.metadata["heddle"]["logprob_mask"]
    assert [lp for lp, m in zip(whole.rollout_log_probs, logprob_mask, strict=True) if not m] == [
        0.0
    ] * 5
    assert aborted.metadata["heddle"]["reason"].startswith("aborted")
    assert set(aborted.loss_mask) <= {0} and aborted.reward == 0.0


def test_every_finish_reason_has_a_slime_status() -> None:
    from heddle.events.base import TerminalReason

    assert set(STATUS_OF_FINISH_REASON) == set(TerminalReason.__args__)
    assert {Sample.Status[name] for name in STATUS_OF_FINISH_REASON.values()} <= set(Sample.Status)


def test_evaluation_and_uneven_groups_are_refused() -> None:
    with pytest.raises(ValueError, match="eval-function-path"):
        generate_rollout(slime_args(), 0, DataSource([], 1), evaluation=True)
    from heddle.integrations.slime import batch_request

    with pytest.raises(ValueError, match="same number"):
        batch_request(slime_args(), [[Sample()], [Sample(), Sample()]], 0)
