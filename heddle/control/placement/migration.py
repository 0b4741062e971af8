"""Migration requests: a new prediction of a placed trajectory may make its placer call for a
move, emitted as ``MigrationRequested`` (once per target; the transfer decider schedules it) when
the target is live, not draining, and admission says it has room, and neither end is in a
re-shard. The placer weighs the weight
swaps pending (``WeightSwaps``): a swapping worker's load pause, and a trajectory whose KV a swap
makes stale re-prefilling wherever it runs; such a move transfers no KV (``transfer_kv``).
``Migrated``: the trajectory now lives on the target."""

from __future__ import annotations

from heddle.control.decider import Output
from heddle.control.placement.admission import Admission
from heddle.control.placement.placer import Placer
from heddle.control.placement.state import PlacementState, TrajectoryRecord
from heddle.events import Migrated, MigrationRequested, Predicted
from heddle.ids import derive_id


class MigrationRequests:
    def __init__(self, state: PlacementState, admission: Admission) -> None:
        self._state = state
        self._admission = admission

    def request(
        self, event: Predicted, placer: Placer, trajectory: TrajectoryRecord
    ) -> list[Output]:
        """The move the placer calls for on this prediction, if it may happen."""
        # The presorted order is by trajectory length (paper s.5.3): what it generated plus what
        # it is predicted to generate, tools included as the placer counts them. Ranking by the
        # remaining length alone would send every nearly finished trajectory to the workers of
        # the short group.
        tool_s = trajectory.tool_s + event.predicted_remaining_tool_s
        predicted_total = (
            trajectory.output_tokens
            + event.predicted_remaining_tokens
            + placer.token_equivalents(tool_s)
        )
        weights = self._state.weights
        is_stale = weights.is_stale(trajectory.kv_version)
        request = placer.on_prediction(
            event.traj_id,
            predicted_total,
            remaining_tokens=event.predicted_remaining_tokens,
            context_tokens=trajectory.context_tokens,
            kv_is_stale=is_stale,
            pauses=weights.pauses(self._state.workers),
        )
        if request is None or request.target_id in ("", trajectory.requested_target):
            return []
        target_id = request.target_id
        if target_id not in self._state.workers or target_id in self._state.draining:
            return []
        resharding = self._state.resharding
        if target_id in resharding or trajectory.worker_id in resharding:
            return []  # its re-shard moves it (or the target) anyway
        if not self._admission.has_room(request.target_id, (event.rollout_id, event.traj_id)):
            return []  # the target cannot hold it: moving would only make it thrash there
        trajectory.requested_target = request.target_id
        target_epoch = trajectory.next_epoch()
        return [
            MigrationRequested(
                event_id=derive_id(event.rollout_id, event.traj_id, event.step, "migration"),
                rollout_id=event.rollout_id,
                occurred_at=event.occurred_at,
                traj_id=event.traj_id,
                source_worker_id=trajectory.worker_id,
                target_worker_id=request.target_id,
                predicted_remaining_tokens=request.predicted_remaining_tokens,
                new_rank=request.rank,
                transfer_kv=not is_stale,
                target_epoch=target_epoch,
            )
        ]

    def migrated(self, event: Migrated) -> None:
        rollout = self._state.rollouts.get(event.rollout_id)
        trajectory = rollout.trajectories.get(event.traj_id) if rollout else None
        if rollout is None or trajectory is None:
            return
        if trajectory.is_generating:
            in_flight = self._state.in_flight
            in_flight[trajectory.worker_id] -= 1
            in_flight[event.target_worker_id] = in_flight.get(event.target_worker_id, 0) + 1
        trajectory.worker_id = event.target_worker_id
        trajectory.requested_target = ""
        if rollout.placer is not None:
            rollout.placer.on_moved(event.traj_id, event.target_worker_id)
        self._admission.moved((event.rollout_id, event.traj_id), event.target_worker_id)
