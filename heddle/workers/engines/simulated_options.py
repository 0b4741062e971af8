"""Options of the ``sim`` engine (a cheap import: the registry and the CLI read it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from heddle.policy.cost.model import HARDWARE, MODELS, TP_DEGREES, CostModel, preset
from heddle.policy.cost.profiles import parse_profile
from heddle.policy.engine_models import DEFAULT_ENGINE_MODEL, ENGINE_MODELS
from heddle.policy.migration.transfers import DEFAULT_LINK_BANDWIDTH_BYTES_S
from heddle.policy.scheduling.preemption import PreemptionConfig
from heddle.workers.engines.base import parse_gpu_ids

_PREEMPTION = PreemptionConfig()


@dataclass(frozen=True, slots=True)
class SimulatedEngineOptions:
    model: str = field(default="qwen3-8b", metadata={"help": f"one of {sorted(MODELS)}"})
    hardware: Literal["h100", "h200"] = field(default="h200", metadata={"help": "GPU kind"})
    tp: int = field(default=1, metadata={"help": "tensor-parallel degree: 1, 2, 4 or 8"})
    time_scale: float = field(default=1.0, metadata={"help": "model seconds per wall second"})
    max_running: int = field(default=1024, metadata={"help": "most generations decoding at once"})
    preemptive: bool = field(default=True, metadata={"help": "higher priority preempts lower"})
    engine_model: str = field(
        default=DEFAULT_ENGINE_MODEL,
        metadata={
            "help": f"engine behaviour (prefix cache, preemption), one of {sorted(ENGINE_MODELS)}"
        },
    )
    preemption_gap: float = field(
        default=_PREEMPTION.min_priority_gap, metadata={"help": "priority margin to preempt"}
    )
    preemption_relative_gap: float = field(
        default=_PREEMPTION.min_relative_gap,
        metadata={"help": "... and fraction of the victim's |priority| to preempt"},
    )
    profile: Path | None = field(
        default=None,
        metadata={"help": "measured ITL profile (.csv or .json) instead of the preset"},
    )
    link_bandwidth_bytes_s: float = field(
        default=DEFAULT_LINK_BANDWIDTH_BYTES_S, metadata={"help": "KV transfer link (bytes/s)"}
    )
    vocab_size: int = field(default=256, metadata={"help": "pseudo-token ids are below this"})
    seed: int = field(default=0, metadata={"help": "seed when a request carries none"})
    weight_load_s: float = field(
        default=0.0, metadata={"help": "model seconds a weight swap pauses the engine"}
    )
    gpu_ids: str = field(
        default="",
        metadata={
            "help": "its node's GPUs, comma-separated, one per TP rank (empty: never re-sharded)"
        },
    )
    restart_s: float = field(
        default=30.0,
        metadata={"help": "model seconds a re-shard's relaunch takes, weights aside"},
    )

    def __post_init__(self) -> None:
        if self.model not in MODELS:
            raise ValueError(f"model must be one of {sorted(MODELS)}, got {self.model!r}")
        if self.hardware not in HARDWARE:
            raise ValueError(f"hardware must be one of {sorted(HARDWARE)}")
        if self.profile is None and self.tp not in TP_DEGREES:
            raise ValueError(f"tp must be one of {TP_DEGREES} (or measured in --profile)")
        if self.profile is not None and self.profile.suffix not in (".csv", ".json"):
            raise ValueError(f"profile {self.profile} must be a .csv or .json file")
        for name in ("time_scale", "link_bandwidth_bytes_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0")
        if not self.weight_load_s >= 0 or not self.restart_s >= 0:
            raise ValueError("weight_load_s and restart_s must be >= 0")
        gpu_ids = parse_gpu_ids(self.gpu_ids)
        if gpu_ids and len(gpu_ids) != self.tp:
            raise ValueError(f"gpu_ids names {len(gpu_ids)} GPUs for TP {self.tp}")
        if self.engine_model not in ENGINE_MODELS:
            raise ValueError(
                f"engine_model must be one of {sorted(ENGINE_MODELS)}, got {self.engine_model!r}"
            )
        if self.vocab_size < 1:
            raise ValueError("vocab_size must be >= 1")


def load_cost_model(options: SimulatedEngineOptions) -> CostModel:
    """The calibrated preset, or the measured profile's model for ``options.tp``."""
    if options.profile is None:
        return preset(options.model, options.hardware, options.tp)
    try:
        text = options.profile.read_text()
    except OSError as exc:
        raise ValueError(f"cannot read profile {options.profile}: {exc.strerror}") from None
    fmt: Literal["csv", "json"] = "csv" if options.profile.suffix == ".csv" else "json"
    profile = parse_profile(
        text, fmt, source=str(options.profile), model=options.model, hardware=options.hardware
    )
    return profile.cost_model(options.tp)
