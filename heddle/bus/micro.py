"""NATS micro services (ADR-32: ``nats micro ls|info|stats``, ``nats req``) and their clients.

``serve_service(bus, name, version, description, endpoints)`` registers a service on the bus's
connection through nats-py's ``nats.micro``: each ``Endpoint`` answers requests on
``<subject>``; its handler gets the request body and headers and returns the reply body, or
raises ``ServiceRefusal`` to answer with the standard error headers (``Nats-Service-Error``, the
message; ``Nats-Service-Error-Code``, the code) and a JSON body ``{"error": ..., "code": ...}``.
An unexpected exception answers code 500 and is logged; the service keeps serving.

``request(bus, subject, body)`` is the client side: the reply body, or ``ServiceRefusal``
when the reply carries the error headers.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

import msgspec
from nats.aio.msg import Msg
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout
from nats.micro import add_service
from nats.micro.request import ERROR_CODE_HEADER, ERROR_HEADER, Request
from nats.micro.service import EndpointConfig, Service, ServiceConfig

from heddle.bus.bus import Bus
from heddle.bus.connection import PermissionDenied

log = logging.getLogger(__name__)

ServiceHandle = Service
"""A running service: ``await handle.stop()``; ``handle.info()``, ``handle.stats()``."""
RequestHandler = Callable[[bytes, Mapping[str, str]], Awaitable[bytes]]
"""Request body and headers -> reply body."""
SubjectHandler = Callable[[str, bytes, Mapping[str, str]], Awaitable[bytes]]
"""Subject the request came on, body and headers -> reply body (an endpoint whose subject has
a wildcard: the subject says who or what the request is for)."""


class ServiceRefusal(Exception):
    """A request the service refuses: ``code`` (a number as text, HTTP-like) and a message."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class ServiceUnavailable(Exception):
    """Nobody answers on the subject (no service), or not within the timeout."""


@dataclass(frozen=True, slots=True)
class Endpoint:
    name: str
    """Endpoint name shown by ``nats micro info`` (letters, digits, ``-``, ``_``)."""
    subject: str
    handler: RequestHandler | None = None
    description: str = ""
    is_concurrent: bool = False
    """Answer each request in its own task: the next request is taken while this one waits
    (nats-py hands a subscription's messages to its callback one at a time), so a handler that
    batches requests sees more than one."""
    subject_handler: SubjectHandler | None = None
    """Used instead of ``handler``: it also gets the subject the request came on."""

    async def answer(self, request: Request) -> bytes:
        headers = request.headers or {}
        if self.subject_handler is not None:
            return await self.subject_handler(request.subject, request.data, headers)
        if self.handler is None:
            raise RuntimeError(f"endpoint {self.name} has no handler")
        return await self.handler(request.data, headers)


async def serve_service(
    bus: Bus, name: str, version: str, description: str, endpoints: Sequence[Endpoint]
) -> Service:
    """Start the service on the bus's connection; ``await service.stop()`` to end it."""
    service = await add_service(
        bus.client, ServiceConfig(name=name, version=version, description=description)
    )
    for endpoint in endpoints:
        await service.add_endpoint(
            EndpointConfig(
                name=endpoint.name,
                subject=endpoint.subject,
                handler=_wrap(endpoint),
                metadata={"description": endpoint.description} if endpoint.description else None,
            )
        )
    return service


def _wrap(endpoint: Endpoint) -> Callable[[Request], Awaitable[None]]:
    in_flight: set[asyncio.Task[None]] = set()

    async def start(request: Request) -> None:
        task = asyncio.create_task(handle(request))
        in_flight.add(task)
        task.add_done_callback(in_flight.discard)

    async def handle(request: Request) -> None:
        try:
            reply = await endpoint.answer(request)
        except ServiceRefusal as refusal:
            await _refuse(request, refusal.code, refusal.message)
            return
        except Exception as exc:
            log.exception("service endpoint %s failed", endpoint.name)
            await _refuse(request, "500", f"internal error: {exc!r}")
            return
        await request.respond(reply)

    return start if endpoint.is_concurrent else handle


async def _refuse(request: Request, code: str, message: str) -> None:
    body = msgspec.json.encode({"error": message, "code": int(code)})
    await request.respond_error(code, message, data=body)


async def request(bus: Bus, subject: str, body: bytes, timeout_s: float = 5.0) -> bytes:
    """Send one request; the reply body, ``ServiceRefusal`` for an error reply,
    ``PermissionDenied`` when the server refused this credential the subject (the request
    then gets no reply: it is not worth asking again)."""
    try:
        reply = await _answered(bus, subject, body, timeout_s)
    except NoRespondersError:
        raise ServiceUnavailable(f"no service answers on {subject}") from None
    except NatsTimeout:
        raise ServiceUnavailable(f"no reply on {subject} within {timeout_s:g} s") from None
    headers = reply.headers or {}
    if ERROR_CODE_HEADER in headers:
        raise ServiceRefusal(headers[ERROR_CODE_HEADER], headers.get(ERROR_HEADER, ""))
    return reply.data


_DENIAL_CHECK_S = 0.1


async def _answered(bus: Bus, subject: str, body: bytes, timeout_s: float) -> Msg:
    """The reply; ``PermissionDenied`` as soon as the server reports the request refused (a
    denied request is dropped, and would otherwise wait out its timeout)."""
    pending = asyncio.ensure_future(bus.client.request(subject, body, timeout=timeout_s))
    try:
        while True:
            done, _ = await asyncio.wait({pending}, timeout=_DENIAL_CHECK_S)
            if done:
                return pending.result()
            for violation in bus.violations:
                if violation.operation == "publish" and violation.subject == subject:
                    raise PermissionDenied(violation.message())
    finally:
        if not pending.done():
            pending.cancel()
