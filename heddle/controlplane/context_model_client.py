"""The shell around the served context model: sends the prediction decider's requests to the
prediction service without waiting, and publishes each answer as a ``Predicted`` event when it
arrives in time.

In time means before the trajectory's tool call returns (the next generation then starts and
ranks by what is known): an answer after that, or no answer (no service, or none within
``timeout_s``), leaves the numeric model's prediction, published at once by the decider, in
force. ``counts`` says how many requests were answered in time, late, or not at all.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from typing import Any, Protocol

import msgspec

from heddle.context_model.wire import PREDICT_SUBJECT, PredictionRequest, reply_decoder
from heddle.events import Predicted
from heddle.ids import derive_id
from heddle.policy.prediction import ContextRequest

log = logging.getLogger(__name__)


class Requester(Protocol):
    async def __call__(self, subject: str, body: bytes, timeout_s: float) -> bytes: ...


class EventPublisher(Protocol):
    async def __call__(self, message: Any) -> object: ...


class ContextPredictions:
    """Requests in flight and the trajectories they are for; driven from the event loop."""

    def __init__(self, request: Requester, publish: EventPublisher, timeout_s: float = 5.0) -> None:
        self._request = request
        self._publish = publish
        self.timeout_s = timeout_s
        self._open: dict[tuple[str, str], int] = {}
        """(rollout, trajectory) -> the step whose tool call is running (-1: none)."""
        self._tasks: set[asyncio.Task[None]] = set()
        self.counts: Counter[str] = Counter()
        """``on_time``, ``late``, ``unavailable``, ``failed``: the requests' fates."""

    def send(self, request: ContextRequest) -> None:
        key = (request.rollout_id, request.progress.traj_id)
        self._open[key] = request.step
        task = asyncio.create_task(self._ask(request), name="context-prediction")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def tool_returned(self, rollout_id: str, traj_id: str, step: int) -> None:
        """The call of ``step`` returned: an answer for it is late from now on."""
        key = (rollout_id, traj_id)
        if self._open.get(key) == step:
            self._open[key] = -1

    def ended(self, rollout_id: str, traj_id: str) -> None:
        self._open.pop((rollout_id, traj_id), None)

    def _is_on_time(self, request: ContextRequest) -> bool:
        return self._open.get((request.rollout_id, request.progress.traj_id)) == request.step

    async def _ask(self, request: ContextRequest) -> None:
        body = msgspec.json.encode(
            PredictionRequest.of(
                request.rollout_id, request.step, request.progress, request.baseline
            )
        )
        try:
            reply = reply_decoder.decode(await self._request(PREDICT_SUBJECT, body, self.timeout_s))
        except Exception as exc:  # no service, a timeout, a refusal: the fallback stands
            self.counts["unavailable"] += 1
            log.debug("context prediction unavailable: %s", exc)
            return
        if not self._is_on_time(request):
            self.counts["late"] += 1
            return
        progress = request.progress
        event = Predicted(
            event_id=derive_id(
                request.rollout_id, progress.traj_id, request.step, "predicted", reply.predictor
            ),
            rollout_id=request.rollout_id,
            occurred_at=time.time(),
            traj_id=progress.traj_id,
            step=request.step,
            predicted_remaining_tokens=reply.remaining_output_tokens,
            predictor=reply.predictor,
            num_context_tokens=progress.prompt_tokens
            + progress.output_tokens
            + progress.tool_output_tokens,
            predicted_remaining_tool_s=reply.remaining_tool_s,
        )
        try:
            await self._publish(event)
        except Exception:
            self.counts["failed"] += 1
            log.exception("publishing a context prediction failed")
            return
        self.counts["on_time"] += 1

    async def drain(self) -> None:
        """Wait for the requests in flight (shutdown, tests)."""
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
