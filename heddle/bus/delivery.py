"""What a consumer handler receives, and how it says what went wrong.

A handler gets ``Delivery`` values (the decoded message plus its delivery metadata). It signals
problems with exceptions or rejections, never by acking itself:

- raise ``TransientError`` (a database that is briefly locked, a service that is restarting):
  the messages are negatively acknowledged and redelivered after the consumer's ``nak_delay_s``;
- reject a message (``Rejection`` from a batch handler, ``InvalidMessage`` from a message handler)
  when it can never be processed: it is published as a ``DeadLettered`` event on
  ``heddle.evt.deadletter.<role>`` (the consumer's role) with the reason, then terminated; the
  rest of the work continues.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import msgspec

T = TypeVar("T")


class Delivery(msgspec.Struct, Generic[T], frozen=True):
    """One delivered message, decoded by the consumer's channel decoder (a msgspec struct:
    built per message, so it must be cheap)."""

    message: T
    subject: str
    stream_sequence: int
    num_delivered: int
    """1 on first delivery; more after naks, timeouts or a crashed consumer."""
    num_pending: int
    """Messages the consumer still had to deliver after this one (lag)."""
    data: bytes
    """The raw payload (for logging and dead letters)."""
    ack_subject: str
    """Where acknowledgements go; used by the runner only."""
    stored_at: float = 0.0
    """Wall seconds (the server's clock) when the stream stored it; 0.0 when unknown."""
    received_at: float = 0.0
    """``time.perf_counter()`` when this process received it; 0.0 when unknown."""


class TransientError(Exception):
    """Raised by a handler for a failure that a later retry can fix; the messages are redelivered
    after the consumer's ``nak_delay_s``.

    ``resume_sequence``, for in-order (``ack_all``) consumers only: the stream sequence to
    rewind to instead of the batch's first (a projector whose stored position lies before the
    batch resumes right after it)."""

    def __init__(self, message: str, *, resume_sequence: int | None = None) -> None:
        super().__init__(message)
        self.resume_sequence = resume_sequence


class InvalidMessage(Exception):
    """Raised by a message handler for a message that can never be processed; it is
    dead-lettered with ``reason`` and terminated."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Rejection:
    """Returned by a batch handler for a message of the batch that it refused as invalid."""

    delivery: Delivery[Any]
    reason: str


Decoder = Callable[[bytes], T]
"""Turns a payload into a message; raises ``ValueError`` (``heddle.events.DecodeError``) when it
is not a valid message of the channel."""
BatchHandler = Callable[[list[Delivery[T]]], Awaitable[Sequence[Rejection] | None]]
"""Processes a batch (in stream order); acked when it returns, except the rejections."""
MessageHandler = Callable[[Delivery[T]], Awaitable[None]]
"""Processes one message; acked when it returns."""
