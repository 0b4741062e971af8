"""``--time-scale auto``: the fastest time scale at which a live run on this machine keeps its
model clock (time off the model under ``OFF_MODEL_BUDGET`` of a step).

Why it is needed: a sim engine runs ``time_scale`` times faster than real time, but everything
around a step is real: the step's events go into the stream, the control plane reacts, the
command and the tool call travel, each process takes its turn on the CPU. Every wall second of
that counts ``time_scale`` model seconds (``heddle.rollout.breakdown``), so a run too fast for its
machine reports a makespan that is not the policy's (the README's job at 100x on 2 cores: 56% of
the slowest trajectory's time off the model).

The rule, from two measured costs of the live system (docs/benchmarks.md, "Time scale"):
``HOP_S``, the wall seconds one step spends in transit when the machine is idle, and
``CPU_S_PER_STEP``, the CPU seconds all processes spend per trajectory step. At time scale
``s``, ``N`` trajectories of ``M`` model seconds per step make ``N s / M`` steps per wall second,
which keep ``N s C / M`` of the ``K`` free cores busy (utilization ``u = N s C / (K M)``); a step
then waits about ``HOP_S / (1 - u)`` in transit (a queue's wait grows as its server fills). Its
share off the model stays under the budget ``b`` while ``s HOP_S / (1 - u) <= b M``, that is

    s <= b M / (HOP_S + b N C / K)

``M`` is the trajectories' mean step: tool seconds plus output tokens at the model's one-sequence
token time (a lower bound: batching only lengthens it). ``K`` is the cores this process may use
less the 1-minute load average of other work, at least ``MIN_FREE_CORES``. The result is rounded
down to 1, 2 or 5 times a power of ten, between 1 and ``MAX_TIME_SCALE``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass

from heddle.policy.cost.model import preset
from heddle.traces import TraceTrajectory

OFF_MODEL_BUDGET = 0.05
HOP_S = 0.02
"""Wall seconds a step spends in transit (event stored, the control plane's reaction, the
command's and the tool call's trips) when the CPU is not the bottleneck: 23 ms measured with 2
trajectories under a load of 9 on 2 cores, docs/benchmarks.md (an idle machine does better:
this errs slow)."""
CPU_S_PER_STEP = 0.012
"""CPU seconds every process together spends per trajectory step (about 7 events: published,
stored, decided, projected, followed): measured, docs/benchmarks.md."""
MIN_FREE_CORES = 0.25
MAX_TIME_SCALE = 100.0


@dataclass(frozen=True, slots=True)
class AutoTimeScale:
    time_scale: float
    step_s: float
    """Mean model seconds per step of the trajectories."""
    num_trajectories: int
    free_cores: float
    num_cores: int

    def describe(self) -> str:
        """One line that says what was picked and why."""
        return (
            f"time scale auto: {self.time_scale:g}x ({self.num_trajectories} trajectories of "
            f"~{self.step_s:.1f} model s per step, {self.free_cores:.2g} of {self.num_cores} "
            f"cores free: time off the model under {OFF_MODEL_BUDGET:.0%})"
        )


def auto_time_scale(
    trace: Sequence[TraceTrajectory],
    model: str,
    hardware: str,
    *,
    num_cores: int | None = None,
    load: float | None = None,
) -> AutoTimeScale:
    """The time scale the module docstring derives (``num_cores`` and ``load`` default to this
    machine's: the cores this process may run on, the 1-minute load average)."""
    cores = num_cores if num_cores is not None else len(os.sched_getaffinity(0))
    busy = load if load is not None else os.getloadavg()[0]
    free = max(MIN_FREE_CORES, cores - busy)
    step_s = mean_step_s(trace, model, hardware)
    bound = (
        OFF_MODEL_BUDGET * step_s / (HOP_S + OFF_MODEL_BUDGET * len(trace) * CPU_S_PER_STEP / free)
    )
    return AutoTimeScale(round_down(bound), step_s, len(trace), free, cores)


def mean_step_s(trace: Sequence[TraceTrajectory], model: str, hardware: str) -> float:
    """Mean model seconds of a step: its tool time and its output at one sequence's pace."""
    token_s = preset(model, hardware).solo_token_s()
    steps = [step for trajectory in trace for step in trajectory.steps]
    if not steps:
        return 0.0
    return sum(step.tool_s + step.output_tokens * token_s for step in steps) / len(steps)


def round_down(value: float) -> float:
    """1, 2 or 5 times a power of ten, at most ``value``, within [1, ``MAX_TIME_SCALE``]."""
    if value <= 1:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    nice = max(m * power for m in (1, 2, 5) if m * power <= value)
    return float(min(MAX_TIME_SCALE, nice))
