"""The one transient-error rule (``heddle.bus.transient.is_transient``): decided by exception
type and JetStream error code, never by the words of a message."""

from __future__ import annotations

import asyncio

import nats.errors
import pytest
from nats.js.errors import APIError, NotFoundError, ServiceUnavailableError

from heddle.bus import PermissionDenied, PublishDenied, PublishError
from heddle.bus.publisher import PayloadTooLarge
from heddle.bus.transient import is_transient

TRANSIENT = [
    TimeoutError(),
    ConnectionError("reset"),
    OSError("network unreachable"),
    nats.errors.TimeoutError(),
    nats.errors.NoRespondersError(),
    nats.errors.ConnectionReconnectingError(),
    nats.errors.StaleConnectionError(),
    nats.errors.OutboundBufferLimitError(),
    ServiceUnavailableError(),
    APIError(code=503, err_code=10008, description="JetStream system temporarily unavailable"),
    PublishError("heddle.evt.x", "not acknowledged: no acknowledgement within 5.0 s"),
]
LASTING = [
    PublishDenied("heddle.cmd.worker.w01.migrate_in", "permissions violation"),
    PermissionDenied("subscription to heddle.evt.> refused"),
    PayloadTooLarge("heddle.evt.x", "payload of 9999999 bytes exceeds the server limit"),
    PublishError("heddle.evt.x", "maximum messages per subject exceeded", err_code=10077 + 1),
    NotFoundError(code=404, err_code=10059, description="stream not found"),
    nats.errors.ConnectionClosedError(),
    ValueError("a connection timeout that reconnects with no responders"),
    RuntimeError("timeout"),
]


@pytest.mark.parametrize("error", TRANSIENT, ids=lambda error: type(error).__name__)
def test_connection_trouble_and_unacknowledged_publishes_pass(error: Exception) -> None:
    assert is_transient(error)


@pytest.mark.parametrize("error", LASTING, ids=lambda error: type(error).__name__)
def test_refusals_rejections_and_bugs_do_not_pass(error: Exception) -> None:
    """The last two carry the words the worker's old rule matched ("timeout", "connection",
    "no responders", "reconnect"): a bug's message does not make it worth retrying."""
    assert not is_transient(error)


def test_counting_stored_messages_asks_again_after_a_timeout() -> None:
    """A loaded server may time out a stream-info request: the count is asked again, not
    raised to the caller (a trainer asking whether its rollout ended)."""
    from types import SimpleNamespace

    from heddle.bus.state import num_matching_messages

    calls: list[str] = []

    class SlowOnce:
        async def stream_info(self, stream: str, subjects_filter: str) -> SimpleNamespace:
            calls.append(subjects_filter)
            if len(calls) == 1:
                raise nats.errors.TimeoutError
            return SimpleNamespace(state=SimpleNamespace(subjects={"a.1": 2, "a.2": 3}))

    count = asyncio.run(num_matching_messages(SlowOnce(), "S", "a.*"))  # type: ignore[arg-type]
    assert count == 5
    assert calls == ["a.*", "a.*"]
