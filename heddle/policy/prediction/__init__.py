"""Predictors of a trajectory's REMAINING output tokens from what is known after each step.

The paper (s.4.1) re-predicts after every step, while the tool runs, from the context so far;
accuracy rises with steps. One protocol serves every predictor:

* ``predict(progress) -> float``: remaining output tokens (>= 0) of a trajectory in flight.
* ``observe(outcome)``: a completed trajectory, for predictors that learn online (or offline, by
  observing a history of earlier rollouts through ``fit``).
* optionally ``predict_tool_s(progress) -> float`` (``ToolTimePredictor``): the tool seconds
  still to come. The paper's makespan (docs/paper.md) is queueing + tokens x per-token time + tool
  time, and on agentic workloads tools are about half of a trajectory and heavy-tailed, so
  PPS and placement rank by predicted remaining *time*. Every built-in predictor has it.

Implementations, by registry name (``PREDICTORS``; names feed the CLI's choices):

* ``oracle``: the truth, from the trace (an upper bound for the predictor).
* ``noisy_oracle``: the truth times a lognormal error ``exp(sigma_k * z)`` with
  ``sigma_k = f + (sigma - f) * sigma_decay ** steps``, ``f = min(sigma, sigma_floor)`` (the
  error of the remaining amount shrinks as context accrues, never below the floor), and
  ``z = sqrt(rho) * z_traj + sqrt(1 - rho) *
  z_step`` standard normal: ``rho = step_correlation`` makes a trajectory's error persist over
  its steps (a learned model sees nearly the same context twice). The draws are pure functions
  of (seed, trajectory[, step]), so a re-run or a replay predicts the same.
* ``prompt_only``: the paper's static baseline: a trajectory's total length from its prompt alone
  (the mean total of its group's completed samples, else a least-squares line in prompt tokens,
  else the mean total seen, else a prior), minus what it has generated.
* ``history``: the paper's history baseline: the mean remaining length of completed trajectories
  at the same step index.
* ``online``: a ridge regression on context features refit at every completion
  (``heddle.policy.prediction.online``), what a live control plane runs by default.

A learned model implements the same protocol. The learned context model (``heddle.context_model``)
reads the trajectory's text as well; it runs as a service, and inside the control plane
``ServedContextPredictor`` stands for it (answering with the numeric model at once, and queueing
a request for the service).

Modules: ``base`` (the protocol, ``Progress``, ``Outcome``), ``oracles``, ``baselines``,
``online`` with ``online_features`` (the ridge model and its features), ``context`` (the served
context model's stand-in), ``trace_oracle`` (the oracle of live runs), ``quality`` (long-tail
recall, correlation), ``registry`` (``PREDICTORS``, ``make_predictor``, ``fit``), ``cross_fit``
(``CrossFitted``: one model per fold of a history, none asked about what it learned from; the
plan check's simulations of the history). The control
plane's side is ``heddle.control.prediction``.
"""

from __future__ import annotations

from heddle.policy.prediction.base import (
    Outcome,
    Predictor,
    PredictorOptions,
    Progress,
    ToolTimePredictor,
    predict_tool_s,
    remaining_tool_s,
    returned_tool_calls,
)
from heddle.policy.prediction.baselines import HistoryPredictor, PromptOnlyPredictor
from heddle.policy.prediction.context import (
    CONTEXT_PREDICTOR,
    ContextAnswer,
    ContextRequest,
    ServedContextPredictor,
    TimedContextPredictor,
)
from heddle.policy.prediction.oracles import NoisyOraclePredictor, OraclePredictor
from heddle.policy.prediction.quality import PredictionQuality, prediction_quality, progress_of
from heddle.policy.prediction.registry import PREDICTORS, fit, make_predictor

__all__ = [
    "CONTEXT_PREDICTOR",
    "PREDICTORS",
    "ContextAnswer",
    "ContextRequest",
    "HistoryPredictor",
    "NoisyOraclePredictor",
    "OraclePredictor",
    "Outcome",
    "PredictionQuality",
    "Predictor",
    "PredictorOptions",
    "Progress",
    "PromptOnlyPredictor",
    "ServedContextPredictor",
    "TimedContextPredictor",
    "ToolTimePredictor",
    "fit",
    "make_predictor",
    "predict_tool_s",
    "prediction_quality",
    "progress_of",
    "remaining_tool_s",
    "returned_tool_calls",
]
