"""``to_data_proto`` against a row-by-row reference written from verl 0.9.1's
``_agent_loop_postprocess`` (left-padded prompt, right-padded response, masks, position ids,
reward at the last response token), for random trajectories: any lengths (responses longer
than ``response_length`` are cut), tool spans, missing logprobs and failures (masked, reward 0).
Skips without verl, fails instead when HEDDLE_REQUIRE_VERL=1."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from heddle.events import Completed

try:
    import verl  # noqa: F401
except ImportError as exc:
    if os.environ.get("HEDDLE_REQUIRE_VERL") == "1":
        raise
    pytest.skip(f"verl is not installed ({exc}): pip install -e '.[verl]'", allow_module_level=True)

from heddle.integrations.verl_batch import to_data_proto

P, R = 6, 8
REASONS = ["stop", "length", "max_steps", "aborted", "error", "tool_error"]


@st.composite
def trajectory(draw: st.DrawFn) -> Completed:
    prompt = draw(st.lists(st.integers(1, 255), max_size=P + 3))
    mask = draw(st.lists(st.integers(0, 1), max_size=R + 4))
    has_logprob = draw(st.lists(st.booleans(), min_size=len(mask), max_size=len(mask)))
    pairs = list(zip(mask, has_logprob, strict=True))
    return Completed(
        event_id="e", traj_id="t000000", occurred_at=0.0, num_steps=1,
        prompt_token_ids=prompt, response_token_ids=[10 + i for i in range(len(mask))],
        response_logprobs=[-1.0 - i if m and h else 0.0 for i, (m, h) in enumerate(pairs)],
        loss_mask=mask, logprob_mask=[int(m and h) for m, h in pairs],
        reward=draw(st.sampled_from([0.0, 0.5, 1.0])), finish_reason=draw(st.sampled_from(REASONS)),
    )  # fmt: skip


def reference_row(t: Completed) -> dict[str, list[float]]:
    prompt = t.prompt_token_ids[-P:]
    response = t.response_token_ids[:R]
    failed = t.finish_reason in {"aborted", "error", "tool_error"}
    mask = [0] * len(response) if failed else t.loss_mask[: len(response)]
    attention = [0] * (P - len(prompt)) + [1] * len(prompt) + [1] * len(response)
    attention += [0] * (R - len(response))
    positions, seen = [], 0
    for a in attention:
        seen += a
        positions.append(max(seen - 1, 0))
    scores = [0.0] * R
    scores[max(len(response) - 1, 0)] = 0.0 if failed else t.reward
    return {
        "prompts": [0] * (P - len(prompt)) + prompt,
        "responses": response + [0] * (R - len(response)),
        "response_mask": mask + [0] * (R - len(response)),
        "attention_mask": attention,
        "position_ids": positions,
        "rollout_log_probs": t.response_logprobs[:R] + [0.0] * (R - len(response)),
        "rm_scores": scores,
    }


@settings(max_examples=60, deadline=None)
@given(st.lists(trajectory(), min_size=1, max_size=5))
def test_to_data_proto_matches_verls_row_by_row_postprocess(batch: list[Completed]) -> None:
    output = to_data_proto(batch, SimpleNamespace(prompt_length=P, response_length=R))
    for row, t in enumerate(batch):
        for key, expected in reference_row(t).items():
            assert output.batch[key][row].tolist() == pytest.approx(expected), key
    assert list(output.non_tensor_batch["heddle_finish_reason"]) == [t.finish_reason for t in batch]
    assert output.meta_info["reward_extra_keys"] == []
