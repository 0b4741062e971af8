"""``train``: fit the context model's head on recorded trajectories and write its folder.

The encoder stays frozen and each distinct context is embedded once; only the head trains (on
a 2-core CPU, fine-tuning a 22M-parameter encoder on 20k contexts would take hours; a frozen
encoder with cached embeddings takes minutes). The loss is the mean squared error of the
standardized ``log1p`` targets (lengths are heavy-tailed; the log keeps the long tail from
dominating); training keeps the head of the epoch whose predictions rank the held-out
trajectories best (Pearson r of remaining output tokens, the paper's figure), epoch 0 included:
the untrained head answers as the numeric model does, so text that tells nothing leaves it
there. The best of many epochs on a few hundred held-out trajectories can beat epoch 0 by
chance, so its correction is kept only when it also ranks them better in ``min_win_share`` of
paired bootstrap resamples of the held-out trajectories (``metrics.bootstrap_win_share``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import msgspec
import numpy as np
import torch

from heddle.context_model.encoder import PACKAGED_BASE, TextEncoder
from heddle.context_model.examples import (
    TARGETS,
    Example,
    build_examples,
    split_by_trajectory,
    target_matrix,
)
from heddle.context_model.metrics import bootstrap_win_share, long_tail_recall, pearson_r
from heddle.context_model.model import (
    ContextModel,
    ModelConfig,
    ResidualHead,
    build_head,
    head_inputs,
    raw_inputs,
    save_model,
)
from heddle.errors import UserError
from heddle.traces import TraceTrajectory

REPORTED_STEPS = (1, 2, 3)


@dataclass(frozen=True, slots=True)
class TrainConfig:
    base: str = PACKAGED_BASE
    """The encoder: a local Hugging Face folder or ``minilm``."""
    max_length: int = 128
    """Encoder tokens read per context."""
    hidden: int = 256
    num_epochs: int = 60
    batch_size: int = 256
    learning_rate: float = 1e-3
    weight_decay: float = 5e-2
    validation_share: float = 0.2
    """Share of trajectories held out (their examples score the head)."""
    min_win_share: float = 0.95
    """The best epoch's correction is kept only when it beats the numeric model's answers
    (epoch 0) in at least this share of bootstrap resamples of the held-out trajectories."""
    max_examples: int | None = 20_000
    seed: int = 0
    device: str = "cpu"

    def __post_init__(self) -> None:
        if not 0 < self.validation_share < 1:
            raise UserError(f"validation_share must be in (0, 1), got {self.validation_share}")
        if self.num_epochs < 1 or self.batch_size < 1 or self.hidden < 1:
            raise UserError("num_epochs, batch_size and hidden must be >= 1")
        if not 0 <= self.min_win_share <= 1:
            raise UserError(f"min_win_share must be in [0, 1], got {self.min_win_share}")


class StepFigures(msgspec.Struct, frozen=True):
    num_steps: int
    num_examples: int
    pearson_r: float | None
    long_tail_recall: float | None


class TrainReport(msgspec.Struct, frozen=True):
    num_trajectories: int
    num_examples: int
    num_train_examples: int
    num_validation_examples: int
    encode_s: float
    train_s: float
    """Wall seconds of the whole training (encoding included)."""
    best_epoch: int
    """0: no epoch beat the numeric model's answers on held-out trajectories (surely enough)."""
    validation_r: float
    """Pearson r of the held-out remaining output tokens at the kept epoch."""
    steps: list[StepFigures]
    win_share: float | None = None
    """Share of bootstrap resamples of the held-out trajectories in which the best epoch beat
    epoch 0 (None: no epoch beat it on the held-out set itself)."""


def train(trajectories: Sequence[TraceTrajectory], out: Path, config: TrainConfig) -> TrainReport:
    """Train on ``trajectories``' examples, write the model folder to ``out``; the report is
    also its ``validation.json``."""
    return train_model(trajectories, out, config)[0]


def train_model(
    trajectories: Sequence[TraceTrajectory], out: Path, config: TrainConfig
) -> tuple[TrainReport, ContextModel]:
    """``train``, and the trained model (its encoder keeps what it embedded)."""
    started = time.perf_counter()
    examples = build_examples(trajectories, config.max_examples, config.seed)
    train_set, validation_set = split_by_trajectory(examples, config.validation_share, config.seed)
    if not train_set or not validation_set:
        raise UserError("too few trajectories with two or more steps to train and validate on")
    encoder = TextEncoder(config.base, config.max_length, device=config.device)
    encoder.encode([text for e in examples for text in e.parts])
    encode_s = time.perf_counter() - started
    model_config, head, fit = _fit_head(encoder, train_set, validation_set, config)
    model = ContextModel(model_config, head, encoder)
    report = TrainReport(
        num_trajectories=len(trajectories),
        num_examples=len(examples),
        num_train_examples=len(train_set),
        num_validation_examples=len(validation_set),
        encode_s=round(encode_s, 3),
        train_s=round(time.perf_counter() - started, 3),
        best_epoch=fit.epoch,
        validation_r=round(fit.validation_r, 4),
        steps=step_figures(model, validation_set),
        win_share=fit.win_share,
    )
    save_model(out, model_config, head, report)
    return report, model


def _raw_inputs(encoder: TextEncoder, examples: Sequence[Example]) -> np.ndarray:
    return raw_inputs(encoder, [e.parts for e in examples], [e.features for e in examples])


@dataclass(frozen=True, slots=True)
class Fit:
    """The kept epoch (0: the untrained head), its held-out Pearson r and, for a trained epoch,
    the share of bootstrap resamples in which it beat the untrained head."""

    epoch: int
    validation_r: float
    win_share: float | None


def _fit_head(
    encoder: TextEncoder,
    train_set: Sequence[Example],
    validation_set: Sequence[Example],
    config: TrainConfig,
) -> tuple[ModelConfig, ResidualHead, Fit]:
    torch.manual_seed(config.seed)
    raw_train, raw_validation = (
        _raw_inputs(encoder, train_set),
        _raw_inputs(encoder, validation_set),
    )
    input_mean, input_std = raw_train.mean(0), np.maximum(raw_train.std(0), 1e-3)
    y_train, y_validation = target_matrix(train_set), target_matrix(validation_set)
    target_mean, target_std = y_train.mean(0), np.maximum(y_train.std(0), 1e-3)

    input_stats, target_stats = (input_mean, input_std), (target_mean, target_std)

    def tensors(raw: np.ndarray, y: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        x = head_inputs(raw, encoder.dim, input_stats, target_stats)
        t = (y - target_mean) / target_std
        return (
            torch.as_tensor(x, dtype=torch.float32).to(config.device),
            torch.as_tensor(t, dtype=torch.float32).to(config.device),
        )

    x_train, t_train = tensors(raw_train, y_train)
    x_validation, _ = tensors(raw_validation, y_validation)
    truth = np.expm1(y_validation[:, 0])
    head = build_head(x_train.shape[1] - len(TARGETS), config.hidden).to(config.device)
    stats = (float(target_mean[0]), float(target_std[0]))
    untrained = _snapshot(head)
    base_guess = _validation_guess(head, x_validation, *stats)
    base_r = _r(truth, base_guess)
    best_epoch, best_r, best_state = _run_epochs(
        head, (x_train, t_train), (x_validation, truth), stats, config, (base_r, untrained)
    )
    head.load_state_dict(best_state)
    fit = Fit(best_epoch, best_r, None)
    if best_epoch > 0:
        held_out = HeldOut(truth, base_guess, base_r, [e.traj_id for e in validation_set])
        guess = _validation_guess(head, x_validation, *stats)
        fit = guarded_fit(fit, held_out, guess, config)
        if fit.epoch == 0:
            head.load_state_dict(untrained)
    head.eval()
    model_config = ModelConfig(
        base=config.base,
        max_length=config.max_length,
        hidden=config.hidden,
        embedding_dim=encoder.dim,
        input_mean=input_mean.tolist(),
        input_std=input_std.tolist(),
        target_mean=target_mean.tolist(),
        target_std=target_std.tolist(),
    )
    return model_config, head, fit


@dataclass(frozen=True, slots=True)
class HeldOut:
    """The held-out examples' true remaining tokens, the untrained head's answers for them (the
    numeric model's) and their Pearson r, and each example's trajectory."""

    truth: np.ndarray
    untrained_guess: np.ndarray
    untrained_r: float
    groups: Sequence[str]


def guarded_fit(best: Fit, held_out: HeldOut, guess: np.ndarray, config: TrainConfig) -> Fit:
    """``best`` (an epoch > 0, whose held-out answers are ``guess``) with its bootstrap win
    share over the untrained head; epoch 0 with the untrained r when that share is below
    ``config.min_win_share`` (not surely better: the numeric answers are kept)."""
    share = bootstrap_win_share(
        held_out.truth, held_out.untrained_guess, guess, held_out.groups, seed=config.seed
    )
    if share < config.min_win_share:
        return Fit(0, held_out.untrained_r, round(share, 4))
    return Fit(best.epoch, best.validation_r, round(share, 4))


def _snapshot(head: ResidualHead) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in head.state_dict().items()}


def _validation_guess(head: ResidualHead, x: torch.Tensor, mean: float, std: float) -> np.ndarray:
    """The remaining output tokens the head predicts for the validation inputs ``x``."""
    head.eval()
    with torch.inference_mode():
        scaled = head(x)[:, 0].cpu().numpy()
    return np.expm1(scaled * std + mean)


def _validation_r(
    head: ResidualHead, validation: tuple[torch.Tensor, np.ndarray], mean: float, std: float
) -> float:
    """Pearson r of the remaining output tokens the head predicts for the validation examples
    (the figure the model is judged by; nan counts as 0)."""
    return _r(validation[1], _validation_guess(head, validation[0], mean, std))


def _r(truth: np.ndarray, guess: np.ndarray) -> float:
    """Pearson r, nan counted as 0."""
    r = pearson_r(truth.tolist(), guess.tolist())
    return 0.0 if math.isnan(r) else r


def _run_epochs(
    head: ResidualHead,
    train_data: tuple[torch.Tensor, torch.Tensor],
    validation: tuple[torch.Tensor, np.ndarray],
    target_stats: tuple[float, float],
    config: TrainConfig,
    untrained: tuple[float, dict[str, torch.Tensor]],
) -> tuple[int, float, dict[str, torch.Tensor]]:
    """Minibatch AdamW epochs; the epoch (0: untrained, the numeric model's answers, whose
    validation r and weights are ``untrained``), the validation r and the weights of the epoch
    with the best validation r: a correction that does not make held-out rankings better is
    not kept."""
    optimizer = torch.optim.AdamW(
        head.parameters(), lr=config.learning_rate, weight_decay=config.weight_decay
    )
    x_train, t_train = train_data
    generator = torch.Generator().manual_seed(config.seed)

    best = (0, *untrained)
    for epoch in range(1, config.num_epochs + 1):
        head.train()
        order = torch.randperm(x_train.shape[0], generator=generator)
        for start in range(0, len(order), config.batch_size):
            batch = order[start : start + config.batch_size]
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(head(x_train[batch]), t_train[batch])
            loss.backward()
            optimizer.step()
        r = _validation_r(head, validation, *target_stats)
        if r > best[1]:
            best = (epoch, r, _snapshot(head))
    return best


def step_figures(
    model: ContextModel, examples: Sequence[Example], steps: Sequence[int] = REPORTED_STEPS
) -> list[StepFigures]:
    """Pearson r of remaining tokens and long-tail recall by total length, per step count."""
    figures = []
    for num_steps in steps:
        at_step = [e for e in examples if e.num_steps == num_steps]
        if not at_step:
            figures.append(StepFigures(num_steps, 0, None, None))
            continue
        inputs = model.inputs([e.parts for e in at_step], [e.features for e in at_step])
        guessed = model.predict_inputs(inputs)[:, 0]
        truth = [e.remaining_output_tokens for e in at_step]
        done = np.asarray([e.output_tokens for e in at_step], dtype=float)
        r = pearson_r(truth, guessed.tolist())
        recall = long_tail_recall(done + np.asarray(truth), done + guessed)
        figures.append(
            StepFigures(
                num_steps,
                len(at_step),
                None if math.isnan(r) else round(r, 4),
                None if math.isnan(recall) else round(recall, 4),
            )
        )
    return figures
