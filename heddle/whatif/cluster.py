"""The simulated cluster that stands for a recorded one: model, GPU kind and TP degrees.

Workers announce themselves with ``WorkerRegistered`` (engine, model, TP degree, batch cap, KV
capacity). The simulator needs a cost-model preset (``heddle.policy.cost.model``): the model is
taken when it names a preset (the sim engine's models do); the GPU kind is not announced, so it
is recognised by the KV capacity, which differs between presets of one model. Anything not
recognised falls back to a default and is reported as assumed, never silently.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from heddle.events import WorkerRegistered
from heddle.policy.cost.model import HARDWARE, MODELS, TP_DEGREES, preset
from heddle.sim import SimConfig

_DEFAULTS = SimConfig()


@dataclass(frozen=True, slots=True)
class RecordedCluster:
    model: str
    """Cost-model preset of every simulated worker."""
    hardware: str
    tp_degrees: list[int]
    """One entry per recorded worker, in worker-id order."""
    worker_ids: list[str]
    max_running: int
    is_model_recorded: bool
    """False: no worker named a preset model; ``model`` is the default."""
    is_hardware_recognised: bool
    """False: no preset matched a worker's KV capacity; ``hardware`` is the default."""

    @property
    def num_gpus(self) -> int:
        return sum(self.tp_degrees)

    def describe(self) -> dict[str, object]:
        return {
            "model": self.model,
            "hardware": self.hardware,
            "tp_degrees": self.tp_degrees,
            "worker_ids": self.worker_ids,
            "max_running": self.max_running,
            "model_source": "recorded" if self.is_model_recorded else "assumed (default)",
            "hardware_source": (
                "recognised by KV capacity" if self.is_hardware_recognised else "assumed (default)"
            ),
        }


def recognise_hardware(model: str, tp_degree: int, max_kv_tokens: int) -> str | None:
    """The GPU kind whose preset of ``model`` at ``tp_degree`` has this KV capacity."""
    if model not in MODELS or tp_degree not in TP_DEGREES or max_kv_tokens <= 0:
        return None
    for name in HARDWARE:
        if preset(model, name, tp_degree).max_kv_tokens == max_kv_tokens:
            return name
    return None


def recorded_cluster(
    registrations: Sequence[WorkerRegistered], worker_ids: Sequence[str]
) -> RecordedCluster:
    """The cluster of ``worker_ids`` (the workers that ran the rollout) from their latest
    registrations; a worker without one is simulated as TP1. ValueError when no worker ran."""
    if not worker_ids:
        raise ValueError("the rollout ran on no worker: nothing to simulate")
    latest = {r.worker_id: r for r in registrations}
    ran = [latest[w] for w in sorted(worker_ids) if w in latest]
    models = Counter(r.model for r in ran if r.model in MODELS)
    model = models.most_common(1)[0][0] if models else _DEFAULTS.model
    kinds = Counter(
        kind
        for r in ran
        if (kind := recognise_hardware(r.model, r.tp_degree, r.max_kv_tokens)) is not None
    )
    hardware = kinds.most_common(1)[0][0] if kinds else _DEFAULTS.hardware
    tp_by_worker = {r.worker_id: r.tp_degree for r in ran if r.tp_degree in TP_DEGREES}
    caps = [r.max_running for r in ran if r.max_running > 0]
    return RecordedCluster(
        model=model,
        hardware=hardware,
        tp_degrees=[tp_by_worker.get(w, 1) for w in sorted(worker_ids)],
        worker_ids=sorted(worker_ids),
        max_running=max(caps) if caps else _DEFAULTS.max_running,
        is_model_recorded=bool(models),
        is_hardware_recognised=bool(kinds),
    )
