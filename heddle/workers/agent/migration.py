"""Handing a trajectory to another worker during its tool gap (the paper's migration).

Source side (``MigrateOut``): export the trajectory's KV cache when the engine can, store it in
the bus object store under a key derived from the migration id, release it locally, publish
``Migrated``, then send the target a ``MigrateIn`` command (spec, cache key, priority). From then
on the source forwards any command for the trajectory to the target.

Target side: ``MigrateIn`` is a resume (``resume.py``) that first imports the cache; without one
the next generation re-prefills the context (counted as recomputed tokens). KV blobs travel as
msgpack (never pickle): the snapshot's fields plus its payload bytes.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import msgspec

from heddle.events import MigrateOut
from heddle.ids import derive_id
from heddle.workers.agent import records
from heddle.workers.agent.generation import engine_key
from heddle.workers.agent.ports import BlobStore
from heddle.workers.agent.publisher import DurablePublisher
from heddle.workers.agent.steps import StepRunner
from heddle.workers.agent.table import HandedOver, HostedTrajectory
from heddle.workers.engines.base import CacheSnapshot, Engine


class _SnapshotRecord(msgspec.Struct, frozen=True):
    trajectory_id: str
    num_tokens: int
    fingerprint: str
    num_kv_bytes: int
    payload: bytes


def encode_snapshot(snapshot: CacheSnapshot) -> bytes:
    record = _SnapshotRecord(
        trajectory_id=snapshot.trajectory_id,
        num_tokens=snapshot.num_tokens,
        fingerprint=snapshot.fingerprint,
        num_kv_bytes=snapshot.num_kv_bytes,
        payload=snapshot.payload,
    )
    return msgspec.msgpack.encode(record)


def decode_snapshot(data: bytes) -> CacheSnapshot:
    """``ValueError`` for a blob that is not a snapshot."""
    try:
        record = msgspec.msgpack.decode(data, type=_SnapshotRecord)
    except msgspec.DecodeError as exc:
        raise ValueError(f"not a KV cache snapshot: {exc}") from None
    return CacheSnapshot(
        trajectory_id=record.trajectory_id,
        num_tokens=record.num_tokens,
        fingerprint=record.fingerprint,
        payload=record.payload,
        num_kv_bytes=record.num_kv_bytes,
    )


def cache_key(migration_id: str) -> str:
    """Object-store key of a migration's KV blob (object names allow ':' and '-')."""
    return derive_id("kv", migration_id)


class Migrator:
    def __init__(
        self,
        *,
        worker_id: str,
        engine: Engine,
        blobs: BlobStore,
        publisher: DurablePublisher,
        runner: StepRunner,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.worker_id = worker_id
        self.engine = engine
        self.blobs = blobs
        self.publisher = publisher
        self.runner = runner
        self.monotonic = monotonic
        self.num_migrations_out = 0

    async def migrate_out(self, hosted: HostedTrajectory, command: MigrateOut) -> None:
        """Hand ``hosted`` (at rest: in a tool call, or between steps) to the command's target."""
        if command.target_worker_id == self.worker_id:
            return
        started_s = self.monotonic()
        key = engine_key(hosted.rollout_id, hosted.traj_id)
        snapshot = None
        if command.transfer_kv and self.engine.capabilities.can_export_kv:
            snapshot = await self.engine.export_cache(key)
        blob_key = ""
        if snapshot is not None:
            blob_key = cache_key(command.migration_id)
            await self.blobs.put_blob(blob_key, encode_snapshot(snapshot))
        await self.engine.release(key)
        transfer_s = (self.monotonic() - started_s) * self.runner.time_scale
        now = self.runner.clock()
        migrate_in = records.migrate_in(
            hosted.log,
            spec=hosted.spec,
            source_worker_id=self.worker_id,
            target_worker_id=command.target_worker_id,
            migration_id=command.migration_id,
            cache_key=blob_key,
            priority=hosted.priority,
            now=now,
            target_epoch=command.target_epoch,
        )
        # Migrated first: from then on the stream names the target as the owner, so a source
        # that crashes before the MigrateIn below forwards the redelivered MigrateOut to the
        # target (which then hosts the trajectory) instead of running it itself.
        await self.runner.events.emit(
            hosted,
            records.migrated(
                hosted.log,
                source_worker_id=self.worker_id,
                target_worker_id=command.target_worker_id,
                migration_id=command.migration_id,
                num_bytes=snapshot.num_bytes if snapshot is not None else 0,
                transfer_s=transfer_s,
                now=now,
                target_epoch=command.target_epoch,
            ),
        )
        await self.publisher.publish(migrate_in)
        hosted.stage = HandedOver(command.target_worker_id)
        self.num_migrations_out += 1
