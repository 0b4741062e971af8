"""GPU cost model of one inference worker: decode step time, prefill time, KV capacity, and the
interference factor F(b) = ITL(b) / ITL(1) that the placement solver minimises against.

The analytic form and every constant come from ``docs/calibration.md`` section 1 (derived from
the ML.ENERGY leaderboard's vLLM measurements on H100, Chung et al., NeurIPS D&B 2025, and from
Vidur's H100 operator profiles for prefill)::

    t_step(S, p) = a(p) + W / (p * BW) + beta(p) * |S| + kv_bytes_per_token * sum(ctx) / (p * BW)

bounded below by the compute time 2 * params * |S| / (p * decode_flops) once linear layers turn
compute bound (~256 sequences). Prefill of ``n`` new tokens of a sequence whose first ``c`` are
cached computes its linear layers (``2 * params`` FLOPs a token) and attention over the context:
each new token's scores and weighted values against every token before it and itself, ``4 *
layers * query_heads * head_dim`` FLOPs per (new token, attended token) pair, ``n c + n (n + 1)
/ 2`` pairs (causal), both at the prefill rate (docs/calibration.md s.1, "Prefill attention")::

    t_prefill(n, c, p) = (2 * params * n + 4 * L * H_q * d_head * (n c + n (n + 1) / 2)) / rate(p)

Measured profiles (``heddle.policy.cost.profiles``) replace the analytic batch term with
interpolation in a user's own ITL table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

GB = 1e9
KIB = 1024


@dataclass(frozen=True, slots=True)
class Hardware:
    name: str
    hbm_bytes: float
    """Memory of one GPU."""
    hbm_bandwidth_bytes_s: float
    """Effective HBM bandwidth (92% of peak; docs/calibration.md section 1)."""
    decode_flops: float
    """Dense bf16 rate reached by decode's linear layers once compute bound."""
    prefill_flops: float
    """Dense bf16 rate reached by prefill (~65% of peak, from Vidur's H100 profiles)."""


# docs/calibration.md s.1: BW 3.08 TB/s on H100 (92% of 3.35); H200 assumed the same 92% of 4.8
# TB/s.
# Compute: ~640 TFLOP/s for decode's linear layers on H100; prefill ~65% of 989 TFLOP/s dense.
H100 = Hardware("h100", 80 * GB, 3.08e12, 640e12, 0.65 * 989e12)
H200 = Hardware("h200", 141 * GB, 4.4e12, 640e12, 0.65 * 989e12)
HARDWARE: dict[str, Hardware] = {hw.name: hw for hw in (H100, H200)}


@dataclass(frozen=True, slots=True)
class ModelShape:
    name: str
    num_params: float
    weight_bytes: float
    """bf16 weights (docs/calibration.md s.1)."""
    kv_bytes_per_token: int
    """layers * kv_heads(8) * head_dim(128) * 2 (K and V) * 2 bytes (docs/calibration.md s.1)."""
    beta_tp1_s: float
    """Per-sequence non-KV cost per decode step at TP1 (docs/calibration.md s.1)."""
    num_layers: int
    num_query_heads: int
    head_dim: int = 128
    """Attention shape (docs/calibration.md s.1): a prefill's attention FLOPs grow with the
    context it attends to (``attention_flops_per_pair``)."""

    @property
    def attention_flops_per_pair(self) -> float:
        """FLOPs of one new token attending to one context token, over all layers: ``Q K^T``
        and the weighted sum of ``V``, ``2 * head_dim`` multiply-adds per query head each."""
        return 4.0 * self.num_layers * self.num_query_heads * self.head_dim


QWEN3_8B = ModelShape("qwen3-8b", 8.2e9, 16.4 * GB, 144 * KIB, 0.06e-3, 36, 32)
QWEN3_14B = ModelShape("qwen3-14b", 14.8e9, 29.6 * GB, 160 * KIB, 0.07e-3, 40, 40)
QWEN3_32B = ModelShape("qwen3-32b", 32.8e9, 65.6 * GB, 256 * KIB, 0.11e-3, 64, 64)
MODELS: dict[str, ModelShape] = {m.name: m for m in (QWEN3_8B, QWEN3_14B, QWEN3_32B)}

# Fixed per-step overhead a(p) (docs/calibration.md s.1: 2.44, 3.71, 4.97 ms at TP 1, 2, 4; TP adds
# ~1.3 ms per doubling, so TP8 is extrapolated to 6.23 ms: an assumption).
_STEP_OVERHEAD_S = {1: 2.44e-3, 2: 3.71e-3, 4: 4.97e-3, 8: 6.23e-3}
# beta falls from 0.11 to 0.09 ms from TP1 to TP2 for Qwen3-32B (docs/calibration.md s.1); we assume
# the same 0.82x per doubling for other models and degrees.
_BETA_PER_DOUBLING = 0.82
# Prefill parallel efficiency per TP doubling: 32B goes 10k -> 19k tokens/s from TP1 to TP2.
_PREFILL_EFFICIENCY_PER_DOUBLING = 0.95
# KV capacity: 90% of HBM across the TP group, minus weights (docs/calibration.md s.1).
_KV_MEMORY_FRACTION = 0.9
TP_DEGREES = (1, 2, 4, 8)


class CostModel(Protocol):
    """Time costs of one worker (one model on ``tp_degree`` GPUs)."""

    @property
    def tp_degree(self) -> int: ...

    @property
    def max_kv_tokens(self) -> int: ...

    def decode_step_s(self, batch_size: int, total_context_tokens: int) -> float:
        """One decode iteration producing one token for each of ``batch_size`` sequences."""
        ...

    def prefill_s(self, num_tokens: int, num_cached_tokens: int = 0) -> float:
        """Prefill ``num_tokens`` new tokens of one sequence whose first ``num_cached_tokens``
        are already in its KV (the new tokens attend to those and to each other). A prefill
        batch costs the sum of its sequences' (the shipped models have no per-batch term)."""
        ...

    def interference(self, batch_size: int, mean_context_tokens: int = 0) -> float:
        """F(b) = ITL(b) / ITL(1) at the given context length (>= 1, non-decreasing in b)."""
        ...

    def solo_token_s(self, context_tokens: int = 0) -> float:
        """T: per-token time of one sequence alone on this worker."""
        ...


@runtime_checkable
class PrefillTerms(Protocol):
    """A cost model whose prefill is linear in tokens and in attended pairs (``prefill_s(n, c)
    = per_token_s * n + per_pair_s * attended_pairs(n, c)``)."""

    def prefill_terms(self) -> tuple[float, float]: ...


@dataclass(frozen=True, slots=True)
class AnalyticCostModel:
    """The calibrated physical model of docs/calibration.md section 1."""

    model: ModelShape
    hardware: Hardware
    tp_degree: int = 1

    def __post_init__(self) -> None:
        if self.tp_degree not in _STEP_OVERHEAD_S:
            raise ValueError(f"tp_degree must be one of {TP_DEGREES}, got {self.tp_degree}")

    @property
    def name(self) -> str:
        return f"{self.model.name}/{self.hardware.name}/tp{self.tp_degree}"

    @property
    def _doublings(self) -> int:
        return int(math.log2(self.tp_degree))

    @property
    def _bandwidth(self) -> float:
        return self.tp_degree * self.hardware.hbm_bandwidth_bytes_s

    @property
    def max_kv_tokens(self) -> int:
        free_bytes = _KV_MEMORY_FRACTION * self.hardware.hbm_bytes * self.tp_degree
        return max(0, int((free_bytes - self.model.weight_bytes) / self.model.kv_bytes_per_token))

    def decode_step_s(self, batch_size: int, total_context_tokens: int) -> float:
        if batch_size <= 0:
            return 0.0
        fixed_s, per_context_token_s = self.decode_floor_terms(batch_size)
        memory_s = fixed_s + per_context_token_s * total_context_tokens
        compute_s = (
            2 * self.model.num_params * batch_size / (self.tp_degree * self.hardware.decode_flops)
        )
        return max(memory_s, compute_s)

    def decode_floor_terms(self, batch_size: int) -> tuple[float, float]:
        """``(fixed_s, per_context_token_s)`` with ``decode_step_s(b, C) >= fixed_s +
        per_context_token_s * C`` for every total context ``C``: the memory-bound terms (the
        compute bound only adds). ``heddle.policy.lower_bound`` sums them in closed form."""
        beta = self.model.beta_tp1_s * _BETA_PER_DOUBLING**self._doublings
        fixed_s = (
            _STEP_OVERHEAD_S[self.tp_degree]
            + self.model.weight_bytes / self._bandwidth
            + beta * batch_size
        )
        return fixed_s, self.model.kv_bytes_per_token / self._bandwidth

    def decode_linear_terms(self) -> tuple[float, float, float]:
        """``(shared_s, per_sequence_s, per_context_token_s)``: the floor of
        ``decode_floor_terms`` is exactly ``shared_s + per_sequence_s * b`` for a batch of ``b``
        (``heddle.policy.kv_work`` charges ``shared_s`` to the tokens by the KV they hold)."""
        one, per_context_token_s = self.decode_floor_terms(1)
        per_sequence_s = self.decode_floor_terms(2)[0] - one
        return one - per_sequence_s, per_sequence_s, per_context_token_s

    def prefill_s(self, num_tokens: int, num_cached_tokens: int = 0) -> float:
        if num_tokens <= 0:
            return 0.0
        per_token_s, per_pair_s = self.prefill_terms()
        return per_token_s * num_tokens + per_pair_s * attended_pairs(num_tokens, num_cached_tokens)

    def prefill_terms(self) -> tuple[float, float]:
        """``(per_token_s, per_pair_s)``: ``prefill_s(n, c) = per_token_s * n + per_pair_s *
        attended_pairs(n, c)`` (``heddle.policy.lower_bound`` sums them in closed form)."""
        rate = (
            self.tp_degree
            * self.hardware.prefill_flops
            * _PREFILL_EFFICIENCY_PER_DOUBLING**self._doublings
        )
        return 2 * self.model.num_params / rate, self.model.attention_flops_per_pair / rate

    def interference(self, batch_size: int, mean_context_tokens: int = 0) -> float:
        solo = self.decode_step_s(1, mean_context_tokens)
        return self.decode_step_s(batch_size, batch_size * mean_context_tokens) / solo

    def solo_token_s(self, context_tokens: int = 0) -> float:
        return self.decode_step_s(1, context_tokens)


def attended_pairs(num_tokens: int, num_cached_tokens: int) -> float:
    """(new token, attended token) pairs of a causal prefill of ``num_tokens`` after
    ``num_cached_tokens``: each new token attends to the cache, the new tokens before it and
    itself."""
    if num_tokens <= 0:
        return 0.0
    return num_tokens * max(0, num_cached_tokens) + num_tokens * (num_tokens + 1) / 2


def preset(model: str, hardware: str = "h200", tp_degree: int = 1) -> AnalyticCostModel:
    """A named calibrated model, e.g. ``preset("qwen3-32b", "h100", 2)``."""
    shape = _model_shape(model)
    if hardware not in HARDWARE:
        raise ValueError(f"unknown hardware {hardware!r}; choose one of {sorted(HARDWARE)}")
    return AnalyticCostModel(shape, HARDWARE[hardware], tp_degree)


def _model_shape(model: str) -> ModelShape:
    if model not in MODELS:
        raise ValueError(f"unknown model {model!r}; choose one of {sorted(MODELS)}")
    return MODELS[model]


WEIGHT_LOAD_BYTES_S_PER_GPU = 5e9
"""Loading a new weight version: each GPU of a worker reads its 1/TP shard at this rate (a
checkpoint on local NVMe or in the page cache, SGLang's ``/update_weights_from_disk``).
Assumption: no published figure."""


def weight_load_s(model: str, tp_degree: int) -> float:
    """Seconds a worker of ``tp_degree`` GPUs serving ``model`` pauses to load a weight version
    (``WEIGHT_LOAD_BYTES_S_PER_GPU``)."""
    return _model_shape(model).weight_bytes / (max(1, tp_degree) * WEIGHT_LOAD_BYTES_S_PER_GPU)
