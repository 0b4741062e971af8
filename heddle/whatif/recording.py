"""Reading a recorded rollout for re-simulation: its trace and summary from a ledger rebuilt
from the stream (``heddle.replay``), its workers' registrations and its predictor from the
stream itself."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from heddle.bus import Bus, ReplayQuery
from heddle.events import Predicted, WorkerRegistered
from heddle.events.subjects import trajectory_subject
from heddle.ledger import Ledger, queries
from heddle.ledger.statuses import RolloutStatus
from heddle.replay import trace_of
from heddle.whatif.cluster import recorded_cluster
from heddle.whatif.resimulate import Recording, WhatIfOptions, WhatIfReport, resimulate


async def load_recording(bus: Bus, ledger: Ledger, rollout_id: str) -> Recording:
    """The recording of ``rollout_id`` (ValueError when the ledger does not know it)."""
    summary = await asyncio.to_thread(queries.rollout_totals, ledger, rollout_id)
    if summary is None:
        raise ValueError(f"no rollout {rollout_id!r} in the recorded events")
    trace = await asyncio.to_thread(trace_of, ledger, rollout_id)
    steps = await asyncio.to_thread(queries.steps, ledger, rollout_id)
    worker_ids = sorted({step.worker_id for step in steps if step.worker_id})
    registrations = await worker_registrations(bus, worker_ids)
    rollout = summary.rollout
    finished = rollout is not None and rollout.status is RolloutStatus.FINISHED
    return Recording(
        rollout_id=rollout_id,
        policy=rollout.policy if rollout is not None else "",
        makespan_s=rollout.makespan_s if finished and rollout is not None else None,
        num_trajectories=rollout.num_trajectories if rollout else summary.num_trajectories,
        trace=trace,
        cluster=recorded_cluster(registrations, worker_ids),
        predictor=await recorded_predictor(bus, rollout_id, [t.id for t in trace[:1]]),
    )


async def worker_registrations(bus: Bus, worker_ids: list[str]) -> list[WorkerRegistered]:
    """Every registration of these workers, in stream order (the last one is the latest). One
    filter subject for all workers: a consumer with many filters costs the server far more."""
    if not worker_ids:
        return []
    wanted = set(worker_ids)
    subject = f"heddle.evt.worker.*.{WorkerRegistered.kind_name()}"
    reader = bus.replay_events(ReplayQuery(filter_subjects=(subject,)))
    return [
        r.message
        async for r in reader
        if isinstance(r.message, WorkerRegistered) and r.message.worker_id in wanted
    ]


async def recorded_predictor(bus: Bus, rollout_id: str, traj_ids: list[str]) -> str:
    """The predictor named by the predictions of the first trajectories ("" when none)."""
    if not traj_ids:
        return ""
    subjects = tuple(trajectory_subject(rollout_id, t, "predicted") for t in traj_ids)
    reader = bus.replay_events(ReplayQuery(filter_subjects=subjects))
    names = [r.message.predictor async for r in reader if isinstance(r.message, Predicted)]
    return names[-1] if names else ""


async def what_if(
    bus: Bus,
    ledger: Ledger,
    rollout_id: str,
    policies: Sequence[str],
    options: WhatIfOptions | None = None,
) -> WhatIfReport:
    """Load the recording of ``rollout_id`` and re-simulate it (``resimulate``) off the loop."""
    recording = await load_recording(bus, ledger, rollout_id)
    return await asyncio.to_thread(resimulate, recording, policies, options)
