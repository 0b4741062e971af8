"""The served context model's stand-in inside the control plane: answers at once with the
numeric model and queues a request for the context model (paper s.4.1: the prediction runs
while the tool call does, off the critical path).

``predict`` returns the fallback's answer (the prediction event then names the fallback) and
records ``(rollout id, step, progress, the fallback's answer)`` in an outbox that the shell
(``heddle.consumers.predictors``) drains after each event and sends to the prediction service
(the context model corrects the fallback's answer from the text); the service's answer
becomes a second prediction event naming the context model, when it arrives before the
trajectory's next generation. Pure: the outbox is data, the I/O is the shell's.
"""

from __future__ import annotations

from dataclasses import dataclass

from heddle.policy.prediction.base import Outcome, Predictor, Progress, predict_tool_s


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
