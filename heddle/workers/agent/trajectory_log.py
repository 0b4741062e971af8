"""A trajectory's history as a fold over its events: the worker's source of truth for resuming.

``TrajectoryLog.apply(event)`` folds one ``heddle.evt.traj.<r>.<t>.*`` event into the log. The
agent applies every event it publishes (after the publish is acknowledged), and a resuming agent
applies the events it replays from the stream, so the live state and the rebuilt state come from
the same code. Duplicates (same event id, or a step fact already known) are ignored, which makes
the fold idempotent over an at-least-once stream.

Context layout (heddle/events/trajectory.py)::

    context = spec.prompt_token_ids
              + for each step: generation_started.input_token_ids + generated.output_token_ids

A step whose generation a re-shard interrupted (``GenerationInterrupted``, before its
``Generated``) has that output in the context already; its ``Generated`` then carries the step's
whole output, the interrupted part first, and replaces it.

Step 0's ``input_token_ids`` are the environment's reset observation when the spec carried no
prompt tokens; they belong to the prompt. Later steps' inputs are tool observations (loss mask 0).

The stream holds whatever a credential published: a forged step, a step of a worker whose
hosting is over (a zombie's). The fold takes only what the trajectory's lease admits
(``heddle.control.leases``, the rules of the control plane's gate and the ledger), so a worker
resuming a trajectory rebuilds exactly the history the control plane acts on.

Ownership: a log is mutable and owned by one agent task at a time (the trajectory's lock).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from heddle.control.leases import TrajectoryLease, admit
from heddle.events import (
    Completed,
    EventT,
    Failed,
    Generated,
    GenerationInterrupted,
    GenerationStarted,
    Migrated,
    Preempted,
    ToolCalled,
    ToolReturned,
    TrajectoryEvent,
    TrajectoryPhase,
    TrajectoryPlaced,
    TrajectorySpec,
    TrajectorySubmitted,
)


class HistoryError(ValueError):
    """Events that cannot belong to one trajectory history (a gap or a foreign trajectory)."""


@dataclass(slots=True)
class StepLog:
    """The events of one step (one generation and at most one tool call)."""

    started: GenerationStarted
    generated: Generated | None = None
    tool_called: ToolCalled | None = None
    tool_returned: ToolReturned | None = None
    interrupted: list[GenerationInterrupted] = field(default_factory=list)
    """Parts of the generation a re-shard stopped, in order (until ``generated`` replaces
    them)."""

    @property
    def partial_token_ids(self) -> list[int]:
        """What interrupted generations of the step produced (none once it is generated)."""
        if self.generated is not None:
            return []
        return [token for part in self.interrupted for token in part.output_token_ids]

    @property
    def partial_logprobs(self) -> list[float]:
        if self.generated is not None:
            return []
        return [
            logprob
            for part in self.interrupted
            for logprob in _aligned(part.output_logprobs, len(part.output_token_ids))
        ]


@dataclass(slots=True)
class TrajectoryLog:
    rollout_id: str
    traj_id: str
    spec: TrajectorySpec | None = None
    steps: list[StepLog] = field(default_factory=list)
    submitted_at: float | None = None
    """Wall time of ``TrajectorySubmitted`` (or of the first generation when unknown)."""
    lease: TrajectoryLease | None = None
    """Who holds the trajectory under which hosting, and where its steps stand (None before
    its submission or spec is known)."""
    outcome: Completed | Failed | None = None
    """Terminal event; a retryable ``Failed`` is not terminal (the trajectory gets re-placed)."""
    num_preemptions: int = 0
    num_migrations: int = 0
    migration_s: float = 0.0
    _event_ids: set[str] = field(default_factory=set)
    _context: list[int] | None = None
    """The context, kept up to date as steps fold in (None: rebuild on the next read); a step
    reads its length several times, and rebuilding it each time cost ~10% of a worker's CPU
    on 20k-token trajectories."""
    _context_spec: TrajectorySpec | None = None
    """The spec whose prompt ``_context`` starts with (``spec`` may be set after folding)."""

    # ---- folding --------------------------------------------------------------------------

    @property
    def owner_worker_id(self) -> str:
        """The worker that holds the trajectory ("" before placement, or when handed back)."""
        return self.lease.worker_id if self.lease is not None else ""

    @property
    def epoch(self) -> int:
        """The holder's hosting number (0: none numbered)."""
        return self.lease.epoch if self.lease is not None else 0

    def host(self, worker_id: str, epoch: int) -> None:
        """``worker_id`` holds the trajectory under hosting ``epoch`` (its command said so)."""
        self._lease().host(worker_id, epoch)

    def apply(self, event: EventT) -> bool:
        """Fold one event in; False when it was a duplicate, the lease refused it, or it does
        not change the history."""
        if not isinstance(event, TrajectoryEvent):
            return False
        if (event.rollout_id, event.traj_id) != (self.rollout_id, self.traj_id):
            raise HistoryError(
                f"event {event.event_id} belongs to {event.rollout_id}/{event.traj_id}, "
                f"not {self.rollout_id}/{self.traj_id}"
            )
        if event.event_id in self._event_ids or not self._admits(event):
            return False
        changed = self._fold(event)
        if changed:
            self._event_ids.add(event.event_id)
        return changed

    def _admits(self, event: TrajectoryEvent) -> bool:
        if isinstance(event, TrajectorySubmitted):
            if self.lease is None:
                self.lease = TrajectoryLease.of(event.spec)
            return self.submitted_at is None
        return admit(self._lease(), event) is None

    def _lease(self) -> TrajectoryLease:
        if self.lease is None:
            self.lease = TrajectoryLease.of(self.spec) if self.spec else TrajectoryLease()
        return self.lease

    def _fold(self, event: TrajectoryEvent) -> bool:
        match event:
            case TrajectorySubmitted():
                self.spec = self.spec or event.spec
                self.submitted_at = event.occurred_at
                return True
            case TrajectoryPlaced():
                return True
            case GenerationStarted():
                return self._start(event)
            case Generated() | GenerationInterrupted() | ToolCalled() | ToolReturned():
                return self._attach(event)
            case Preempted():
                self.num_preemptions += 1
                return True
            case Migrated():
                self.num_migrations += 1
                self.migration_s += event.transfer_s
                return True
            case Completed():
                self.outcome = self.outcome or event
                return True
            case Failed():
                if event.retryable or self.outcome is not None:
                    return False
                self.outcome = event
                return True
        return False

    def _start(self, event: GenerationStarted) -> bool:
        if event.step < len(self.steps):
            return False
        if event.step > len(self.steps):
            raise HistoryError(
                f"{self.traj_id}: generation of step {event.step} started "
                f"before step {len(self.steps)}"
            )
        if self.submitted_at is None:
            self.submitted_at = event.occurred_at
        self.steps.append(StepLog(started=event))
        if self._context is not None:
            self._context.extend(event.input_token_ids)
        return True

    def _attach(self, event: Generated | GenerationInterrupted | ToolCalled | ToolReturned) -> bool:
        if event.step >= len(self.steps):
            raise HistoryError(
                f"{self.traj_id}: {type(event).kind_name()} of step {event.step} "
                "before its generation started"
            )
        step = self.steps[event.step]
        match event:
            case Generated() if step.generated is None:
                has_partial = bool(step.interrupted)
                step.generated = event
                if self._context is not None and event.step == len(self.steps) - 1:
                    if has_partial:
                        self._context = None  # the whole output replaces the parts
                    else:
                        self._context.extend(event.output_token_ids)
                else:
                    self._context = None  # an earlier step's output: its place is inside
            case GenerationInterrupted() if step.generated is None:
                step.interrupted.append(event)
                if self._context is not None and event.step == len(self.steps) - 1:
                    self._context.extend(event.output_token_ids)
                else:
                    self._context = None
            case ToolCalled() if step.tool_called is None:
                step.tool_called = event
            case ToolReturned() if step.tool_returned is None:
                step.tool_returned = event
            case _:
                return False
        return True

    # ---- derived facts --------------------------------------------------------------------

    @property
    def phase(self) -> TrajectoryPhase:
        """Where the trajectory stands according to its events alone: READY, GENERATING (no
        result yet: after a crash, run it again), GENERATED, IN_TOOL or DONE (completed, or
        failed for good)."""
        if self.outcome is not None:
            return TrajectoryPhase.DONE
        if not self.steps:
            return TrajectoryPhase.READY
        last = self.steps[-1]
        if last.generated is None:
            return TrajectoryPhase.GENERATING
        if last.tool_called is None:
            return TrajectoryPhase.GENERATED
        if last.tool_returned is None:
            return TrajectoryPhase.IN_TOOL
        return TrajectoryPhase.READY

    @property
    def num_steps(self) -> int:
        """Steps whose generation started."""
        return len(self.steps)

    @property
    def current_step(self) -> int:
        """The step in progress, or the next one to run when the phase is READY."""
        if self.phase is TrajectoryPhase.READY:
            return len(self.steps)
        return len(self.steps) - 1

    @property
    def is_started(self) -> bool:
        return bool(self.steps) or self.outcome is not None

    def context_token_ids(self) -> list[int]:
        """Every token the next generation conditions on (prompt, outputs, observations); a
        copy the caller may keep."""
        return list(self._current_context())

    @property
    def num_context_tokens(self) -> int:
        """``len(context_token_ids())`` without the copy."""
        return len(self._current_context())

    def _current_context(self) -> list[int]:
        if self._context is None or self._context_spec is not self.spec:
            context = list(self.spec.prompt_token_ids) if self.spec else []
            for step in self.steps:
                context.extend(step.started.input_token_ids)
                if step.generated is not None:
                    context.extend(step.generated.output_token_ids)
                else:
                    context.extend(step.partial_token_ids)
            self._context, self._context_spec = context, self.spec
        return self._context

    def prompt_token_ids(self) -> list[int]:
        prompt = list(self.spec.prompt_token_ids) if self.spec else []
        if self.steps:
            prompt.extend(self.steps[0].started.input_token_ids)
        return prompt

    def response(self) -> tuple[list[int], list[float], list[int]]:
        """(token ids, logprobs, loss mask) after the prompt: 1 = model token, 0 = tool token."""
        tokens: list[int] = []
        logprobs: list[float] = []
        mask: list[int] = []
        for index, step in enumerate(self.steps):
            if index > 0:
                observation = step.started.input_token_ids
                tokens.extend(observation)
                logprobs.extend([0.0] * len(observation))
                mask.extend([0] * len(observation))
            if step.generated is not None:
                output = step.generated.output_token_ids
                tokens.extend(output)
                logprobs.extend(_aligned(step.generated.output_logprobs, len(output)))
                mask.extend([1] * len(output))
        return tokens, logprobs, mask

    def logprob_mask(self) -> list[int]:
        """Aligned with ``response()``: 1 where the engine returned the token's logprob, 0 at
        observation tokens and where the engine returned none."""
        mask: list[int] = []
        for index, step in enumerate(self.steps):
            if index > 0:
                mask.extend([0] * len(step.started.input_token_ids))
            if step.generated is not None:
                output = step.generated
                num_returned = min(len(output.output_logprobs), len(output.output_token_ids))
                mask.extend([1] * num_returned)
                mask.extend([0] * (len(output.output_token_ids) - num_returned))
        return mask

    @property
    def num_prompt_tokens(self) -> int:
        """``len(prompt_token_ids())`` without the copy."""
        num_spec = len(self.spec.prompt_token_ids) if self.spec else 0
        return num_spec + (len(self.steps[0].started.input_token_ids) if self.steps else 0)

    def generated_events(self) -> list[Generated]:
        return [step.generated for step in self.steps if step.generated is not None]

    def tool_results(self) -> list[ToolReturned]:
        return [step.tool_returned for step in self.steps if step.tool_returned is not None]

    def worker_history(self) -> list[str]:
        """Workers that ran generations of this trajectory, in order, without repeats in a row."""
        history: list[str] = []
        for step in self.steps:
            for worker_id in (step.started.worker_id, _generated_by(step)):
                if worker_id and (not history or history[-1] != worker_id):
                    history.append(worker_id)
        return history


def _generated_by(step: StepLog) -> str:
    return step.generated.worker_id if step.generated is not None else ""


def _aligned(logprobs: list[float], length: int) -> list[float]:
    """Logprobs padded or cut to ``length`` (engines that return none give zeros)."""
    if len(logprobs) == length:
        return list(logprobs)
    return (list(logprobs) + [0.0] * length)[:length]


def rebuild(
    rollout_id: str, traj_id: str, events: list[EventT], spec: TrajectorySpec | None = None
) -> TrajectoryLog:
    """The log of one trajectory from its events in stream order (``spec``: what a command
    says it is, for a stream that no longer holds its submission)."""
    log = TrajectoryLog(rollout_id=rollout_id, traj_id=traj_id, spec=spec)
    for event in events:
        log.apply(event)
    return log
