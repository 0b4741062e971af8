"""How wrong the remaining-length predictions turned out, once trajectories complete.

Pure bookkeeping over the event stream: ``Generated`` adds a step's output tokens, ``Predicted``
records the latest prediction and the step it saw, ``Completed`` reveals the true remainder of
that prediction (total output minus the output through the predicted-at step). No clock, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from heddle.events import Completed, Event, Failed, Generated, Predicted


@dataclass(slots=True)
class _Trajectory:
    step_outputs: dict[int, int] = field(default_factory=dict)
    """Output tokens of each step seen (a step reported twice counts once)."""
    predicted_remaining_tokens: float | None = None
    predicted_at_step: int = -1


@dataclass(frozen=True, slots=True)
class PredictionError:
    """One prediction checked against the truth."""

    predicted_remaining_tokens: float
    actual_remaining_tokens: int

    @property
    def relative_error(self) -> float:
        """|predicted - actual| / actual (actual floored at one token)."""
        actual = max(1, self.actual_remaining_tokens)
        return abs(self.predicted_remaining_tokens - self.actual_remaining_tokens) / actual


class PredictionTracker:
    """Remembers the latest prediction of every trajectory in flight until it completes."""

    def __init__(self) -> None:
        self._trajectories: dict[tuple[str, str], _Trajectory] = {}

    @property
    def num_tracked(self) -> int:
        return len(self._trajectories)

    def observe(self, event: Event) -> PredictionError | None:
        """Fold one event; the checked prediction when ``event`` completes a predicted
        trajectory, else None."""
        match event:
            case Generated():
                entry = self._entry(event.rollout_id, event.traj_id)
                entry.step_outputs[event.step] = len(event.output_token_ids)
            case Predicted():
                entry = self._entry(event.rollout_id, event.traj_id)
                if event.step >= entry.predicted_at_step:
                    entry.predicted_remaining_tokens = event.predicted_remaining_tokens
                    entry.predicted_at_step = event.step
            case Completed():
                done = self._trajectories.pop((event.rollout_id, event.traj_id), None)
                if done is None or done.predicted_remaining_tokens is None:
                    return None
                last = done.predicted_at_step
                seen = sum(n for step, n in done.step_outputs.items() if step <= last)
                return PredictionError(
                    done.predicted_remaining_tokens, max(0, event.num_output_tokens - seen)
                )
            case Failed():
                self._trajectories.pop((event.rollout_id, event.traj_id), None)
        return None

    def _entry(self, rollout_id: str, traj_id: str) -> _Trajectory:
        key = (rollout_id, traj_id)
        entry = self._trajectories.get(key)
        if entry is None:
            entry = self._trajectories[key] = _Trajectory()
        return entry
