"""A text layer for synthetic traces: what the agent wrote and what its tools returned, with a
stated share of signal about the work still to come.

    >>> from heddle.workloads.text import with_text
    >>> texted = with_text(trace, kind="swe", signal=0.9, seed=7)

The paper (s.4.1) reads the remaining length from the context: "the first step's plan is a strong
early indicator". A trace has numbers only, so this layer writes the words that carry them, per
family kind (``TEXT_KINDS``, in ``text_vocabulary``):

* ``swe``: a plan naming the files to change; test output listing failures; a next-step note;
* ``search``: a plan naming the facts to look up; search results that do or do not answer;
* ``math``: a plan naming the sub-problems; python output that checks out or does not;
* ``web``: a plan naming the pages to visit; page dumps that hold the item or not.

How much the words tell is ``signal`` in [0, 1]: each text reports a quantity
``z = signal * z_true + sqrt(1 - signal**2) * noise`` where ``z_true`` is the standardized log
of the steps still to come (for the plan: of all steps) and ``noise`` is standard normal (half a
per-trajectory draw, half a per-step one). ``z`` picks the text's wording (one of five levels of
effort, each with several paraphrases, and a closing remark that halves each level: ten degrees
in all) and its list length. At ``signal = 0`` the text is
independent of the future: a predictor that reads it can only learn to ignore it. Everything is a
pure function of (trace, kind, signal, seed); ``with_text_and_quantities`` also gives the ``z``
each text was written from (what a reader of the words could at best recover: the benchmarks'
text reader).
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from heddle.traces import TraceStep, TraceTrajectory
from heddle.workloads.text_vocabulary import TEXT_KINDS, TextVocabulary

SIGNAL_LEVELS: dict[str, float] = {"none": 0.0, "weak": 0.5, "strong": 0.9, "full": 1.0}
"""Named signal strengths; ``full``: the text reports the steps to come without noise (a
ceiling study, outside the predictor bench's default grid ``BENCH_SIGNALS``)."""
BENCH_SIGNALS = ("none", "weak", "strong")
"""The predictor bench's default grid of ``SIGNAL_LEVELS`` names."""
_LEVEL_CUTS = (-0.84, -0.25, 0.25, 0.84)
"""Standard-normal quintile cuts: ``z`` below the first is level 0 (least work left)."""
_HALF_CUTS = (-1.28, -0.52, 0.0, 0.52, 1.28)
"""Per level, the decile cut inside it: above it, the text adds ``_HARDER`` (else ``_EASIER``),
so the words tell ten degrees of work apart (the top decile is the long tail)."""
_EASIER = (" Straightforward.", " Should be quick.")
_HARDER = (" Harder than it looks.", " Expect surprises.")


def text_kind_of(family: str) -> str:
    """The text kind of a zoo family, preset or mix member name (``"swe-long"`` -> ``swe``,
    ``"mix.search"`` -> ``search``); ``ValueError`` when none fits."""
    for part in reversed(family.replace("-", ".").split(".")):
        if part in TEXT_KINDS:
            return part
    if family == "coding":
        return "swe"
    raise ValueError(f"no text kind for {family!r}; choose one of {', '.join(TEXT_KINDS)}")


def with_text(
    trace: Sequence[TraceTrajectory], kind: str, signal: float, seed: int
) -> list[TraceTrajectory]:
    """The trace with every step's ``output_text`` and ``tool_text`` written (numbers kept)."""
    return with_text_and_quantities(trace, kind, signal, seed)[0]


StepQuantities = tuple[float, float | None]
"""The ``z`` of one step's ``output_text`` and of its ``tool_text`` (None after the last step)."""


def with_text_and_quantities(
    trace: Sequence[TraceTrajectory], kind: str, signal: float, seed: int
) -> tuple[list[TraceTrajectory], dict[str, list[StepQuantities]]]:
    """``with_text``'s trace, and per trajectory id, per step, the ``z`` each of the step's texts
    was written from."""
    if kind not in TEXT_KINDS:
        raise ValueError(f"unknown text kind {kind!r}; choose one of {', '.join(TEXT_KINDS)}")
    if not (0.0 <= signal <= 1.0):
        raise ValueError(f"signal must be in [0, 1], got {signal}")
    vocabulary = TEXT_KINDS[kind]
    scale = _LogScale.of([len(t.steps) for t in trace])
    written = [_texted(t, vocabulary, signal, scale, seed) for t in trace]
    return [texted for texted, _ in written], {texted.id: zs for texted, zs in written}


@dataclass(frozen=True, slots=True)
class _LogScale:
    """Mean and deviation of ``log1p(steps)`` over a trace, to standardize step counts."""

    mean: float
    std: float

    @classmethod
    def of(cls, counts: Sequence[int]) -> _LogScale:
        logs = np.log1p(np.asarray(counts, dtype=float))
        return cls(float(logs.mean()) if logs.size else 0.0, max(float(logs.std()), 0.25))

    def z(self, steps: int) -> float:
        return (math.log1p(steps) - self.mean) / self.std


@dataclass(frozen=True, slots=True)
class _Reporter:
    """What one trajectory's texts report: ``signal`` parts truth, the rest its noise."""

    signal: float
    scale: _LogScale
    trajectory_noise: float
    rng: np.random.Generator

    def z(self, steps_left: int) -> float:
        noise = math.sqrt(0.5) * (self.trajectory_noise + float(self.rng.standard_normal()))
        noise_share = math.sqrt(max(0.0, 1.0 - self.signal * self.signal))
        return self.signal * self.scale.z(steps_left) + noise_share * noise


def _texted(
    trajectory: TraceTrajectory,
    vocabulary: TextVocabulary,
    signal: float,
    scale: _LogScale,
    seed: int,
) -> tuple[TraceTrajectory, list[StepQuantities]]:
    rng = np.random.default_rng([seed, zlib.crc32(trajectory.id.encode())])
    reporter = _Reporter(signal, scale, float(rng.standard_normal()), rng)
    num_steps = len(trajectory.steps)
    steps: list[TraceStep] = []
    quantities: list[StepQuantities] = []
    for index, step in enumerate(trajectory.steps):
        levels = vocabulary.plans if index == 0 else vocabulary.notes
        output_z = reporter.z(num_steps - index)
        output_text = _phrase(levels, output_z, vocabulary, rng)
        tool_text, tool_z = "", None
        if index < num_steps - 1:
            tool_z = reporter.z(num_steps - index - 1)
            tool_text = _phrase(vocabulary.results, tool_z, vocabulary, rng)
        quantities.append((output_z, tool_z))
        steps.append(
            TraceStep(
                output_tokens=step.output_tokens,
                tool_s=step.tool_s,
                tool_output_tokens=step.tool_output_tokens,
                output_text=output_text,
                tool_text=tool_text,
            )
        )
    texted = TraceTrajectory(
        id=trajectory.id,
        group=trajectory.group,
        prompt_tokens=trajectory.prompt_tokens,
        steps=steps,
    )
    return texted, quantities


def _phrase(
    levels: tuple[tuple[str, ...], ...],
    z: float,
    vocabulary: TextVocabulary,
    rng: np.random.Generator,
) -> str:
    """A paraphrase of the effort level ``z`` falls in, its list as long as ``z`` says."""
    level = sum(z > cut for cut in _LEVEL_CUTS)
    paraphrases = levels[level]
    template = paraphrases[int(rng.integers(len(paraphrases)))]
    suffixes = _HARDER if z > _HALF_CUTS[level] else _EASIER
    template += suffixes[int(rng.integers(len(suffixes)))]
    num_items = int(np.clip(round(math.exp(0.9 + 0.6 * z)), 1, len(vocabulary.items)))
    chosen = rng.choice(len(vocabulary.items), size=num_items, replace=False)
    items = ", ".join(vocabulary.items[i] for i in sorted(chosen))
    return template.format(items=items, n=int(np.clip(round(math.exp(1.5 + z)), 1, 99)))
