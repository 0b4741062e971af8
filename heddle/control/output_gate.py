"""The output gate: what a bundle's deciders may emit, whatever they compute from a late event.

Deciders fold every event of their rollouts, late ones included (a tool result after its
trajectory was cancelled, a step after a completion the stream already holds), and some answer
them: a prediction, a priority update, a placement. The gate drops the outputs that would act
on something over:

- a cancelled rollout (``RolloutCancelled``) gets no more worker commands, placements or
  migration requests: its deciders still fold its events, but an abandoned rollout never comes
  back to life on the workers of a later one (the control plane aborts its trajectories on their
  workers, ``heddle.controlplane.liveness``);
- nothing is emitted about a finished trajectory: once its ``Completed`` (or a ``Failed`` that
  is not retried) is folded, outputs naming it (events of that trajectory, commands for it) are
  dropped; once its rollout finished, all outputs naming its trajectories are.

The outputs an event itself calls for stand: a cancellation counts before the outputs of its
event are gated, a trajectory's or rollout's end after. ``GatedDeciders`` runs a bundle's
deciders (or one stage of them) behind one gate: the simulator and the live control plane emit
exactly what it lets through.
"""

from __future__ import annotations

from collections.abc import Sequence

from heddle.control.decider import Decider, Output, dispatch_table
from heddle.events import (
    Completed,
    Event,
    Failed,
    MigrationRequested,
    RolloutCancelled,
    RolloutFinished,
    TrajectoryEvent,
    TrajectoryPlaced,
    WorkerCommand,
)

_STARTS_WORK = (WorkerCommand, TrajectoryPlaced, MigrationRequested)
"""What would set a cancelled rollout's trajectories moving."""


class OutputGate:
    """Folds rollouts' and trajectories' ends; drops the outputs about them (module doc)."""

    name = "output_gate"
    handles: frozenset[type[Event]] = frozenset(
        {RolloutCancelled, RolloutFinished, Completed, Failed}
    )

    def __init__(self) -> None:
        self._cancelled: set[str] = set()
        self._finished: dict[str, set[str]] = {}
        """Per running rollout, its trajectories that ended (completed or failed for good)."""
        self._ended: set[str] = set()
        """Rollouts that finished: every output naming one of their trajectories is dropped."""

    def gate(self, event: Event, outputs: list[Output]) -> list[Output]:
        """Fold ``event``; what may go out of ``outputs``, the deciders' answer to it."""
        if isinstance(event, RolloutCancelled):
            self._cancelled.add(event.rollout_id)
        if self._cancelled or self._finished or self._ended:
            outputs = [output for output in outputs if self.is_allowed(output)]
        self._note_end(event)
        return outputs

    def is_allowed(self, output: Output) -> bool:
        rollout_id = output.rollout_id
        if rollout_id in self._cancelled and isinstance(output, _STARTS_WORK):
            return False
        if not isinstance(output, (WorkerCommand, TrajectoryEvent)):
            return True
        traj_id = getattr(output, "traj_id", "")
        if not traj_id:
            return True
        return rollout_id not in self._ended and traj_id not in self._finished.get(rollout_id, ())

    def _note_end(self, event: Event) -> None:
        match event:
            case Completed() | Failed() if not getattr(event, "retryable", False):
                if event.rollout_id not in self._ended:
                    self._finished.setdefault(event.rollout_id, set()).add(event.traj_id)
            case RolloutFinished():
                self._finished.pop(event.rollout_id, None)
                self._ended.add(event.rollout_id)


class GatedDeciders:
    """Deciders in dispatch order behind one output gate: for each event, the outputs of every
    decider that handles it, in order, minus what the gate drops (itself a ``Decider``)."""

    name = "gated"

    def __init__(self, deciders: Sequence[Decider]) -> None:
        self.deciders = list(deciders)
        self.gate = OutputGate()
        self._table = dispatch_table(self.deciders)
        self.handles: frozenset[type[Event]] = frozenset(self._table) | OutputGate.handles

    def decide(self, event: Event) -> list[Output]:
        outputs: list[Output] = []
        for decider in self._table.get(type(event), ()):
            outputs += decider.decide(event)
        return self.gate.gate(event, outputs)
