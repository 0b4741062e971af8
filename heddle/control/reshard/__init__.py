"""Tail re-sharding (ours, beyond the paper): merge a node's workers into one of a higher TP
degree as a rollout drains to a few stragglers.

- ``view``: what the decider knows of workers and trajectories, folded from the stream.
- ``decider``: the ``ReshardDecider`` (when a merge pays, its ``ReshardRequested``, the
  members' ``Retire`` and the leader's ``Reshard``), and its ``ReshardConfig``.

The estimate itself is ``heddle.policy.resources.reshard``; the placement decider moves the
retired members' trajectories (``heddle.control.placement``).
"""

from heddle.control.reshard.decider import (
    DEFAULT_ENGINE_RESTART_S,
    ReshardConfig,
    ReshardDecider,
)

__all__ = ["DEFAULT_ENGINE_RESTART_S", "ReshardConfig", "ReshardDecider"]
