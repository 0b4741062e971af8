"""The words of the synthetic text layer (``heddle.workloads.text``), per family kind: item
names, and per effort level (five, 0: least work left) several paraphrases of a plan, a tool
result and a next-step note. ``{items}`` and ``{n}`` are filled in by the text layer.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TextVocabulary:
    """One family kind's words: item names, and per effort level (0: least work) the phrases
    of its plans, tool results and next-step notes; ``{items}``/``{n}`` are filled in."""

    items: tuple[str, ...]
    plans: tuple[tuple[str, ...], ...]
    results: tuple[tuple[str, ...], ...]
    notes: tuple[tuple[str, ...], ...]


def _levels(*phrases: str) -> tuple[tuple[str, ...], ...]:
    """Five levels from ``"a|b"`` strings (paraphrases of one level split on ``|``)."""
    return tuple(tuple(phrase.split("|")) for phrase in phrases)


TEXT_KINDS: dict[str, TextVocabulary] = {
    "swe": TextVocabulary(
        items=(
            "parser.py",
            "models.py",
            "views.py",
            "cli.py",
            "io/reader.py",
            "io/writer.py",
            "config.py",
            "cache.py",
            "schema.py",
            "auth/session.py",
            "db/query.py",
            "utils.py",
        ),
        plans=_levels(
            "Plan: a one-line fix in {items}.|Plan: trivial typo, change {items} only.",
            "Plan: a small patch to {items}.|Plan: adjust a condition in {items}.",
            "Plan: change {items} and add a test.|Plan: update {items}, then rerun the tests.",
            "Plan: refactor {items}; several call sites move.|Plan: rework {items} and tests.",
            "Plan: a large rewrite across {items}; the API changes everywhere."
            "|Plan: redesign {items}; expect many failing tests to fix one by one.",
        ),
        results=_levels(
            "{n} passed, 0 failed.|All {n} tests pass.",
            "1 failed: {items}. {n} passed.|One failure left in {items}.",
            "{n} failed: {items}.|FAILED {items} ({n} failures).",
            "{n} failed, errors in {items}; import errors.|{n} failures across {items}.",
            "collection error; {n} failed, build broken in {items}."
            "|Traceback in {items}; {n} tests error out.",
        ),
        notes=_levels(
            "Done; submitting.|The fix is complete.",
            "Almost there: one assertion in {items}.|A last tweak to {items}.",
            "Fixing {items} next.|Now the failures in {items}.",
            "Many failures remain in {items}; continuing.|Still broken: {items}.",
            "Everything fails; start over with {items}.|Deep problem; rewriting {items}.",
        ),
    ),
    "search": TextVocabulary(
        items=(
            "the author",
            "the year",
            "the capital",
            "the population",
            "the founder",
            "the award",
            "the river",
            "the league",
            "the album",
            "the treaty",
            "the mayor",
        ),
        plans=_levels(
            "I know this; one lookup of {items}.|A single search for {items} settles it.",
            "Look up {items}, then answer.|Search {items} once or twice.",
            "Need {items}; a few searches.|First find {items}, then combine.",
            "Multi-hop: {items}, each needs its own search.|Chain of facts: {items}.",
            "Obscure question; {items} are hard to find, many searches ahead."
            "|Ambiguous: {items} each have several candidates to check.",
        ),
        results=_levels(
            "Result 1 answers directly: {items}.|Top hit states {items} exactly.",
            "Result 2 mentions {items}.|A snippet names {items}.",
            "Results mention {items} but not the answer.|Partial: {items}, not confirmed.",
            "No result answers; {n} unrelated pages about {items}.|Irrelevant hits on {items}.",
            "Nothing found; {n} dead links for {items}.|Zero relevant results for {items}.",
        ),
        notes=_levels(
            "The answer is found.|Answering now.",
            "One check of {items}.|Confirm {items}.",
            "Search {items} next.|Try another query on {items}.",
            "Still missing {items}; more queries.|Rephrase the search for {items}.",
            "Lost; restarting the search for {items}.|No lead yet on {items}.",
        ),
    ),
    "math": TextVocabulary(
        items=(
            "the integral",
            "the recurrence",
            "the base case",
            "the bound",
            "the modulus",
            "the sum",
            "the inequality",
            "the polynomial",
            "the limit",
            "the lemma",
        ),
        plans=_levels(
            "Direct computation of {items}.|Plug in: {items} is immediate.",
            "Simplify {items}, then compute.|One substitution in {items}.",
            "Split into {items}; check each numerically.|Solve {items} step by step.",
            "Hard: {items} need case analysis.|Several cases: {items}.",
            "Very hard: {items} need a proof by induction with many cases."
            "|No obvious approach; explore {items} numerically for a long time.",
        ),
        results=_levels(
            "Output: {n}. Matches.|Check passed: {n}.",
            "Output: {n}. Close; one correction.|Result {n}, nearly there.",
            "Output: {n}. Does not match {items}.|Mismatch in {items}.",
            "Error: {items} diverges.|Exception while evaluating {items}.",
            "Timeout; {items} explode.|MemoryError computing {items}.",
        ),
        notes=_levels(
            "So the answer is {n}.|Final answer: {n}.",
            "Fix the sign in {items}.|Adjust {items} slightly.",
            "Recheck {items}.|Try {items} another way.",
            "Back to {items}; the approach fails.|Rethink {items}.",
            "Start over on {items}.|None of it works; new idea for {items}.",
        ),
    ),
    "web": TextVocabulary(
        items=(
            "the cart page",
            "the login form",
            "the search box",
            "the product list",
            "the settings tab",
            "the checkout",
            "the filter menu",
            "the review section",
            "the order history",
            "the help center",
        ),
        plans=_levels(
            "Open {items} and read the value.|One click on {items}.",
            "Go to {items}, then confirm.|Visit {items} once.",
            "Visit {items} in turn.|Navigate {items}, compare.",
            "Many pages: {items}, with forms to fill.|Long task across {items}.",
            "Complex workflow over {items}; expect retries and pop-ups."
            "|Unclear site; explore {items} page by page.",
        ),
        results=_levels(
            "Page shows the item: {items}.|Found it on {items}.",
            "Page lists {items}; one more click.|Near: {items}.",
            "Page loaded {items}, not the target.|Wrong page: {items}.",
            "Error page at {items}; {n} broken links.|Login wall at {items}.",
            "Timeout loading {items}; {n} retries failed.|Blank page at {items}.",
        ),
        notes=_levels(
            "Task complete.|Submitting the answer.",
            "Click {items} to finish.|Last step: {items}.",
            "Next, {items}.|Try {items}.",
            "Go back; try {items}.|Detour through {items}.",
            "Lost on the site; restart at {items}.|Nothing works; retry {items}.",
        ),
    ),
}
