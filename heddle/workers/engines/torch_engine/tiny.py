"""The built-in ``tiny`` model: a Qwen3-shaped decoder small enough for CPU tests and demos.

Its vocabulary is exactly the project's byte tokenizer's (256 bytes + BOS, EOS, PAD), so every
token it samples decodes, and EOS can stop a generation. Weights are random and seeded (see
``loading.build_random_model``): the model is a real transformer whose outputs mean nothing,
which is all that batching, preemption and migration need.
"""

from __future__ import annotations

from typing import Any

from heddle.workers.tokenizers import ByteTokenizer

TINY_VOCAB_SIZE = ByteTokenizer.VOCAB_SIZE


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
        bos_token_id=ByteTokenizer.BOS_TOKEN_ID,
        eos_token_id=ByteTokenizer.EOS_TOKEN_ID,
        pad_token_id=ByteTokenizer.PAD_TOKEN_ID,
    )
