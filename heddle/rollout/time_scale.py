"""``--time-scale auto``: the fastest time scale at which a live run on this machine keeps its
model clock (time off the model under ``OFF_MODEL_BUDGET`` of a step).

Why it is needed: a sim engine runs ``time_scale`` times faster than real time, but everything
around a step is real: the step's events go into the stream, the control plane reacts, the
command and the tool call travel, each process takes its turn on the CPU. Every wall second of
that counts ``time_scale`` model seconds (``heddle.rollout.breakdown``), so a run too fast for its
machine reports a makespan that is not the policy's (the README's job at 100x on 2 cores: 56% of
the slowest trajectory's time off the model).

The rule, from two measured costs of the live system (docs/benchmarks.md, "Time scale"):
``HOP_S``, the wall seconds a step spends in transit when the CPU is not the bottleneck, and
``CPU_S_PER_STEP``, the CPU seconds all processes spend per trajectory step. The trajectories
make ``r`` steps per model second (all their steps over the longest one's model time: most of
them end well before it), so at time scale ``s`` they keep ``s r C`` of the ``K`` cores the
run gets busy (utilization ``u = s r C / K``), and a step waits about ``HOP_S / (1 - u)`` in
transit (a queue's wait grows as its server fills). Its share off the model stays under the
budget ``b`` of a mean step of ``M`` model seconds while ``s HOP_S / (1 - u) <= b M``, that is

    s <= b M / (HOP_S + b M r C / K)

``M`` counts each step's tool seconds and its output tokens at the model's one-sequence token
time (a lower bound: batching only lengthens a step). ``K`` is the cores this process may use,
shared with other work as the scheduler shares them: the run's ``RUN_PROCESSES`` processes get
``K n / (n + L)`` of them against a 1-minute load average ``L``. The result is rounded down to 1,
2 or 5 times a power of ten, between 1 and ``MAX_TIME_SCALE``.
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
CPU_S_PER_STEP = 0.015
"""CPU seconds every process together spends per trajectory step (about 7 events: published,
stored, decided, projected, followed): 12-18 ms measured, docs/benchmarks.md."""
RUN_PROCESSES = 6
"""A run's busy processes: nats-server, the control plane, the ledger projector, the workers,
the tool executor, the launcher."""
MAX_TIME_SCALE = 100.0


@dataclass(frozen=True, slots=True)
class AutoTimeScale:
    time_scale: float
    step_s: float
    """Mean model seconds per step of the trajectories."""
    steps_per_s: float
    """Steps the trajectories make per model second."""
    num_trajectories: int
    free_cores: float
    """The cores the run gets (``K``)."""
    num_cores: int

    def describe(self) -> str:
        """One line that says what was picked and why."""
        return (
            f"time scale auto: {self.time_scale:g}x ({self.num_trajectories} trajectories, "
            f"~{self.steps_per_s:.1f} steps per model s of ~{self.step_s:.1f} s each, "
            f"{self.free_cores:.2g} of {self.num_cores} cores: time off the model under "
            f"{OFF_MODEL_BUDGET:.0%})"
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
    others = load if load is not None else os.getloadavg()[0]
    share = cores * RUN_PROCESSES / (RUN_PROCESSES + max(0.0, others))
    step_s, steps_per_s = step_pace(trace, model, hardware)
    queueing_s = OFF_MODEL_BUDGET * step_s * steps_per_s * CPU_S_PER_STEP / share
    bound = OFF_MODEL_BUDGET * step_s / (HOP_S + queueing_s) if step_s > 0 else 1.0
    return AutoTimeScale(round_down(bound), step_s, steps_per_s, len(trace), share, cores)


def step_pace(trace: Sequence[TraceTrajectory], model: str, hardware: str) -> tuple[float, float]:
    """(mean model seconds of a step, steps per model second): a step is its tool time and its
    output at one sequence's pace; the rollout lasts its longest trajectory."""
    token_s = preset(model, hardware).solo_token_s()
    durations = [
        sum(step.tool_s + step.output_tokens * token_s for step in trajectory.steps)
        for trajectory in trace
    ]
    num_steps = sum(len(trajectory.steps) for trajectory in trace)
    if not num_steps or max(durations) <= 0:
        return 0.0, 0.0
    return sum(durations) / num_steps, num_steps / max(durations)


def round_down(value: float) -> float:
    """1, 2 or 5 times a power of ten, at most ``value``, within [1, ``MAX_TIME_SCALE``]."""
    if value <= 1:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    nice = max(m * power for m in (1, 2, 5) if m * power <= value)
    return float(min(MAX_TIME_SCALE, nice))
