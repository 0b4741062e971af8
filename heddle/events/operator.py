"""Operator events: what a person asked the running system to do, recorded before it is done.

The operations service (``heddle.controlplane.operations``) validates each steering request and
publishes one of these events on the subject of what it concerns (a trajectory's, a rollout's or
a worker's), so ``nats stream view`` of that trajectory, the ledger (``operator_actions``) and
``heddle replay`` see who asked what and why. The control plane then acts on the event: the
priority decider on ``TrajectoryReprioritizeRequested``, the placement decider on the drain pair
(no new trajectories there), and the operators' view (``heddle.control.operations``) answers
aborts, drains and undrains with the worker command, sent to whichever worker holds the
trajectory when the event arrives, and a cancel request with ``RolloutCancelled``.

Every operator event carries ``operator`` (who: the NATS user when the server authenticates,
else what the request named) and ``reason`` (why). Ids are ``<target>:op:<request_id>:<action>``: a
request retried with the same id stores one event.
"""

from __future__ import annotations

from heddle.events.rollout import RolloutEvent
from heddle.events.trajectory import TrajectoryEvent
from heddle.events.worker import WorkerEvent


class TrajectoryReprioritizeRequested(
    TrajectoryEvent, frozen=True, kw_only=True, tag="traj.reprioritize_requested"
):
    """Run the trajectory at ``priority`` (larger runs first). With ``pin`` the priority policy
    no longer changes it; without, the policy's next update may."""

    priority: float
    pin: bool = False
    operator: str = ""
    reason: str = ""


class TrajectoryAbortRequested(
    TrajectoryEvent, frozen=True, kw_only=True, tag="traj.abort_requested"
):
    """Abort the trajectory where it runs; it ends failed (not retried)."""

    operator: str = ""
    reason: str = ""


class RolloutCancelRequested(
    RolloutEvent, frozen=True, kw_only=True, tag="rollout.cancel_requested"
):
    """Cancel the rollout: the operators' view answers with ``RolloutCancelled``."""

    operator: str = ""
    reason: str = ""


class WorkerDrainRequested(WorkerEvent, frozen=True, kw_only=True, tag="worker.drain_requested"):
    """Place nothing new on the worker; it finishes what it holds and reports drained."""

    operator: str = ""
    reason: str = ""


class WorkerUndrainRequested(
    WorkerEvent, frozen=True, kw_only=True, tag="worker.undrain_requested"
):
    """Place on the worker again after a drain."""

    operator: str = ""
    reason: str = ""


OperatorEventT = (
    TrajectoryReprioritizeRequested
    | TrajectoryAbortRequested
    | RolloutCancelRequested
    | WorkerDrainRequested
    | WorkerUndrainRequested
)
OPERATOR_EVENTS: tuple[type[TrajectoryEvent] | type[RolloutEvent] | type[WorkerEvent], ...] = (
    TrajectoryReprioritizeRequested,
    TrajectoryAbortRequested,
    RolloutCancelRequested,
    WorkerDrainRequested,
    WorkerUndrainRequested,
)
