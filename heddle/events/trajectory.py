"""Events of one trajectory: ``heddle.evt.traj.<rollout_id>.<traj_id>.<kind>``.

Step events carry the token ids they add to the context (``GenerationStarted.input_token_ids``
for what was appended before a generation, such as a tool observation;
``Generated.output_token_ids`` for the model's output), so the stream alone rebuilds any
trajectory's context:

    context = submitted.prompt_token_ids
              + for each step: generation_started.input_token_ids + generated.output_token_ids

Number lists are written compactly on the wire (``heddle.events.arrays``: base64 of int32 ids,
float32 logprobs, uint8 masks, the encoding named in the event); decoders read both forms.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import msgspec

from heddle.events.arrays import Logprobs, LossMask, TokenIds
from heddle.events.base import (
    Event,
    FinishReason,
    SamplingParams,
    TerminalReason,
    ToolStatus,
    TrajectoryTimings,
)

PlacementReason = Literal["initial", "migration", "replacement", "operator", "reshard"]


class TrajectoryEvent(Event, frozen=True, kw_only=True, omit_defaults=True):
    """An event of one trajectory; fields at their defaults are left out on the wire, but for
    the trainer's records (``Completed``, ``Failed``), written in full."""

    family: ClassVar[str] = "traj"
    traj_id: str
    epoch: int = 0
    """The hosting (lease) the event belongs to: the number the control plane gave the
    trajectory when it last placed, re-placed or migrated it (``TrajectoryPlaced.epoch``,
    ``Migrated.target_epoch``), written by the worker into every event it publishes for that
    hosting. An event of an older hosting (a worker declared failed that still runs) is refused
    (``heddle.control.gate``). 0: events written before hostings were numbered."""


class ChatMessage(msgspec.Struct, frozen=True, kw_only=True):
    """One message of a chat prompt (the OpenAI / SGLang ``messages`` format)."""

    role: str
    """``system``, ``user``, ``assistant`` or ``tool``."""
    content: str


class TrajectorySpec(msgspec.Struct, frozen=True, kw_only=True):
    """What a trajectory is asked to do (in ``TrajectorySubmitted`` and ``StartTrajectory``)."""

    group_id: str
    """Trajectories sampled from the same prompt share a group (GRPO-style group sampling)."""
    index: int
    """Position of the trajectory in its rollout (submission order)."""
    environment: str
    """Registry name of the environment: trace, math, coding, search."""
    task: dict[str, Any] = {}
    """Environment-specific task payload; each environment validates it into its own struct."""
    prompt_token_ids: TokenIds = []
    """The prompt, tokenized by the submitter; empty: ``messages`` or the environment's prompt."""
    messages: list[ChatMessage] = []
    """A chat prompt the worker tokenizes with its model's chat template (generation prompt
    appended), when ``prompt_token_ids`` is empty; it replaces the environment's own prompt (the
    environment still reads ``task`` to score the answer)."""
    max_steps: int = 64
    max_new_tokens: int = 4096
    """Cap on the tokens generated in one step."""
    max_total_tokens: int = 131072
    """Cap on the whole context (prompt + generations + observations)."""
    max_response_tokens: int | None = None
    """Cap on the response (every token after the prompt: generations and observations); the
    trajectory ends with ``finish_reason`` ``length`` when it is reached. None: no cap."""
    sampling: SamplingParams = SamplingParams()
    tool_pool: str = "default"
    max_staleness: int | None = None
    """Partial rollout's bound: a generation may run on weights at most this many versions newer
    than the trajectory's oldest tokens; one that would not ends the trajectory ``stale``.
    None: no bound (a trajectory continues on whatever weights its worker serves)."""
    max_attempts: int = 1
    """How many times the trajectory may run afresh: one that goes ``stale`` before its last
    attempt is resubmitted from its prompt under a new id (``heddle.ids.resubmission_id``), with
    this spec and ``attempt`` one higher. 1: a stale trajectory ends ``stale``."""
    attempt: int = 0
    """Runs of this slot before this one (0: as the trainer submitted it)."""


class TrajectorySubmitted(TrajectoryEvent, frozen=True, kw_only=True, tag="traj.submitted"):
    spec: TrajectorySpec


class TrajectoryPlaced(TrajectoryEvent, frozen=True, kw_only=True, tag="traj.placed"):
    worker_id: str
    reason: PlacementReason = "initial"
    group_rank: int = 0
    """Rank of the trajectory in the presorted order (0 = predicted longest)."""
    tp_degree: int = 1


class GenerationStarted(TrajectoryEvent, frozen=True, kw_only=True, tag="traj.generation_started"):
    step: int
    worker_id: str
    input_token_ids: TokenIds = []
    """Tokens appended to the context since the previous generation (an observation)."""
    num_context_tokens: int
    """Length of the whole context this generation conditions on."""
    num_cached_tokens: int = 0
    """Prefix tokens the engine already held, when known before generating (usually 0: the
    engine reports it with the result, see ``Generated.num_cached_tokens``)."""
    priority: float = 0.0
    queued_s: float = 0.0
    """Time the step waited on the worker before the engine started it (model time)."""
    command_stored_at: float = 0.0
    """Unix time (the stream server's clock) when the command that started this step
    (``StartTrajectory``, ``ContinueTrajectory``, ``MigrateIn``) was stored; 0.0 for a step that
    followed the previous one without a command. With ``command_received_at`` it splits the gap
    before the step into the control plane's reaction and the command's delivery."""
    command_received_at: float = 0.0
    """Unix time (the worker's clock) when the worker took that command from its consumer."""
    command_issued_at: float = 0.0
    """The command's ``issued_at``: the time of the event the control plane decided it on. Later
    than the step's cause (the submission, the tool result) when the control plane held the
    trajectory meanwhile (KV admission, a paused program): the summary's ``admission`` and
    ``held``."""


class Generated(TrajectoryEvent, frozen=True, kw_only=True, tag="traj.generated"):
    step: int
    worker_id: str
    output_token_ids: TokenIds
    output_logprobs: Logprobs = []
    finish_reason: FinishReason = "stop"
    num_context_tokens: int = 0
    """Context length after this generation."""
    queue_s: float = 0.0
    prefill_s: float = 0.0
    decode_s: float = 0.0
    num_preemptions: int = 0
    num_recomputed_tokens: int = 0
    """Tokens prefilled again because the KV cache had been lost (preemption or migration)."""
    num_cached_tokens: int = 0
    """Context tokens the engine served from its cache (not prefilled) for this generation."""
    num_warmed_tokens: int = 0
    """Context tokens a warm-up prefill computed on this worker during the tool gap before this
    generation (a migration to an engine without KV transfer): re-prefill the gap hid."""
    weight_version: int = 0
    """The weight version that produced these tokens (0: the weights the worker started with;
    see ``heddle.events.weights``)."""
    weights_wait_s: float = 0.0
    """Model seconds the generation waited on its worker for a weight swap before the engine
    took it (outside ``queue_s``)."""


class GenerationInterrupted(
    TrajectoryEvent, frozen=True, kw_only=True, tag="traj.generation_interrupted"
):
    """The worker stopped the step's generation before it finished (its engine stops for a
    re-shard) and kept what it had produced: ``output_token_ids`` join the context, and the
    step's generation continues after them wherever the trajectory resumes, re-prefilling its
    context there. The step's ``Generated`` then carries the step's whole output, these tokens
    first; a step may be interrupted more than once (each adds to the previous)."""

    step: int
    worker_id: str
    output_token_ids: TokenIds = []
    output_logprobs: Logprobs = []
    reason: str = ""
    queue_s: float = 0.0
    prefill_s: float = 0.0
    decode_s: float = 0.0
    """Model seconds the interrupted part of the generation spent (its ``Generated`` counts
    only the part after the resumption)."""


class ToolCalled(TrajectoryEvent, frozen=True, kw_only=True, tag="traj.tool_called"):
    step: int
    worker_id: str
    call_id: str
    tool: str
    pool: str = "default"


class ToolReturned(TrajectoryEvent, frozen=True, kw_only=True, tag="traj.tool_returned"):
    step: int
    call_id: str
    tool: str
    status: ToolStatus
    output: str = ""
    """Text result (stdout, search hits, ...), capped by the executor."""
    error: str = ""
    """stderr or the reason of a failure, capped by the executor."""
    exit_code: int | None = None
    output_token_ids: TokenIds = []
    """Token ids of the observation, when the tool produces tokens itself (trace replay)."""
    duration_s: float = 0.0
    """Model seconds the call ran (the executor's wall time x the call's ``time_scale``), like
    every duration in an event: ledgers, traces and predictors read it as model time."""
    executor_id: str = ""


class Predicted(TrajectoryEvent, frozen=True, kw_only=True, tag="traj.predicted"):
    step: int
    """The last completed step the prediction saw (-1: before the first generation)."""
    predicted_remaining_tokens: float
    predictor: str
    num_context_tokens: int = 0
    predicted_remaining_tool_s: float = 0.0
    """Tool seconds still to come, counting the call in flight (0: the predictor has none)."""


class Prioritized(TrajectoryEvent, frozen=True, kw_only=True, tag="traj.prioritized"):
    worker_id: str
    priority: float
    """Larger runs first."""


class Preempted(TrajectoryEvent, frozen=True, kw_only=True, tag="traj.preempted"):
    step: int
    worker_id: str
    by_traj_id: str = ""
    kv_kept: bool = True
    num_generated_tokens: int = 0
    """Tokens of the interrupted step generated before the preemption."""


class MigrationRequested(
    TrajectoryEvent, frozen=True, kw_only=True, tag="traj.migration_requested"
):
    source_worker_id: str
    target_worker_id: str
    predicted_remaining_tokens: float = 0.0
    new_rank: int = 0
    transfer_kv: bool = True
    """False: the trajectory's KV is stale (computed under weights older than the latest
    published, which a swap drops), so none is moved and the target prefills its context."""
    target_epoch: int = 0
    """The hosting number the target takes the trajectory under if the move happens
    (``Migrated.target_epoch``)."""


class Migrated(TrajectoryEvent, frozen=True, kw_only=True, tag="traj.migrated"):
    source_worker_id: str
    target_worker_id: str
    num_context_tokens: int = 0
    num_bytes: int = 0
    """Bytes of KV cache moved (0 when the target re-prefills)."""
    kv_transferred: bool = False
    transfer_s: float = 0.0
    target_epoch: int = 0
    """The target's hosting number (from ``MigrationRequested.target_epoch``); ``epoch`` is the
    source's, whose hosting this ends."""


class Completed(
    TrajectoryEvent, frozen=True, kw_only=True, omit_defaults=False, tag="traj.completed"
):
    """A trajectory's record for the trainer. ``HeddleClient.completions`` also hands a terminal
    ``Failed`` over as a ``Completed`` (its ``finish_reason`` and ``reason`` say why, the tokens
    are those generated before it failed), so a batch has a row for every trajectory."""

    num_steps: int
    prompt_token_ids: TokenIds = []
    response_token_ids: TokenIds = []
    """Everything after the prompt: generations and observations, in order."""
    response_logprobs: Logprobs = []
    """Aligned with response_token_ids; 0.0 at observation tokens."""
    loss_mask: LossMask = []
    """Aligned with response_token_ids: 1 for model tokens, 0 for tool tokens."""
    logprob_mask: LossMask = []
    """Aligned with response_token_ids: 1 where ``response_logprobs`` holds a logprob the engine
    returned, 0 at observation tokens and where the engine returned none (their 0.0 is no
    logprob). Empty in events written before this field."""
    reward: float = 0.0
    finish_reason: TerminalReason | FinishReason = "stop"
    """Why the trajectory ended (``heddle.events.base.TerminalReason``); events written before
    the terminal reasons may hold a generation's reason."""
    reason: str = ""
    """What went wrong, for a failure handed over as a completion ("" otherwise)."""
    num_output_tokens: int = 0
    """Tokens the model generated (sum over steps)."""
    timings: TrajectoryTimings = TrajectoryTimings()
    worker_history: list[str] = []
    num_recomputed_tokens: int = 0
    group_id: str = ""
    """The spec's group (the samples of one prompt); "" in events written before this field."""
    index: int = 0
    """The spec's index: the trajectory's position in its rollout (submission order)."""
    weight_versions: list[int] = []
    """The weight versions its generations came from, in the order first used (each step's is
    its ``Generated.weight_version``); one item unless weights changed mid-trajectory."""
    worker_id: str = ""
    """The worker that ended it (the holder of hosting ``epoch``; "" in older events)."""


class Failed(TrajectoryEvent, frozen=True, kw_only=True, omit_defaults=False, tag="traj.failed"):
    step: int
    reason: str
    worker_id: str = ""
    retryable: bool = False
    """True: not terminal, the control plane places the trajectory again."""
    finish_reason: TerminalReason = "error"
    """Why it ended, when terminal (``aborted``, ``stale``, ``tool_error`` or ``error``)."""
    group_id: str = ""
    """The spec's group ("" when the publisher did not know it, or in older events)."""
    index: int = 0
    """The spec's index (0 when ``group_id`` is "")."""
    resubmitted_as: str = ""
    """The trajectory that runs this one's slot afresh (a ``stale`` one with attempts left); its
    ``Completed`` or final ``Failed`` ends the slot instead. "" otherwise."""

    @property
    def is_final(self) -> bool:
        """Whether this ends the trajectory's slot: not re-placed (``retryable``) and not run
        afresh under another id (``resubmitted_as``)."""
        return not self.retryable and not self.resubmitted_as


TrajectoryEventT = (
    TrajectorySubmitted
    | TrajectoryPlaced
    | GenerationStarted
    | Generated
    | GenerationInterrupted
    | ToolCalled
    | ToolReturned
    | Predicted
    | Prioritized
    | Preempted
    | MigrationRequested
    | Migrated
    | Completed
    | Failed
)

TRAJECTORY_EVENTS: tuple[type[TrajectoryEvent], ...] = (
    TrajectorySubmitted,
    TrajectoryPlaced,
    GenerationStarted,
    Generated,
    GenerationInterrupted,
    ToolCalled,
    ToolReturned,
    Predicted,
    Prioritized,
    Preempted,
    MigrationRequested,
    Migrated,
    Completed,
    Failed,
)
