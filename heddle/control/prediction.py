"""The prediction decider: re-predicts a trajectory's remaining output after every step.

Consumes ``TrajectorySubmitted`` (predicts before the first generation: ``Predicted.step = -1``),
``Generated`` (adds the step's output), ``ToolCalled`` (predicts: the paper runs the predictor
while the tool executes, so the prediction is off the critical path), ``ToolReturned`` (adds the
observation) and ``Completed`` (the predictor learns from the finished trajectory) or ``Failed``.

Tool observations count by ``len(ToolReturned.output_token_ids)``: trace tools and the simulator
fill it; for tools that return only text it is 0 (no current predictor reads it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from heddle.control.decider import Output
from heddle.events import (
    Completed,
    Event,
    Failed,
    Generated,
    Predicted,
    ToolCalled,
    ToolReturned,
    TrajectorySubmitted,
)
from heddle.ids import derive_id
from heddle.policy.predictors import Outcome, Predictor, Progress


@dataclass(slots=True)
class _Tracked:
    progress: Progress
    step_outputs: list[int] = field(default_factory=list)


class PredictionDecider:
    """State: the progress of every trajectory in flight, and the predictor's own learning."""

    name = "prediction"
    handles: frozenset[type[Event]] = frozenset(
        {TrajectorySubmitted, Generated, ToolCalled, ToolReturned, Completed, Failed}
    )

    def __init__(self, predictor: Predictor) -> None:
        self.predictor = predictor
        self._tracked: dict[tuple[str, str], _Tracked] = {}
        """(rollout id, trajectory id) -> progress (trajectory ids repeat across rollouts)."""

    def decide(self, event: Event) -> list[Output]:
        key = (event.rollout_id, getattr(event, "traj_id", ""))
        match event:
            case TrajectorySubmitted():
                if key in self._tracked:
                    return []
                spec = event.spec
                progress = Progress(event.traj_id, spec.group_id, len(spec.prompt_token_ids))
                self._tracked[key] = _Tracked(progress)
                return [self._predicted(event, -1, progress)]
            case Generated():
                tracked = self._tracked.get(key)
                if tracked is None or len(tracked.step_outputs) != event.step:
                    return []  # unknown, or a duplicate of a step already counted
                num_tokens = len(event.output_token_ids)
                tracked.progress = tracked.progress.after_generation(num_tokens)
                tracked.step_outputs.append(num_tokens)
                return []
            case ToolCalled():
                tracked = self._tracked.get(key)
                if tracked is None or len(tracked.step_outputs) != event.step + 1:
                    return []
                return [self._predicted(event, event.step, tracked.progress)]
            case ToolReturned():
                tracked = self._tracked.get(key)
                if tracked is not None and len(tracked.step_outputs) == event.step + 1:
                    tracked.progress = tracked.progress.after_tool(
                        len(event.output_token_ids), event.duration_s
                    )
                return []
            case Completed():
                tracked = self._tracked.pop(key, None)
                if tracked is not None:
                    progress = tracked.progress
                    self.predictor.observe(
                        Outcome(
                            progress.traj_id,
                            progress.group_id,
                            progress.prompt_tokens,
                            tuple(tracked.step_outputs),
                        )
                    )
                return []
            case Failed():
                self._tracked.pop(key, None)
                return []
        return []

    def _predicted(self, event: Event, step: int, progress: Progress) -> Predicted:
        traj_id = progress.traj_id
        return Predicted(
            event_id=derive_id(event.rollout_id, traj_id, step, "predicted"),
            rollout_id=event.rollout_id,
            occurred_at=event.occurred_at,
            traj_id=traj_id,
            step=step,
            predicted_remaining_tokens=max(0.0, float(self.predictor.predict(progress))),
            predictor=self.predictor.name,
            num_context_tokens=progress.prompt_tokens
            + progress.output_tokens
            + progress.tool_output_tokens,
        )

    def snapshot(self) -> dict[tuple[str, str], tuple[Progress, tuple[int, ...]]]:
        """The state, as a comparable value (replay tests)."""
        return {k: (v.progress, tuple(v.step_outputs)) for k, v in self._tracked.items()}
