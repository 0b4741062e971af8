"""Options of the ``torch`` engine (``heddle worker --engine torch ...``). A cheap import: no torch.

The engine runs one model (``tiny`` or a local folder) on one device with continuous batching.
``max_running`` and ``max_kv_tokens`` bound the batch; see ``scheduler.py`` for how.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from heddle.policy.scheduling.preemption import PreemptionConfig
from heddle.workers.engines.base import parse_gpu_ids

DTypeName = Literal["auto", "float32", "bfloat16", "float16"]
ParkLocation = Literal["device", "host"]
PreemptionMode = Literal["keep", "recompute"]

TINY_MODEL = "tiny"


def _help(text: str) -> dict[str, str]:
    return {"help": text}


@dataclass(frozen=True, slots=True)
class TorchEngineOptions:
    model: str = field(
        default=TINY_MODEL,
        metadata=_help(
            "'tiny' (built-in seeded random Qwen3-shaped model) or a local model folder"
        ),
    )
    device: str = field(default="cpu", metadata=_help("torch device: cpu, cuda or cuda:N"))
    dtype: DTypeName = field(
        default="auto",
        metadata=_help("weights and KV dtype (auto: float32 on cpu, bfloat16 on cuda)"),
    )
    max_running: int = field(default=32, metadata=_help("most requests decoded together"))
    max_kv_tokens: int = field(
        default=65536, metadata=_help("KV tokens held at once: running, preempted and cached")
    )
    seed: int = field(
        default=0, metadata=_help("seed of the tiny model's weights and of unseeded sampling")
    )
    preemption_threshold: float = field(
        default=0.0, metadata=_help("priority gap by which a waiting request preempts")
    )
    preemption_relative_gap: float = field(
        default=PreemptionConfig().min_relative_gap,
        metadata=_help("... and fraction of the running priority it must exceed"),
    )
    preemption_mode: PreemptionMode = field(
        default="keep",
        metadata=_help("keep: a preempted request keeps its KV; recompute: drops it"),
    )
    park_on: ParkLocation = field(
        default="device", metadata=_help("where KV waits while not decoding (host: CPU memory)")
    )
    max_prefill_chunk_tokens: int = field(
        default=2048, metadata=_help("most tokens per prefill forward (longer prompts are chunked)")
    )
    initial_kv_capacity_tokens: int = field(
        default=256, metadata=_help("first per-slot KV length; slots grow by doubling")
    )
    num_threads: int = field(default=0, metadata=_help("torch CPU threads (0: torch's default)"))
    tp: int = field(
        default=1,
        metadata=_help("TP degree it reports (it runs on one device; a re-shard restarts it)"),
    )
    gpu_ids: str = field(
        default="",
        metadata=_help(
            "its node's GPUs, comma-separated, one per TP rank (empty: never re-sharded)"
        ),
    )

    @property
    def preemption(self) -> PreemptionConfig:
        """The shared preemption rule with this engine's margins."""
        return PreemptionConfig(self.preemption_threshold, self.preemption_relative_gap)

    def __post_init__(self) -> None:
        if not self.model:
            raise ValueError("--model must be 'tiny' or a local model folder")
        if self.max_running < 1 or self.max_kv_tokens < 2:
            raise ValueError("max-running must be >= 1 and max-kv-tokens >= 2")
        if self.max_prefill_chunk_tokens < 1 or self.initial_kv_capacity_tokens < 1:
            raise ValueError("max-prefill-chunk-tokens and initial-kv-capacity-tokens must be >= 1")
        if min(self.preemption_threshold, self.preemption_relative_gap, self.num_threads) < 0:
            raise ValueError(
                "preemption-threshold, preemption-relative-gap and num-threads must be >= 0"
            )
        if not (self.device == "cpu" or self.device.startswith("cuda")):
            raise ValueError(f"--device {self.device!r}: use cpu, cuda or cuda:N")
        gpu_ids = parse_gpu_ids(self.gpu_ids)
        if self.tp < 1 or (gpu_ids and len(gpu_ids) != self.tp):
            raise ValueError(f"tp must be >= 1 and gpu-ids name tp GPUs, got {self.gpu_ids!r}")
