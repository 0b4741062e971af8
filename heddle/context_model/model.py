"""The context model: a frozen pretrained encoder, and a small regression head over its
embedding and the step's numbers, predicting remaining output tokens, steps and tool seconds.

A model folder holds ``config.json`` (``ModelConfig``: the base, the input layout, the input
and target normalisation), ``head.pt`` (the head's weights, loaded with ``weights_only``) and
``validation.json`` (the figures training measured on held-out trajectories). Importing it
imports torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import msgspec
import numpy as np
import torch
from torch import nn

from heddle.context_model.encoder import TextEncoder
from heddle.context_model.examples import (
    CONTEXT_PARTS,
    NUMERIC_FEATURES,
    TARGETS,
    Baseline,
    context_parts,
    numeric_features,
)
from heddle.errors import UserError
from heddle.policy.prediction import Progress

CONFIG_FILE = "config.json"
HEAD_FILE = "head.pt"
VALIDATION_FILE = "validation.json"


class ModelConfig(msgspec.Struct, frozen=True, kw_only=True):
    name: str = "context"
    """The predictor name its predictions carry."""
    base: str
    """The encoder: a local Hugging Face folder or ``minilm`` (``heddle.context_model.encoder``)."""
    max_length: int = 128
    hidden: int = 256
    embedding_dim: int
    """Of one context part; the head reads one embedding per part of ``context_parts``."""
    context_parts: tuple[str, ...] = CONTEXT_PARTS
    numeric_features: tuple[str, ...] = NUMERIC_FEATURES
    targets: tuple[str, ...] = TARGETS
    input_mean: list[float]
    input_std: list[float]
    target_mean: list[float]
    """Of ``log1p`` of each target over the training examples."""
    target_std: list[float]


class ResidualHead(nn.Module):
    """The regression head: the numeric model's answer plus a correction read from the inputs.

    Its input is ``head_inputs``: the normalised inputs, then one base column per target (the
    numeric model's answer on the standardised target scale; 0, the mean, for the steps, which
    it does not predict). The correction (inputs -> hidden, GELU -> one output per target)
    starts at zero, so an untrained head answers as the numeric model does, and training with
    early stopping moves it only as far as the text helps on held-out trajectories.
    """

    def __init__(self, num_inputs: int, hidden: int, dropout: float = 0.2) -> None:
        super().__init__()
        last = nn.Linear(hidden, len(TARGETS))
        nn.init.zeros_(last.weight)
        nn.init.zeros_(last.bias)
        self.correction = nn.Sequential(
            nn.Dropout(dropout),
            nn.Linear(num_inputs, hidden),
            nn.GELU(),
            nn.Dropout(dropout),
            last,
        )

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        num_targets = len(TARGETS)
        return inputs[:, -num_targets:] + self.correction(inputs[:, :-num_targets])


def build_head(num_inputs: int, hidden: int) -> ResidualHead:
    return ResidualHead(num_inputs, hidden)


BASELINE_COLUMNS = (0, 2)
"""The targets the numeric model answers (tokens, tool seconds): its answer is their base."""


def head_inputs(
    raw: np.ndarray,
    embedding_dim: int,
    input_stats: tuple[np.ndarray, np.ndarray],
    target_stats: tuple[np.ndarray, np.ndarray],
) -> np.ndarray:
    """``raw_inputs`` normalised, then the base columns ``ResidualHead`` adds to."""
    input_mean, input_std = input_stats
    target_mean, target_std = target_stats
    first = embedding_dim * len(CONTEXT_PARTS)  # the numbers open with the two baseline logs
    bases = np.zeros((raw.shape[0], len(TARGETS)), dtype=np.float32)
    for offset, target in enumerate(BASELINE_COLUMNS):
        bases[:, target] = (raw[:, first + offset] - target_mean[target]) / target_std[target]
    return np.concatenate([(raw - input_mean) / input_std, bases], axis=1).astype(np.float32)


def num_inputs(embedding_dim: int) -> int:
    return embedding_dim * len(CONTEXT_PARTS) + len(NUMERIC_FEATURES)


def raw_inputs(
    encoder: TextEncoder, parts: Sequence[Sequence[str]], features: Sequence[Sequence[float]]
) -> np.ndarray:
    """Per example: each part's embedding, then the numbers (not normalised)."""
    num_parts = len(CONTEXT_PARTS)
    flat = [text for example in parts for text in example]
    embedded = encoder.encode(flat).reshape(len(parts), num_parts * encoder.dim)
    numbers = np.asarray(features, dtype=np.float32).reshape(len(parts), -1)
    return np.concatenate([embedded, numbers], axis=1)


class ContextModel:
    """A loaded model: ``predict(progresses, baselines)`` -> (n, 3) remaining tokens, steps,
    tool s."""

    def __init__(self, config: ModelConfig, head: ResidualHead, encoder: TextEncoder) -> None:
        self.config = config
        self.head = head
        self.encoder = encoder
        self._input_stats = (
            np.asarray(config.input_mean, dtype=np.float32),
            np.asarray(config.input_std, dtype=np.float32),
        )
        self._target_stats = (np.asarray(config.target_mean), np.asarray(config.target_std))

    @classmethod
    def load(cls, folder: Path, device: str = "cpu") -> ContextModel:
        config_path = folder / CONFIG_FILE
        if not config_path.is_file():
            raise UserError(f"{folder}: not a context model folder (no {CONFIG_FILE})")
        config = msgspec.json.decode(config_path.read_bytes(), type=ModelConfig)
        encoder = TextEncoder(config.base, config.max_length, device=device)
        head = build_head(num_inputs(config.embedding_dim), config.hidden)
        state = torch.load(folder / HEAD_FILE, map_location=device, weights_only=True)
        head.load_state_dict(state)
        return cls(config, head.to(device).eval(), encoder)

    def inputs(
        self, parts: Sequence[Sequence[str]], features: Sequence[Sequence[float]]
    ) -> np.ndarray:
        """The head's inputs (``head_inputs``), one row per example."""
        raw = raw_inputs(self.encoder, parts, features)
        return head_inputs(raw, self.config.embedding_dim, self._input_stats, self._target_stats)

    def predict_inputs(self, inputs: np.ndarray) -> np.ndarray:
        """Remaining (tokens, steps, tool s) in their units, >= 0, from ``inputs``."""
        with torch.inference_mode():
            tensor = torch.as_tensor(inputs, dtype=torch.float32, device=self.encoder.device)
            scaled = self.head(tensor).cpu().numpy()
        logs = scaled * np.asarray(self.config.target_std) + np.asarray(self.config.target_mean)
        return np.maximum(0.0, np.expm1(logs))

    def predict(self, progresses: Sequence[Progress], baselines: Sequence[Baseline]) -> np.ndarray:
        """Per progress, with the numeric model's answer for it: remaining tokens, steps and
        tool seconds."""
        if not progresses:
            return np.zeros((0, len(TARGETS)))
        parts = [context_parts(p) for p in progresses]
        features = [numeric_features(p, b) for p, b in zip(progresses, baselines, strict=True)]
        return self.predict_inputs(self.inputs(parts, features))


def save_model(folder: Path, config: ModelConfig, head: ResidualHead, validation: object) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / CONFIG_FILE).write_bytes(msgspec.json.format(msgspec.json.encode(config)))
    torch.save(head.state_dict(), folder / HEAD_FILE)
    (folder / VALIDATION_FILE).write_bytes(msgspec.json.format(msgspec.json.encode(validation)))
