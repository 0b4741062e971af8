"""Base structs of the event contract.

Every event and command is a frozen, keyword-only msgspec struct tagged by ``kind``. Tags are
``<family>.<kind>`` (``traj.generated``); the part after the dot is the last subject token.
Rules: past-tense names for events, imperative for commands; new fields get defaults;
tags are never reordered or reused.

Trajectory step and decision events (every ``traj.*`` kind but ``traj.completed`` and
``traj.failed``) and commands leave out the fields that hold their defaults (msgspec's
``omit_defaults``, after ``heddle.events.codec`` makes equal values the default objects):
they are most of the stream's messages, and a reader fills the defaults in.
``kind``, the id, the time and ``version`` are always written, and so is every field of the
records a trainer reads (``traj.completed``, ``traj.failed``, ``rollout.*``, ``worker.*``,
``weights.*``).
"""

from __future__ import annotations

from typing import ClassVar, Literal

import msgspec

SCHEMA_VERSION = 1

FinishReason = Literal["stop", "length", "abort", "tool_call", "error"]
"""Why one generation stopped (``Generated.finish_reason``, the engine's answer): ``stop`` (a
stop token), ``length`` (its token cap), ``abort`` (the engine dropped it)."""
TerminalReason = Literal[
    "stop", "length", "max_steps", "environment_done", "tool_error", "aborted", "stale", "error"
]
"""Why a trajectory ended, on its terminal event (``Completed`` or a non-retryable ``Failed``):

- ``stop``: the model stopped by itself (stop token) and the environment ended the trajectory;
- ``length``: truncated by a token cap: the last generation hit ``max_new_tokens``, or the
  context reached ``max_total_tokens``, or the response reached ``max_response_tokens``;
- ``max_steps``: truncated at ``max_steps`` generations;
- ``environment_done``: the environment ended it after an observation, with no generation since;
- ``tool_error``: failed while the environment read a tool's result;
- ``aborted``: aborted by an operator or a cancelled rollout;
- ``stale``: its next generation would have run on weights more than the spec's
  ``max_staleness`` versions newer than its oldest tokens, on its last attempt (earlier
  attempts are run afresh under another id: ``Failed.resubmitted_as``);
- ``error``: any other failure (a bad task, a bad prompt, the engine).

Truncated trajectories (``length``, ``max_steps``) and finished ones (``stop``,
``environment_done``) both come as ``Completed``; ``tool_error``, ``aborted``, ``stale`` and
``error`` as a non-retryable ``Failed``. When a trajectory ends right after a generation, its
terminal reason is ``length`` exactly when that generation's ``Generated.finish_reason`` is
``length``, or when a trajectory-level cap (``max_total_tokens``, ``max_response_tokens``) was
reached."""
ToolStatus = Literal["ok", "error", "timeout", "killed"]


class Message(msgspec.Struct, frozen=True, kw_only=True, tag_field="kind"):
    """Common ancestor of events and commands."""

    family: ClassVar[str] = ""

    @classmethod
    def kind_name(cls) -> str:
        """The subject token for this kind: the tag after its family prefix."""
        tag = cls.__struct_config__.tag
        assert isinstance(tag, str), f"{cls.__name__} has no string tag"
        return tag.split(".", 1)[1]


def _schema_version() -> int:
    return SCHEMA_VERSION


_VERSION = msgspec.field(default_factory=_schema_version)
"""The schema version of a message: a factory default, so that a message that leaves out its
defaults still writes it (a reader of a later schema must not take an old message for its own
version)."""


class Event(Message, frozen=True, kw_only=True):
    """An immutable fact. ``event_id`` is deterministic (see ``heddle.ids.derive_id``)."""

    event_id: str
    rollout_id: str = ""
    occurred_at: float
    """Unix time in seconds when the fact happened (the publisher's clock)."""
    version: int = _VERSION


class Command(Message, frozen=True, kw_only=True, omit_defaults=True):
    """An instruction to a worker or a tool executor. ``command_id`` is deterministic."""

    command_id: str
    rollout_id: str = ""
    issued_at: float
    version: int = _VERSION


class SamplingParams(msgspec.Struct, frozen=True, kw_only=True):
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    """Per-trajectory seed; engines derive each step's seed from it and the step index."""


class TrajectoryTimings(msgspec.Struct, frozen=True, kw_only=True):
    """Where a trajectory's time went, in seconds of model time (wall time x time scale)."""

    queue_s: float = 0.0
    prefill_s: float = 0.0
    decode_s: float = 0.0
    tool_s: float = 0.0
    migration_s: float = 0.0
    total_s: float = 0.0
