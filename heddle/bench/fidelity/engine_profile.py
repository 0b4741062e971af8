"""The torch engine's cost profile for ``heddle.bench.fidelity.engine``: ``heddle bench engine``
run by one process per live worker side by side, combined into one profile (median per figure).

The live workers share this machine's cores with each other (and with whatever else runs on it),
so an engine measured alone would be faster than any of them: measured side by side, the profile
prices a decode step as the live workers pay it.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from heddle.bench.fidelity.engine_options import EngineFidelityOptions
from heddle.traces import TraceTrajectory


async def measure_profile(
    options: EngineFidelityOptions, path: Path, *, round_name: str = ""
) -> list[Path]:
    """``heddle bench engine`` run by ``num_workers`` processes at once, on contexts of the
    trace's size; returns the profiles they wrote next to ``path`` (module docstring)."""
    stem = f"{path.stem}-{round_name}" if round_name else path.stem
    paths = [path.with_name(f"{stem}-{index}.json") for index in range(options.num_workers)]
    path.parent.mkdir(parents=True, exist_ok=True)
    benches = [
        asyncio.create_subprocess_exec(
            *_bench_argv(options, out),
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        for out in paths
    ]
    processes = await asyncio.gather(*benches)
    outputs = await asyncio.gather(*(process.communicate() for process in processes))
    for process, (_, stderr) in zip(processes, outputs, strict=True):
        if process.returncode:
            raise ValueError(f"heddle bench engine failed: {stderr.decode()[-400:]}")
    return paths


def write_combined(paths: list[Path], path: Path, kv_budget_tokens: int) -> dict[str, Any]:
    document = combine_profiles([json.loads(out.read_text()) for out in paths])
    document["max_kv_tokens"] = {"1": kv_budget_tokens}
    path.write_text(json.dumps(document, indent=2) + "\n")
    return document


def _bench_argv(options: EngineFidelityOptions, out: Path) -> list[str]:
    sizes = [size for size in (1, 2, 4, 8, 16, 32) if size <= options.max_running]
    context = mean_context_tokens(options.trace())
    return [
        sys.executable, "-m", "heddle.cli", "bench", "engine", "--engine", "torch",
        "--model", options.model, "--num-threads", str(options.num_threads),
        "--batch-sizes", ",".join(map(str, sizes)), "--context-tokens", str(context),
        "--decode-tokens", "32", "--prefill-tokens", "128", "--resume-tokens", "128",
        "--repeats", str(options.profile_repeats), "--profile-out", str(out),
    ]  # fmt: skip


def combine_profiles(documents: list[dict[str, Any]]) -> dict[str, Any]:
    """One TP-1 profile from several measured side by side: the median of each figure."""
    first = documents[0]
    batches = first["itl_ms"]["1"]
    return {
        "model": first["model"],
        "hardware": first["hardware"],
        "itl_ms": {
            "1": {b: statistics.median(d["itl_ms"]["1"][b] for d in documents) for b in batches}
        },
        "prefill_tokens_per_s": {
            "1": statistics.median(d["prefill_tokens_per_s"]["1"] for d in documents)
        },
        "max_kv_tokens": first["max_kv_tokens"],
        "context_tokens": first["context_tokens"],
    }


def mean_context_tokens(trace: list[TraceTrajectory]) -> int:
    """The mean context a decode step attends to: half of each trajectory's final context."""
    return max(1, sum(t.num_context_tokens for t in trace) // (2 * len(trace)))
