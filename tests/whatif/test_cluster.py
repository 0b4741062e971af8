"""The recorded cluster: presets recognised by KV capacity, latest registrations, defaults."""

from __future__ import annotations

import itertools

import pytest

from heddle.events import WorkerRegistered
from heddle.policy.cost.model import HARDWARE, MODELS, TP_DEGREES, preset
from heddle.whatif import recognise_hardware, recorded_cluster


def registered(worker_id: str, model: str, tp: int, kv: int, when: float = 0.0) -> WorkerRegistered:
    return WorkerRegistered(
        event_id=f"{worker_id}:{when}", occurred_at=when, worker_id=worker_id, engine="sim",
        model=model, tp_degree=tp, max_running=256, max_kv_tokens=kv,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("model", "hardware", "tp"), list(itertools.product(MODELS, HARDWARE, TP_DEGREES))
)
def test_every_preset_is_recognised_by_its_kv_capacity(model: str, hardware: str, tp: int) -> None:
    kv = preset(model, hardware, tp).max_kv_tokens
    if kv > 0:
        assert recognise_hardware(model, tp, kv) == hardware
    assert recognise_hardware(model, tp, kv + 1) is None
    assert recognise_hardware("llama-70b", tp, kv) is None


def test_cluster_from_the_latest_registrations_of_the_workers_that_ran() -> None:
    kv = preset("qwen3-14b", "h100", 2).max_kv_tokens
    registrations = [
        registered("w01", "qwen3-14b", 1, 0, when=1.0),
        registered("w01", "qwen3-14b", 2, kv, when=2.0),  # restarted with TP2: the latest wins
        registered("w00", "qwen3-14b", 2, kv),
        registered("w09", "qwen3-32b", 8, 0),  # did not run the rollout
    ]
    cluster = recorded_cluster(registrations, ["w01", "w00", "w02"])
    assert cluster.model == "qwen3-14b" and cluster.hardware == "h100"
    assert cluster.worker_ids == ["w00", "w01", "w02"]
    assert cluster.tp_degrees == [2, 2, 1]  # w02 never registered: TP1
    assert cluster.num_gpus == 5 and cluster.max_running == 256
    assert cluster.is_model_recorded and cluster.is_hardware_recognised


def test_unknown_models_and_capacities_fall_back_to_reported_defaults() -> None:
    cluster = recorded_cluster([registered("w00", "/models/llama", 4, 123)], ["w00"])
    assert cluster.tp_degrees == [4]
    assert not cluster.is_model_recorded and not cluster.is_hardware_recognised
    assert cluster.describe()["model_source"] == "assumed (default)"
    with pytest.raises(ValueError, match="no worker"):
        recorded_cluster([], [])
