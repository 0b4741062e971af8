"""Hypothesis strategies for messages no consumer may accept: malformed JSON, wrong-schema
messages, valid messages on a subject they do not belong on, and oversized payloads, for every
subject family Heddle consumes. None of them is a valid message on its subject."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st
from ledger.lifecycle import everything

from heddle.events import (
    MAX_PAYLOAD_BYTES,
    Event,
    Preempt,
    Reprioritize,
    SearchTool,
    ToolCall,
    WorkerCommand,
    encode,
)
from heddle.events.subjects import (
    rollout_subject,
    subject_for_command,
    subject_for_event,
    tool_subject,
    trajectory_subject,
    worker_command_subject,
    worker_event_subject,
)

FAMILIES = ("rollout", "traj", "worker", "cmd.worker", "cmd.tool")
WORKER_IDS = ("w00", "w01")
TOOL_POOL = "default"


@dataclass(frozen=True, slots=True)
class Fuzzed:
    subject: str
    data: bytes
    kind: str
    """malformed, wrong_schema, wrong_subject or oversized."""

    @property
    def is_command(self) -> bool:
        return self.subject.startswith("heddle.cmd.")


def _commands() -> list[WorkerCommand | ToolCall]:
    return [
        Preempt(command_id="fz-p", issued_at=1.0, worker_id="w00", traj_id="t000000"),
        Reprioritize(
            command_id="fz-r", issued_at=1.0, worker_id="w01", traj_id="t000001", priority=2.0
        ),
        ToolCall(
            command_id="fz-t",
            rollout_id="fz",
            issued_at=1.0,
            traj_id="t000000",
            step=0,
            call_id="c0",
            pool=TOOL_POOL,
            request=SearchTool(query="q"),
        ),
    ]


VALID: list[Event | WorkerCommand | ToolCall] = [*everything(), *_commands()]


def subject_of(message: Event | WorkerCommand | ToolCall) -> str:
    if isinstance(message, Event):
        return subject_for_event(message)
    return subject_for_command(message)


def family_subjects(family: str) -> st.SearchStrategy[str]:
    """Well-formed subjects of one family that Heddle's consumers listen on."""
    rollouts = st.sampled_from(["r1", "r2", "fz"])
    if family == "rollout":
        kinds = st.sampled_from(["submitted", "finished", "cancelled"])
        return st.builds(rollout_subject, rollouts, kinds)
    if family == "traj":
        trajs = st.sampled_from(["t000000", "t000001"])
        kinds = st.sampled_from(["generated", "completed", "placed", "tool_returned"])
        return st.builds(trajectory_subject, rollouts, trajs, kinds)
    if family == "worker":
        kinds = st.sampled_from(["registered", "failed", "drained"])
        return st.builds(worker_event_subject, st.sampled_from(WORKER_IDS), kinds)
    if family == "cmd.worker":
        actions = st.sampled_from(["run", "preempt", "reprioritize", "abort"])
        return st.builds(worker_command_subject, st.sampled_from(WORKER_IDS), actions)
    return st.just(tool_subject(TOOL_POOL))


def _in_family(message: Event | WorkerCommand | ToolCall, family: str) -> bool:
    subject = subject_of(message)
    prefix = "heddle." + (family if family.startswith("cmd.") else f"evt.{family}") + "."
    return subject.startswith(prefix)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3)
    ),
    max_leaves=8,
)

malformed_json = st.one_of(
    st.binary(max_size=64),
    st.text(max_size=40).map(str.encode),
    json_values.map(lambda value: json.dumps(value).encode()),
    st.sampled_from([b"", b"{", b'{"kind": "traj.generated"', b"[1, 2", b"\xff\xfe"]),
)


def _wrong_type(value: Any) -> Any:
    """A JSON value no field of ``value``'s type accepts (str and number fields never take a
    list, lists and objects never take a string)."""
    return "not-this" if isinstance(value, list | dict) else [value]


@st.composite
def wrong_schema(draw: st.DrawFn, family: str) -> tuple[str, bytes]:
    """A valid message of the family with one field of the wrong type, on the message's own
    subject. Number lists (token ids, logprobs) are left alone: the
    ledger's lean decoder reads them as raw JSON without looking inside."""
    message = draw(st.sampled_from([m for m in VALID if _in_family(m, family)]))
    document = json.loads(encode(message))
    names = sorted(
        name
        for name, value in document.items()
        if name not in ("kind", "version") and value is not None and not _number_list(value)
    )
    name = draw(st.sampled_from(names))
    document[name] = _wrong_type(document[name])
    return subject_of(message), json.dumps(document).encode()


def _number_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(x, int | float) for x in value)


@st.composite
def wrong_subject(draw: st.DrawFn, family: str) -> tuple[str, bytes]:
    """A valid message of the family on another subject of the same family."""
    message = draw(st.sampled_from([m for m in VALID if _in_family(m, family)]))
    subject = draw(family_subjects(family).filter(lambda s: s != subject_of(message)))
    return subject, encode(message)


def fuzzed(family: str) -> st.SearchStrategy[Fuzzed]:
    """Any message of the four kinds for ``family`` (oversized ones are over the codec's and
    the embedded server's limit)."""
    subjects = family_subjects(family)
    oversized = st.builds(
        lambda subject, extra: Fuzzed(subject, b" " * (MAX_PAYLOAD_BYTES + extra), "oversized"),
        subjects,
        st.integers(1, 1024),
    )
    kinds: list[st.SearchStrategy[Fuzzed]] = [
        st.builds(lambda s, d: Fuzzed(s, d, "malformed"), subjects, malformed_json),
        wrong_schema(family).map(lambda pair: Fuzzed(*pair, "wrong_schema")),
        oversized,
    ]
    if family != "cmd.tool":  # one tool pool: no other subject of the family to misuse
        kinds.append(wrong_subject(family).map(lambda pair: Fuzzed(*pair, "wrong_subject")))
    return st.one_of(kinds)


any_fuzzed = st.sampled_from(FAMILIES).flatmap(fuzzed)
