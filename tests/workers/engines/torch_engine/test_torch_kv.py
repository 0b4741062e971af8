"""Model loading, the slot pool and the runner against a plain transformers forward, snapshots."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import transformers
from hypothesis import given, settings
from hypothesis import strategies as st

from heddle.workers.engines.base import CacheMismatchError, CacheSnapshot
from heddle.workers.engines.torch_engine.forward import ModelRunner
from heddle.workers.engines.torch_engine.kv import KVBlock, SlotPool
from heddle.workers.engines.torch_engine.loading import LoadedModel, build_random_model, load_model
from heddle.workers.engines.torch_engine.options import TorchEngineOptions
from heddle.workers.engines.torch_engine.snapshot import restore_block, snapshot_block
from heddle.workers.engines.torch_engine.tiny import TINY_VOCAB_SIZE

ATOL = 1e-4


class _Owner:
    def __init__(self, num_kv_tokens: int = 0) -> None:
        self.num_kv_tokens = num_kv_tokens


def _runner(model: LoadedModel, *, num_slots: int = 4, chunk: int = 5) -> ModelRunner:
    pool = SlotPool(model.layout, num_slots=num_slots, device=model.device, capacity_tokens=4)
    return ModelRunner(model, pool, max_chunk_tokens=chunk)


def _full_logits(model: LoadedModel, token_ids: list[int]) -> torch.Tensor:
    """Reference: transformers' own forward over the whole sequence, no cache."""
    with torch.inference_mode():
        return model.module(input_ids=torch.tensor([token_ids])).logits[0].float()


def _tokens(seed: int, length: int) -> list[int]:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, TINY_VOCAB_SIZE, (length,), generator=generator).tolist()


def _prefill(runner: ModelRunner, owner: _Owner, tokens: list[int]) -> torch.Tensor:
    slot = runner.pool.acquire(owner)
    logits = runner.prefill(slot, tokens, 0)
    owner.num_kv_tokens = len(tokens)
    return logits


def test_same_seed_same_model_and_fingerprint_names_model_dtype_and_layout(
    tiny: LoadedModel,
) -> None:
    again = load_model(TorchEngineOptions(seed=0))
    other = load_model(TorchEngineOptions(seed=1))
    assert again.fingerprint == tiny.fingerprint != other.fingerprint
    assert tiny.fingerprint.startswith("qwen3/float32/4x2x32/")
    assert tiny.vocab_size == TINY_VOCAB_SIZE
    tokens = _tokens(0, 9)
    assert torch.equal(_full_logits(again, tokens), _full_logits(tiny, tokens))


def test_chunked_prefill_and_decode_match_the_uncached_forward(tiny: LoadedModel) -> None:
    runner = _runner(tiny, chunk=5)
    owner = _Owner()
    tokens = _tokens(1, 23)
    prefill_logits = _prefill(runner, owner, tokens[:-3])  # 20 tokens in 4 chunks, pool grows
    reference = _full_logits(tiny, tokens)
    assert torch.allclose(prefill_logits, reference[-4], atol=ATOL)
    for offset in range(3):
        position = len(tokens) - 3 + offset
        logits = runner.decode([tokens[position]], [position])
        owner.num_kv_tokens += 1
        assert torch.allclose(logits[0], reference[position], atol=ATOL)
    assert runner.pool.capacity_tokens >= len(tokens)


def test_batched_decode_of_rows_with_different_lengths_matches_each_alone(
    tiny: LoadedModel,
) -> None:
    runner = _runner(tiny)
    sequences = [_tokens(seed, length) for seed, length in ((2, 6), (3, 17), (4, 11))]
    owners = [_Owner() for _ in sequences]
    for owner, tokens in zip(owners, sequences, strict=True):
        _prefill(runner, owner, tokens[:-1])
    logits = runner.decode([tokens[-1] for tokens in sequences], [len(t) - 1 for t in sequences])
    for row, tokens in enumerate(sequences):
        assert torch.allclose(logits[row], _full_logits(tiny, tokens)[-1], atol=ATOL)


def test_releasing_a_slot_moves_the_last_owner_without_changing_its_kv(tiny: LoadedModel) -> None:
    runner = _runner(tiny)
    first, last = _Owner(), _Owner()
    short, long = _tokens(5, 5), _tokens(6, 13)
    _prefill(runner, first, short[:-1])
    _prefill(runner, last, long[:-1])
    runner.pool.release(first)
    assert runner.pool.owners == [last] and runner.pool.slot_of(last) == 0
    logits = runner.decode([long[-1]], [len(long) - 1])
    assert torch.allclose(logits[0], _full_logits(tiny, long)[-1], atol=ATOL)


def test_kv_moved_to_another_engine_gives_the_same_next_token_logits(tiny: LoadedModel) -> None:
    """Migration at the tensor level: A's KV, as bytes, lets B decode without prefilling."""
    tokens = _tokens(7, 30)
    source, owner = _runner(tiny), _Owner()
    _prefill(source, owner, tokens[:-1])
    block = source.pool.read(0, tuple(tokens[:-1]))
    snapshot = snapshot_block("t1", block, tiny.fingerprint)

    other_engine_model = load_model(TorchEngineOptions())  # its own copy, same seed
    target, moved = _runner(other_engine_model), _Owner()
    slot = target.pool.acquire(moved)
    target.pool.write(slot, restore_block(snapshot, other_engine_model.fingerprint))
    moved.num_kv_tokens = len(tokens) - 1

    expected = source.decode([tokens[-1]], [len(tokens) - 1])
    assert torch.allclose(target.decode([tokens[-1]], [len(tokens) - 1]), expected, atol=ATOL)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_snapshot_bytes_round_trip_exactly(dtype: torch.dtype) -> None:
    data = torch.randn(4, 2, 2, 6, 32).to(dtype)
    block = KVBlock(tuple(range(6)), data)
    snapshot = snapshot_block("t9", block, "fp")
    assert snapshot.num_tokens == 6 and snapshot.trajectory_id == "t9"
    decoded = restore_block(snapshot, "fp")
    assert decoded.token_ids == block.token_ids
    assert decoded.data.dtype == dtype and torch.equal(decoded.data, data)


def test_snapshot_from_another_model_is_refused_with_a_clear_error(tiny: LoadedModel) -> None:
    other = load_model(TorchEngineOptions(seed=3))
    block = KVBlock((1, 2), torch.zeros(4, 2, 2, 2, 32))
    snapshot = snapshot_block("t1", block, other.fingerprint)
    with pytest.raises(CacheMismatchError, match="same model weights, dtype"):
        restore_block(snapshot, tiny.fingerprint)
    forged = CacheSnapshot("t1", 2, tiny.fingerprint, snapshot.payload)  # header still says other
    with pytest.raises(CacheMismatchError):
        restore_block(forged, tiny.fingerprint)


def test_corrupt_snapshot_bytes_are_refused() -> None:
    snapshot = snapshot_block("t1", KVBlock((1,), torch.zeros(1, 2, 1, 1, 4)), "fp")
    for payload in (b"", b"XXXX" + snapshot.payload[4:], snapshot.payload[:-3]):
        with pytest.raises(ValueError):
            restore_block(CacheSnapshot("t1", 1, "fp", payload), "fp")
    with pytest.raises(ValueError, match="carries KV of"):
        restore_block(CacheSnapshot("t2", 1, "fp", snapshot.payload), "fp")


def test_local_model_folder_loads_offline_and_computes_the_same(
    tiny: LoadedModel, tmp_path: Path
) -> None:
    tiny.module.save_pretrained(tmp_path / "tiny-copy")
    loaded = load_model(TorchEngineOptions(model=str(tmp_path / "tiny-copy")))
    assert loaded.name == "tiny-copy"
    tokens = _tokens(8, 12)
    assert torch.allclose(_full_logits(loaded, tokens), _full_logits(tiny, tokens), atol=ATOL)
    with pytest.raises(ValueError, match=r"no config\.json"):
        load_model(TorchEngineOptions(model=str(tmp_path / "missing")))


@settings(max_examples=40)
@given(
    layers=st.integers(1, 3),
    heads=st.integers(1, 3),
    tokens=st.lists(st.integers(0, 258), max_size=9),
    head_dim=st.sampled_from([1, 4, 8]),
    dtype=st.sampled_from([torch.float32, torch.bfloat16, torch.float16]),
)
def test_any_block_survives_the_byte_round_trip(
    layers: int, heads: int, tokens: list[int], head_dim: int, dtype: torch.dtype
) -> None:
    data = torch.randn(layers, 2, heads, len(tokens), head_dim).to(dtype)
    decoded = restore_block(snapshot_block("t", KVBlock(tuple(tokens), data), "fp"), "fp")
    assert decoded.token_ids == tuple(tokens) and torch.equal(decoded.data, data)


_SMALL = {"vocab_size": 300, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2}


@pytest.mark.parametrize(
    "config",
    [
        transformers.LlamaConfig(**_SMALL, num_attention_heads=4, num_key_value_heads=2),
        transformers.Qwen2Config(**_SMALL, num_attention_heads=4, num_key_value_heads=2),
        transformers.GPT2Config(vocab_size=300, n_embd=64, n_layer=2, n_head=4),
    ],
    ids=["llama", "qwen2", "gpt2"],
)
def test_other_causal_lms_run_on_the_slot_pool(config: object) -> None:
    model = build_random_model(config, name="x", dtype=torch.float32, device="cpu", seed=0)
    runner, owner = _runner(model), _Owner()
    tokens = [(7 * index) % 300 for index in range(1, 15)]
    prefill_logits = _prefill(runner, owner, tokens[:-1])
    decode_logits = runner.decode([tokens[-1]], [len(tokens) - 1])
    reference = _full_logits(model, tokens)
    assert torch.allclose(prefill_logits, reference[-2], atol=ATOL)
    assert torch.allclose(decode_logits[0], reference[-1], atol=ATOL)


def test_sliding_window_models_are_refused() -> None:
    config = transformers.MistralConfig(**_SMALL, num_attention_heads=4, sliding_window=16)
    with pytest.raises(ValueError, match="full-attention decoders only"):
        build_random_model(config, name="x", dtype=torch.float32, device="cpu", seed=0)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_a_cuda_device_without_a_gpu_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="sees no CUDA GPU"):
        load_model(TorchEngineOptions(device="cuda"))
