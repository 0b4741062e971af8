"""Engine models: how every system's inference engines behave in a comparison (provisional:
the radix cache and retract-on-preempt land with the batching model's engine-model work)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from heddle.policy.batching import BatchingConfig

CacheKind = Literal["radix", "trajectory"]


@dataclass(frozen=True, slots=True)
class EngineModel:
    name: str
    summary: str
    cache: CacheKind
    page_tokens: int
    preemption_keeps_kv: bool
    kv_transfer: bool

    def batching_config(
        self, *, preemptive: bool, max_running: int = 1024, record_timeline: bool = False
    ) -> BatchingConfig:
        return BatchingConfig(
            max_running=max_running,
            preemptive=preemptive,
            eviction="lru",
            record_timeline=record_timeline,
        )


ENGINE_MODELS: dict[str, EngineModel] = {
    model.name: model
    for model in (
        EngineModel("sglang", "stock SGLang 0.5.x", "radix", 1, False, False),
        EngineModel("torch", "Heddle's torch engine", "trajectory", 1, True, True),
    )
}
DEFAULT_ENGINE_MODEL = "sglang"


def engine_model(name: str) -> EngineModel:
    model = ENGINE_MODELS.get(name)
    if model is None:
        raise ValueError(f"unknown engine model {name!r}; choose from {', '.join(ENGINE_MODELS)}")
    return model
