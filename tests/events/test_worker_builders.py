"""The ids of a worker's own events: a retried publish carries the same id (JetStream drops the
duplicate); a new incarnation or another re-shard a new one."""

from __future__ import annotations

from heddle.events.worker_builders import worker_registered_event, worker_retired_event


def registration(incarnation: str) -> str:
    return worker_registered_event(
        worker_id="w01", incarnation=incarnation, engine="sim", model="m", tp_degree=1,
        max_running=8, max_kv_tokens=1000, can_export_kv=True, node="n", gpu_ids=[0], now=1.0,
    ).event_id  # fmt: skip


def test_a_registration_is_named_by_its_incarnation() -> None:
    assert registration("ab12") == "w01:ab12:registered"
    assert registration("ab12:relaunch") == "w01:ab12:relaunch:registered"
    assert registration("") == "w01:registered"  # the simulator's first launch


def test_a_retirement_is_named_by_its_reshard() -> None:
    def retirement(reshard_id: str, now: float) -> str:
        return worker_retired_event(
            worker_id="w01", reshard_id=reshard_id, successor_worker_id="w02",
            trajectory_ids=["t000001"], gpu_ids=[0, 1], now=now,
        ).event_id  # fmt: skip

    assert retirement("rs1", 1.0) == retirement("rs1", 2.0) == "w01:rs1:retired"
    assert retirement("rs2", 1.0) != retirement("rs1", 1.0)
