"""The archive's Parquet schemas (docs/trainer.md, "Archiving and purging"): what
``heddle archive`` writes per rollout, readable by pyarrow, pandas and Hugging Face ``datasets``
(``load_dataset("parquet", data_files=...)``)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

ARCHIVE_VERSION = 1
"""The archive's format version (a manifest's ``schema_version``), not the events' own."""

EVENTS_SCHEMA = pa.schema([
    ("sequence", pa.int64()),  # the message's stream sequence
    ("subject", pa.string()),
    ("kind", pa.string()),  # the event's type tag: "traj.generated", "rollout.finished", ...
    ("event_id", pa.string()),
    ("traj_id", pa.string()),  # "" for a rollout event
    ("occurred_at", pa.float64()),  # Unix seconds, the publisher's clock
    ("stored_at", pa.float64()),  # Unix seconds, when the stream stored it
    ("data", pa.binary()),  # the message exactly as stored (JSON; arrays may be packed)
])  # fmt: skip
"""One row per message of the rollout, in stream order."""

PAYLOADS_SCHEMA = pa.schema([
    ("name", pa.string()),  # the object's name in bucket heddle-payloads
    ("size", pa.int64()),
    ("sha256", pa.string()),
    ("data", pa.binary()),
])  # fmt: skip
"""One row per array an event kept in the object store (``heddle.bus.payloads``): what its
reference points at, so ``data`` of ``EVENTS_SCHEMA`` stays whole after a purge."""

COMPLETIONS_SCHEMA = pa.schema([
    ("event_id", pa.string()),  # the terminal event's id (a failure's: its Failed's)
    ("rollout_id", pa.string()),
    ("traj_id", pa.string()),
    ("group_id", pa.string()),
    ("index", pa.int32()),  # the trajectory's slot in the rollout (submission order)
    ("prompt_token_ids", pa.list_(pa.int32())),
    ("response_token_ids", pa.list_(pa.int32())),  # generations and tool observations
    ("response_logprobs", pa.list_(pa.float32())),  # 0.0 on observation tokens
    ("loss_mask", pa.list_(pa.int8())),  # 1 model token, 0 tool token
    ("logprob_mask", pa.list_(pa.int8())),  # 1 where the engine returned a logprob
    ("reward", pa.float64()),
    ("finish_reason", pa.string()),
    ("reason", pa.string()),
    ("num_steps", pa.int32()),
    ("num_output_tokens", pa.int64()),
    ("num_recomputed_tokens", pa.int64()),
    ("weight_versions", pa.list_(pa.int64())),
    ("worker_history", pa.list_(pa.string())),
    ("queue_s", pa.float64()),  # timings: model seconds
    ("prefill_s", pa.float64()),
    ("decode_s", pa.float64()),
    ("tool_s", pa.float64()),
    ("migration_s", pa.float64()),
    ("total_s", pa.float64()),
    ("occurred_at", pa.float64()),
    ("worker_id", pa.string()),  # the worker that ended it (the holder of hosting epoch)
    ("epoch", pa.int64()),  # its hosting number (heddle.control.leases)
])  # fmt: skip
"""One row per trajectory slot, as ``HeddleClient.completions`` hands them over (a failure as
its ``Completed``), by ``index``."""

TIMINGS = ("queue_s", "prefill_s", "decode_s", "tool_s", "migration_s", "total_s")


def arrow_table(schema: pa.Schema, rows: list[dict[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=schema)
