"""The built-in ``tiny`` model: a Qwen3-shaped decoder small enough for CPU tests and demos.

Its vocabulary covers the project's byte tokenizer (256 byte tokens plus a few specials, padded
to 512). Weights are random and seeded (see ``loading.build_random_model``): the model is a real
transformer whose outputs mean nothing, which is all that batching, preemption and migration
need.
"""

from __future__ import annotations

from typing import Any

TINY_VOCAB_SIZE = 512
"""Byte tokenizer: 256 bytes + specials, rounded up to a power of two."""


def tiny_config() -> Any:
    """A 4-layer Qwen3 config: 128 hidden, 4 query heads, 2 KV heads of 32 dims (~0.9M params)."""
    from transformers import Qwen3Config

    return Qwen3Config(
        vocab_size=TINY_VOCAB_SIZE,
        hidden_size=128,
        intermediate_size=384,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=32768,
        # Larger than the usual 0.02 so that random logits are peaked rather than near-uniform.
        initializer_range=0.05,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
    )
