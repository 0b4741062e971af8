"""The one transient-error rule (``heddle.bus.transient.is_transient``): decided by exception
type and JetStream error code, never by the words of a message."""

from __future__ import annotations

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
