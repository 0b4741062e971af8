"""What the control plane reads from ``HEDDLE_EVENTS`` for its trainers, whose credentials read
only their delivery streams (``heddle.controlplane.gating.TrainerRecords``):

- ``completion_of_failure``: a final ``Failed`` as the ``Completed`` a trainer batches (reward
  0, the tokens generated before it, its reason), delivered in its place;
- ``summary_reply``: a rollout's ``RolloutSummary``, the answer of ``heddle.ops.summary.
  <trainer>``.

Whoever starts a control plane (``heddle up``, ``InProcessDeployment``) gives it
``TRAINER_RECORDS``.
"""

from __future__ import annotations

import msgspec

from heddle.bus import Bus, ReplayQuery
from heddle.controlplane.gating import TrainerRecords
from heddle.events import Completed, EventT, Failed, RolloutSubmitted
from heddle.events.subjects import rollout_subject, trajectory_subject
from heddle.rollout.summary import rollout_summary
from heddle.workers.agent.records import completed as completed_record
from heddle.workers.agent.trajectory_log import rebuild


async def _events(bus: Bus, subject: str) -> list[EventT]:
    query = ReplayQuery(filter_subjects=(subject,), start_sequence=1)
    return [record.message async for record in bus.replay_events(query)]


async def completion_of_failure(bus: Bus, failed: Failed) -> Completed:
    """A terminal ``Failed`` as the trainer's ``Completed``: reward 0, the tokens of its events,
    its terminal reason, its group and index (from its spec when the event lacks them)."""
    events = await _events(bus, trajectory_subject(failed.rollout_id, failed.traj_id, ">"))
    log = rebuild(failed.rollout_id, failed.traj_id, [e for e in events if e is not failed])
    submitted = await _events(bus, rollout_subject(failed.rollout_id, "submitted"))
    scale = next((e.time_scale for e in submitted if isinstance(e, RolloutSubmitted)), 1.0)
    record = completed_record(
        log,
        worker_id=failed.worker_id,
        reward=0.0,
        finish_reason=failed.finish_reason,
        time_scale=scale,
        now=failed.occurred_at,
        reason=failed.reason,
    )
    if log.spec is None:  # never submitted (its submission was dead-lettered): the event's
        record = msgspec.structs.replace(record, group_id=failed.group_id, index=failed.index)
    return record


async def summary_reply(bus: Bus, rollout_id: str) -> bytes:
    """The rollout's summary as JSON (``heddle.rollout.summary.RolloutSummary``)."""
    return msgspec.json.encode(await rollout_summary(bus, rollout_id))


TRAINER_RECORDS = TrainerRecords(failure=completion_of_failure, summary=summary_reply)
