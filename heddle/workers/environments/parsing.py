"""Finding actions in generated text: code blocks, boxed answers, answer lines, XML-ish tags.

Each finder returns a ``Found`` (where the action starts and its content) or None, so an
environment can take the earliest action when a generation holds several.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# An unterminated block at the very end counts: engines often stop at (and strip) the closing
# fence, or hit the token limit inside the block.
_CODE_BLOCK = re.compile(r"```(?:python|py)[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL)
_ANSWER_LINE = re.compile(r"^[ \t]*(?:final[ \t]+)?answer[ \t]*:[ \t]*(.+?)[ \t]*$", re.I | re.M)


@dataclass(frozen=True, slots=True)
class Found:
    start: int
    """Offset of the action in the text."""
    content: str


def find_code_block(text: str) -> Found | None:
    """The first ```python (or ```py) block."""
    match = _CODE_BLOCK.search(text)
    return Found(match.start(), match.group(1)) if match else None


def find_boxed(text: str) -> Found | None:
    """The first ``\\boxed{...}`` with balanced braces (``\\boxed{\\frac{1}{2}}`` works)."""
    start = text.find("\\boxed{")
    while start != -1:
        content = _balanced(text, start + len("\\boxed{"))
        if content is not None:
            return Found(start, content.strip())
        start = text.find("\\boxed{", start + 1)
    return None


def _balanced(text: str, position: int) -> str | None:
    """Text from ``position`` up to the brace that closes an already-open one, or None."""
    depth = 1
    for index in range(position, len(text)):
        if text[index] == "{":
            depth += 1
        elif text[index] == "}":
            depth -= 1
            if depth == 0:
                return text[position:index]
    return None


def find_answer_line(text: str) -> Found | None:
    """The first line ``Answer: X`` (or ``Final answer: X``), case-insensitive."""
    match = _ANSWER_LINE.search(text)
    return Found(match.start(), match.group(1)) if match else None


def find_tag(text: str, tag: str) -> Found | None:
    """The first ``<tag>content</tag>``; an unclosed tag at the end counts (stop strings)."""
    match = re.search(rf"<{tag}>(.*?)(?:</{tag}>|\Z)", text, re.DOTALL)
    return Found(match.start(), match.group(1).strip()) if match else None


def earliest(*candidates: tuple[str, Found | None]) -> tuple[str, Found] | None:
    """The (name, found) that starts first among those found."""
    found = [(item.start, name, item) for name, item in candidates if item is not None]
    if not found:
        return None
    _, name, item = min(found, key=lambda entry: entry[0])
    return name, item
