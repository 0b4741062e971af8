"""A worker's own events that a data plane publishes (registration, retirement), each built in
one place from plain values (pure): the worker agent (``heddle.workers.agent``) and the simulator
(``heddle.sim.facts``) both call them. Ids, so a retried publish is de-duplicated:

    <worker>:<incarnation>:registered      (no incarnation part when it is empty)
    <worker>:<reshard>:retired
"""

from __future__ import annotations

from heddle.events.worker import WorkerRegistered, WorkerRetired
from heddle.ids import derive_id


def worker_registered_event(
    *,
    worker_id: str,
    incarnation: str,
    engine: str,
    model: str,
    tp_degree: int,
    max_running: int,
    max_kv_tokens: int,
    can_export_kv: bool,
    node: str,
    gpu_ids: list[int],
    now: float,
    host: str = "",
    time_scale: float = 1.0,
    max_context_tokens: int = 0,
) -> WorkerRegistered:
    """``incarnation``: the engine's launch, new after each relaunch (a re-shard, a restart)."""
    return WorkerRegistered(
        event_id=derive_id(worker_id, incarnation or None, "registered"),
        occurred_at=now,
        worker_id=worker_id,
        engine=engine,
        model=model,
        tp_degree=tp_degree,
        max_running=max_running,
        max_kv_tokens=max_kv_tokens,
        can_export_kv=can_export_kv,
        host=host,
        incarnation=incarnation,
        time_scale=time_scale,
        max_context_tokens=max_context_tokens,
        node=node,
        gpu_ids=gpu_ids,
    )


def worker_retired_event(
    *,
    worker_id: str,
    reshard_id: str,
    successor_worker_id: str,
    trajectory_ids: list[str],
    gpu_ids: list[int],
    now: float,
) -> WorkerRetired:
    """``trajectory_ids``: those the worker hosted, now the successor's."""
    return WorkerRetired(
        event_id=derive_id(worker_id, reshard_id, "retired"),
        occurred_at=now,
        worker_id=worker_id,
        reshard_id=reshard_id,
        successor_worker_id=successor_worker_id,
        trajectory_ids=trajectory_ids,
        gpu_ids=gpu_ids,
    )
