"""Blob storage on the JetStream object store (buckets ``heddle-kv``: exported KV caches;
``heddle-payloads``: number arrays too large for their event, see ``heddle.bus.payloads``).

Objects are split into 128 KiB chunks by the object store, so a blob may exceed the server's
message size limit; the store checks a SHA-256 digest on read.
"""

from __future__ import annotations

import base64
import hashlib
import io

from nats.js import JetStreamContext, api
from nats.js.errors import BucketNotFoundError, NotFoundError
from nats.js.object_store import ObjectStore

KV_BUCKET = "heddle-kv"
PAYLOADS_BUCKET = "heddle-payloads"


class ObjectNotFound(KeyError):
    """No object of that key in the bucket."""


class Objects:
    """Put, get and delete blobs in one object-store bucket (created on first use)."""

    def __init__(
        self,
        js: JetStreamContext,
        bucket: str = KV_BUCKET,
        num_replicas: int = 1,
        max_age_s: float = 0.0,
    ):
        """``max_age_s``: how long the bucket keeps an object after it was written (0: until
        deleted); applies when this creates the bucket."""
        self._js = js
        self.bucket = bucket
        self._num_replicas = num_replicas
        self._max_age_s = max_age_s
        self._store: ObjectStore | None = None

    async def _open(self) -> ObjectStore:
        if self._store is None:
            try:
                self._store = await self._js.object_store(self.bucket)
            except BucketNotFoundError:
                config = api.ObjectStoreConfig(
                    bucket=self.bucket,
                    storage=api.StorageType.FILE,
                    replicas=self._num_replicas,
                    ttl=self._max_age_s or None,
                )
                self._store = await self._js.create_object_store(self.bucket, config=config)
        return self._store

    async def put(self, key: str, data: bytes) -> int:
        """Store ``data`` under ``key`` (replacing an older object); returns its size."""
        store = await self._open()
        info = await store.put(key, data)
        return int(info.size or 0)

    async def put_once(self, key: str, data: bytes) -> int:
        """``put``, unless the bucket holds exactly ``data`` under ``key`` already (a retried
        publish offloads the same arrays again): an object is then never replaced, which would
        purge its chunks, so a writer needs no purge permission (heddle/deploy/roles.py)."""
        store = await self._open()
        try:
            info = await store.get_info(key)
        except NotFoundError:
            info = None
        if info is not None and info.size == len(data) and info.digest == _digest(data):
            return len(data)
        return int((await store.put(key, data)).size or 0)

    async def get(self, key: str) -> bytes:
        """The object's bytes; ``ObjectNotFound`` when absent."""
        store = await self._open()
        buffer = io.BytesIO()
        try:
            await store.get(key, writeinto=buffer)
        except NotFoundError:
            raise ObjectNotFound(key) from None
        return buffer.getvalue()

    async def size(self, key: str) -> int:
        """The object's size in bytes, read from its metadata; ``ObjectNotFound`` when absent."""
        store = await self._open()
        try:
            info = await store.get_info(key)
        except NotFoundError:
            raise ObjectNotFound(key) from None
        return int(info.size or 0)

    async def delete(self, key: str) -> None:
        """Remove the object; ``ObjectNotFound`` when absent."""
        store = await self._open()
        try:
            await store.delete(key)
        except NotFoundError:
            raise ObjectNotFound(key) from None

    async def names(self, prefix: str = "") -> list[str]:
        """Names of the bucket's objects that start with ``prefix``."""
        store = await self._open()
        try:
            infos = await store.list(ignore_deletes=True)
        except NotFoundError:
            return []  # an empty bucket
        return [info.name for info in infos if info.name.startswith(prefix)]


def _digest(data: bytes) -> str:
    """The object store's digest of ``data`` (``ObjectInfo.digest``)."""
    return "SHA-256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode()
