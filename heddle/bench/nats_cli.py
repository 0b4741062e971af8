"""The NATS CLI's own JetStream benchmark (``nats bench js``) on the bus's server: the bus's
physical limit, measured in the same run as Heddle's rates (``heddle bench bus``).

``run_nats_bench(url, num_msgs, msg_bytes)`` runs, with natscli (``find_nats_cli``: PATH, then
``$GOPATH/bin`` and ``~/go/bin``):

- ``nats bench js pub async`` into a fresh file-backed stream (R1, the same store as
  ``HEDDLE_EVENTS``) with ``--dedup`` (a ``Nats-Msg-Id`` per message, as Heddle publishes),
  batches of 500 in flight;
- ``nats bench js fetch``: the same messages through a durable pull consumer with explicit
  acks, in fetches of ``fetch_batch`` (as Heddle's consumers read);

and deletes the stream. Rates come from the CSV the CLI writes (``MsgsPerSec``).
"""

from __future__ import annotations

import asyncio
import csv
import os
import shutil
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

NATSCLI_INSTALL = "go install github.com/nats-io/natscli/nats@v0.5.0"


class NatsBenchError(RuntimeError):
    """``nats bench`` failed; the message holds its output."""


def find_nats_cli() -> str | None:
    """The ``nats`` binary, or None."""
    found = shutil.which("nats")
    if found:
        return found
    for root in (os.environ.get("GOPATH"), str(Path.home() / "go")):
        if root and os.access(Path(root) / "bin" / "nats", os.X_OK):
            return str(Path(root) / "bin" / "nats")
    return None


@dataclass(frozen=True, slots=True)
class NatsBenchResult:
    num_msgs: int
    msg_bytes: int
    pub_msgs_per_s: float
    consume_msgs_per_s: float


async def run_nats_bench(
    binary: str, url: str, num_msgs: int, msg_bytes: int, *, fetch_batch: int = 1000
) -> NatsBenchResult:
    stream = f"heddle-natsbench-{uuid.uuid4().hex[:8]}"
    common = ["--server", url, "--stream", stream, "--msgs", str(num_msgs), "--no-progress"]
    with tempfile.TemporaryDirectory() as folder:
        pub_csv, fetch_csv = Path(folder) / "pub.csv", Path(folder) / "fetch.csv"
        try:
            await _run(
                binary, "bench", "js", "pub", "async", f"{stream}.msgs", *common,
                "--create", "--storage", "file", "--size", str(msg_bytes), "--dedup",
                "--csv", str(pub_csv),
            )  # fmt: skip
            await _run(
                binary, "bench", "js", "fetch", *common, "--batch", str(fetch_batch),
                "--csv", str(fetch_csv),
            )  # fmt: skip
        finally:
            await _run(binary, "--server", url, "stream", "rm", stream, "-f", check=False)
        return NatsBenchResult(num_msgs, msg_bytes, _rate(pub_csv), _rate(fetch_csv))


async def _run(binary: str, *args: str, check: bool = True) -> str:
    process = await asyncio.create_subprocess_exec(
        binary,
        *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await process.communicate()
    text = out.decode(errors="replace")
    if check and process.returncode != 0:
        raise NatsBenchError(f"nats {' '.join(args[:4])} failed: {text[-2000:]}")
    return text


def _rate(path: Path) -> float:
    """Messages per second of the first client's row (one client per run)."""
    with path.open() as handle:
        rows = list(csv.DictReader(handle))
    if not rows:
        raise NatsBenchError(f"nats bench wrote no figures to {path.name}")
    return float(rows[0]["MsgsPerSec"])
