"""A tiny randomly initialised BERT written to a folder: the real loading and training code runs
on it offline in seconds (the packaged MiniLM is for the bench and the CLI). Fixtures of the
predictor's tests and the sweep's context model (``tests/context_model``, ``tests/experiments``)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from heddle.workloads.text import TEXT_KINDS


def _vocabulary() -> list[str]:
    words: set[str] = set()
    for vocabulary in TEXT_KINDS.values():
        phrases = [*vocabulary.items]
        for levels in (vocabulary.plans, vocabulary.results, vocabulary.notes):
            phrases.extend(p for level in levels for p in level)
        for phrase in phrases:
            words.update(re.findall(r"[a-z]+|[0-9]|[^\sa-z0-9]", phrase.lower()))
    return ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *sorted(words)]


@pytest.fixture(scope="session")
def tiny_encoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from transformers import BertConfig, BertModel, BertTokenizerFast

    folder = tmp_path_factory.mktemp("tiny-bert")
    vocab = folder / "vocab.txt"
    vocab.write_text("\n".join(_vocabulary()) + "\n")
    tokenizer = BertTokenizerFast(vocab_file=str(vocab), do_lower_case=True)
    tokenizer.save_pretrained(folder)
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
    )
    BertModel(config).save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_model(tiny_encoder: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A context model trained a few epochs on a small search trace with text."""
    import random

    from heddle.context_model.train import TrainConfig, train
    from heddle.workloads.text import with_text
    from heddle.workloads.zoo import zoo_family

    family = zoo_family("search")
    trace = with_text(family.generate(family.draw(random.Random(1)), 40, seed=1), "search", 0.9, 1)
    folder = tmp_path_factory.mktemp("tiny-model")
    train(trace, folder, TrainConfig(base=str(tiny_encoder), num_epochs=3, hidden=16))
    return folder
