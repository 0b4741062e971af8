"""``heddle archive <rollout_id> --to DIR``: a finished rollout's events and completions as
compressed Parquet files (schemas: ``heddle.lifecycle.archive_schema``, docs/trainer.md).

``DIR/<rollout_id>/`` holds ``events.parquet`` (every message of the rollout as stored, in stream
order), ``payloads.parquet`` (the arrays its events kept in the object store),
``completions.parquet`` (one row per trajectory slot, as a trainer receives them) and
``manifest.json`` (counts, the stream sequences covered, each file's size and SHA-256), written
last: an archive without its manifest is unfinished. Files are zstd-compressed; the archive is
written to a temporary folder and renamed, so a crash leaves no half archive under the final
name. ``verify_archive`` checks a manifest against its files (what ``heddle purge`` relies on).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import pyarrow.parquet as pq

from heddle.bus import PAYLOADS_BUCKET, Bus, ReplayQuery, ReplayRecord
from heddle.bus.payloads import payload_prefix
from heddle.bus.purge import bucket_names
from heddle.completions import is_over
from heddle.events import Completed, EventT, Failed, decode_event
from heddle.events.arrays import Logprobs, LossMask, TokenIds
from heddle.events.base import TrajectoryTimings
from heddle.ids import check_token
from heddle.lifecycle import archive_schema as schema
from heddle.rollout.trainer_records import completion_of_failure

ROW_GROUP = 2048
FILES = ("events.parquet", "payloads.parquet", "completions.parquet")


class ArchiveError(ValueError):
    """A rollout that cannot be archived, or an archive that does not check out."""


@dataclass(frozen=True)
class Manifest:
    rollout_id: str
    num_events: int
    first_sequence: int
    last_sequence: int
    num_completions: int
    num_payloads: int
    files: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Per file: ``bytes`` and ``sha256``."""
    archived_at: float = 0.0
    schema_version: int = schema.ARCHIVE_VERSION


def rollout_subjects(rollout_id: str) -> tuple[str, ...]:
    """Every subject a rollout's events are on."""
    rollout = check_token(rollout_id, "rollout id")
    return (f"heddle.evt.rollout.{rollout}.>", f"heddle.evt.traj.{rollout}.>")


async def archive_rollout(bus: Bus, rollout_id: str, to: Path) -> Manifest:
    """Archive a finished (or cancelled) rollout under ``to/<rollout_id>`` (module docstring);
    its manifest. ``ArchiveError`` for a rollout still running or with no events."""
    if not await is_over(bus, rollout_id):
        raise ArchiveError(f"rollout {rollout_id} is still running (or unknown): not archived")
    final = to / rollout_id
    partial = to / f".{rollout_id}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    try:
        events = await _write_events(bus, rollout_id, partial / "events.parquet")
        num_payloads = await _write_payloads(bus, rollout_id, partial / "payloads.parquet")
        num_completions = _write_completions(
            await _completions(bus, events.terminal), partial / "completions.parquet"
        )
        manifest = Manifest(
            rollout_id, events.count, events.first, events.last, num_completions, num_payloads,
            files={name: _digest(partial / name) for name in FILES}, archived_at=time.time(),
        )  # fmt: skip
        (partial / "manifest.json").write_text(json.dumps(asdict(manifest), indent=1))
        shutil.rmtree(final, ignore_errors=True)
        partial.rename(final)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return manifest


@dataclass
class _Events:
    count: int = 0
    first: int = 0
    last: int = 0
    terminal: list[EventT] = field(default_factory=list)
    """The rollout's ``Completed`` and ``Failed`` events, in stream order."""


async def _write_events(bus: Bus, rollout_id: str, path: Path) -> _Events:
    query = ReplayQuery(filter_subjects=rollout_subjects(rollout_id), start_sequence=1)
    found = _Events()
    rows: list[dict[str, Any]] = []
    with pq.ParquetWriter(path, schema.EVENTS_SCHEMA, compression="zstd") as writer:
        async for batch in bus.replay(query, _raw).batches():
            for record in batch:
                rows.append(_event_row(record, found))
            if len(rows) >= ROW_GROUP:
                writer.write_table(schema.arrow_table(schema.EVENTS_SCHEMA, rows))
                rows = []
        if rows:
            writer.write_table(schema.arrow_table(schema.EVENTS_SCHEMA, rows))
    if found.count == 0:
        raise ArchiveError(f"rollout {rollout_id} has no events in the stream")
    return found


def _raw(data: bytes) -> bytes:
    return data


def _event_row(record: ReplayRecord[bytes], found: _Events) -> dict[str, Any]:
    event = decode_event(record.message)
    found.count += 1
    found.first = found.first or record.stream_sequence
    found.last = record.stream_sequence
    if isinstance(event, (Completed, Failed)):
        found.terminal.append(event)
    tag = type(event).__struct_config__.tag
    return {
        "sequence": record.stream_sequence, "subject": record.subject, "kind": str(tag),
        "event_id": event.event_id, "traj_id": str(getattr(event, "traj_id", "")),
        "occurred_at": event.occurred_at, "stored_at": record.stored_at, "data": record.message,
    }  # fmt: skip


async def _write_payloads(bus: Bus, rollout_id: str, path: Path) -> int:
    names = await bucket_names(bus, PAYLOADS_BUCKET, payload_prefix(rollout_id))
    rows = []
    for name in sorted(names):
        data = await bus.get_bucket_object(PAYLOADS_BUCKET, name)
        rows.append({"name": name, "size": len(data),
                     "sha256": hashlib.sha256(data).hexdigest(), "data": data})  # fmt: skip
    pq.write_table(schema.arrow_table(schema.PAYLOADS_SCHEMA, rows), path, compression="zstd")
    return len(rows)


async def _completions(bus: Bus, terminal: list[EventT]) -> list[Completed]:
    """The trajectories as ``HeddleClient.completions`` hands them over: each trajectory's first
    ``Completed`` (arrays read back), else its final ``Failed`` as a ``Completed``."""
    by_traj: dict[str, Completed] = {}
    for event in terminal:
        if event.traj_id in by_traj:  # type: ignore[union-attr]
            continue
        if isinstance(event, Completed):
            by_traj[event.traj_id] = await bus.resolve(event)
        elif isinstance(event, Failed) and event.is_final:
            by_traj[event.traj_id] = await completion_of_failure(bus, event)
    return sorted(by_traj.values(), key=lambda completed: completed.index)


def _write_completions(completions: list[Completed], path: Path) -> int:
    rows = [completion_row(completed) for completed in completions]
    pq.write_table(schema.arrow_table(schema.COMPLETIONS_SCHEMA, rows), path, compression="zstd",
                   row_group_size=ROW_GROUP)  # fmt: skip
    return len(rows)


def completion_row(completed: Completed) -> dict[str, Any]:
    row = msgspec.to_builtins(completed)
    timings = row.pop("timings", {}) or {}
    kept = {name: row.get(name) for name in schema.COMPLETIONS_SCHEMA.names if name in row}
    for name in schema.TIMINGS:
        kept[name] = float(timings.get(name, 0.0))
    for name in ("prompt_token_ids", "response_token_ids", "response_logprobs", "loss_mask",
                 "logprob_mask", "weight_versions", "worker_history"):  # fmt: skip
        kept[name] = list(getattr(completed, name))
    return kept


def read_completions(folder: Path) -> list[Completed]:
    """The archived trajectories of ``folder`` (one rollout's archive) as ``Completed``."""
    rows = pq.read_table(folder / "completions.parquet").to_pylist()
    completed = []
    for row in rows:
        timings = TrajectoryTimings(**{name: row.pop(name) for name in schema.TIMINGS})
        for name, array_type in _ARRAY_TYPES.items():
            row[name] = array_type(row[name])
        completed.append(Completed(**row, timings=timings))
    return completed


_ARRAY_TYPES: dict[str, Any] = {
    "prompt_token_ids": TokenIds, "response_token_ids": TokenIds,
    "response_logprobs": Logprobs, "loss_mask": LossMask, "logprob_mask": LossMask,
}  # fmt: skip
"""The list types ``Completed`` declares (they pack on the wire)."""


def verify_archive(folder: Path) -> Manifest:
    """The manifest of the archive at ``folder`` once each file's size and SHA-256 match it;
    ``ArchiveError`` saying what does not."""
    path = folder / "manifest.json"
    if not path.is_file():
        raise ArchiveError(f"no archive at {folder} (no manifest.json)")
    manifest = Manifest(**json.loads(path.read_text()))
    for name in FILES:
        expected = manifest.files.get(name)
        if expected is None or not (folder / name).is_file():
            raise ArchiveError(f"archive {folder}: {name} is missing")
        if _digest(folder / name) != expected:
            raise ArchiveError(f"archive {folder}: {name} differs from its manifest")
    return manifest


def _digest(path: Path) -> dict[str, Any]:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for chunk in iter(lambda: stream.read(1 << 20), b""):
            digest.update(chunk)
    return {"bytes": path.stat().st_size, "sha256": digest.hexdigest()}
