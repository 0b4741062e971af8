"""Synthetic agentic workloads (coding, search, math) in the trace format.

    >>> from heddle.workloads import generate
    >>> trace = generate("coding", num_trajectories=64, seed=0)

The registry's names feed CLI choices (``workload_names()``); ``catalog`` holds each workload's
parameters with their sources (``docs/calibration.md`` section 2).

Modules: ``spec`` (``WorkloadSpec``: a workload's parameters), ``catalog`` (the named workloads),
``distributions`` (lognormals named by published quantiles), ``generator`` (drawing a spec's
trajectories into traces), ``stats`` (summary statistics of a trace), ``text`` (the synthetic text
layer, with a stated share of signal) and ``text_vocabulary`` (its words), ``zoo`` (parameterised
agent families) with ``zoo_params`` (their parameter records), ``zoo_ranges`` (the documented ranges
they are drawn from), ``agent_shape`` (the concrete shape and sampler a record becomes) and
``zoo_wide`` (the hunter's wide family); ``history`` (the history a rollout is judged with: other
prompts, the same prompts, or none).
"""

from __future__ import annotations

from heddle.traces import TraceTrajectory
from heddle.workloads.catalog import WORKLOADS
from heddle.workloads.distributions import LogNormal
from heddle.workloads.generator import generate_from_spec
from heddle.workloads.spec import ToolModel, TurnModel, WorkloadSpec
from heddle.workloads.stats import WorkloadSummary, summarize

__all__ = [
    "WORKLOADS",
    "LogNormal",
    "ToolModel",
    "TurnModel",
    "WorkloadSpec",
    "WorkloadSummary",
    "generate",
    "generate_from_spec",
    "summarize",
    "workload_names",
    "workload_spec",
]


def workload_names() -> list[str]:
    return sorted(WORKLOADS)


def workload_spec(name: str) -> WorkloadSpec:
    try:
        return WORKLOADS[name]
    except KeyError:
        raise ValueError(
            f"unknown workload {name!r}; choose one of {', '.join(workload_names())}"
        ) from None


def generate(
    name: str, num_trajectories: int, seed: int, group_size: int | None = None, epoch: int = 0
) -> list[TraceTrajectory]:
    """``num_trajectories`` trajectories of the named workload, in GRPO groups of ``group_size``
    (default: the workload's own, 8 or 16). Same arguments, same trace; another ``epoch`` draws
    new samples of the same prompts (a history for prompt-based predictors)."""
    return generate_from_spec(workload_spec(name), num_trajectories, seed, group_size, epoch)
