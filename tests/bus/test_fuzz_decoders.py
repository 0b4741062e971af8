"""Every decoder a consumer uses refuses fuzzed messages the way the runners need: with
``ValueError`` (dead-lettered with its text as the reason), or, for a valid message on a subject
it does not belong on, with a subject mismatch (dead-lettered too). Any other exception would
stop the consumer."""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import given, settings

from bus.fuzz_strategies import VALID, Fuzzed, any_fuzzed, subject_of
from heddle.controlplane.decider_decoders import decode_for_deciders, decode_for_placement
from heddle.events import decode_event, decode_tool_call, decode_worker_command, encode
from heddle.events.subjects import subject_mismatch
from heddle.ledger.lean_decoder import decode_event_lean

EVENT_DECODERS: tuple[Callable[[bytes], object], ...] = (
    decode_event,
    decode_event_lean,
    decode_for_deciders,
    decode_for_placement,
)


def decoders_of(message: Fuzzed) -> tuple[Callable[[bytes], object], ...]:
    if message.subject.startswith("heddle.cmd.worker."):
        return (decode_worker_command,)
    if message.subject.startswith("heddle.cmd.tool."):
        return (decode_tool_call,)
    return EVENT_DECODERS


def refusal(decode: Callable[[bytes], object], message: Fuzzed) -> str | None:
    """The dead-letter reason a runner would give; None when the message would be accepted."""
    try:
        decoded = decode(message.data)
    except ValueError as exc:
        return str(exc)
    return subject_mismatch(message.subject, decoded)


@settings(max_examples=150)
@given(any_fuzzed)
def test_every_consumer_decoder_refuses_fuzzed_messages(message: Fuzzed) -> None:
    for decode in decoders_of(message):
        reason = refusal(decode, message)
        assert reason, (decode, message.kind, message.subject, message.data[:200])


def test_valid_messages_on_their_own_subjects_are_accepted() -> None:
    """The check above could pass by refusing everything: valid messages still get through."""
    for message in VALID:
        fuzzed = Fuzzed(subject_of(message), encode(message), "valid")
        for decode in decoders_of(fuzzed):
            assert refusal(decode, fuzzed) is None, (decode, fuzzed.subject)
