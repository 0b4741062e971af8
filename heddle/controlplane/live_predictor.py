"""The predictor a live control plane runs, and the shell work around its prediction deciders.

One predictor instance serves every bundle's prediction decider: remaining lengths depend on the
workload, not on the policy, so a model learns from every completed trajectory whatever bundle
ran it. Choices (``LIVE_PREDICTORS``):

- ``online`` (default): ``heddle.policy.prediction.online.OnlinePredictor``, refit as completions
  arrive, bootstrapped at start from earlier rollouts in the ledger (``ledger_history``);
- ``oracle`` / ``noisy_oracle``: the truth of ``trace`` trajectories, whose task is their trace
  line (simulation-grade live runs; the noisy one draws the simulator's errors), the online model
  for the others;
- ``history`` / ``prompt_only``: the paper's baselines (``heddle.policy.prediction``);
- ``context``: the served context model (``heddle predictor serve``): the online model answers
  each prediction at once and the service's answer follows when it comes in time
  (``heddle.controlplane.context_model_client``); with no service running, the online model alone.

``PredictionHooks`` is that shell work (run by the router's stage holding the prediction
deciders, ``heddle.control.bundle_router``): before each event it scopes the trace oracle to the
event's rollout and learns the trace of a submitted ``trace`` trajectory; after a trajectory
ends it forgets it. With ``context``, after each event it sends the decider's queued requests
(only once ``attach`` gave it the bus: the events replayed at start ask nothing).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

import msgspec

from heddle.bus.bus import Bus
from heddle.bus.micro import request
from heddle.controlplane.context_model_client import ContextPredictions
from heddle.events import Completed, Event, Failed, ToolReturned, TrajectorySubmitted
from heddle.policy.prediction import (
    Predictor,
    PredictorOptions,
    ServedContextPredictor,
    fit,
    make_predictor,
)
from heddle.policy.prediction.online import OnlineModelConfig, OnlinePredictor
from heddle.policy.prediction.trace_oracle import LiveOracle
from heddle.traces import TRACE_ENVIRONMENT, TraceStep, TraceTrajectory

log = logging.getLogger(__name__)

LIVE_PREDICTORS = ("online", "oracle", "noisy_oracle", "history", "prompt_only", "context")


@dataclass(frozen=True, slots=True)
class PredictorConfig:
    """Which predictor the control plane runs; the noise defaults are ``SimConfig``'s."""

    name: str = "online"
    """One of ``LIVE_PREDICTORS``."""
    seed: int = 0
    sigma: float = 0.5
    """``noisy_oracle``: log-error standard deviation at the first prediction."""
    sigma_decay: float = 0.8
    step_correlation: float = 0.8
    """``noisy_oracle``: correlation of one trajectory's errors across steps."""
    prior_total_tokens: float = 8192.0
    """Total output guessed before any completion is known."""
    max_history_rollouts: int = 20
    """Earlier rollouts the online model learns from at start (most recent first)."""
    context_timeout_s: float = 5.0
    """``context``: how long a request to the prediction service may take at most."""

    def __post_init__(self) -> None:
        if self.name not in LIVE_PREDICTORS:
            raise ValueError(
                f"unknown predictor {self.name!r}; choose one of {', '.join(LIVE_PREDICTORS)}"
            )

    def noise(self) -> PredictorOptions:
        return PredictorOptions(
            seed=self.seed,
            sigma=self.sigma,
            sigma_decay=self.sigma_decay,
            step_correlation=self.step_correlation,
            prior_total_tokens=self.prior_total_tokens,
        )


class PredictionHooks:
    """The live predictor and its hooks around the prediction decider's events
    (``heddle.control.bundle_router.RouterHooks``)."""

    def __init__(self, config: PredictorConfig | None = None) -> None:
        self.config = config = config or PredictorConfig()
        model = OnlineModelConfig(prior_total_tokens=config.prior_total_tokens)
        self.online = OnlinePredictor(model)
        self.oracle: LiveOracle | None = None
        self.context: ServedContextPredictor | None = None
        self.context_client: ContextPredictions | None = None
        self.predictor: Predictor
        match config.name:
            case "online":
                self.predictor = self.online
            case "oracle" | "noisy_oracle":
                noise = config.noise() if config.name == "noisy_oracle" else None
                self.oracle = LiveOracle(self.online, noise)
                self.predictor = self.oracle
            case "context":
                self.context = ServedContextPredictor(self.online)
                self.predictor = self.context
            case _:
                options = PredictorOptions(prior_total_tokens=config.prior_total_tokens)
                self.predictor = make_predictor(config.name, options)

    def attach(self, bus: Bus) -> None:
        """Start sending context requests through ``bus`` (call once the replay is done)."""
        if self.context is None:
            return

        async def ask(subject: str, body: bytes, timeout_s: float) -> bytes:
            return await request(bus, subject, body, timeout_s)

        self.context_client = ContextPredictions(ask, bus.publish, self.config.context_timeout_s)

    def before(self, event: Event) -> None:
        if self.context is not None:
            self._before_context(self.context, event)
        if self.oracle is None:
            return
        self.oracle.oracle.scope(event.rollout_id)
        if not isinstance(event, TrajectorySubmitted):
            return
        is_trace = event.spec.environment == TRACE_ENVIRONMENT
        if not is_trace or self.oracle.oracle.knows(event.rollout_id, event.traj_id):
            return  # a repeated submission: the first one counts, as for the deciders
        trace = trace_of_task(event.spec.task)
        if trace is not None:
            self.oracle.oracle.add(event.rollout_id, event.traj_id, trace)

    def _before_context(self, context: ServedContextPredictor, event: Event) -> None:
        context.scope(event.rollout_id)
        client = self.context_client
        if client is not None and isinstance(event, ToolReturned):
            client.tool_returned(event.rollout_id, event.traj_id, event.step)

    def _after_context(self, context: ServedContextPredictor, event: Event) -> None:
        requests = context.take_requests()
        client = self.context_client
        if client is None:
            return
        for context_request in requests:
            client.send(context_request)
        if isinstance(event, (Completed, Failed)):
            client.ended(event.rollout_id, event.traj_id)

    def after(self, event: Event) -> None:
        if self.context is not None:
            self._after_context(self.context, event)
        if self.oracle is None or not isinstance(event, (Completed, Failed)):
            return
        if isinstance(event, Completed) or not event.retryable:
            self.oracle.oracle.forget(event.rollout_id, event.traj_id)

    def learn_history(self, history: Iterable[TraceTrajectory]) -> int:
        """Let the predictor learn from earlier rollouts' trajectories; how many it saw."""
        count = 0
        for trajectory in history:
            if isinstance(self.predictor, (OnlinePredictor, LiveOracle, ServedContextPredictor)):
                self.online.observe_trace(trajectory)
            else:
                fit(self.predictor, [trajectory])
            count += 1
        return count


def trace_of_task(task: dict[str, object]) -> TraceTrajectory | None:
    """The trace line a ``trace`` trajectory's task holds (None, logged, when it is not one).
    Converted, not re-parsed: the worker's environment validates the task itself."""
    try:
        return msgspec.convert(task, TraceTrajectory)
    except msgspec.ValidationError as exc:
        log.warning("a trace task without a valid trace: %s", exc)
        return None


def trace_from_steps(
    traj_id: str, group_id: str, prompt_tokens: int, steps: Iterable[tuple[int, float, int]]
) -> TraceTrajectory | None:
    """A recorded trajectory as a trace line: ``steps`` are (output tokens, tool seconds, tool
    output tokens) in step order; None when it has no step."""
    trace_steps = [
        TraceStep(output_tokens=out, tool_s=max(0.0, tool_s), tool_output_tokens=tool_tokens)
        for out, tool_s, tool_tokens in steps
    ]
    if not trace_steps:
        return None
    return TraceTrajectory(
        id=traj_id, group=group_id, prompt_tokens=max(0, prompt_tokens), steps=trace_steps
    )
