"""How big the figures' simulations are: ``QUICK`` (tests, seconds) or ``PAPER`` (the default).

The paper sizes its control-plane overhead at n = 6400 trajectories on m = 16 workers and its
overall comparison on Qwen3-8B/14B/32B over coding, search and math agents. ``PAPER`` keeps the
models, the workloads and the 16-GPU budget, and runs 2048 trajectories per rollout (the
simulator takes ~5-15 s per run there on one core, and the figures need ~80 runs); the placement
solver alone is timed at the paper's n = 6400, m = 16. ``--trajectories``/``--gpus`` change it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from heddle.policy.cost.model import HARDWARE, MODELS
from heddle.policy.engine_models import ENGINE_MODELS
from heddle.workloads import workload_names


@dataclass(frozen=True, slots=True)
class FigureScale:
    name: str
    num_trajectories: int
    """Trajectories per simulated rollout (every system of a comparison runs the same trace)."""
    num_gpus: int
    """GPU budget of every simulated cluster (>= 8, so that Fix-8 has one worker)."""
    hardware: str = "h200"
    engine_model: str = "sglang"
    """How every system's engines behave (``heddle.policy.engine_models``)."""
    workloads: tuple[str, ...] = ("coding", "search", "math")
    """Workloads of the overall comparison (Fig. 12)."""
    models: tuple[str, ...] = ("qwen3-8b", "qwen3-14b", "qwen3-32b")
    """Models of the overall comparison (Fig. 12)."""
    ablation_workloads: tuple[str, ...] = ("coding", "search", "math")
    """Workloads of the per-mechanism experiments (Fig. 14, 15, 16 and the predictor study)."""
    ablation_model: str = "qwen3-32b"
    """Model of the per-mechanism experiments (the paper: gains grow with model size)."""
    sigmas: tuple[float, ...] = (0.0, 0.25, 0.5, 1.0, 2.0)
    """Noisy-oracle log-error standard deviations of the predictor sweep (0 is the oracle)."""
    placement_num_trajectories: int = 6400
    placement_num_workers: int = 16
    """The paper's placement-solver size (s.7.5: ~42 ms for its DP)."""
    num_timing_repeats: int = 5
    seed: int = 0

    def __post_init__(self) -> None:
        if self.num_trajectories < 1:
            raise ValueError(f"num_trajectories must be >= 1, got {self.num_trajectories}")
        if self.num_gpus < 8:
            raise ValueError(
                f"num_gpus must be >= 8 (Fix-8 needs one TP8 worker), got {self.num_gpus}"
            )
        if self.hardware not in HARDWARE:
            raise ValueError(
                f"unknown hardware {self.hardware!r}; choose one of {sorted(HARDWARE)}"
            )
        if self.engine_model not in ENGINE_MODELS:
            raise ValueError(
                f"unknown engine model {self.engine_model!r}; choose one of {list(ENGINE_MODELS)}"
            )
        for model in (*self.models, self.ablation_model):
            if model not in MODELS:
                raise ValueError(f"unknown model {model!r}; choose one of {sorted(MODELS)}")
        for name in (*self.workloads, *self.ablation_workloads):
            if name not in workload_names():
                raise ValueError(f"unknown workload {name!r}; choose one of {workload_names()}")
        if not self.sigmas or min(self.sigmas) < 0:
            raise ValueError("sigmas must be a non-empty list of values >= 0")

    def describe(self) -> list[str]:
        """The scale as lines for the README (what ran)."""
        return [
            f"scale `{self.name}`: {self.num_trajectories} trajectories per rollout, "
            f"{self.num_gpus} x {self.hardware.upper()} GPUs, seed {self.seed}, engine model "
            f"`{self.engine_model}` for every system, online predictor unless a study says",
            f"overall comparison: workloads {', '.join(self.workloads)}; "
            f"models {', '.join(self.models)}",
            f"per-mechanism experiments: {self.ablation_model} on "
            f"{', '.join(self.ablation_workloads)}",
            f"predictor sweep: noisy-oracle sigma in {', '.join(map(str, self.sigmas))}",
            f"placement solver timed at n = {self.placement_num_trajectories}, "
            f"m = {self.placement_num_workers} (median of {self.num_timing_repeats})",
        ]

    def resized(
        self,
        num_trajectories: int | None = None,
        num_gpus: int | None = None,
        seed: int | None = None,
        engine_model: str | None = None,
    ) -> FigureScale:
        return replace(
            self,
            engine_model=engine_model or self.engine_model,
            num_trajectories=num_trajectories or self.num_trajectories,
            num_gpus=num_gpus or self.num_gpus,
            seed=self.seed if seed is None else seed,
        )


PAPER = FigureScale(name="paper", num_trajectories=2048, num_gpus=16)
QUICK = FigureScale(
    name="quick",
    num_trajectories=32,
    num_gpus=8,
    models=("qwen3-8b",),
    ablation_workloads=("math",),
    ablation_model="qwen3-8b",
    sigmas=(0.0, 1.0),
    placement_num_trajectories=640,
    placement_num_workers=8,
    num_timing_repeats=1,
)
