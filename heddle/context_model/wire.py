"""The prediction service's requests and replies (msgspec JSON on ``PREDICT_SUBJECT``).

A request is a trajectory's progress after a step (``heddle.policy.prediction.Progress``) and
the ids its answer is published under; a reply is the three remaining amounts and how long the
service held the request. This module imports neither torch nor nats: the control plane's shell
encodes requests with it.
"""

from __future__ import annotations

import msgspec

from heddle.policy.prediction import Progress

PREDICTOR_SERVICE_NAME = "heddle-predictor"
PREDICT_SUBJECT = "heddle.predictor.predict"
STATS_SUBJECT = "heddle.predictor.stats"


class PredictionRequest(msgspec.Struct, frozen=True, kw_only=True):
    rollout_id: str
    traj_id: str
    step: int
    """The last completed step the prediction sees (as ``Predicted.step``)."""
    group_id: str = ""
    prompt_tokens: int = 0
    num_steps: int = 0
    output_tokens: int = 0
    tool_output_tokens: int = 0
    tool_s: float = 0.0
    first_output_tokens: int = 0
    last_output_tokens: int = 0
    first_output_text: str = ""
    last_output_text: str = ""
    last_tool_text: str = ""
    baseline_remaining_tokens: float = 0.0
    """The numeric model's answer for the same step (the context model corrects it)."""
    baseline_remaining_tool_s: float = 0.0

    @classmethod
    def of(
        cls, rollout_id: str, step: int, progress: Progress, baseline: tuple[float, float]
    ) -> PredictionRequest:
        return cls(
            rollout_id=rollout_id,
            traj_id=progress.traj_id,
            step=step,
            baseline_remaining_tokens=baseline[0],
            baseline_remaining_tool_s=baseline[1],
            group_id=progress.group_id,
            prompt_tokens=progress.prompt_tokens,
            num_steps=progress.num_steps,
            output_tokens=progress.output_tokens,
            tool_output_tokens=progress.tool_output_tokens,
            tool_s=progress.tool_s,
            first_output_tokens=progress.first_output_tokens,
            last_output_tokens=progress.last_output_tokens,
            first_output_text=progress.first_output_text,
            last_output_text=progress.last_output_text,
            last_tool_text=progress.last_tool_text,
        )

    def progress(self) -> Progress:
        return Progress(
            traj_id=self.traj_id,
            group_id=self.group_id,
            prompt_tokens=self.prompt_tokens,
            num_steps=self.num_steps,
            output_tokens=self.output_tokens,
            tool_output_tokens=self.tool_output_tokens,
            tool_s=self.tool_s,
            first_output_tokens=self.first_output_tokens,
            last_output_tokens=self.last_output_tokens,
            first_output_text=self.first_output_text,
            last_output_text=self.last_output_text,
            last_tool_text=self.last_tool_text,
        )

    def baseline(self) -> tuple[float, float]:
        return (self.baseline_remaining_tokens, self.baseline_remaining_tool_s)


class PredictionReply(msgspec.Struct, frozen=True, kw_only=True):
    predictor: str
    """The model's name (``Predicted.predictor`` of the answer)."""
    remaining_output_tokens: float
    remaining_steps: float
    remaining_tool_s: float
    service_ms: float
    """From the request's arrival to its answer, batching wait included."""
    batch_size: int


class ServiceStats(msgspec.Struct, frozen=True, kw_only=True):
    num_requests: int
    num_batches: int
    p50_ms: float
    p99_ms: float
    mean_batch_size: float


request_decoder = msgspec.json.Decoder(PredictionRequest)
reply_decoder = msgspec.json.Decoder(PredictionReply)
