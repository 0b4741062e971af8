"""Engine models: the two real engines' behaviour as batching settings."""

from __future__ import annotations

import pytest

from heddle.policy.batching import BatchingConfig, BatchingModel, GenerationJob
from heddle.policy.cost.model import preset
from heddle.policy.engine_models import DEFAULT_ENGINE_MODEL, ENGINE_MODELS, engine_model
from heddle.policy.scheduling.preemption import PreemptionConfig


def test_the_two_engines_and_their_settings() -> None:
    assert sorted(ENGINE_MODELS) == ["sglang", "torch"] and DEFAULT_ENGINE_MODEL == "sglang"
    sglang, torch = engine_model("sglang"), engine_model("torch")
    assert (sglang.cache, sglang.page_tokens, sglang.preemption_keeps_kv) == ("radix", 1, False)
    assert not sglang.kv_transfer and torch.kv_transfer
    assert (torch.cache, torch.preemption_keeps_kv) == ("trajectory", True)
    for flag in ("--enable-priority-scheduling", "--radix-eviction-policy lru", "--page-size 1"):
        assert flag in sglang.summary
    with pytest.raises(ValueError, match=r"choose one of \['sglang', 'torch'\]"):
        engine_model("vllm")


def test_batching_config_carries_the_engine_and_the_run_settings() -> None:
    gap = PreemptionConfig(min_priority_gap=3.0)
    config = engine_model("sglang").batching_config(
        preemptive=True, max_running=8, record_timeline=True, preemption=gap
    )
    assert config == BatchingConfig(
        max_running=8,
        preemptive=True,
        preemption=gap,
        cache="radix",
        page_tokens=1,
        preemption_keeps_kv=False,
        record_timeline=True,
    )
    model = BatchingModel(preset("qwen3-8b", "h200", 1), config)
    model.submit(GenerationJob("a", "t", 100, 100, 5, group_id="g", num_prompt_tokens=60), 0.0)
    assert model.next_event_time() is not None


def test_invalid_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="cache must be one of"):
        BatchingConfig(cache="lfu")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="page_tokens"):
        BatchingConfig(page_tokens=0)
    with pytest.raises(ValueError, match="more prompt tokens"):
        GenerationJob("a", "t", 10, 10, 1, group_id="g", num_prompt_tokens=11)
    with pytest.raises(ValueError, match="token counts"):
        GenerationJob("a", "t", 10, 10, 1, num_prompt_tokens=-1)
