"""Checking a submission against the deployment, and the events that open its rollout (pure).

The operations service (``heddle.controlplane.submissions``) refuses a bad submission before any
event of it exists, with ``RequestRefused`` naming the trajectory and the field: the rollout
then never exists, rather than existing in part (a trajectory dead-lettered later would leave
its rollout waiting forever). What is checked, beyond the strict decoding of ``submit_requests``:

- the rollout: its id (a subject token), a known policy, 1 to ``MAX_TRAJECTORIES``
  trajectories in index order, bounded labels; its time scale, which is the deployment's
  (``DeploymentLimits.time_scales``, from the workers' registrations: another one is refused,
  since every figure of the rollout would be off by their ratio);
- each spec: numbers in range (steps, token caps, attempts, sampling), a valid tool pool, token
  ids that are int32 and inline, a prompt that fits the models' context
  (``DeploymentLimits.max_context_tokens``) and its own ``max_total_tokens``, and fields besides
  its token arrays that fit one event (``max_event_bytes``: only arrays move to the object
  store). Its ``task`` is its environment's to check (the service is given that check).

``submission_events``: ``RolloutSubmitted`` (with the trainer that owns it) and one
``TrajectorySubmitted`` per spec, ids derived from the rollout's, so a retry stores nothing twice.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import msgspec

from heddle.control.ops_requests import RequestRefused
from heddle.control.submit_requests import SubmitRequest
from heddle.control.systems import SYSTEMS
from heddle.events import Event, RolloutSubmitted, TrajectorySpec, TrajectorySubmitted, encode
from heddle.events.arrays import unresolved
from heddle.ids import check_token, derive_id, trajectory_id

MAX_TRAJECTORIES = 100_000
MAX_STEPS = 100_000
MAX_TOKENS = 2**31 - 1
"""Token counts and ids are int32 on the wire and in the engines."""
MAX_ATTEMPTS = 100
MAX_LABELS = 64
MAX_TEXT_CHARS = 1024
"""Longest label key or value, source, group id."""
MAX_SEED = 2**63 - 1
CHAT_ROLES = frozenset({"system", "user", "assistant", "tool"})


@dataclass(frozen=True, slots=True)
class DeploymentLimits:
    """What the deployment takes, as the control plane knows it (``OperationsView.limits``)."""

    time_scales: tuple[float, ...] = ()
    """The distinct time scales of the live registered workers (empty: none registered)."""
    max_context_tokens: int = 0
    """The smallest context a live worker's model takes (0: none says)."""
    max_event_bytes: int = 256 * 1024
    """The bus's event limit: a spec's fields besides its token arrays must fit in it."""


def check_submission(request: SubmitRequest, limits: DeploymentLimits) -> float:
    """The time scale the rollout runs at; ``RequestRefused`` naming the first problem otherwise."""
    _check_rollout(request)
    time_scale = _time_scale(request.time_scale, limits.time_scales)
    for position, spec in enumerate(request.trajectories):
        problem = spec_problem(spec, position, limits)
        if problem is not None:
            raise RequestRefused(
                400, f"trajectory {position} ({trajectory_id(position)}): {problem}"
            )
    return time_scale


def _check_rollout(request: SubmitRequest) -> None:
    try:
        check_token(request.rollout_id, "rollout id")
    except ValueError as exc:
        raise RequestRefused(400, str(exc)) from None
    if request.policy not in SYSTEMS:
        raise RequestRefused(
            400, f"unknown policy {request.policy!r}; choose one of {', '.join(SYSTEMS)}"
        )
    if not 1 <= len(request.trajectories) <= MAX_TRAJECTORIES:
        raise RequestRefused(
            400, f"a rollout has 1 to {MAX_TRAJECTORIES} trajectories, not "
            f"{len(request.trajectories)}"
        )  # fmt: skip
    if len(request.labels) > MAX_LABELS or any(
        len(k) > MAX_TEXT_CHARS or len(v) > MAX_TEXT_CHARS for k, v in request.labels.items()
    ):
        raise RequestRefused(
            400, f"labels: at most {MAX_LABELS}, each under {MAX_TEXT_CHARS} chars"
        )
    if len(request.source) > MAX_TEXT_CHARS:
        raise RequestRefused(400, f"source: at most {MAX_TEXT_CHARS} characters")


def _time_scale(requested: float | None, deployed: tuple[float, ...]) -> float:
    if requested is not None and not (math.isfinite(requested) and requested > 0):
        raise RequestRefused(400, f"time_scale must be a finite number > 0, not {requested}")
    if len(deployed) > 1 and requested not in deployed:
        scales = ", ".join(f"{s:g}" for s in sorted(deployed))
        raise RequestRefused(409, f"the workers run at different time scales ({scales}): name one")
    if deployed and requested is not None and requested not in deployed:
        raise RequestRefused(
            409, f"time_scale {requested:g} differs from the deployment's {deployed[0]:g} (its "
            "workers' registrations): leave it out to take the deployment's"
        )  # fmt: skip
    if requested is not None:
        return requested
    return deployed[0] if deployed else 1.0


def spec_problem(spec: TrajectorySpec, position: int, limits: DeploymentLimits) -> str | None:
    """The first thing wrong with the spec at ``position``, as 'field: reason', or None."""
    return (
        _identity_problem(spec, position)
        or _cap_problem(spec)
        or _prompt_problem(spec, limits)
        or _sampling_problem(spec)
        or _size_problem(spec, limits)
    )


def _identity_problem(spec: TrajectorySpec, position: int) -> str | None:
    if spec.index != position:
        return f"index: {spec.index}, but it is trajectory {position} (specs go in index order)"
    if not spec.group_id or len(spec.group_id) > MAX_TEXT_CHARS:
        return f"group_id: 1 to {MAX_TEXT_CHARS} characters"
    if not spec.environment:
        return "environment: must be named"
    try:
        check_token(spec.tool_pool, "tool pool")
    except ValueError as exc:
        return f"tool_pool: {exc}"
    if spec.attempt != 0:
        return "attempt: must be 0 (the control plane counts resubmissions)"
    if not 1 <= spec.max_attempts <= MAX_ATTEMPTS:
        return f"max_attempts: must be in [1, {MAX_ATTEMPTS}]"
    if spec.max_staleness is not None and not 0 <= spec.max_staleness <= MAX_TOKENS:
        return "max_staleness: must be >= 0 (or null: no bound)"
    return None


def _cap_problem(spec: TrajectorySpec) -> str | None:
    if not 1 <= spec.max_steps <= MAX_STEPS:
        return f"max_steps: must be in [1, {MAX_STEPS}]"
    if not 1 <= spec.max_new_tokens <= MAX_TOKENS:
        return f"max_new_tokens: must be in [1, {MAX_TOKENS}]"
    if not 1 <= spec.max_total_tokens <= MAX_TOKENS:
        return f"max_total_tokens: must be in [1, {MAX_TOKENS}]"
    if spec.max_response_tokens is not None and not 1 <= spec.max_response_tokens <= MAX_TOKENS:
        return f"max_response_tokens: must be in [1, {MAX_TOKENS}] (or null: no cap)"
    return None


def _prompt_problem(spec: TrajectorySpec, limits: DeploymentLimits) -> str | None:
    ids = spec.prompt_token_ids
    if unresolved(ids) is not None:
        return "prompt_token_ids: must be inline (upload a large submission whole instead)"
    if ids and not 0 <= min(ids) <= max(ids) <= MAX_TOKENS:
        return f"prompt_token_ids: ids must be in [0, {MAX_TOKENS}]"
    if len(ids) >= spec.max_total_tokens:
        return (
            f"prompt_token_ids: the prompt's {len(ids)} tokens leave no room under "
            f"max_total_tokens {spec.max_total_tokens}"
        )
    if limits.max_context_tokens and len(ids) >= limits.max_context_tokens:
        return (
            f"prompt_token_ids: the prompt's {len(ids)} tokens do not fit the model's context "
            f"of {limits.max_context_tokens} tokens (the workers' registrations)"
        )
    for index, message in enumerate(spec.messages):
        if message.role not in CHAT_ROLES:
            return f"messages[{index}].role: one of {', '.join(sorted(CHAT_ROLES))}"
    return None


def _sampling_problem(spec: TrajectorySpec) -> str | None:
    sampling = spec.sampling
    if not (math.isfinite(sampling.temperature) and sampling.temperature >= 0):
        return "sampling.temperature: must be a finite number >= 0"
    if not (math.isfinite(sampling.top_p) and 0 < sampling.top_p <= 1):
        return "sampling.top_p: must be in (0, 1]"
    if sampling.seed is not None and not -MAX_SEED <= sampling.seed <= MAX_SEED:
        return "sampling.seed: must fit a signed 64-bit integer"
    return None


def _size_problem(spec: TrajectorySpec, limits: DeploymentLimits) -> str | None:
    """Only token arrays move to the object store: the rest of the event must fit one message."""
    bare = msgspec.structs.replace(spec, prompt_token_ids=[])
    event = TrajectorySubmitted(event_id="", rollout_id="", occurred_at=0.0, traj_id="", spec=bare)
    num_bytes = len(encode(event))
    if num_bytes > limits.max_event_bytes:
        return (
            f"its fields besides prompt_token_ids take {num_bytes} bytes, more than one event "
            f"holds ({limits.max_event_bytes}): shorten the task or the messages"
        )
    return None


def submission_events(
    request: SubmitRequest, *, trainer: str, time_scale: float, now: float
) -> list[Event]:
    """``RolloutSubmitted`` then every ``TrajectorySubmitted``, with derived ids."""
    rollout_id = request.rollout_id
    events: list[Event] = [
        RolloutSubmitted(
            event_id=derive_id(rollout_id, "submitted"),
            rollout_id=rollout_id,
            occurred_at=now,
            policy=request.policy,
            num_trajectories=len(request.trajectories),
            source=request.source,
            time_scale=time_scale,
            labels=dict(request.labels),
            trainer=trainer,
        )
    ]
    for spec in request.trajectories:
        traj_id = trajectory_id(spec.index)
        events.append(
            TrajectorySubmitted(
                event_id=derive_id(rollout_id, traj_id, "submitted"),
                rollout_id=rollout_id,
                occurred_at=now,
                traj_id=traj_id,
                spec=spec,
            )
        )
    return events
