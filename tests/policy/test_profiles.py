"""Measured profiles: parsing, interpolation, CostModel behaviour, clear errors."""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from heddle.policy.cost.model import CostModel, preset
from heddle.policy.cost.profiles import parse_profile

CSV = """# Qwen3-8B on one H100, vLLM
tp,batch,itl_ms
1,1,7.9
1,8,8.6
1,64,14.0
2,1,5.1
2,16,6.0
"""

JSON = {
    "model": "qwen3-8b",
    "hardware": "h100",
    "itl_ms": {"1": {"1": 7.9, "8": 8.6, "64": 14.0}},
    "prefill_tokens_per_s": {"1": 40000},
    "max_kv_tokens": {"1": 380000},
    "context_tokens": 512,
}


def as_cost_model(model: CostModel) -> CostModel:
    return model


def test_csv_profile_interpolates_in_batch_and_takes_kv_from_the_preset() -> None:
    profile = parse_profile(CSV, "csv", model="qwen3-8b", hardware="h100")
    assert profile.tp_degrees == [1, 2]
    model = as_cost_model(profile.cost_model(1))
    assert model.decode_step_s(8, 0) == pytest.approx(8.6e-3)
    assert model.decode_step_s(36, 0) == pytest.approx((8.6 + 0.5 * (14.0 - 8.6)) * 1e-3)
    assert model.decode_step_s(128, 0) > model.decode_step_s(64, 0)  # last slope extends
    assert model.max_kv_tokens == preset("qwen3-8b", "h100", 1).max_kv_tokens
    assert model.prefill_s(40_000) == pytest.approx(preset("qwen3-8b", "h100").prefill_s(40_000))
    assert model.interference(1) == 1.0
    assert model.interference(64) == pytest.approx(14.0 / 7.9)


def test_json_profile_fields_and_context_term() -> None:
    profile = parse_profile(json.dumps(JSON), "json", source="p.json")
    model = profile.cost_model(1)
    assert model.max_kv_tokens == 380000
    # The measured rate prices the linear layers; attention over the context is the preset's.
    assert model.prefill_terms()[0] * 40000 == pytest.approx(1.0)
    attention_s = preset("qwen3-8b", "h100").prefill_terms()[1] * (40000 * 40001 / 2)
    assert model.prefill_s(40000) == pytest.approx(1.0 + attention_s)
    assert model.prefill_s(100, 8000) > model.prefill_s(100)
    # At or below the measured context the profile stands; beyond it KV reads add time.
    assert model.solo_token_s(512) == pytest.approx(7.9e-3)
    assert model.solo_token_s(100) == pytest.approx(7.9e-3)
    assert model.solo_token_s(8192) > model.solo_token_s(512)


@settings(max_examples=60)
@given(
    points=st.dictionaries(st.integers(1, 512), st.floats(1.0, 100.0), min_size=1, max_size=8),
    context=st.integers(0, 4096),
)
def test_interference_is_at_least_one_and_non_decreasing(
    points: dict[int, float], context: int
) -> None:
    document = {
        "itl_ms": {"1": {str(b): v for b, v in points.items()}},
        "prefill_tokens_per_s": {"1": 1000},
        "max_kv_tokens": {"1": 10**6},
    }
    model = parse_profile(json.dumps(document), "json").cost_model(1)
    factors = [model.interference(b, context) for b in range(1, 600, 7)]
    assert factors[0] >= 1.0 - 1e-12
    assert all(a <= b + 1e-12 for a, b in itertools.pairwise(factors))


@pytest.mark.parametrize(
    ("text", "fmt", "message"),
    [
        ("", "csv", "empty"),
        ("tp,batch,latency\n1,1,7", "csv", "header"),
        ("tp,batch,itl_ms\n1,1,7\n1,x,8", "csv", r"prof:3: batch"),
        ("tp,batch,itl_ms\n1,1,-7", "csv", r"prof:2: itl_ms"),
        ("tp,batch,itl_ms\n1,1,7\n1,1,8", "csv", "twice"),
        ("tp,batch,itl_ms\n1,1", "csv", "3 columns"),
        ("{", "json", "not valid JSON"),
        ('{"itl_ms": {"1": {"1": "fast"}}}', "json", r"itl_ms\.1\.1"),
        ('{"itl_ms": {"0": {"1": 7}}}', "json", "itl_ms key"),
        ('{"model": "x"}', "json", "missing field 'itl_ms'"),
        ('{"itl_ms": {"1": {"1": 7}}, "speed": 1}', "json", "unknown field"),
        ('{"itl_ms": {"1": {"1": 7}}, "context_tokens": -1}', "json", "context_tokens"),
    ],
)
def test_bad_profiles_name_the_line_or_field(text: str, fmt: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_profile(text, fmt, source="prof")  # type: ignore[arg-type]


def test_missing_prefill_without_preset_is_explained() -> None:
    profile = parse_profile("tp,batch,itl_ms\n1,1,7.0\n", "csv")
    with pytest.raises(ValueError, match="prefill_tokens_per_s has no tp 1"):
        profile.cost_model(1)
    with pytest.raises(ValueError, match="no tp 4"):
        profile.cost_model(4)
