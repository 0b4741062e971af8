#!/usr/bin/env python3
"""Profile decode time vs batch size of a Qwen3-8B-shaped model on one GPU; write an ITL profile.

Usage (from the repository root, on the GPU host; no network needed, weights are random):

    python deploy/gpu_profile.py --out profiles/qwen3-8b-h200.json
    python deploy/gpu_profile.py --tiny --device cpu --out /tmp/tiny.json   # a CPU smoke test

Two implementations of the same decoder forward (bf16, random weights, KV cache):

- ``engine``: the torch engine's own path (``ModelRunner.decode`` + sampling over its slot pool,
  transformers' Qwen3 forward), when transformers and heddle import here;
- ``native``: a self-contained torch decoder below (torch alone), run eagerly and, on CUDA, as a
  captured CUDA graph (closer to what SGLang/vLLM do per step).

For each context length and batch size it fills a KV cache of ``batch x context`` random tokens,
warms up, then times ``--steps`` decode steps with CUDA events (median). Points whose KV would
exceed ``--max-kv-gb`` are skipped, and so is the rest once ``--time-budget-s`` is spent; both
are listed. ``--out`` gets the primary table (engine if available, else native; first context) in
``heddle.policy.cost.profiles``' JSON format; ``<out>.full.json`` gets every measurement.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class Shape:
    name: str
    vocab: int
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    rope_theta: float = 1e6
    tied: bool = False

    @property
    def kv_bytes_per_token(self) -> int:  # bf16 K and V of every layer
        return self.layers * 2 * self.kv_heads * self.head_dim * 2

    @property
    def num_params(self) -> int:
        attention = self.hidden * self.head_dim * (2 * self.heads + 2 * self.kv_heads)
        per_layer = attention + 3 * self.hidden * self.intermediate
        return self.layers * per_layer + self.vocab * self.hidden * (1 if self.tied else 2)


QWEN3_8B = Shape("qwen3-8b", 151936, 4096, 36, 32, 8, 128, 12288)
TINY = Shape("tiny", 512, 128, 2, 4, 2, 32, 256, rope_theta=1e4, tied=True)


class NativeDecoder:
    """Qwen3 decoder forward in plain torch: RMSNorm, q/k norm, RoPE, GQA attention, SwiGLU."""

    def __init__(self, shape: Shape, dtype: torch.dtype, device: torch.device, seed: int = 0):
        self.shape, self.dtype, self.device = shape, dtype, device
        gen = torch.Generator(device=device).manual_seed(seed)

        def weight(*size: int) -> torch.Tensor:
            return (torch.randn(*size, generator=gen, device=device) * 0.02).to(dtype)

        s = shape
        ones = lambda n: torch.ones(n, dtype=dtype, device=device)  # noqa: E731
        self.embed = weight(s.vocab, s.hidden)
        self.lm_head = self.embed if s.tied else weight(s.vocab, s.hidden)
        self.norm = ones(s.hidden)
        self.blocks = [
            {
                "qkv": weight((s.heads + 2 * s.kv_heads) * s.head_dim, s.hidden),
                "o": weight(s.hidden, s.heads * s.head_dim),
                "gate_up": weight(2 * s.intermediate, s.hidden),
                "down": weight(s.hidden, s.intermediate),
                "in_norm": ones(s.hidden),
                "post_norm": ones(s.hidden),
                "q_norm": ones(s.head_dim),
                "k_norm": ones(s.head_dim),
            }
            for _ in range(s.layers)
        ]
        steps = torch.arange(0, s.head_dim, 2, device=device, dtype=torch.float32)
        self.inv_freq = 1.0 / (s.rope_theta ** (steps / s.head_dim))

    def kv_cache(self, batch: int, tokens: int) -> torch.Tensor:
        """``[layers, 2, batch, kv_heads, tokens, head_dim]`` filled with random values."""
        s = self.shape
        size = (s.layers, 2, batch, s.kv_heads, tokens, s.head_dim)
        return torch.empty(size, dtype=self.dtype, device=self.device).uniform_(-1, 1)

    @torch.inference_mode()
    def forward(self, ids: torch.Tensor, start: int, kv: torch.Tensor) -> torch.Tensor:
        """Logits after ``ids`` ``[B, T]`` at positions ``start..``; writes their KV into ``kv``."""
        s, (batch, num_new) = self.shape, ids.shape
        positions = torch.arange(start, start + num_new, device=self.device, dtype=torch.float32)
        angles = positions[:, None] * self.inv_freq[None, :]
        cos, sin = (
            torch.cat([f(angles)] * 2, dim=-1).to(self.dtype) for f in (torch.cos, torch.sin)
        )
        x = F.embedding(ids, self.embed)
        for layer, p in enumerate(self.blocks):
            q, k, v = (F.linear(_rms(x, p["in_norm"]), p["qkv"])).split(
                [s.heads * s.head_dim, s.kv_heads * s.head_dim, s.kv_heads * s.head_dim], dim=-1
            )
            q = _rope(_rms(q.view(batch, num_new, s.heads, s.head_dim), p["q_norm"]), cos, sin)
            k = _rope(_rms(k.view(batch, num_new, s.kv_heads, s.head_dim), p["k_norm"]), cos, sin)
            kv[layer, 0, :batch, :, start : start + num_new] = k.transpose(1, 2)
            kv[layer, 1, :batch, :, start : start + num_new] = v.view(
                batch, num_new, s.kv_heads, s.head_dim
            ).transpose(1, 2)
            keys = kv[layer, 0, :batch, :, : start + num_new]
            values = kv[layer, 1, :batch, :, : start + num_new]
            attention = _attention(q.transpose(1, 2), keys, values, causal=num_new > 1)
            x = x + F.linear(attention.transpose(1, 2).reshape(batch, num_new, -1), p["o"])
            gate, up = F.linear(_rms(x, p["post_norm"]), p["gate_up"]).chunk(2, dim=-1)
            x = x + F.linear(F.silu(gate) * up, p["down"])
        return F.linear(_rms(x[:, -1], self.norm), self.lm_head).float()


def _rms(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    variance = x.float().pow(2).mean(-1, keepdim=True)
    return (x.float() * torch.rsqrt(variance + eps)).to(x.dtype) * weight


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos[:, None, :] + rotated * sin[:, None, :]


def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    try:
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
    except TypeError:  # torch < 2.5: no enable_gqa
        repeat = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(repeat, dim=1), v.repeat_interleave(repeat, dim=1)
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


# Timing ------------------------------------------------------------------------------------


def time_steps(step: Callable[[], object], device: torch.device, warmup: int, steps: int) -> float:
    """Median seconds of one ``step()`` (CUDA events on a GPU, perf_counter otherwise)."""
    for _ in range(warmup):
        step()
    if device.type != "cuda":
        samples = []
        for _ in range(steps):
            started = time.perf_counter()
            step()
            samples.append(time.perf_counter() - started)
        return statistics.median(samples)
    torch.cuda.synchronize(device)
    events = [
        (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
        for _ in range(steps)
    ]
    for begin, end in events:
        begin.record()
        step()
        end.record()
    torch.cuda.synchronize(device)
    return statistics.median(begin.elapsed_time(end) for begin, end in events) / 1e3


def as_graph(step: Callable[[], object], device: torch.device) -> Callable[[], object]:
    """``step`` captured once as a CUDA graph (static shapes), replayed by the returned call."""
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        for _ in range(2):
            step()
    torch.cuda.current_stream(device).wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return graph.replay


# Implementations under test ----------------------------------------------------------------


class _Owner:
    """A slot owner of the engine's pool holding ``num_kv_tokens`` tokens."""

    def __init__(self, num_kv_tokens: int) -> None:
        self.num_kv_tokens = num_kv_tokens


class EngineImpl:
    """The torch engine's decode path: ``ModelRunner.decode`` + sampling over a filled slot pool."""

    name = "engine"

    def __init__(self, shape: Shape, dtype: torch.dtype, device: torch.device) -> None:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from transformers import Qwen3Config

        from heddle.workers.engines.torch_engine.forward import ModelRunner
        from heddle.workers.engines.torch_engine.kv import SlotPool
        from heddle.workers.engines.torch_engine.loading import build_random_model
        from heddle.workers.engines.torch_engine.sampler import RowSampling, sample

        self._pool_type, self._runner_type = SlotPool, ModelRunner
        self._row, self._sample = RowSampling, sample
        config = Qwen3Config(
            vocab_size=shape.vocab,
            hidden_size=shape.hidden,
            intermediate_size=shape.intermediate,
            num_hidden_layers=shape.layers,
            num_attention_heads=shape.heads,
            num_key_value_heads=shape.kv_heads,
            head_dim=shape.head_dim,
            max_position_embeddings=40960,
            tie_word_embeddings=shape.tied,
        )
        self.model = build_random_model(
            config, name=shape.name, dtype=dtype, device=str(device), seed=0, init_on_device=True
        )
        self.device = device

    def _runner(self, slots: int, tokens: int, context: int) -> object:
        pool = self._pool_type(
            self.model.layout, num_slots=slots, device=self.device, capacity_tokens=tokens
        )
        with torch.inference_mode():
            for layer in range(self.model.layout.num_layers):
                pool.keys(layer).uniform_(-1, 1)
                pool.values(layer).uniform_(-1, 1)
        for _ in range(slots):
            pool.acquire(_Owner(context))
        return self._runner_type(self.model, pool, max_chunk_tokens=tokens)

    def decode_step(self, batch: int, context: int) -> Callable[[], object]:
        runner = self._runner(batch, context + 1, context)
        rows = [self._row(1.0, 1.0, seed=index, position=context + 1) for index in range(batch)]
        tokens, positions = [1] * batch, [context] * batch
        return lambda: self._sample(runner.decode(tokens, positions), rows)  # type: ignore[attr-defined]

    def prefill_step(self, num_tokens: int) -> Callable[[], object]:
        runner = self._runner(1, num_tokens, 0)
        tokens = [1] * num_tokens
        return lambda: runner.prefill(0, tokens, 0)  # type: ignore[attr-defined]


class NativeImpl:
    """``NativeDecoder`` run eagerly, or (``graphs``) as a CUDA graph per point."""

    def __init__(self, model: NativeDecoder, *, graphs: bool) -> None:
        self.model, self.graphs = model, graphs
        self.name = "native-graph" if graphs else "native"

    def decode_step(self, batch: int, context: int) -> Callable[[], object]:
        kv = self.model.kv_cache(batch, context + 1)
        ids = torch.ones(batch, 1, dtype=torch.long, device=self.model.device)
        step = lambda: self.model.forward(ids, context, kv)  # noqa: E731
        return as_graph(step, self.model.device) if self.graphs else step

    def prefill_step(self, num_tokens: int) -> Callable[[], object]:
        kv = self.model.kv_cache(1, num_tokens)
        ids = torch.ones(1, num_tokens, dtype=torch.long, device=self.model.device)
        return lambda: self.model.forward(ids, 0, kv)


# Measurement plan --------------------------------------------------------------------------


@dataclass
class Phase:
    impl: str
    itl_ms: dict[int, dict[int, float]]
    prefill_tokens_per_s: dict[int, float]
    skipped: list[dict[str, object]]
    wall_s: float = 0.0


def measure(impl: EngineImpl | NativeImpl, args: argparse.Namespace, shape: Shape) -> Phase:
    phase, started = Phase(impl.name, {}, {}, []), time.perf_counter()
    device = torch.device(args.device)
    for context in args.contexts:
        for batch in args.batches:
            reason = _skip_reason(args, shape, batch, context + 1)
            if reason is None:
                step_s = _guarded(partial(impl.decode_step, batch, context), args, device)
                reason = step_s if isinstance(step_s, str) else None
                if isinstance(step_s, float):
                    phase.itl_ms.setdefault(context, {})[batch] = step_s * 1e3
            if reason is not None:
                phase.skipped.append({"context": context, "batch": batch, "reason": reason})
    for num_tokens in args.prefill_tokens:
        step_s = _guarded(partial(impl.prefill_step, num_tokens), args, device)
        if isinstance(step_s, float):
            phase.prefill_tokens_per_s[num_tokens] = num_tokens / step_s
        else:
            phase.skipped.append({"prefill_tokens": num_tokens, "reason": step_s})
    phase.wall_s = time.perf_counter() - started
    return phase


def _skip_reason(args: argparse.Namespace, shape: Shape, batch: int, tokens: int) -> str | None:
    kv_gb = batch * tokens * shape.kv_bytes_per_token / 1e9
    if kv_gb > args.max_kv_gb:
        return f"KV of {kv_gb:.3g} GB exceeds --max-kv-gb {args.max_kv_gb:g}"
    if time.perf_counter() > args.deadline:
        return "time budget spent"
    return None


def _guarded(
    build: Callable[[], Callable[[], object]], args: argparse.Namespace, device: torch.device
) -> float | str:
    """Median step seconds, or why it could not be measured (memory, time)."""
    if time.perf_counter() > args.deadline:
        return "time budget spent"
    try:
        return time_steps(build(), device, args.warmup, args.steps)
    except torch.cuda.OutOfMemoryError:
        return "out of memory"
    finally:
        gc.collect()  # drop this point's KV cache (and any reference cycle) before the next
        if device.type == "cuda":
            torch.cuda.empty_cache()


# Output --------------------------------------------------------------------------------------


def profile(
    phase: Phase, args: argparse.Namespace, shape: Shape, hardware: str
) -> dict[str, object]:
    """``heddle.policy.cost.profiles`` JSON of one phase at its first measured context."""
    context = min(phase.itl_ms)
    prefill = phase.prefill_tokens_per_s
    reference = min(prefill, key=lambda tokens: abs(tokens - 2048)) if prefill else None
    document: dict[str, object] = {
        "model": shape.name,
        "hardware": hardware,
        "itl_ms": {"1": {str(b): round(ms, 4) for b, ms in sorted(phase.itl_ms[context].items())}},
        "context_tokens": context,
    }
    if reference is not None:
        document["prefill_tokens_per_s"] = {"1": round(prefill[reference], 1)}
    if args.device.startswith("cuda"):
        total = torch.cuda.get_device_properties(torch.device(args.device)).total_memory
        free_bytes = 0.9 * total - 2 * shape.num_params
        document["max_kv_tokens"] = {"1": max(1, int(free_bytes / shape.kv_bytes_per_token))}
    else:
        document["max_kv_tokens"] = {"1": max(args.batches) * max(args.contexts)}
    return document


def print_table(phases: list[Phase], contexts: list[int], batches: list[int]) -> None:
    columns = [(phase, context) for phase in phases for context in contexts]
    print("decode ms per step (median); '-' = skipped")
    print("batch" + "".join(f"{f'{phase.impl}@{context}':>20}" for phase, context in columns))
    for batch in batches:
        cells = [phase.itl_ms.get(context, {}).get(batch) for phase, context in columns]
        print(f"{batch:>5}" + "".join(f"{'-' if v is None else f'{v:.2f}':>20}" for v in cells))
    for phase in phases:
        rates = ", ".join(f"{t}: {r:,.0f}" for t, r in sorted(phase.prefill_tokens_per_s.items()))
        counts = f"{len(phase.skipped)} skipped; {phase.wall_s:.0f} s"
        print(f"{phase.impl}: prefill tokens/s {{{rates}}}; {counts}")
        for skipped in phase.skipped:
            print(f"  skipped {skipped}")


def hardware_name(device: str) -> str:
    if not device.startswith("cuda"):
        return "cpu"
    name = torch.cuda.get_device_name(torch.device(device)).lower()
    return next((known for known in ("h200", "h100") if known in name), name.replace(" ", "-"))


def write_outputs(phases: list[Phase], args: argparse.Namespace, shape: Shape) -> None:
    measured = [phase for phase in phases if phase.itl_ms]
    if not measured:
        print("nothing was measured; no profile written", file=sys.stderr)
        return
    hardware = hardware_name(args.device)
    primary = next((p for p in measured if p.impl == "engine"), measured[-1])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(profile(primary, args, shape, hardware), indent=2) + "\n")
    full = {
        "primary": primary.impl,
        "shape": asdict(shape),
        "hardware": hardware,
        "device_name": torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu",
        "torch": torch.__version__,
        "profiles": {p.impl: profile(p, args, shape, hardware) for p in measured},
        "phases": [asdict(p) for p in phases],
        "settings": {k: v for k, v in vars(args).items() if k not in ("out", "deadline")},
    }
    full_path = args.out.with_suffix(".full.json")
    full_path.write_text(json.dumps(full, indent=2, default=str) + "\n")
    print(f"profile ({primary.impl}): {args.out}; everything: {full_path}")


# Driver --------------------------------------------------------------------------------------


def _ints(text: str) -> list[int]:
    return sorted({int(part) for part in text.split(",") if part.strip()})


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="profile JSON to write")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--tiny", action="store_true", help="tiny shapes (a CPU smoke test)")
    parser.add_argument(
        "--impl",
        choices=["auto", "engine", "native"],
        default="auto",
        help="auto: the engine if it imports, and the native decoder",
    )
    parser.add_argument("--contexts", type=_ints, default=None, help="default 1024,4096")
    parser.add_argument("--batches", type=_ints, default=None, help="default 1,2,4,...,256")
    parser.add_argument("--prefill-tokens", type=_ints, default=None, help="default 512,2048,8192")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per point")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps per point")
    parser.add_argument("--max-kv-gb", type=float, default=80.0, help="skip bigger KV caches")
    parser.add_argument(
        "--time-budget-s",
        type=float,
        default=240.0,
        help="skip remaining points after this many seconds",
    )
    parser.add_argument("--no-graphs", action="store_true", help="skip the CUDA-graph variant")
    args = parser.parse_args(argv)
    small = args.tiny
    args.contexts = args.contexts or ([32, 128] if small else [1024, 4096])
    args.batches = args.batches or ([1, 2, 4, 8] if small else [2**k for k in range(9)])
    args.prefill_tokens = args.prefill_tokens or ([64, 256] if small else [512, 2048, 8192])
    args.deadline = time.perf_counter() + args.time_budget_s
    return args


def _implementations(args: argparse.Namespace, shape: Shape, dtype: torch.dtype):  # type: ignore[no-untyped-def]
    """Yield each implementation in turn (one model in memory at a time)."""
    device = torch.device(args.device)
    if args.impl in ("auto", "engine"):
        try:
            engine = EngineImpl(shape, dtype, device)
        except Exception as exc:  # missing or incompatible transformers / heddle dependencies
            if args.impl == "engine":
                raise
            print(f"engine path unavailable ({exc!r}); measuring the native decoder only")
        else:
            yield engine
            del engine
    if args.impl in ("auto", "native"):
        model = NativeDecoder(shape, dtype, device)
        yield NativeImpl(model, graphs=False)
        if device.type == "cuda" and not args.no_graphs:
            yield NativeImpl(model, graphs=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    shape = TINY if args.tiny else QWEN3_8B
    dtype = torch.bfloat16 if args.device.startswith("cuda") else torch.float32
    print(
        f"profiling {shape.name} ({shape.num_params / 1e6:,.1f}M params, {dtype}) on {args.device}"
    )
    phases: list[Phase] = []
    for impl in _implementations(args, shape, dtype):
        try:
            phases.append(measure(impl, args, shape))
        except Exception as exc:  # one broken implementation must not cost the others' figures
            print(f"{impl.name} failed: {exc!r}", file=sys.stderr)
            phases.append(Phase(impl.name, {}, {}, [{"error": repr(exc)}]))
        write_outputs(phases, args, shape)  # after every phase: a crash later loses nothing
        del impl
        if args.device.startswith("cuda"):
            torch.cuda.empty_cache()
    print_table(phases, args.contexts, args.batches)
    return 0 if any(phase.itl_ms for phase in phases) else 1


if __name__ == "__main__":
    sys.exit(main())
