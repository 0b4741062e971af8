"""The predictors by registry name, and fitting one to a history of earlier rollouts."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from heddle.policy.prediction.base import Outcome, Predictor, PredictorOptions
from heddle.policy.prediction.baselines import HistoryPredictor, PromptOnlyPredictor
from heddle.policy.prediction.online import OnlineModelConfig, OnlinePredictor
from heddle.policy.prediction.oracles import NoisyOraclePredictor, OraclePredictor
from heddle.traces import TraceTrajectory


def _oracle(options: PredictorOptions) -> Predictor:
    return OraclePredictor(options.trace)


def _noisy_oracle(options: PredictorOptions) -> Predictor:
    return NoisyOraclePredictor(OraclePredictor(options.trace), options)


def _prompt_only(options: PredictorOptions) -> Predictor:
    return PromptOnlyPredictor(options.prior_total_tokens)


def _history(options: PredictorOptions) -> Predictor:
    return HistoryPredictor(options.prior_total_tokens)


def _online(options: PredictorOptions) -> Predictor:
    return OnlinePredictor(OnlineModelConfig(prior_total_tokens=options.prior_total_tokens))


PREDICTORS: dict[str, Callable[[PredictorOptions], Predictor]] = {
    "oracle": _oracle,
    "noisy_oracle": _noisy_oracle,
    "prompt_only": _prompt_only,
    "history": _history,
    "online": _online,
}
"""Predictor factories by name (the CLI's ``--predictor`` choices)."""


def make_predictor(name: str, options: PredictorOptions | None = None) -> Predictor:
    """A fresh predictor registered as ``name``; ``ValueError`` listing the choices otherwise."""
    factory = PREDICTORS.get(name)
    if factory is None:
        raise ValueError(f"unknown predictor {name!r}; choose one of {sorted(PREDICTORS)}")
    return factory(options or PredictorOptions())


def fit(predictor: Predictor, history: Iterable[TraceTrajectory]) -> Predictor:
    """Let a predictor observe completed trajectories of earlier rollouts; returns it."""
    for trajectory in history:
        predictor.observe(Outcome.from_trace(trajectory))
    return predictor
