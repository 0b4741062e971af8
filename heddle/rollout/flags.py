"""CLI flags of ``heddle rollout`` into values: the source, the engine's cost-model defaults,
the history file the control plane learns from. Problems are ``UserError`` lines."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from heddle.controlplane import ControlPlaneConfig
from heddle.errors import UserError
from heddle.rollout.sources import Source, SourceChoice, load_source
from heddle.rollout.submission import TaskOptions
from heddle.traces import write_trace
from heddle.workers.engines.options import parse_options
from heddle.workers.engines.simulated import SimulatedEngineOptions


def source_from_flags(
    workload: str | None,
    trace: Path | None,
    tasks: Path | None,
    env: str | None,
    trajectories: int,
    seed: int,
    group_size: int,
    tokenizer: str,
) -> Source:
    """The source the CLI's flags name (``UserError`` for a bad one)."""
    try:
        task_options = TaskOptions(group_size=group_size, seed=seed)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    choice = SourceChoice(
        workload=workload,
        num_trajectories=trajectories,
        seed=seed,
        trace=trace,
        tasks=tasks,
        environment=env,
        tokenizer=tokenizer,
        task_options=task_options,
    )
    return load_source(choice)


def engine_defaults(engine: str, options: dict[str, str]) -> tuple[str | None, str | None, float]:
    """The sim engine's model, hardware and time scale (the control plane's cost model must
    match them); None and 1.0 for real engines."""
    if engine != "sim":
        return None, None, 1.0
    parsed = parse_options(SimulatedEngineOptions, options, what="engine 'sim'")
    return parsed.model, parsed.hardware, parsed.time_scale


def with_history(config: ControlPlaneConfig, source: Source, data_dir: Path) -> ControlPlaneConfig:
    """The control plane learns the workload's previous epoch (as ``heddle sim`` does)."""
    if not source.history:
        return config
    path = data_dir / "history" / f"{source.label.replace(':', '-').replace('/', '_')}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_trace(path, source.history)
    return replace(config, history=(path,))
