"""The flags ``heddle rollout run`` and ``compare`` share (``submit`` takes some of them), and
the two blocks both read the same way: where the trajectories come from (``SourceFlags``) and
how the engines and the control plane are set up (``EngineFlags``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from heddle.cli.up import check_engine_options, control_plane_config
from heddle.controlplane import ControlPlaneConfig
from heddle.errors import UserError
from heddle.rollout.flags import engine_defaults, source_from_flags
from heddle.rollout.sources import Source
from heddle.rollout.submission import RolloutPlan
from heddle.rollout.time_scale import auto_time_scale
from heddle.workers.environments import environment_names
from heddle.workloads import workload_names

WorkloadOpt = Annotated[
    str | None, typer.Option(help=f"Synthetic workload: {', '.join(workload_names())}")
]
TraceOpt = Annotated[Path | None, typer.Option(help="JSONL trace file (replayed by `trace`)")]
TasksOpt = Annotated[Path | None, typer.Option(help="JSONL task file of a real environment")]
_ENVIRONMENTS = ", ".join(environment_names())
EnvOpt = Annotated[
    str | None, typer.Option("--env", help=f"Environment of --tasks: {_ENVIRONMENTS}")
]
TrajectoriesOpt = Annotated[int, typer.Option(help="Trajectories of --workload")]
GroupOpt = Annotated[int, typer.Option(help="Samples per task (--tasks)")]
ToolsOpt = Annotated[int, typer.Option(help="Tool executors to start", min=0)]
RunTimeoutOpt = Annotated[
    float | None, typer.Option(help="Give up (and cancel) after this many wall seconds")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object")]
QuietOpt = Annotated[bool, typer.Option(help="No live progress on stderr")]
DeploymentTimeScaleOpt = Annotated[
    float | None,
    typer.Option(
        "--time-scale",
        help="Model seconds per wall second of the deployment's sim engines (default: the "
        "deployment's, from its workers' registrations; another value is refused)",
    ),
]
RunTimeScaleOpt = Annotated[
    str | None,
    typer.Option(
        "--time-scale",
        help="sim engines: model seconds per wall second, or auto (the default): the fastest "
        "at which this machine keeps the model clock (time off the model under 5%), printed; "
        "with --attach, the deployment's",
    ),
]
TrainerOpt = Annotated[
    str, typer.Option(help="Trainer name the rollout is submitted under (its owner)")
]
SimCostModelOpt = Annotated[
    str | None,
    typer.Option(help="Cost-model preset of the workers' model (default: the sim engine's)"),
]
SimHardwareOpt = Annotated[
    str | None, typer.Option(help="GPU kind of the cost model (default: the sim engine's)")
]


@dataclass(frozen=True, slots=True)
class SourceFlags:
    """``--workload`` / ``--trace`` / ``--tasks`` and the flags that go with them."""

    workload: str | None
    trace: Path | None
    tasks: Path | None
    env: str | None
    trajectories: int
    seed: int
    group_size: int
    tokenizer: str

    def source(self) -> Source:
        """The trajectories they name (``UserError`` for a bad combination)."""
        return source_from_flags(
            self.workload, self.trace, self.tasks, self.env, self.trajectories, self.seed,
            self.group_size, self.tokenizer,
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class EngineFlags:
    """``--engine`` with its ``--name value`` options, and the control plane's flags."""

    engine: str
    options: dict[str, str]
    cost_model: str | None
    hardware: str | None
    predictor: str
    sigma: float
    seed: int
    worker_timeout_s: float

    def control_plane(self) -> tuple[ControlPlaneConfig, float]:
        """The control plane's config (cost model and hardware default to the sim engine's)
        and the engines' time scale; ``UserError`` for bad engine options."""
        check_engine_options(self.engine, self.options)
        model, sim_hardware, time_scale = engine_defaults(self.engine, self.options)
        config = control_plane_config(
            cost_model=self.cost_model or model or "qwen3-8b",
            hardware=self.hardware or sim_hardware or "h200",
            predictor=self.predictor,
            sigma=self.sigma,
            seed=self.seed,
            worker_timeout_s=self.worker_timeout_s,
            transfer_kv=True,
        )
        return config, time_scale


def run_time_scale(
    flag: str | None, engine: str, options: dict[str, str], source: Source
) -> tuple[dict[str, str], str]:
    """The engine options with the time scale ``--time-scale`` names (``auto`` or none: the
    one ``heddle.rollout.time_scale`` picks for a sim engine), and the line that says which was
    picked ("" when it was given)."""
    if flag is not None and flag != "auto":
        try:
            value = float(flag)
        except ValueError:
            raise UserError(f"--time-scale takes a number or auto, not {flag!r}") from None
        return {**options, "time_scale": repr(value)}, ""
    if engine != "sim":
        if flag == "auto":
            raise UserError("--time-scale auto is for sim engines (real engines run at 1)")
        return options, ""
    check_engine_options(engine, options)
    if not source.trace:
        note = "time scale auto: 1x (the tasks' step lengths are unknown: give --time-scale)"
        return {**options, "time_scale": "1.0"}, note
    model, hardware, _ = engine_defaults(engine, options)
    auto = auto_time_scale(source.trace, model or "qwen3-8b", hardware or "h200")
    return {**options, "time_scale": repr(auto.time_scale)}, auto.describe()


def attached_time_scale(
    flag: str | None, options: dict[str, str]
) -> tuple[dict[str, str], float | None]:
    """``--attach``: a running deployment's time scale is its own. A number given is checked
    against it by the control plane, and given to the workers the run starts beside it; None
    or ``auto``: the deployment's (the plan names none)."""
    if flag is None or flag == "auto":
        return options, None
    try:
        value = float(flag)
    except ValueError:
        raise UserError(f"--time-scale takes a number or auto, not {flag!r}") from None
    return {**options, "time_scale": repr(value)}, value


def rollout_plan(policy: str, source: Source, time_scale: float | None) -> RolloutPlan:
    """The rollout to submit (``UserError`` when it cannot be)."""
    try:
        return RolloutPlan(policy, source.specs, source.label, time_scale)
    except ValueError as exc:
        raise UserError(str(exc)) from None
