"""``heddle bench hops``: the files one trajectory step opens, from a tool result to the next
generation.

One in-process deployment on embedded defaults (``heddle.rollout.inprocess``: an embedded
nats-server, the control plane with the default configuration and predictor, one worker agent
with the simulated engine, one tool executor), one trajectory replayed from a trace: ``steps``
generations with a tool call between each two. Every tool result opens a window (``hops_trace``):

- it opens when a ``ToolReturned`` the deployment has not carried before is first handed to a
  function under ``heddle/`` (the tool executor publishing the tool's result);
- it closes when an ``Engine``'s ``generate`` (``heddle/workers/engines/base.py``) is called:
  the worker starts the next generation.

Between the two the result travels executor -> NATS -> the control plane's deciders ->
``ContinueTrajectory`` -> NATS -> the worker agent -> the engine. The calls that carry it (the
path: ``hops_path`` says which, and what it leaves out beside the step and why) give the figures:
the files in the order they are first opened, the hops between files, the returns to a file left
before. Each tool call waits ``tool_s`` model seconds, so the deployment is at rest when its
result arrives and the window holds only what that result sets off; heartbeats and telemetry run
on their own tasks and stay beside the path.

The profile hook slows every call: this counts files, it times nothing.
"""

from __future__ import annotations

import asyncio
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from heddle.bench.hops_path import (
    HopFigures,
    TaskSummary,
    hop_figures,
    path_calls,
    path_parts,
    task_summaries,
)
from heddle.bench.hops_trace import StepTracer, Window
from heddle.client import HeddleClient
from heddle.config import Settings
from heddle.rollout.inprocess import InProcessDeployment, InProcessOptions
from heddle.traces import TraceStep, TraceTrajectory


@dataclass(frozen=True)
class HopsConfig:
    steps: int = 4
    """Generations of the one trajectory (a tool call between each two)."""
    tool_s: float = 8.0
    """Model seconds each tool call waits (wall seconds: over ``time_scale``)."""
    output_tokens: int = 32
    """Output tokens of each generation."""
    time_scale: float = 4.0
    """Model seconds per wall second of the simulated engine and the trace tools."""
    timeout_s: float = 300.0

    def __post_init__(self) -> None:
        if self.steps < 2:
            raise ValueError("steps must be >= 2: a tool result between two generations")
        if not (self.tool_s > 0 and self.time_scale > 0 and self.timeout_s > 0):
            raise ValueError("tool_s, time_scale and timeout_s must be > 0")
        if self.output_tokens < 1:
            raise ValueError("output_tokens must be >= 1")


@dataclass(frozen=True)
class StepHops:
    """One tool result's way to the next generation."""

    step: int
    """The step whose tool result it is."""
    num_files: int
    num_hops: int
    num_returns: int
    files: list[str]
    returns: list[str]
    parts: dict[str, list[str]]
    """``tools``, ``control plane``, ``worker`` -> the files each opens, in order."""
    window_files: list[str]
    """Every file any task opened in the window, the path's and the rest."""
    tasks: list[TaskSummary]


@dataclass
class HopsResult:
    config: dict[str, Any]
    steps: list[StepHops] = field(default_factory=list)

    @property
    def last(self) -> StepHops:
        """The figure reported: the last tool result (its code paths all warm)."""
        return self.steps[-1]


def step_hops(window: Window) -> StepHops:
    calls = path_calls(window)
    figures: HopFigures = hop_figures(call.file for call in calls)
    parts = path_parts(window)
    by_part: dict[str, list[str]] = {}
    for part in dict.fromkeys(parts[call.task] for call in calls):
        by_part[part] = hop_figures(c.file for c in calls if parts[c.task] == part).files
    return StepHops(
        step=window.step,
        num_files=figures.num_files,
        num_hops=figures.num_hops,
        num_returns=figures.num_returns,
        files=figures.files,
        returns=figures.returns,
        parts=by_part,
        window_files=hop_figures(call.file for call in window.calls).files,
        tasks=task_summaries(window),
    )


def trajectory(config: HopsConfig) -> TraceTrajectory:
    tool = TraceStep(output_tokens=config.output_tokens, tool_s=config.tool_s, tool_output_tokens=8)
    last = TraceStep(output_tokens=config.output_tokens)
    return TraceTrajectory(
        id="t0", group="g0", prompt_tokens=16, steps=[tool] * (config.steps - 1) + [last]
    )


async def run_hops(config: HopsConfig, folder: Path) -> HopsResult:
    settings = Settings(data_dir=folder)
    options = InProcessOptions(num_workers=1, engine_options={"time_scale": str(config.time_scale)})
    tracer = StepTracer()
    async with InProcessDeployment(settings, options), HeddleClient(settings) as client:
        with tracer.installed():
            rollout_id = await client.submit(trace=[trajectory(config)])
            summary = await client.wait(rollout_id, timeout_s=config.timeout_s)
    if summary.num_completed != 1:
        raise RuntimeError(f"the trajectory did not complete: {summary}")
    return HopsResult(config=asdict(config), steps=[step_hops(w) for w in tracer.windows])


def bench_hops(config: HopsConfig) -> HopsResult:
    with tempfile.TemporaryDirectory(prefix="heddle-bench-hops-") as folder:
        return asyncio.run(run_hops(config, Path(folder)))
