"""The served context model's stand-in inside the control plane: answers at once with the
numeric model and queues a request for the context model (paper s.4.1: the prediction runs
while the tool call does, off the critical path).

``predict`` returns the fallback's answer (the prediction event then names the fallback) and
records ``(rollout id, step, progress, the fallback's answer)`` in an outbox that the shell
(``heddle.controlplane.live_predictor``) drains after each event and sends to the prediction service
(the context model corrects the fallback's answer from the text); the service's answer
becomes a second prediction event naming the context model, when it arrives before the
trajectory's next generation. Pure: the outbox is data, the I/O is the shell's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from heddle.policy.prediction.base import Outcome, Predictor, Progress, predict_tool_s

CONTEXT_PREDICTOR = "context"
"""The context model's name (its predictions carry it; the simulator's ``--predictor``)."""


@dataclass(frozen=True, slots=True)
class ContextRequest:
    rollout_id: str
    step: int
    """The last completed step (as ``Predicted.step``: -1 before the first generation)."""
    progress: Progress
    baseline: tuple[float, float]
    """The fallback's answer: remaining output tokens and tool seconds."""


class ServedContextPredictor:
    """A ``Predictor`` (and ``ToolTimePredictor``) answering with ``fallback`` and queueing a
    ``ContextRequest`` for every prediction after the first generation (before it there is no
    context to read)."""

    def __init__(self, fallback: Predictor) -> None:
        self.fallback = fallback
        self._rollout_id = ""
        self._outbox: list[ContextRequest] = []

    @property
    def name(self) -> str:
        return self.fallback.name

    def scope(self, rollout_id: str) -> None:
        """The rollout of the event being decided (the progress does not name it)."""
        self._rollout_id = rollout_id

    def predict(self, progress: Progress) -> float:
        tokens = self.fallback.predict(progress)
        if progress.num_steps > 0:
            baseline = (tokens, predict_tool_s(self.fallback, progress))
            step = progress.num_steps - 1
            self._outbox.append(ContextRequest(self._rollout_id, step, progress, baseline))
        return tokens

    def predict_tool_s(self, progress: Progress) -> float:
        return predict_tool_s(self.fallback, progress)

    def observe(self, outcome: Outcome) -> None:
        self.fallback.observe(outcome)

    def take_requests(self) -> list[ContextRequest]:
        """The requests queued since the last call (the outbox empties)."""
        taken, self._outbox = self._outbox, []
        return taken


ContextAnswer = Callable[[Progress, tuple[float, float]], tuple[float, float]]
"""The context model, as a function: (progress, the fallback's answer) -> remaining output
tokens and tool seconds."""
ToolDuration = Callable[[str, int], float]
"""(trajectory id, step) -> seconds the tool call of that step runs (the simulator knows)."""


class TimedContextPredictor:
    """The served context model as the simulator sees it: a service that answers
    ``latency_s`` after each prediction after the first generation.

    Live (``ServedContextPredictor``), the fallback answers at once and the service's answer
    counts when it arrives before the trajectory's tool call returns (its next generation then
    ranks by what is known). Here a prediction whose answer would arrive by then
    (``latency_s <= tool_duration(traj_id, step)``) is the context model's, the others the
    fallback's, as they would be live. Simplification: an on-time answer takes effect at the
    tool call, not later in the tool gap, so a decision taken inside the gap before it would
    arrive (a migration at the tool call) sees it here and not live. ``name`` is the last
    answer's (the prediction event names the model that answered); ``counts`` holds how many
    answers were ``on_time`` and ``late``."""

    def __init__(
        self,
        fallback: Predictor,
        answer: ContextAnswer,
        latency_s: float,
        tool_duration: ToolDuration,
        name: str = "context",
    ) -> None:
        if not latency_s >= 0:
            raise ValueError(f"latency_s must be >= 0, got {latency_s}")
        self.fallback = fallback
        self._answer = answer
        self.latency_s = latency_s
        self._tool_duration = tool_duration
        self._context_name = name
        self._last: tuple[Progress, tuple[float, float], bool] | None = None
        self.counts = {"on_time": 0, "late": 0}

    @property
    def name(self) -> str:
        if self._last is not None and self._last[2]:
            return self._context_name
        return self.fallback.name

    def _answered(self, progress: Progress) -> tuple[float, float]:
        if self._last is not None and self._last[0] == progress:
            return self._last[1]
        baseline = (self.fallback.predict(progress), predict_tool_s(self.fallback, progress))
        answer, by_context = baseline, False
        if progress.num_steps > 0:
            step = progress.num_steps - 1
            by_context = self.latency_s <= self._tool_duration(progress.traj_id, step)
            self.counts["on_time" if by_context else "late"] += 1
            if by_context:
                tokens, tool_s = self._answer(progress, baseline)
                answer = (max(0.0, float(tokens)), max(0.0, float(tool_s)))
        self._last = (progress, answer, by_context)
        return answer

    def predict(self, progress: Progress) -> float:
        return self._answered(progress)[0]

    def predict_tool_s(self, progress: Progress) -> float:
        return self._answered(progress)[1]

    def observe(self, outcome: Outcome) -> None:
        self.fallback.observe(outcome)
