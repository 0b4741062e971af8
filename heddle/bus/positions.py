"""Consumer positions kept apart from the durables themselves: a JetStream key-value bucket,
``heddle-positions``, one key per durable, the last stream sequence whose outputs are stored.

A durable holds its own position (its ack floor); when it disappears (an operator deleted it,
or the server lost it) while its process is down, that position goes with it, and a process
that then adopted the stream's end would skip every event published meanwhile. The control
plane records its position here as it goes (heddle/controlplane/host.py), and recreates a missing
durable from it. Only the control plane and operators may write the bucket
(heddle/deploy/roles.py).
"""

from __future__ import annotations

from nats.js import JetStreamContext, api
from nats.js.errors import BucketNotFoundError, KeyNotFoundError, NotFoundError
from nats.js.kv import KeyValue

POSITIONS_BUCKET = "heddle-positions"


class Positions:
    def __init__(self, js: JetStreamContext, num_replicas: int = 1) -> None:
        self._js = js
        self._num_replicas = num_replicas
        self._bucket: KeyValue | None = None

    async def _open(self, *, create: bool) -> KeyValue | None:
        if self._bucket is None:
            try:
                self._bucket = await self._js.key_value(POSITIONS_BUCKET)
            except BucketNotFoundError:
                if not create:
                    return None
                config = api.KeyValueConfig(
                    bucket=POSITIONS_BUCKET,
                    history=1,
                    storage=api.StorageType.FILE,
                    replicas=self._num_replicas,
                )
                self._bucket = await self._js.create_key_value(config)
        return self._bucket

    async def record(self, durable: str, position: int) -> None:
        """Record that ``durable``'s outputs are stored up to stream sequence ``position``."""
        bucket = await self._open(create=True)
        assert bucket is not None
        await bucket.put(durable, str(position).encode())

    async def recorded(self, durable: str) -> int | None:
        """The position last recorded for ``durable``; None when none was."""
        bucket = await self._open(create=False)
        if bucket is None:
            return None
        try:
            entry = await bucket.get(durable)
        except (KeyNotFoundError, NotFoundError):
            return None
        return int(entry.value or b"0")

    async def forget(self, durable: str) -> None:
        """Drop ``durable``'s record (its run is over: a later durable of that name starts
        afresh)."""
        bucket = await self._open(create=False)
        if bucket is not None:
            await bucket.purge(durable)
