"""Tokenizers: the built-in byte tokenizer and a real Hugging Face tokenizer from a local folder."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from heddle.events import ChatMessage
from heddle.workers.tokenizers import (
    ByteTokenizer,
    HFTokenizer,
    Tokenizer,
    TokenizerError,
    chat_prompt_ids,
    load_tokenizer,
    tokenizer_names,
)

valid_text = st.text(alphabet=st.characters(exclude_categories=["Cs"]))


@given(valid_text)
def test_byte_round_trip(text: str) -> None:
    tokenizer = ByteTokenizer()
    token_ids = tokenizer.encode(text)
    assert all(0 <= token_id < 256 for token_id in token_ids)
    assert len(token_ids) == len(text.encode("utf-8"))
    assert tokenizer.decode(token_ids) == text


@given(valid_text, valid_text)
def test_byte_specials_are_dropped_on_decode(left: str, right: str) -> None:
    tokenizer = ByteTokenizer()
    token_ids = [tokenizer.bos_token_id, *tokenizer.encode(left), tokenizer.eos_token_id]
    token_ids += [*tokenizer.encode(right), tokenizer.pad_token_id]
    assert tokenizer.decode(token_ids) == left + right


def test_byte_vocabulary() -> None:
    tokenizer = load_tokenizer("byte")
    assert isinstance(tokenizer, Tokenizer)
    assert (tokenizer.vocab_size, tokenizer.eos_token_id) == (259, 257)
    assert tokenizer.encode("é") == [0xC3, 0xA9]
    assert tokenizer.decode([0xC3]) == "\ufffd"
    with pytest.raises(TokenizerError, match="outside"):
        tokenizer.decode([259])
    assert "byte" in tokenizer_names()


def test_missing_tokenizer_folder_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(TokenizerError, match="does not exist"):
        load_tokenizer(str(tmp_path / "nowhere"))
    with pytest.raises(TokenizerError, match="cannot load a tokenizer"):
        load_tokenizer(str(tmp_path))


@pytest.fixture(scope="module")
def hf_tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real tokenizer folder, built offline with the `tokenizers` library."""
    from tokenizers import Tokenizer as RawTokenizer
    from tokenizers import models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = ["[UNK]", "</s>", "the", "answer", "is", "42", "."]
    raw = RawTokenizer(models.WordLevel({word: i for i, word in enumerate(words)}, "[UNK]"))
    raw.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    wrapped = PreTrainedTokenizerFast(tokenizer_object=raw, unk_token="[UNK]", eos_token="</s>")
    folder = tmp_path_factory.mktemp("tokenizer")
    wrapped.save_pretrained(str(folder))
    return folder


def test_hf_tokenizer_from_a_local_folder(hf_tokenizer_dir: Path) -> None:
    tokenizer = load_tokenizer(str(hf_tokenizer_dir))
    assert isinstance(tokenizer, HFTokenizer)
    assert tokenizer.encode("the answer is 42") == [2, 3, 4, 5]
    assert tokenizer.encode("what") == [0]
    assert tokenizer.eos_token_id == 1
    assert tokenizer.vocab_size == 7
    assert tokenizer.decode([2, 3, 1]) == "the answer"


def test_chat_prompts_use_the_tokenizer_chat_template(
    hf_tokenizer_dir: Path, tmp_path: Path
) -> None:
    from transformers import AutoTokenizer

    messages = [
        ChatMessage(role="user", content="the answer"),
        ChatMessage(role="assistant", content="42"),
    ]
    with pytest.raises(TokenizerError, match="no chat template"):
        chat_prompt_ids(load_tokenizer(str(hf_tokenizer_dir)), messages)
    templated = AutoTokenizer.from_pretrained(str(hf_tokenizer_dir), local_files_only=True)
    templated.chat_template = (
        "{% for m in messages %}{{ m['content'] }} . {% endfor %}"
        "{% if add_generation_prompt %}is{% endif %}"
    )
    templated.save_pretrained(str(tmp_path / "chat"))
    ids = chat_prompt_ids(load_tokenizer(str(tmp_path / "chat")), messages)
    assert ids == [2, 3, 6, 5, 6, 4]  # "the answer . 42 . is"
    byte_ids = chat_prompt_ids(ByteTokenizer(), messages)
    assert bytes(byte_ids) == b"<|user|>\nthe answer\n<|assistant|>\n42\n<|assistant|>\n"
