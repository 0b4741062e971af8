"""Model loading: the built-in ``tiny`` model or a local causal LM, with its KV layout and identity.

Any decoder-only ``AutoModelForCausalLM`` whose attention layers store K and V through
``cache.update`` (Llama, Mistral, Qwen2, Qwen3 and most others in transformers 5) runs here;
sliding-window and linear-attention layers are refused because the engine builds one full causal
mask for every layer. Loading is offline (``local_files_only``): nothing is downloaded.

The ``fingerprint`` names the model family, dtype, KV layout and a digest of the weights, so a
KV cache exported by one engine is imported only by an engine that would have computed the same
KV (the device may differ).
"""

from __future__ import annotations

import hashlib
import inspect
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch

from heddle.workers.engines.torch_engine.options import TINY_MODEL, DTypeName, TorchEngineOptions
from heddle.workers.engines.torch_engine.tiny import tiny_config

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# Config keys that differ between two copies of the same model (paths, versions, defaults).
_UNSTABLE_CONFIG_KEYS = ("_name_or_path", "transformers_version", "dtype", "torch_dtype")
_SAMPLES_PER_PARAMETER = 64

MaskKind = Literal["bool", "additive"]


@dataclass(frozen=True, slots=True)
class KVLayout:
    """Shape of one token's KV: ``num_layers`` x (K, V) x ``num_kv_heads`` x ``head_dim``."""

    num_layers: int
    num_kv_heads: int
    head_dim: int
    dtype: torch.dtype

    @property
    def bytes_per_token(self) -> int:
        itemsize = torch.empty((), dtype=self.dtype).element_size()
        return self.num_layers * 2 * self.num_kv_heads * self.head_dim * itemsize

    @property
    def dtype_name(self) -> str:
        return str(self.dtype).removeprefix("torch.")


@dataclass(frozen=True, slots=True)
class LoadedModel:
    module: Any
    """The transformers ``PreTrainedModel``, in eval mode on ``device``."""
    name: str
    layout: KVLayout
    vocab_size: int
    max_positions: int
    device: torch.device
    fingerprint: str
    cache_kwarg: str
    """``cache`` (transformers >= 5.x) or ``past_key_values`` (older): the forward's keyword."""
    mask_kind: MaskKind
    """``bool`` for SDPA (True attends), ``additive`` (0 / -inf) for eager attention."""


def resolve_dtype(name: DTypeName, device: str) -> torch.dtype:
    """``auto`` is float32 on CPU (bf16 matmuls are slow there) and bfloat16 on CUDA."""
    if name == "auto":
        return torch.float32 if device == "cpu" else torch.bfloat16
    return _DTYPES[name]


def load_model(options: TorchEngineOptions) -> LoadedModel:
    """The model ``options.model`` names, on ``options.device`` in the resolved dtype."""
    dtype = resolve_dtype(options.dtype, options.device)
    if options.device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(
            f"--device {options.device}: torch {torch.__version__} sees no CUDA GPU here"
        )
    if options.model == TINY_MODEL:
        return build_random_model(
            tiny_config(), name=TINY_MODEL, dtype=dtype, device=options.device, seed=options.seed
        )
    return load_local_model(Path(options.model), dtype=dtype, device=options.device)


def load_local_model(path: Path, *, dtype: torch.dtype, device: str) -> LoadedModel:
    """A model folder with ``config.json`` and weights, loaded offline."""
    from transformers import AutoConfig, AutoModelForCausalLM

    if not (path / "config.json").is_file():
        raise ValueError(f"model folder {path} has no config.json (give 'tiny' or a local model)")
    config = AutoConfig.from_pretrained(path, local_files_only=True)
    _check_supported(config)
    module: Any = AutoModelForCausalLM.from_pretrained(
        path, local_files_only=True, dtype=dtype, attn_implementation="sdpa"
    )
    return _finish(module.to(device), name=path.name, dtype=dtype)


def build_random_model(
    config: Any,
    *,
    name: str,
    dtype: torch.dtype,
    device: str,
    seed: int,
    init_on_device: bool = False,
) -> LoadedModel:
    """A model of ``config``'s shape with seeded normal weights (no download, no checkpoint).

    Weights are drawn on the CPU by default, so the same seed gives the same model on every
    worker and device (what makes migration testable); ``init_on_device`` draws them on the
    device instead, for large shapes where only the timing matters.
    """
    from transformers import AutoModelForCausalLM

    _check_supported(config)
    build_device = device if init_on_device else "cpu"
    with torch.device(build_device):
        module = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation="sdpa")
    _seeded_init(module, seed=seed, std=float(getattr(config, "initializer_range", 0.02)))
    return _finish(module.to(device), name=name, dtype=dtype)


def _check_supported(config: Any) -> None:
    layer_types = set(getattr(config, "layer_types", None) or ["full_attention"])
    # Qwen2/3 keep a sliding_window value that only use_sliding_window switches on; Mistral-style
    # configs apply it whenever it is set.
    window_on = getattr(config, "use_sliding_window", getattr(config, "sliding_window", None))
    if layer_types != {"full_attention"} or window_on:
        raise ValueError(
            f"model type {config.model_type!r} uses {sorted(layer_types)} layers; the torch engine "
            "supports full-attention decoders only (no sliding-window or linear attention)"
        )
    if getattr(config, "is_encoder_decoder", False):
        raise ValueError(f"model type {config.model_type!r} is an encoder-decoder, not a decoder")


def _seeded_init(module: Any, *, seed: int, std: float) -> None:
    """Normal(0, std) matrices, unit norms, zero biases, drawn in parameter-name order."""
    generator = torch.Generator(device=next(module.parameters()).device).manual_seed(seed)
    with torch.no_grad():
        for name, parameter in sorted(module.named_parameters()):
            if parameter.ndim >= 2:
                parameter.normal_(0.0, std, generator=generator)
            elif "norm" in name:
                parameter.fill_(1.0)
            else:
                parameter.zero_()


def _finish(module: Any, *, name: str, dtype: torch.dtype) -> LoadedModel:
    module.eval()
    config = module.config
    layout = kv_layout(config, dtype)
    return LoadedModel(
        module=module,
        name=name,
        layout=layout,
        vocab_size=int(config.vocab_size),
        max_positions=int(getattr(config, "max_position_embeddings", 0) or 2**31 - 1),
        device=next(module.parameters()).device,
        fingerprint=model_fingerprint(module, layout),
        cache_kwarg=_cache_kwarg(module),
        mask_kind="bool" if config._attn_implementation == "sdpa" else "additive",
    )


def kv_layout(config: Any, dtype: torch.dtype) -> KVLayout:
    num_heads = int(config.num_attention_heads)
    head_dim = getattr(config, "head_dim", None) or int(config.hidden_size) // num_heads
    return KVLayout(
        num_layers=int(config.num_hidden_layers),
        num_kv_heads=int(getattr(config, "num_key_value_heads", None) or num_heads),
        head_dim=int(head_dim),
        dtype=dtype,
    )


def model_fingerprint(module: Any, layout: KVLayout) -> str:
    """``<model_type>/<dtype>/<layers>x<kv_heads>x<head_dim>/<digest>``: equal iff same KV.

    The digest covers the config (less paths and versions) and a strided sample of every
    weight, so two random models with different seeds differ, while hashing all weights of a
    large model (seconds) is avoided.
    """
    config = {k: v for k, v in module.config.to_dict().items() if k not in _UNSTABLE_CONFIG_KEYS}
    digest = hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode())
    with torch.no_grad():
        for name, parameter in sorted(module.named_parameters()):
            flat = parameter.detach().reshape(-1)
            stride = max(1, flat.numel() // _SAMPLES_PER_PARAMETER)
            sample = flat[::stride][:_SAMPLES_PER_PARAMETER].float().cpu()
            digest.update(name.encode())
            digest.update(sample.numpy().tobytes())
    shape = f"{layout.num_layers}x{layout.num_kv_heads}x{layout.head_dim}"
    model_type = module.config.model_type
    return f"{model_type}/{layout.dtype_name}/{shape}/{digest.hexdigest()[:16]}"


def _cache_kwarg(module: Any) -> str:
    parameters = inspect.signature(module.forward).parameters
    return "cache" if "cache" in parameters else "past_key_values"
