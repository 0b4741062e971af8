"""Checking answers: numbers with tolerance (math), normalized exact match and token F1 (search).

The search normalization follows the SQuAD evaluation script (Rajpurkar et al., 2016): lower
case, drop punctuation and the articles a/an/the, collapse whitespace.
"""

from __future__ import annotations

import math
import re
import string
from collections import Counter
from collections.abc import Iterable

_LATEX_FRACTION = re.compile(r"\\[dt]?frac\{([^{}]+)\}\{([^{}]+)\}")
_LATEX_WRAPPER = re.compile(r"\\(?:text|mathrm|mathbf)\{([^{}]*)\}")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?:\D|$))")
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


def normalize_math(answer: str) -> str:
    """Strip LaTeX decoration, dollar signs, thousands separators and a trailing period."""
    text = answer.strip().strip("$").strip()
    text = _LATEX_WRAPPER.sub(r"\1", text)
    text = _LATEX_FRACTION.sub(r"(\1)/(\2)", text)
    text = _THOUSANDS.sub("", text)
    return text.rstrip(".").replace("\\!", "").replace(" ", "")


def parse_number(answer: str) -> float | None:
    """A finite number from ``3``, ``-2.5e3``, ``1,000``, ``3/4``, ``\\frac{3}{4}``; else None."""
    text = normalize_math(answer)
    fraction = re.fullmatch(r"\(?([-+]?[\d.]+(?:e[-+]?\d+)?)\)?/\(?([-+]?[\d.]+)\)?", text, re.I)
    try:
        value = float(fraction.group(1)) / float(fraction.group(2)) if fraction else float(text)
    except (ValueError, ZeroDivisionError):
        return None
    return value if math.isfinite(value) else None


def math_answers_match(
    given: str, expected: str | float, *, rel_tolerance: float = 1e-6, abs_tolerance: float = 1e-9
) -> bool:
    """Numerically close when both parse as numbers, else equal after normalization."""
    expected_text = str(expected)
    given_value, expected_value = parse_number(given), parse_number(expected_text)
    if given_value is not None and expected_value is not None:
        return math.isclose(
            given_value, expected_value, rel_tol=rel_tolerance, abs_tol=abs_tolerance
        )
    return normalize_math(given).casefold() == normalize_math(expected_text).casefold()


def normalize_text(text: str) -> str:
    lowered = text.lower().translate(_PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", lowered).split())


def exact_match(prediction: str, answers: Iterable[str]) -> float:
    normalized = normalize_text(prediction)
    return 1.0 if any(normalized == normalize_text(answer) for answer in answers) else 0.0


def token_f1(prediction: str, answers: Iterable[str]) -> float:
    """Best token-level F1 of ``prediction`` against any answer."""
    predicted = normalize_text(prediction).split()
    return max((_f1(predicted, normalize_text(answer).split()) for answer in answers), default=0.0)


def _f1(predicted: list[str], reference: list[str]) -> float:
    if not predicted or not reference:
        return float(predicted == reference)
    num_common = sum((Counter(predicted) & Counter(reference)).values())
    if num_common == 0:
        return 0.0
    precision, recall = num_common / len(predicted), num_common / len(reference)
    return 2 * precision * recall / (precision + recall)
