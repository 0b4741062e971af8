"""`heddle bench engine`: measure an inference engine on this machine and write its ITL profile.

Measures the torch engine (``heddle.bench.engine``): decode time per step
against batch size (the interference curve F(b)), prefill rate, resume cost after preemption
(kept KV vs recompute) and migration cost (KV transfer vs re-prefill). The ITL table is written
as a profile JSON that ``heddle.policy.cost.profiles`` loads. torch is imported only when this
command runs.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from heddle.cli.apps import bench_app, settings_of
from heddle.errors import UserError
from heddle.policy.cost.profiles import parse_profile
from heddle.workers.engines.torch_engine.options import DTypeName, TorchEngineOptions

if TYPE_CHECKING:
    from heddle.bench.engine import EngineBenchResult

_DTYPES: tuple[DTypeName, ...] = ("auto", "float32", "bfloat16", "float16")


@bench_app.command("engine")
def bench_engine_command(
    ctx: typer.Context,
    engine: Annotated[str, typer.Option(help="Engine to measure (torch)")] = "torch",
    model: Annotated[str, typer.Option(help="'tiny' or a local model folder")] = "tiny",
    device: Annotated[str, typer.Option(help="cpu, cuda or cuda:N")] = "cpu",
    dtype: Annotated[str, typer.Option(help="auto, float32, bfloat16 or float16")] = "auto",
    batch_sizes: Annotated[str, typer.Option(help="Decode batch sizes, comma-separated")] = (
        "1,2,4,8,16,32"
    ),
    context_tokens: Annotated[int, typer.Option(help="Prompt tokens per decode request")] = 128,
    decode_tokens: Annotated[int, typer.Option(help="Output tokens per decode request")] = 64,
    prefill_tokens: Annotated[int, typer.Option(help="Prompt of the prefill measurement")] = 512,
    resume_tokens: Annotated[int, typer.Option(help="Context of the preempted request")] = 512,
    repeats: Annotated[int, typer.Option(help="Runs per figure (the median is reported)")] = 5,
    num_threads: Annotated[int, typer.Option(help="torch CPU threads (0: default)")] = 0,
    profile_out: Annotated[
        Path | None,
        typer.Option(
            help="Profile JSON path (default: <data-dir>/profiles/torch-<model>-<hw>.json)"
        ),
    ] = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print one JSON object")] = False,
) -> None:
    """Decode ITL vs batch size, prefill rate, preemption and migration costs of an engine."""
    from heddle.bench.engine import EngineBenchConfig, run_engine_bench

    if engine != "torch":
        raise UserError(f"--engine {engine!r}: only the torch engine has a benchmark here")
    if dtype not in _DTYPES:
        raise UserError(f"--dtype {dtype!r}: use one of {', '.join(_DTYPES)}")
    try:
        options = TorchEngineOptions(
            model=model,
            device=device,
            dtype=dtype,
            num_threads=num_threads,
        )
        config = EngineBenchConfig(
            batch_sizes=_parse_sizes(batch_sizes),
            context_tokens=context_tokens,
            decode_tokens=decode_tokens,
            prefill_tokens=prefill_tokens,
            resume_context_tokens=resume_tokens,
            migration_context_tokens=resume_tokens,
            repeats=repeats,
        )
        result = asyncio.run(run_engine_bench(options, config))
    except ValueError as exc:
        raise UserError(str(exc)) from None
    hardware = hardware_name(device)
    path = profile_out or _default_profile_path(ctx, result.model, hardware)
    write_profile(path, profile_document(result, hardware))
    if json_output:
        typer.echo(json.dumps({**result.to_dict(), "hardware": hardware, "profile": str(path)}))
    else:
        typer.echo(_report(result, hardware, path))


def profile_document(result: EngineBenchResult, hardware: str) -> dict[str, Any]:
    """The measured ITL table in ``heddle.policy.cost.profiles``' JSON format (TP 1)."""
    return {
        "model": Path(result.model).name.lower(),
        "hardware": hardware,
        "itl_ms": {"1": {str(point.batch_size): round(point.itl_ms, 4) for point in result.decode}},
        "prefill_tokens_per_s": {"1": round(result.prefill_tokens_per_s, 1)},
        "max_kv_tokens": {"1": result.max_kv_tokens},
        "context_tokens": result.mean_context_tokens,
    }


def write_profile(path: Path, document: dict[str, Any]) -> None:
    """Write ``document`` after checking that the profile loader accepts it."""
    text = json.dumps(document, indent=2) + "\n"
    parse_profile(text, "json", source=str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def hardware_name(device: str) -> str:
    """``h200``/``h100`` for those GPUs (names with cost-model presets), else a readable name."""
    if not device.startswith("cuda"):
        return f"cpu-{os.cpu_count() or 1}core"
    import torch

    name = torch.cuda.get_device_name(torch.device(device)).lower()
    for known in ("h200", "h100"):
        if known in name:
            return known
    return name.replace("nvidia", "").strip().replace(" ", "-")


def _parse_sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(sorted({int(part) for part in text.split(",") if part.strip()}))
    except ValueError:
        raise UserError(f"--batch-sizes {text!r}: give positive integers, e.g. 1,8,32") from None
    if not sizes or sizes[0] < 1:
        raise UserError(f"--batch-sizes {text!r}: give positive integers, e.g. 1,8,32")
    return sizes


def _default_profile_path(ctx: typer.Context, model: str, hardware: str) -> Path:
    name = Path(model).name.lower()
    return settings_of(ctx).data_dir / "profiles" / f"torch-{name}-{hardware}.json"


def _report(result: EngineBenchResult, hardware: str, path: Path) -> str:
    lines = [
        f"torch engine: model {result.model} on {result.device} ({result.dtype}, {hardware})",
        f"decode, mean context {result.mean_context_tokens} tokens:",
        "  batch   ITL ms   tokens/s   F(b)",
    ]
    lines += [
        f"  {p.batch_size:>5} {p.itl_ms:>8.2f} {p.tokens_per_s:>10.0f} {p.interference:>6.2f}"
        for p in result.decode
    ]
    resume, migration = result.resume, result.migration
    lines += [
        f"prefill: {result.prefill_tokens_per_s:,.0f} tokens/s",
        f"resume after preemption ({resume.context_tokens}-token context): kept KV "
        f"{resume.kept_kv_ms:.2f} ms vs recompute {resume.recompute_ms:.2f} ms "
        f"({resume.speedup:.0f}x)",
        f"migration ({migration.context_tokens}-token context, {migration.payload_bytes:,} bytes): "
        f"export {migration.export_ms:.2f} ms + import {migration.import_ms:.2f} ms vs re-prefill "
        f"{migration.reprefill_ms:.2f} ms ({migration.speedup:.1f}x)",
        f"profile: {path}",
    ]
    return "\n".join(lines)
