"""The context model: a frozen pretrained encoder, and a small regression head over its
embedding and the step's numbers, predicting remaining output tokens, steps and tool seconds.

A model folder holds ``config.json`` (``ModelConfig``: the base, the input layout, the input
and target normalisation), ``head.pt`` (the head's weights, loaded with ``weights_only``) and
``validation.json`` (the figures training measured on held-out trajectories).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import msgspec
import numpy as np

from heddle.errors import UserError
from heddle.policy.predictors import Progress
from heddle.predictor.encoder import TextEncoder
from heddle.predictor.examples import (
    CONTEXT_PARTS,
    NUMERIC_FEATURES,
    TARGETS,
    Baseline,
    context_parts,
    numeric_features,
)

CONFIG_FILE = "config.json"
HEAD_FILE = "head.pt"
VALIDATION_FILE = "validation.json"


class ModelConfig(msgspec.Struct, frozen=True, kw_only=True):
    name: str = "context"
    """The predictor name its predictions carry."""
    base: str
    """The encoder: a local Hugging Face folder or ``minilm`` (``heddle.predictor.encoder``)."""
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


def build_head(num_inputs: int, hidden: int, dropout: float = 0.1):  # type: ignore[no-untyped-def]
    """The regression head: inputs -> hidden (GELU) -> one output per target."""
    from torch import nn

    return nn.Sequential(
        nn.Linear(num_inputs, hidden),
        nn.GELU(),
        nn.Dropout(dropout),
        nn.Linear(hidden, len(TARGETS)),
    )


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

    def __init__(self, config: ModelConfig, head: object, encoder: TextEncoder) -> None:
        import torch

        self.config = config
        self.head = head
        self.encoder = encoder
        self._torch = torch
        self._input_mean = np.asarray(config.input_mean, dtype=np.float32)
        self._input_std = np.asarray(config.input_std, dtype=np.float32)

    @classmethod
    def load(cls, folder: Path, device: str = "cpu") -> ContextModel:
        import torch

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
        """The head's normalised inputs (``raw_inputs`` normalised), one row per example."""
        return (raw_inputs(self.encoder, parts, features) - self._input_mean) / self._input_std

    def predict_inputs(self, inputs: np.ndarray) -> np.ndarray:
        """Remaining (tokens, steps, tool s) in their units, >= 0, from normalised inputs."""
        torch = self._torch
        with torch.inference_mode():
            tensor = torch.as_tensor(inputs, dtype=torch.float32, device=self.encoder.device)
            scaled = self.head(tensor).cpu().numpy()  # type: ignore[operator]
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


def save_model(folder: Path, config: ModelConfig, head: object, validation: object) -> None:
    import torch

    folder.mkdir(parents=True, exist_ok=True)
    (folder / CONFIG_FILE).write_bytes(msgspec.json.format(msgspec.json.encode(config)))
    torch.save(head.state_dict(), folder / HEAD_FILE)  # type: ignore[attr-defined]
    (folder / VALIDATION_FILE).write_bytes(msgspec.json.format(msgspec.json.encode(validation)))
