"""Control-plane overhead: step event -> resulting command latency at a paper-scale load.

A thin adapter over ``heddle.bench.control`` (``heddle bench control``), the live control
plane's own load driver: a real control plane (``heddle up`` as a child process) and this
process playing the workers of one rollout of ``num_trajectories`` trace trajectories. Measured:
from just before a ``ToolReturned`` is published to the arrival of the command that routes the
next step (``ContinueTrajectory``, or ``StartTrajectory`` elsewhere) on a core-NATS subscription
to ``heddle.cmd.worker.>``; both ends on this process's monotonic clock, so no clock skew. The
load is given as steps per second over the fleet: each trajectory steps every
``num_trajectories / steps_per_s`` seconds on average.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from heddle.bench.control import BenchOptions, run_control_bench
from heddle.config import Settings
from heddle.controlplane import ControlPlaneConfig, PredictorConfig
from heddle.workloads import generate

TARGET_P99_MS = 5.0


@dataclass(frozen=True, slots=True)
class OverheadOptions:
    num_trajectories: int = 6400
    num_workers: int = 16
    policy: str = "heddle"
    workload: str = "coding"
    seed: int = 0
    steps_per_s: float = 50.0
    """Steps (tool returns) per wall second over the fleet (6400 trajectories stepping every
    ~30 s on real GPUs make ~200/s; the 2-core development VM saturates near 100/s)."""
    duration_s: float = 240.0
    """Wall seconds of the run, from the submission (initial placement included)."""
    warmup_s: float = 90.0
    """Seconds left out at the start: the initial placement and the first steps' ramp."""
    model: str = "qwen3-8b"
    hardware: str = "h200"
    predictor: str = "online"

    def __post_init__(self) -> None:
        if self.num_trajectories < 1 or self.num_workers < 1 or not self.steps_per_s > 0:
            raise ValueError("need trajectories >= 1, workers >= 1 and steps_per_s > 0")
        if not self.duration_s > self.warmup_s >= 0:
            raise ValueError("need duration_s > warmup_s >= 0")

    @property
    def step_s(self) -> float:
        """Mean wall seconds between two steps of one trajectory."""
        return self.num_trajectories / self.steps_per_s


@dataclass(frozen=True, slots=True)
class OverheadResult:
    options: OverheadOptions
    bench: dict[str, Any]
    """``run_control_bench``'s document: percentiles, rates, every consumer's batch times."""

    @property
    def p99_ms(self) -> float:
        return float(self.bench["p99_ms"])

    def to_json(self) -> dict[str, Any]:
        bench = self.bench
        return {
            "measured": "ToolReturned published -> routed ContinueTrajectory/StartTrajectory "
            "received (one process's monotonic clock)",
            "options": asdict(self.options),
            "num_samples": bench["num_samples"],
            "latency_ms": {key: bench[f"{key}_ms"] for key in ("p50", "p90", "p99", "max")},
            "steps_per_s": self.options.steps_per_s,
            "events_per_s": bench["events_per_s"],
            "commands_per_s": bench["commands_per_s"],
            "control_batch_ms": {
                c["durable"]: {"p50": c["batch_ms_p50"], "p99": c["batch_ms_p99"]}
                for c in bench["consumers"]
            },
            "control_decide_ms": {
                u["slot"]: {"p50": u["decide_ms_p50"], "p99": u["decide_ms_p99"]}
                for u in bench["slots"]
            },
            "target_p99_ms": TARGET_P99_MS,
            "meets_target": bench["num_samples"] > 0 and self.p99_ms < TARGET_P99_MS,
        }


async def measure_overhead(settings: Settings, options: OverheadOptions) -> OverheadResult:
    """Run the measurement on ``settings`` (use a fresh data dir: it starts a control plane)."""
    trace = generate(options.workload, options.num_trajectories, options.seed)
    control = ControlPlaneConfig(
        cost_model=options.model,
        hardware=options.hardware,
        predictor=PredictorConfig(name=options.predictor, seed=options.seed),
        worker_timeout_s=60.0,
        learn_from_ledger=False,
    )
    bench = BenchOptions(
        num_workers=options.num_workers,
        step_s=options.step_s,
        duration_s=options.duration_s,
        warmup_s=options.warmup_s,
        seed=options.seed,
    )
    log_dir = settings.data_dir / "logs" / "bench-fidelity"
    document = await run_control_bench(settings, trace, bench, control, log_dir, options.policy)
    return OverheadResult(options, document)
