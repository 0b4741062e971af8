"""The built-in ``tiny`` torch model as a Hugging Face folder a trainer can load: its Qwen3
config with seeded random weights, and a tokenizer whose ids are the byte tokenizer's (UTF-8
bytes 0..255, then BOS, EOS, PAD) with the byte chat template. Heddle's workers run the same
folder, so the trainer's log-probs and the engine's are of one model."""

from __future__ import annotations

from pathlib import Path

from heddle.workers.engines.torch_engine.tiny import tiny_config
from heddle.workers.tokenizers import ByteTokenizer

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
"""``heddle.workers.tokenizers.BYTE_CHAT_TEMPLATE`` in Jinja."""


def write_tiny_model(folder: Path, seed: int = 0) -> Path:
    import torch
    from tokenizers import Tokenizer, decoders, models
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    vocab = {f"<0x{i:02X}>": i for i in range(256)}
    vocab.update({"<s>": ByteTokenizer.BOS_TOKEN_ID, "</s>": ByteTokenizer.EOS_TOKEN_ID,
                  "<pad>": ByteTokenizer.PAD_TOKEN_ID})  # fmt: skip
    raw = Tokenizer(models.BPE(vocab=vocab, merges=[], byte_fallback=True))
    raw.decoder = decoders.ByteFallback()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=raw, bos_token="<s>", eos_token="</s>", pad_token="<pad>"
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(folder)
    torch.manual_seed(seed)
    AutoModelForCausalLM.from_config(tiny_config()).save_pretrained(folder)
    return folder
