"""Watching worker commands as they are published (core NATS, no consumer, nothing acked).

For operators' tools and benchmarks that need to see a command the moment it is stored, e.g.
``heddle bench fidelity`` timing a step event to the command it causes. Commands published while
nobody watches are not replayed: read ``HEDDLE_CMDS`` for history.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from heddle.events import WorkerCommandT, decode_worker_command
from heddle.events.subjects import COMMANDS_SUBJECTS, worker_command_subject

log = logging.getLogger(__name__)

CommandHandler = Callable[[WorkerCommandT], None]


class CommandWatch:
    """Calls a (synchronous) handler for each worker command; undecodable ones are dropped."""

    def __init__(self, handler: CommandHandler) -> None:
        self._handler = handler
        self._subscription: Subscription | None = None
        self.num_dropped = 0

    async def open(self, client: Client, worker_id: str = "*") -> CommandWatch:
        subject = COMMANDS_SUBJECTS if worker_id == "*" else worker_command_subject(worker_id)
        self._subscription = await client.subscribe(subject, cb=self._receive)
        return self

    async def close(self) -> None:
        subscription, self._subscription = self._subscription, None
        if subscription is not None:
            await subscription.unsubscribe()

    async def _receive(self, msg: Msg) -> None:
        try:
            command = decode_worker_command(msg.data)
        except ValueError as exc:
            self.num_dropped += 1
            log.debug("dropped a command on %s: %s", msg.subject, exc)
            return
        self._handler(command)
