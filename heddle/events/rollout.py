"""Events of a whole rollout: ``heddle.evt.rollout.<rollout_id>.<kind>``."""

from __future__ import annotations

from typing import ClassVar

from heddle.events.base import Event

DEFAULT_TRAINER = "trainer"
"""The owner of a rollout whose submission names none (published past the operations service,
or before trainers were named), and ``HeddleClient``'s trainer unless it is given one."""


class RolloutEvent(Event, frozen=True, kw_only=True):
    family: ClassVar[str] = "rollout"


class RolloutSubmitted(RolloutEvent, frozen=True, kw_only=True, tag="rollout.submitted"):
    """Opens a rollout. Its trajectories follow as ``TrajectorySubmitted`` events; the control
    plane places them once it has seen ``num_trajectories`` of them."""

    policy: str
    """Name of the system bundle that runs it (heddle, verl, slime, ...)."""
    num_trajectories: int
    source: str = ""
    """What was submitted, for humans: ``workload:coding``, ``trace:FILE``, ``tasks:FILE``."""
    time_scale: float = 1.0
    """Model seconds per wall second (sim engines run faster than real time by this factor)."""
    labels: dict[str, str] = {}
    """Free-form metadata from the submitter (training step, experiment name, ...)."""
    trainer: str = ""
    """The trainer that submitted it and owns it: the operations service takes it from the
    subject its request came on (``heddle.ops.submit.<trainer>``). Its trajectories' terminal
    records are delivered to stream ``HEDDLE_OUT_<trainer>``; "" (streams written before, or a
    submission naming none) means ``DEFAULT_TRAINER``."""


class RolloutFinished(RolloutEvent, frozen=True, kw_only=True, tag="rollout.finished"):
    num_completed: int
    num_failed: int = 0
    makespan_s: float = 0.0
    """Model seconds from submission to the last trajectory's end."""
    num_output_tokens: int = 0


class RolloutCancelled(RolloutEvent, frozen=True, kw_only=True, tag="rollout.cancelled"):
    reason: str = ""


RolloutEventT = RolloutSubmitted | RolloutFinished | RolloutCancelled
ROLLOUT_EVENTS: tuple[type[RolloutEvent], ...] = (
    RolloutSubmitted,
    RolloutFinished,
    RolloutCancelled,
)
