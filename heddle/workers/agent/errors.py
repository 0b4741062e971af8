"""Why the agent refuses to let a command be acknowledged, and why a step cannot go on."""

from __future__ import annotations

from heddle.events import TerminalReason


class WorkerFailing(RuntimeError):
    """The engine failed (``WorkerFailed`` is published): leave the command unacknowledged and
    stop; the control plane re-places the worker's trajectories."""


class WorkerStopping(RuntimeError):
    """The worker is shutting down before the command's effects were all stored: the command
    goes back to the stream (negative acknowledgement) for the next incarnation."""


class CommandRefused(ValueError):
    """The command names something this worker cannot act on (a trajectory the stream does not
    know): it is dead-lettered with the reason, and no event about it is published (a made-up
    id must not become a trajectory or a rollout in the ledger)."""


class StepError(RuntimeError):
    """A step that cannot go on; ``retryable`` failures may succeed on another worker."""

    def __init__(
        self, reason: str, *, retryable: bool = False, finish_reason: TerminalReason = "error"
    ) -> None:
        super().__init__(reason)
        self.retryable = retryable
        self.finish_reason: TerminalReason = finish_reason


class StepInterrupted(RuntimeError):
    """The worker retires for a re-shard: the step's generation was interrupted and what it
    produced is stored (``GenerationInterrupted``); the trajectory rests here until the control
    plane hands it to the re-shard's leader."""
