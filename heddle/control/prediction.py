"""The prediction decider: re-predicts a trajectory's remaining output after every step.

Consumes ``TrajectorySubmitted`` (predicts before the first generation: ``Predicted.step = -1``),
``Generated`` (adds the step's output), ``ToolCalled`` (predicts: the paper runs the predictor
while the tool executes, so the prediction is off the critical path), ``ToolReturned`` (adds the
observation and its duration) and ``Completed`` (the predictor learns from the finished
trajectory, with each step's tool figures) or ``Failed``. ``Predicted`` carries the remaining
output tokens and, from predictors that have it, the remaining tool seconds.

Tool observations count by ``len(ToolReturned.output_token_ids)``: trace tools and the simulator
fill it; for tools that return only text it is 0 (the context predictor reads the text).

Texts, for the context predictor: a tool's result is ``ToolReturned.output``; a generation's
text is not in ``Generated`` (token ids only), so it is known only for ``trace`` trajectories,
whose task is a trace line that may carry each step's ``output_text`` and ``tool_text``
(``heddle.workloads.text``), read from the submission.
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
    TrajectorySpec,
    TrajectorySubmitted,
)
from heddle.events.arrays import num_items
from heddle.ids import derive_id
from heddle.policy.prediction import Outcome, Predictor, Progress, predict_tool_s
from heddle.traces import TRACE_ENVIRONMENT


@dataclass(slots=True)
class _Tracked:
    """Mutable counters of one trajectory (a ``Progress`` is built only to predict)."""

    traj_id: str
    group_id: str
    prompt_tokens: int
    step_outputs: list[int] = field(default_factory=list)
    step_tool_outputs: list[int] = field(default_factory=list)
    step_tool_s: list[float] = field(default_factory=list)
    output_tokens: int = 0
    tool_output_tokens: int = 0
    tool_s: float = 0.0
    recorded_texts: tuple[tuple[str, str], ...] = ()
    """Per step (output text, tool text) from a trace task; empty for other environments."""
    first_output_text: str = ""
    last_output_text: str = ""
    last_tool_text: str = ""

    def recorded(self, step: int) -> tuple[str, str]:
        texts = self.recorded_texts
        return texts[step] if 0 <= step < len(texts) else ("", "")

    def tool_figures(self) -> tuple[tuple[int, ...], tuple[float, ...]]:
        """Per-step observation tokens and tool seconds, the last step's zero (it calls no
        tool); empty when a result was missed (the outcome then carries none)."""
        if len(self.step_tool_s) != len(self.step_outputs) - 1:
            return (), ()
        return (*self.step_tool_outputs, 0), (*self.step_tool_s, 0.0)

    def progress(self) -> Progress:
        steps = self.step_outputs
        return Progress(
            traj_id=self.traj_id,
            group_id=self.group_id,
            prompt_tokens=self.prompt_tokens,
            num_steps=len(steps),
            output_tokens=self.output_tokens,
            tool_output_tokens=self.tool_output_tokens,
            tool_s=self.tool_s,
            first_output_tokens=steps[0] if steps else 0,
            last_output_tokens=steps[-1] if steps else 0,
            first_output_text=self.first_output_text,
            last_output_text=self.last_output_text,
            last_tool_text=self.last_tool_text,
        )


def recorded_texts(spec: TrajectorySpec) -> tuple[tuple[str, str], ...]:
    """(output text, tool text) per step of a ``trace`` task that carries them, else ()."""
    steps = spec.task.get("steps") if spec.environment == TRACE_ENVIRONMENT else None
    if not isinstance(steps, list):
        return ()
    texts = []
    for step in steps:
        entry = step if isinstance(step, dict) else {}
        output_text, tool_text = entry.get("output_text", ""), entry.get("tool_text", "")
        texts.append((str(output_text), str(tool_text)))
    return tuple(texts) if any(a or b for a, b in texts) else ()


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
        tracked: _Tracked | None
        match event:
            case TrajectorySubmitted():
                if key in self._tracked:
                    return []
                spec = event.spec
                fresh = _Tracked(
                    event.traj_id,
                    spec.group_id,
                    num_items(spec.prompt_token_ids),
                    recorded_texts=recorded_texts(spec),
                )
                self._tracked[key] = fresh
                return [self._predicted(event, -1, fresh)]
            case Generated():
                tracked = self._tracked.get(key)
                if tracked is None or len(tracked.step_outputs) != event.step:
                    return []  # unknown, or a duplicate of a step already counted
                num_tokens = len(event.output_token_ids)
                tracked.step_outputs.append(num_tokens)
                tracked.output_tokens += num_tokens
                tracked.last_output_text = tracked.recorded(event.step)[0]
                if event.step == 0:
                    tracked.first_output_text = tracked.last_output_text
                return []
            case ToolCalled():
                tracked = self._tracked.get(key)
                if tracked is None or len(tracked.step_outputs) != event.step + 1:
                    return []
                return [self._predicted(event, event.step, tracked)]
            case ToolReturned():
                tracked = self._tracked.get(key)
                if tracked is not None and len(tracked.step_outputs) == event.step + 1:
                    if len(tracked.step_tool_s) == event.step:
                        tracked.step_tool_outputs.append(num_items(event.output_token_ids))
                        tracked.step_tool_s.append(event.duration_s)
                    tracked.tool_output_tokens += num_items(event.output_token_ids)
                    tracked.tool_s += event.duration_s
                    tracked.last_tool_text = event.output or tracked.recorded(event.step)[1]
                return []
            case Completed():
                tracked = self._tracked.pop(key, None)
                if tracked is not None:
                    outcome = Outcome(
                        tracked.traj_id,
                        tracked.group_id,
                        tracked.prompt_tokens,
                        tuple(tracked.step_outputs),
                        *tracked.tool_figures(),
                    )
                    self.predictor.observe(outcome)
                return []
            case Failed() if not event.retryable:  # a retryable one is placed again
                self._tracked.pop(key, None)
                return []
        return []

    def _predicted(self, event: Event, step: int, tracked: _Tracked) -> Predicted:
        progress = tracked.progress()
        return Predicted(
            event_id=derive_id(event.rollout_id, tracked.traj_id, step, "predicted"),
            rollout_id=event.rollout_id,
            occurred_at=event.occurred_at,
            traj_id=tracked.traj_id,
            step=step,
            predicted_remaining_tokens=max(0.0, float(self.predictor.predict(progress))),
            predictor=self.predictor.name,
            num_context_tokens=progress.prompt_tokens
            + progress.output_tokens
            + progress.tool_output_tokens,
            predicted_remaining_tool_s=predict_tool_s(self.predictor, progress),
        )

    def snapshot(self) -> dict[tuple[str, str], tuple[Progress, tuple[int, ...]]]:
        """The state, as a comparable value (replay tests)."""
        return {k: (v.progress(), tuple(v.step_outputs)) for k, v in self._tracked.items()}
