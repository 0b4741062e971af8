"""deploy/gpu_profile.py on CPU with tiny shapes: it runs, skips what does not fit, writes a
loadable profile, and its torch-only decoder computes what transformers' Qwen3 computes."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from heddle.policy.cost.profiles import parse_profile

SCRIPT = Path(__file__).resolve().parents[4] / "deploy" / "gpu_profile.py"


@pytest.fixture(scope="module")
def gpu_profile() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_profile", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_profile"] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


def test_tiny_run_writes_a_profile_the_policy_loads(
    gpu_profile: ModuleType, tmp_path: Path
) -> None:
    out = tmp_path / "tiny.json"
    small = ["--contexts", "16,48", "--batches", "1,2,4", "--prefill-tokens", "32"]
    args = ["--tiny", "--device", "cpu", "--out", str(out), "--steps", "2", "--warmup", "1"]
    # Tiny KV is 512 bytes a token: 4 x 49 tokens (100 kB) exceed 80 kB, 2 x 49 do not.
    assert gpu_profile.main([*args, *small, "--max-kv-gb", "0.00008"]) == 0
    profile = parse_profile(out.read_text(), "json", source=str(out))
    assert profile.model == "tiny" and profile.context_tokens == 16
    assert sorted(profile.itl_ms[1]) == [1, 2, 4]
    full = json.loads(out.with_suffix(".full.json").read_text())
    assert full["primary"] == "engine"
    phases = {phase["impl"]: phase for phase in full["phases"]}
    assert set(phases) == {"engine", "native"}
    for phase in phases.values():
        assert phase["skipped"] == [
            {"context": 48, "batch": 4, "reason": "KV of 0.0001 GB exceeds --max-kv-gb 8e-05"}
        ]
        assert set(phase["itl_ms"]["48"]) == {"1", "2"}
        assert phase["prefill_tokens_per_s"]["32"] > 0


def test_without_transformers_the_native_decoder_alone_is_measured(
    gpu_profile: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers now fails
    out = tmp_path / "native.json"
    small = ["--contexts", "16", "--batches", "1,2", "--prefill-tokens", "32"]
    args = ["--tiny", "--device", "cpu", "--out", str(out), "--steps", "1", "--warmup", "0"]
    assert gpu_profile.main([*args, *small]) == 0
    full = json.loads(out.with_suffix(".full.json").read_text())
    assert full["primary"] == "native" and [p["impl"] for p in full["phases"]] == ["native"]
    assert parse_profile(out.read_text(), "json").itl_ms[1].keys() == {1, 2}


def test_native_decoder_matches_transformers_qwen3(gpu_profile: ModuleType) -> None:
    shape = gpu_profile.TINY
    native = gpu_profile.NativeDecoder(shape, torch.float32, torch.device("cpu"))
    reference = Qwen3ForCausalLM(
        Qwen3Config(
            vocab_size=shape.vocab,
            hidden_size=shape.hidden,
            intermediate_size=shape.intermediate,
            num_hidden_layers=shape.layers,
            num_attention_heads=shape.heads,
            num_key_value_heads=shape.kv_heads,
            head_dim=shape.head_dim,
            rope_theta=shape.rope_theta,
            tie_word_embeddings=shape.tied,
        )
    ).eval()
    _copy_weights(native, reference)
    tokens = torch.tensor([[3, 141, 59, 26, 5, 358, 97, 9, 32, 384]])
    with torch.inference_mode():
        expected = reference(input_ids=tokens).logits[0].float()
    kv = native.kv_cache(1, tokens.shape[1])
    prefill = native.forward(tokens[:, :-1], 0, kv)
    decode = native.forward(tokens[:, -1:], tokens.shape[1] - 1, kv)
    assert torch.allclose(prefill[0], expected[-2], atol=1e-4)
    assert torch.allclose(decode[0], expected[-1], atol=1e-4)


def _copy_weights(native: object, reference: Qwen3ForCausalLM) -> None:
    model = reference.model
    with torch.no_grad():
        model.embed_tokens.weight.copy_(native.embed)  # type: ignore[attr-defined]
        model.norm.weight.copy_(native.norm)  # type: ignore[attr-defined]
        for block, layer in zip(native.blocks, model.layers, strict=True):  # type: ignore[attr-defined]
            attention, mlp = layer.self_attn, layer.mlp
            q, k, v = block["qkv"].split(
                [
                    attention.q_proj.out_features,
                    attention.k_proj.out_features,
                    attention.v_proj.out_features,
                ]
            )
            attention.q_proj.weight.copy_(q)
            attention.k_proj.weight.copy_(k)
            attention.v_proj.weight.copy_(v)
            attention.o_proj.weight.copy_(block["o"])
            gate, up = block["gate_up"].chunk(2)
            mlp.gate_proj.weight.copy_(gate)
            mlp.up_proj.weight.copy_(up)
            mlp.down_proj.weight.copy_(block["down"])
            # Random norms (not ones) so that a misplaced norm shows in the logits.
            for name in ("in_norm", "post_norm", "q_norm", "k_norm"):
                block[name].uniform_(0.5, 1.5)
            layer.input_layernorm.weight.copy_(block["in_norm"])
            layer.post_attention_layernorm.weight.copy_(block["post_norm"])
            attention.q_norm.weight.copy_(block["q_norm"])
            attention.k_norm.weight.copy_(block["k_norm"])
