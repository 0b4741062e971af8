"""Engine models: how the inference engine behaves, a run setting shared by every system compared.

The prefix cache, what preemption does to KV and whether a migration moves KV are properties of
the engine, not of the scheduling policy on top of it, so every system in a comparison runs on
the same engine model. We offer exactly what our two real engines do:

``sglang`` (the default) stands for stock SGLang 0.5.x launched with
``--enable-priority-scheduling --radix-eviction-policy lru
--priority-scheduling-preemption-threshold <gap> --page-size 1`` (the threshold is
``heddle.policy.scheduling.preemption.PreemptionConfig``; page size 1 is SGLang's default for the
FlashInfer/FA3 backends, ``ServerArgs.page_size``). Its radix cache
(``python/sglang/srt/mem_cache/radix_cache.py``: ``match_prefix``, ``insert``,
``cache_finished_req``, ``evict``) keeps finished requests' tokens in a tree, shares a group's
prompt between its samples and evicts whole leaves least recently used first, so a returning
request hits whatever survives of its prefix (``heddle.policy.batching.radix``). Priority
preemption retracts the victim (``ScheduleBatch.retract_decode`` / ``release_req``): the KV of
what it generated is freed and recomputed on resume, while the context it was admitted with
stays in the tree as evictable cache. SGLang has no per-request KV export: a migration cannot
move KV, the target re-prefills.

``torch`` stands for our own engine (``heddle/workers/engines/torch_engine``), which follows
this model's rules under its KV budget (``--max-kv-tokens``; ``scheduler.py`` states them): its
prefix store (``prefix_store.py``) holds one entry per trajectory, evicted whole in LRU order,
nothing shared between trajectories; admission reserves each running request's final context
(prompt + ``max_new_tokens``), so nothing is retracted for memory; a preempted sequence keeps its
KV and frees only its unused reservation; KV is exported and imported on migration
(``core.py``). Both real engines order and preempt by ``heddle.policy.scheduling.preemption``.
"""

from __future__ import annotations

from dataclasses import dataclass

from heddle.policy.batching import BatchingConfig, CacheKind
from heddle.policy.bound_facts import PromptSharing
from heddle.policy.scheduling.preemption import PreemptionConfig


@dataclass(frozen=True, slots=True)
class EngineModel:
    name: str
    summary: str
    """One line, with the real flags it stands for."""
    cache: CacheKind
    page_tokens: int
    preemption_keeps_kv: bool
    kv_transfer: bool
    """A migration moves the KV (torch), or the target re-prefills (sglang)."""

    @property
    def prompt_sharing(self) -> PromptSharing:
        """What its prefix cache saves on a group's prompt (``heddle.policy.bound_facts``): the
        radix tree holds it once and prefills it once; the per-trajectory store keeps a copy
        each."""
        return "group" if self.cache == "radix" else "none"

    def batching_config(
        self,
        *,
        preemptive: bool,
        max_running: int = 1024,
        record_timeline: bool = False,
        preemption: PreemptionConfig = PreemptionConfig(),
    ) -> BatchingConfig:
        """The batching model of one worker running this engine."""
        return BatchingConfig(
            max_running=max_running,
            preemptive=preemptive,
            preemption=preemption,
            cache=self.cache,
            page_tokens=self.page_tokens,
            preemption_keeps_kv=self.preemption_keeps_kv,
            record_timeline=record_timeline,
        )


SGLANG = EngineModel(
    name="sglang",
    summary=(
        "SGLang 0.5.x: --enable-priority-scheduling --radix-eviction-policy lru "
        "--priority-scheduling-preemption-threshold <gap> --page-size 1; radix cache, "
        "preemption retracts, no KV transfer"
    ),
    cache="radix",
    page_tokens=1,
    preemption_keeps_kv=False,
    kv_transfer=False,
)
TORCH = EngineModel(
    name="torch",
    summary=(
        "Heddle's torch engine: per-trajectory LRU prefix store, preemption keeps KV, "
        "KV export/import on migration"
    ),
    cache="trajectory",
    page_tokens=1,
    preemption_keeps_kv=True,
    kv_transfer=True,
)
ENGINE_MODELS: dict[str, EngineModel] = {model.name: model for model in (SGLANG, TORCH)}
DEFAULT_ENGINE_MODEL = "sglang"


def engine_model(name: str) -> EngineModel:
    """The engine model called ``name``; ValueError naming the choices."""
    model = ENGINE_MODELS.get(name)
    if model is None:
        raise ValueError(f"unknown engine model {name!r}; choose one of {sorted(ENGINE_MODELS)}")
    return model
