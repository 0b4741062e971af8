"""Recorded trajectories with their text, from the event stream (``predictor train
--from-stream``).

The ledger keeps numbers only; the stream keeps what the tools returned
(``ToolReturned.output``) and, for ``trace`` trajectories, the recorded text of their task. A
trajectory becomes a trace line when it completes: ``prompt_tokens`` from its submission, per
generated step its output tokens, the following tool call's seconds, observation tokens and
text. Failed or unfinished trajectories are left out (their remaining length is unknown).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from heddle.bus.bus import Bus
from heddle.bus.replay import ReplayQuery
from heddle.control.prediction import recorded_texts
from heddle.events import Completed, Event, Generated, ToolReturned, TrajectorySubmitted
from heddle.traces import TraceStep, TraceTrajectory

TRAJECTORY_SUBJECTS = ("heddle.evt.traj.>",)


@dataclass(slots=True)
class _Recording:
    group_id: str
    prompt_tokens: int
    recorded: tuple[tuple[str, str], ...]
    outputs: dict[int, int] = field(default_factory=dict)
    tools: dict[int, tuple[float, int, str]] = field(default_factory=dict)

    def trace(self, traj_id: str) -> TraceTrajectory | None:
        if not self.outputs:
            return None
        steps = []
        for step in range(max(self.outputs) + 1):
            tool_s, tool_tokens, tool_text = self.tools.get(step, (0.0, 0, ""))
            output_text, trace_tool_text = (
                self.recorded[step] if step < len(self.recorded) else ("", "")
            )
            steps.append(
                TraceStep(
                    output_tokens=self.outputs.get(step, 0),
                    tool_s=max(0.0, tool_s),
                    tool_output_tokens=tool_tokens,
                    output_text=output_text,
                    tool_text=tool_text or trace_tool_text,
                )
            )
        return TraceTrajectory(
            id=traj_id, group=self.group_id, prompt_tokens=self.prompt_tokens, steps=steps
        )


def traces_from_events(events: Iterable[Event]) -> list[TraceTrajectory]:
    """Completed trajectories as trace lines, in completion order; ids are
    ``<rollout id>:<trajectory id>`` (trajectory ids repeat across rollouts)."""
    recordings: dict[tuple[str, str], _Recording] = {}
    traces: list[TraceTrajectory] = []
    for event in events:
        key = (event.rollout_id, getattr(event, "traj_id", ""))
        match event:
            case TrajectorySubmitted():
                spec = event.spec
                recordings.setdefault(
                    key, _Recording(spec.group_id, len(spec.prompt_token_ids), recorded_texts(spec))
                )
            case Generated() if key in recordings:
                recordings[key].outputs[event.step] = len(event.output_token_ids)
            case ToolReturned() if key in recordings:
                figures = (event.duration_s, len(event.output_token_ids), event.output)
                recordings[key].tools[event.step] = figures
            case Completed() if key in recordings:
                trace = recordings.pop(key).trace(f"{key[0]}:{key[1]}")
                if trace is not None:
                    traces.append(trace)
    return traces


async def traces_from_stream(bus: Bus) -> list[TraceTrajectory]:
    """``traces_from_events`` over every trajectory event the stream holds."""
    query = ReplayQuery(filter_subjects=TRAJECTORY_SUBJECTS, start_sequence=1)
    return traces_from_events([record.message async for record in bus.replay_events(query)])
