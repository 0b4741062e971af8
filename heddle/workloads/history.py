"""The history a rollout is judged with: what the learning predictors and the plan check saw
before it, the previous training step.

Three kinds (``HistoryKind``):

* ``other``: the previous step, on other prompts of the same task distribution. Consecutive RL
  steps draw other prompts from the dataset, so this is the realistic one and the default
  wherever one history is used. Its prompts come from another seed and its groups and ids carry
  the suffix ``_prev``, so a predictor can never take a group of the history for a group of the
  rollout.
* ``same``: the same prompts an epoch back (new samples of the same groups, under the same
  names): what a predictor sees when the dataset comes round again; a group's siblings in the
  history then tell it about the group in the rollout, so this one flatters predictors that key
  on the prompt.
* ``none``: no history (the first step of a run).

    >>> from heddle.workloads import generate
    >>> sample = lambda seed, epoch: generate("coding", 64, seed, epoch=epoch)
    >>> history = make_history("other", sample, seed=3)  # 64 trajectories of other prompts
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

import msgspec
import numpy as np

from heddle.traces import TraceTrajectory

HistoryKind = Literal["other", "same", "none"]
HISTORY_KINDS: tuple[HistoryKind, ...] = ("other", "same", "none")
DEFAULT_HISTORY: HistoryKind = "other"
OTHER_PROMPTS_SUFFIX = "_prev"
_OTHER_PROMPTS_TAG = 0x07E5


def history_kind(name: str) -> HistoryKind:
    """``name`` as a history kind (``ValueError`` naming the choices otherwise)."""
    for kind in HISTORY_KINDS:
        if kind == name:
            return kind
    raise ValueError(f"unknown history {name!r}; choose one of {', '.join(HISTORY_KINDS)}")


def other_prompts_seed(seed: int, replication: int = 0) -> int:
    """The seed whose prompts stand for the previous step's, for the rollout of ``seed`` (and
    its replication): a 63-bit hash, so it never equals ``seed``'s stream in practice."""
    state = np.random.SeedSequence([seed, _OTHER_PROMPTS_TAG, replication]).generate_state(2)
    return (int(state[0]) << 31 | int(state[1]) >> 1) & (2**63 - 1)


def as_other_prompts(trace: Sequence[TraceTrajectory]) -> list[TraceTrajectory]:
    """``trace`` with every id and group suffixed ``_prev``: prompts the rollout never shares."""
    return [
        msgspec.structs.replace(
            t,
            id=t.id + OTHER_PROMPTS_SUFFIX,
            group=t.group + OTHER_PROMPTS_SUFFIX if t.group else "",
        )
        for t in trace
    ]


def make_history(
    kind: HistoryKind,
    sample: Callable[[int, int], list[TraceTrajectory]],
    seed: int,
    replication: int = 0,
) -> list[TraceTrajectory]:
    """The history of kind ``kind`` for the rollout ``sample(seed, 2 * replication)``
    (``sample(seed, epoch)``: a trace of a workload's prompts of ``seed``, sampled at
    ``epoch``): ``same`` is epoch ``2 * replication + 1`` of the same prompts, ``other`` the
    prompts of ``other_prompts_seed(seed, replication)`` renamed, ``none`` empty."""
    if kind == "none":
        return []
    if kind == "same":
        return sample(seed, 2 * replication + 1)
    return as_other_prompts(sample(other_prompts_seed(seed, replication), 0))
