import random
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from heddle.workloads.text import (
    SIGNAL_LEVELS,
    TEXT_KINDS,
    text_kind_of,
    with_text,
    with_text_and_quantities,
)
from heddle.workloads.zoo import zoo_family


def _trace(family: str, num: int = 120, seed: int = 3):
    zoo = zoo_family(family)
    return zoo.generate(zoo.draw(random.Random(seed)), num, seed=seed)


def _plan_level(text: str, kind: str) -> int:
    """The effort level a plan's wording comes from (the vocabulary's templates)."""
    for level, paraphrases in enumerate(TEXT_KINDS[kind].plans):
        for template in paraphrases:
            if text.startswith(template.split("{")[0]):
                return level
    raise AssertionError(f"no level for {text!r}")


def _level(text: str, levels: tuple[tuple[str, ...], ...]) -> int:
    """The effort level of ``levels`` (plans, notes or results) whose template the text fills,
    then one closing remark."""
    found = {
        level
        for level, paraphrases in enumerate(levels)
        for template in paraphrases
        if re.fullmatch(_template_pattern(template) + _CLOSING_REMARKS, text)
    }
    assert len(found) == 1, f"levels {sorted(found)} for {text!r}"
    return found.pop()


_CLOSING_REMARKS = (
    r"(?: Straightforward\.| Should be quick\.| Harder than it looks\.| Expect surprises\.)"
)


def _template_pattern(template: str) -> str:
    parts = re.split(r"(\{n\}|\{items\})", template)
    fills = {"{n}": r"\d+", "{items}": r"[^ ,]+(?:, [^ ,]+)*"}
    return "".join(fills.get(part, re.escape(part)) for part in parts)


def test_text_keeps_numbers_and_fills_every_step() -> None:
    trace = _trace("swe", 20)
    texted = with_text(trace, "swe", 0.9, seed=1)
    for plain, with_words in zip(trace, texted, strict=True):
        assert [s.output_tokens for s in plain.steps] == [s.output_tokens for s in with_words.steps]
        assert [s.tool_s for s in plain.steps] == [s.tool_s for s in with_words.steps]
        assert all(s.output_text for s in with_words.steps)
        assert all(s.tool_text for s in with_words.steps[:-1])
        assert with_words.steps[-1].tool_text == ""


def test_text_is_deterministic_from_the_seed() -> None:
    trace = _trace("search", 40)
    assert with_text(trace, "search", 0.5, seed=2) == with_text(trace, "search", 0.5, seed=2)
    assert with_text(trace, "search", 0.5, seed=2) != with_text(trace, "search", 0.5, seed=3)


@pytest.mark.parametrize("kind", sorted(TEXT_KINDS))
def test_plan_wording_tracks_length_as_strongly_as_the_signal_says(kind: str) -> None:
    trace = _trace("swe" if kind == "swe" else kind, 400)
    steps = np.log1p([len(t.steps) for t in trace])
    correlations = {}
    for name, signal in SIGNAL_LEVELS.items():
        texted = with_text(trace, kind, signal, seed=5)
        levels = [_plan_level(t.steps[0].output_text, kind) for t in texted]
        correlations[name] = float(np.corrcoef(levels, steps)[0, 1])
    assert abs(correlations["none"]) < 0.15
    assert correlations["strong"] > correlations["weak"] > correlations["none"] + 0.1
    assert correlations["strong"] > 0.5


@pytest.mark.parametrize("signal", [0.0, 0.5, 0.9])
def test_reported_quantities_are_what_the_words_were_written_from(signal: float) -> None:
    trace = _trace("swe", 60)
    texted, quantities = with_text_and_quantities(trace, "swe", signal, seed=4)
    assert texted == with_text(trace, "swe", signal, seed=4)
    vocabulary = TEXT_KINDS["swe"]
    quintile_cuts = (-0.84, -0.25, 0.25, 0.84)
    for trajectory in texted:
        steps = quantities[trajectory.id]
        assert len(steps) == len(trajectory.steps)
        assert steps[-1][1] is None
        for index, (step, (output_z, tool_z)) in enumerate(
            zip(trajectory.steps, steps, strict=True)
        ):
            outputs = vocabulary.plans if index == 0 else vocabulary.notes
            assert _level(step.output_text, outputs) == sum(output_z > c for c in quintile_cuts)
            if index < len(steps) - 1:
                assert tool_z is not None
                level = sum(tool_z > c for c in quintile_cuts)
                assert _level(step.tool_text, vocabulary.results) == level


def test_full_signal_reports_the_steps_left_exactly() -> None:
    trace = _trace("search", 80)
    _, quantities = with_text_and_quantities(trace, "search", 1.0, seed=0)
    logs = np.log1p([len(t.steps) for t in trace])
    mean, std = logs.mean(), max(logs.std(), 0.25)
    for trajectory in trace:
        num_steps = len(trajectory.steps)
        for index, (output_z, tool_z) in enumerate(quantities[trajectory.id]):
            # a step's output reports the steps from it on; its tool result those after it
            assert output_z == pytest.approx((np.log1p(num_steps - index) - mean) / std)
            if tool_z is not None:
                assert tool_z == pytest.approx((np.log1p(num_steps - index - 1) - mean) / std)


def test_kind_names() -> None:
    assert text_kind_of("swe-long") == "swe"
    assert text_kind_of("mix.search") == "search"
    assert text_kind_of("coding") == "swe"
    with pytest.raises(ValueError, match="no text kind"):
        text_kind_of("chess")
    with pytest.raises(ValueError, match="signal"):
        with_text([], "swe", 1.5, seed=0)


@settings(max_examples=30, deadline=None)
@given(signal=st.floats(0, 1), seed=st.integers(0, 2**31))
def test_any_signal_writes_valid_text(signal: float, seed: int) -> None:
    texted = with_text(_trace("math", 8, seed=1), "math", signal, seed)
    texts = [s.output_text for t in texted for s in t.steps] + [
        s.tool_text for t in texted for s in t.steps[:-1]
    ]
    assert all(text and "{" not in text and "}" not in text for text in texts)
