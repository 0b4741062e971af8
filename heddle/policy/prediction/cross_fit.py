"""A predictor that is never asked about a trajectory it learned from.

Simulating a rollout of the history under a model fitted on that same history asks the model
about trajectories it has seen: it ranks them better than it will rank the next rollout's
samples of the same prompts, and a plan that leans on good ranks looks better than it will run.
``CrossFitted`` splits every group's samples into folds by their position in the group (a
trajectory without a group counts among the ungrouped ones) and holds one model per fold, fitted
on the other folds: a trajectory is predicted by its fold's model, which has seen its siblings
but never it, as the next rollout's model has seen the prompt's earlier samples and not the new
ones; it learns it when it completes, as the rollout's model learns a new sample.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from heddle.policy.prediction.base import Outcome, Predictor, Progress, predict_tool_s
from heddle.traces import TraceTrajectory

NUM_FOLDS = 8
"""Folds of the history: a model learns from all of a group's G samples but at most
ceil(G / 8), nearly what the next rollout's model learns from (all G earlier samples)."""


def folds_of(trajectories: Sequence[TraceTrajectory], num_folds: int = NUM_FOLDS) -> list[int]:
    """Fold of each trajectory: its position among its group's samples (in order) modulo
    ``num_folds``, so every group's folds differ in size by at most one."""
    if num_folds < 2:
        raise ValueError(f"cross-fitting needs at least 2 folds, got {num_folds}")
    seen: dict[str, int] = {}
    folds = []
    for trajectory in trajectories:
        position = seen.get(trajectory.group, 0)
        seen[trajectory.group] = position + 1
        folds.append(position % num_folds)
    return folds


def outside_fold(
    trajectories: Sequence[TraceTrajectory], folds: Sequence[int], fold: int
) -> list[TraceTrajectory]:
    """The trajectories fold ``fold``'s model learns from: those of every other fold."""
    return [t for t, other in zip(trajectories, folds, strict=True) if other != fold]


def cross_fit(
    trajectories: Sequence[TraceTrajectory],
    ids: Sequence[str],
    fitted: Callable[[list[TraceTrajectory]], Predictor],
    num_folds: int = NUM_FOLDS,
) -> CrossFitted:
    """``CrossFitted`` over ``trajectories`` (known to the run as ``ids``, in order): fold
    ``k``'s model is ``fitted(outside_fold(..., k))``."""
    folds = folds_of(trajectories, num_folds)
    models = tuple(fitted(outside_fold(trajectories, folds, fold)) for fold in range(num_folds))
    return CrossFitted(models, dict(zip(ids, folds, strict=True)))


@dataclass(frozen=True, slots=True)
class CrossFitted:
    """Predicts each trajectory with ``models[fold_of[traj_id]]`` (fold 0 for an id it was not
    given). A completed trajectory teaches that model only: the others learned from it in their
    fit, and a second sample of it would weigh it twice."""

    models: tuple[Predictor, ...]
    fold_of: Mapping[str, int]

    @property
    def name(self) -> str:
        return self.models[0].name

    def _model(self, traj_id: str) -> Predictor:
        return self.models[self.fold_of.get(traj_id, 0)]

    def predict(self, progress: Progress) -> float:
        return self._model(progress.traj_id).predict(progress)

    def predict_tool_s(self, progress: Progress) -> float:
        return predict_tool_s(self._model(progress.traj_id), progress)

    def observe(self, outcome: Outcome) -> None:
        self._model(outcome.traj_id).observe(outcome)
