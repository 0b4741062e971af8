"""Tokenizers: text <-> token ids for the worker's context and the environments' observations.

``load_tokenizer("byte")`` gives the built-in ``ByteTokenizer`` (no download; what the tiny torch
model uses); ``load_tokenizer(PATH)`` loads a Hugging Face tokenizer from a local folder, offline.
Both satisfy the ``Tokenizer`` protocol.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable


class TokenizerError(ValueError):
    """A tokenizer that cannot be loaded, or ids outside its vocabulary; the message says which."""


@runtime_checkable
class Tokenizer(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def eos_token_id(self) -> int: ...

    @property
    def vocab_size(self) -> int:
        """Number of ids, special ones included: every id is in ``[0, vocab_size)``."""
        ...

    def encode(self, text: str) -> list[int]:
        """The ids of ``text``, without special tokens (no BOS/EOS added)."""
        ...

    def decode(self, token_ids: Sequence[int]) -> str:
        """The text of ``token_ids``; special tokens are dropped, invalid bytes replaced."""
        ...


class ChatTurn(Protocol):
    """A chat message (``heddle.events.ChatMessage``)."""

    @property
    def role(self) -> str: ...

    @property
    def content(self) -> str: ...


BYTE_CHAT_TEMPLATE = "<|{role}|>\n{content}\n"
"""The byte tokenizer's chat template, per message; ``<|assistant|>\n`` follows the last one
(the generation prompt)."""


def chat_prompt_ids(tokenizer: Tokenizer, messages: Iterable[ChatTurn]) -> list[int]:
    """The ids of a chat prompt: the tokenizer's chat template applied to ``messages`` with the
    generation prompt appended (a Hugging Face tokenizer's own template; ``BYTE_CHAT_TEMPLATE``
    for the byte tokenizer). ``TokenizerError`` when the tokenizer has no chat template."""
    turns = [(message.role, message.content) for message in messages]
    if isinstance(tokenizer, HFTokenizer):
        return tokenizer.apply_chat_template(turns)
    text = "".join(BYTE_CHAT_TEMPLATE.format(role=role, content=content) for role, content in turns)
    return tokenizer.encode(text + "<|assistant|>\n")


class ByteTokenizer:
    """UTF-8 bytes as ids 0..255, then three specials: BOS 256, EOS 257, PAD 258.

    ``vocab_size`` is 259: small enough for a tiny CPU model's embedding table, and every text
    (any language, any byte) encodes without an unknown token.
    """

    BOS_TOKEN_ID = 256
    EOS_TOKEN_ID = 257
    PAD_TOKEN_ID = 258
    VOCAB_SIZE = 259

    @property
    def name(self) -> str:
        return "byte"

    @property
    def eos_token_id(self) -> int:
        return self.EOS_TOKEN_ID

    @property
    def bos_token_id(self) -> int:
        return self.BOS_TOKEN_ID

    @property
    def pad_token_id(self) -> int:
        return self.PAD_TOKEN_ID

    @property
    def vocab_size(self) -> int:
        return self.VOCAB_SIZE

    def encode(self, text: str) -> list[int]:
        # Lone surrogates cannot be UTF-8: replace them rather than fail on model output.
        return list(text.encode("utf-8", errors="replace"))

    def decode(self, token_ids: Sequence[int]) -> str:
        for token_id in token_ids:
            if not 0 <= token_id < self.VOCAB_SIZE:
                raise TokenizerError(f"token id {token_id} is outside [0, {self.VOCAB_SIZE})")
        data = bytes(token_id for token_id in token_ids if token_id < 256)
        return data.decode("utf-8", errors="replace")


class HFTokenizer:
    """A Hugging Face tokenizer loaded from a local folder (``local_files_only``: never a
    download)."""

    def __init__(self, path: Path) -> None:
        if not path.is_dir():
            raise TokenizerError(
                f"tokenizer folder {str(path)!r} does not exist: give 'byte' or a local folder "
                "holding tokenizer.json / tokenizer_config.json"
            )
        from transformers import AutoTokenizer

        try:
            self._tokenizer: Any = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        except (OSError, ValueError) as exc:
            raise TokenizerError(f"cannot load a tokenizer from {str(path)!r}: {exc}") from None
        if self._tokenizer.eos_token_id is None:
            raise TokenizerError(f"the tokenizer at {str(path)!r} defines no EOS token")
        self._path = path

    @property
    def name(self) -> str:
        return str(self._path)

    @property
    def eos_token_id(self) -> int:
        return int(self._tokenizer.eos_token_id)

    @property
    def vocab_size(self) -> int:
        return len(self._tokenizer)

    def encode(self, text: str) -> list[int]:
        return list(self._tokenizer.encode(text, add_special_tokens=False))

    def decode(self, token_ids: Sequence[int]) -> str:
        return str(self._tokenizer.decode(list(token_ids), skip_special_tokens=True))

    def apply_chat_template(self, turns: Sequence[tuple[str, str]]) -> list[int]:
        """``transformers``' ``apply_chat_template`` with the generation prompt, as ids."""
        if not getattr(self._tokenizer, "chat_template", None):
            raise TokenizerError(f"the tokenizer at {str(self._path)!r} has no chat template")
        messages = [{"role": role, "content": content} for role, content in turns]
        ids = self._tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=True
        )
        if isinstance(ids, Mapping):  # newer transformers may return a BatchEncoding
            ids = ids["input_ids"]
        return [int(token_id) for token_id in ids]


TOKENIZERS: dict[str, Callable[[], Tokenizer]] = {"byte": ByteTokenizer}
"""Built-in tokenizers by name (names feed CLI help); anything else is a folder path."""


def tokenizer_names() -> list[str]:
    return sorted(TOKENIZERS)


def load_tokenizer(spec: str) -> Tokenizer:
    """A built-in tokenizer by name (``byte``) or a Hugging Face tokenizer from a local folder."""
    factory = TOKENIZERS.get(spec)
    if factory is not None:
        return factory()
    return HFTokenizer(Path(spec).expanduser())
