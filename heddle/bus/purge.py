"""Removing what a training run no longer needs from JetStream (``heddle.lifecycle.purge``): a
subject's messages up to a sequence, durable consumers, and the names needed to find them.

``purge_subject`` asks the server to drop the messages of one subject filter whose sequence is
below ``below_sequence``: a purged rollout never loses an event that arrived after the ledger
snapshot that replaces it. Streams and consumers are listed by name for the clean-up of what a
rollout left behind (trainers' durables, per-trainer delivery streams).
"""

from __future__ import annotations

from nats.js.errors import BucketNotFoundError, NotFoundError

from heddle.bus.bus import Bus
from heddle.bus.objects import ObjectNotFound, Objects
from heddle.bus.transient import retry_transient


async def purge_subject(
    bus: Bus, stream: str, subject: str, below_sequence: int | None = None
) -> None:
    """Delete ``stream``'s messages on ``subject`` (wildcards allowed) with a sequence below
    ``below_sequence`` (>= 2; None: all of them)."""
    if below_sequence is not None and below_sequence < 2:
        raise ValueError(f"nothing lies below sequence {below_sequence}")
    await retry_transient(
        lambda: bus.js.purge_stream(stream, seq=below_sequence, subject=subject),
        f"purge {subject} of {stream}",
    )


async def count_messages(bus: Bus, stream: str, subject: str) -> int:
    """How many messages ``stream`` holds on ``subject`` (wildcards allowed)."""
    try:
        info = await bus.js.stream_info(stream, subjects_filter=subject)
    except NotFoundError:
        return 0
    return sum((info.state.subjects or {}).values())


async def stream_names(bus: Bus, prefix: str) -> list[str]:
    """The streams whose name starts with ``prefix``."""
    infos = await bus.js.streams_info()
    names = [info.config.name or "" for info in infos]
    return sorted(name for name in names if name.startswith(prefix))


async def consumer_names(bus: Bus, stream: str) -> list[str]:
    """The durable consumers of ``stream`` ([] when the stream does not exist)."""
    try:
        infos = await bus.js.consumers_info(stream)
    except NotFoundError:
        return []
    return sorted(info.name for info in infos if info.name)


async def bucket_names(bus: Bus, bucket: str, prefix: str = "") -> list[str]:
    """Names of ``bucket``'s objects starting with ``prefix``; [] when the bucket does not exist
    (it is not created: a reader may not be allowed to)."""
    try:
        store = await bus.js.object_store(bucket)
        infos = await store.list(ignore_deletes=True)
    except (BucketNotFoundError, NotFoundError):
        return []
    return [info.name for info in infos if info.name.startswith(prefix)]


async def delete_bucket_object(bus: Bus, bucket: str, name: str) -> bool:
    """Delete one object; False when it was not there."""
    try:
        await Objects(bus.js, bucket).delete(name)
    except ObjectNotFound:
        return False
    return True
