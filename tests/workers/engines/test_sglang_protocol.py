"""SGLang wire shapes: what the sglang engine sends, and how it reads SGLang's answers."""

from __future__ import annotations

import json

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from heddle.workers.engines.sglang.client import RetryPolicy
from heddle.workers.engines.sglang.http import error_text
from heddle.workers.engines.sglang.protocol import (
    MAX_PRIORITY,
    GenerateBody,
    GenerateOutput,
    MetaInfo,
    SamplingParamsWire,
    StreamMerger,
    decode_loads,
    decode_output,
    decode_server_info,
    encode_json,
    to_priority,
)


def test_a_generate_body_names_only_sglang_keys_and_leaves_logprob_start_len_unset() -> None:
    body = GenerateBody(
        input_ids=[5, 6, 7],
        sampling_params=SamplingParamsWire(max_new_tokens=16, temperature=0.7, stop_token_ids=[2]),
        rid="hd00000000-000000000001",
        priority=3,
        return_logprob=True,
    )
    wire = json.loads(encode_json(body))
    assert wire == {
        "input_ids": [5, 6, 7],
        "sampling_params": {"max_new_tokens": 16, "temperature": 0.7, "stop_token_ids": [2]},
        "rid": "hd00000000-000000000001",
        "priority": 3,
        "return_logprob": True,
    }
    assert isinstance(wire["priority"], int) and isinstance(
        wire["sampling_params"]["max_new_tokens"], int
    )


def test_a_prefill_only_body_asks_for_zero_new_tokens() -> None:
    body = GenerateBody(
        input_ids=[1], sampling_params=SamplingParamsWire(max_new_tokens=0), rid="r"
    )
    assert json.loads(encode_json(body))["sampling_params"] == {"max_new_tokens": 0}


RESPONSE = b"""{"text": "ab", "output_ids": [11, 12, 2],
 "meta_info": {"id": "r1", "finish_reason": {"type": "stop", "matched": 2},
   "prompt_tokens": 4, "completion_tokens": 3, "cached_tokens": 3, "e2e_latency": 0.12,
   "weight_version": "default", "num_retractions": 1, "spec_verify_ct": 0,
   "input_token_logprobs": [], "output_token_logprobs": [[-0.5, 11, null], [-1.25, 12, null],
   [-0.01, 2, null]]}}"""


def test_a_finished_response_decodes_ids_counters_and_logprobs() -> None:
    output = decode_output(RESPONSE)
    assert output.output_ids == [11, 12, 2]
    assert output.is_finished
    meta = output.meta_info
    assert meta.finish_reason is not None and meta.finish_reason.type == "stop"
    assert meta.finish_reason.matched == 2
    assert (meta.prompt_tokens, meta.cached_tokens, meta.num_retractions) == (4, 3, 1)
    assert output.output_logprobs == [-0.5, -1.25, -0.01]


@pytest.mark.parametrize(
    ("reason", "kind"),
    [
        ('{"type": "length", "length": 8}', "length"),
        ('{"type": "abort", "message": "Abort in running batch"}', "abort"),
        ('{"type": "stop", "matched": "</s>"}', "stop"),
        ('{"type": "stop", "matched": null}', "stop"),
    ],
)
def test_every_finish_reason_variant_decodes(reason: str, kind: str) -> None:
    payload = f'{{"output_ids": [], "meta_info": {{"finish_reason": {reason}}}}}'
    finish = decode_output(payload.encode()).meta_info.finish_reason
    assert finish is not None and finish.type == kind


def test_a_running_stream_frame_has_no_finish_reason() -> None:
    frame = decode_output(b'{"output_ids": [1], "meta_info": {"finish_reason": null}}')
    assert not frame.is_finished


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b'{"error": {"message": "temperature must be a non-negative"}}', "temperature must be"),
        (b'{"detail": "The request queue is full."}', "queue is full"),
        (
            b'{"detail": [{"loc": ["body", "priority"], '
            b'"msg": "Input should be a valid integer"}]}',
            "body.priority: Input should be a valid integer",
        ),
        (b"Internal Server Error", "Internal Server Error"),
        (b"", "HTTP 500 with an empty body"),
    ],
)
def test_error_text_is_the_servers_own_message(body: bytes, expected: str) -> None:
    assert expected in error_text(500, body)


def test_loads_aggregate_over_dp_ranks() -> None:
    report = decode_loads(
        b"""{"timestamp": "2026-01-01T00:00:00+00:00", "version": "0.5.23", "accelerator": null,
        "num_accelerators": 2, "loads": [
        {"dp_rank": 0, "num_running_reqs": 3, "num_waiting_reqs": 1, "token_usage": 0.25,
         "max_total_num_tokens": 1000, "max_running_requests": 8, "memory": {"weight_gb": 1}},
        {"dp_rank": 1, "num_running_reqs": 2, "num_waiting_reqs": 0, "token_usage": 0.5,
         "max_total_num_tokens": 1000, "max_running_requests": 8}]}"""
    )
    assert (report.num_running, report.num_waiting) == (5, 1)
    assert (report.max_running_requests, report.max_total_num_tokens) == (16, 2000)
    assert report.token_usage == 0.5


def test_server_info_reads_model_tp_and_scheduling_flags() -> None:
    info = decode_server_info(
        b"""{"model_path": "/models/qwen3-8b", "served_model_name": null, "tp_size": 2,
        "dp_size": 1, "enable_priority_scheduling": true, "max_total_num_tokens": 500000,
        "internal_states": [{"avg_spec_accept_length": null}], "version": "0.5.23"}"""
    )
    assert (info.model_name, info.tp_size, info.enable_priority_scheduling) == (
        "/models/qwen3-8b",
        2,
        True,
    )


@given(st.floats(-1e12, 1e12), st.floats(-1e12, 1e12), st.sampled_from([1.0, 10.0, 0.01]))
def test_server_priority_keeps_order_within_int32(a: float, b: float, scale: float) -> None:
    low, high = sorted((a, b))
    assert to_priority(low, scale) <= to_priority(high, scale)
    assert -MAX_PRIORITY <= to_priority(a, scale) <= MAX_PRIORITY


@given(st.lists(st.lists(st.integers(0, 50_000), max_size=4), min_size=1, max_size=8))
def test_merging_incremental_frames_gives_the_cumulative_output(deltas: list[list[int]]) -> None:
    merger = StreamMerger(incremental=True)
    merged = GenerateOutput()
    for delta in deltas:
        logprobs: list[tuple[float | None, int, str | None]] = [(-0.5, t, None) for t in delta]
        frame = GenerateOutput(output_ids=delta, meta_info=MetaInfo(output_token_logprobs=logprobs))
        merged = merger.add(frame)
    expected = [token for delta in deltas for token in delta]
    assert merged.output_ids == expected
    assert [entry[1] for entry in merged.meta_info.output_token_logprobs or []] == expected


def test_cumulative_frames_pass_through_unchanged() -> None:
    frame = GenerateOutput(output_ids=[1, 2])
    assert StreamMerger(incremental=False).add(frame) is frame


@given(st.integers(0, 20), st.floats(0.0, 2.0), st.floats(0.0, 30.0))
def test_retry_backoff_doubles_up_to_its_ceiling(
    index: int, initial: float, ceiling: float
) -> None:
    policy = RetryPolicy(max_retries=3, backoff_initial_s=initial, backoff_max_s=ceiling)
    assert policy.delay_s(index) == min(ceiling, initial * 2**index)
    assert policy.delay_s(index) <= policy.delay_s(index + 1)


def test_negative_retry_settings_are_refused() -> None:
    with pytest.raises(ValueError, match=">= 0"):
        RetryPolicy(max_retries=-1)


def test_unknown_finish_shapes_fail_loudly() -> None:
    with pytest.raises(msgspec.ValidationError):
        decode_output(b'{"output_ids": ["x"], "meta_info": {}}')
