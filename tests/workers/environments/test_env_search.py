"""The search environment with scripted model outputs and the real BM25 tool."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from heddle.events import SearchTool, ToolRequest, ToolReturned
from heddle.workers.environments import StepOutcome, TaskError, create_environment
from heddle.workers.environments.answers import exact_match, token_f1

Execute = Callable[[ToolRequest], Awaitable[ToolReturned]]
TASK = {"question": "Who discovered penicillin?", "answer": ["Alexander Fleming", "Fleming"]}


async def test_search_then_answer(execute: Execute) -> None:
    env = create_environment("search")
    prompt = env.reset(TASK)
    assert "<search>" in prompt.text and "penicillin" in prompt.text
    outcome = env.step("I should look it up. <search>penicillin discovery</search>")
    assert outcome.tool_request == SearchTool(query="penicillin discovery", top_k=3)
    observed = env.observe(await execute(outcome.tool_request))
    assert observed.observation is not None
    assert observed.observation.text.startswith("<information>\n[1] (penicillin)")
    assert "Alexander Fleming" in observed.observation.text
    final = env.step("<answer>Alexander Fleming.</answer>")
    assert final == StepOutcome.finish(1.0, "answered")


@pytest.mark.parametrize(
    ("text", "options", "reward"),
    [
        ("<answer>the fleming</answer>", {}, 1.0),
        ("<answer>Howard Florey</answer>", {}, 0.0),
        ("<answer>Sir Alexander Fleming</answer>", {}, 0.0),
        ("<answer>Sir Alexander Fleming</answer>", {"match": "f1"}, 0.8),
    ],
)
def test_answers_are_matched(text: str, options: dict[str, str], reward: float) -> None:
    env = create_environment("search", options)
    env.reset(TASK)
    assert env.step(text).reward == pytest.approx(reward)


async def test_user_corpus_from_options_and_task(execute: Execute, tmp_path: Path) -> None:
    (tmp_path / "notes.md").write_text("The heddle is part of a loom that separates warp threads.")
    env = create_environment("search", {"corpus": str(tmp_path)})
    env.reset({"question": "What is a heddle part of?", "answer": "a loom"})
    outcome = env.step("<search>heddle</search>")
    assert isinstance(outcome.tool_request, SearchTool)
    assert outcome.tool_request.corpus == str(tmp_path)
    observed = env.observe(await execute(outcome.tool_request))
    assert observed.observation is not None and "warp threads" in observed.observation.text
    assert env.step("<answer>loom</answer>").reward == 1.0
    per_task = create_environment("search", {"corpus": "elsewhere"})
    per_task.reset({**TASK, "corpus": "sample"})
    request = per_task.step("<search>x</search>").tool_request
    assert isinstance(request, SearchTool) and request.corpus == "sample"


def test_no_action_and_turn_limit_end_with_zero() -> None:
    env = create_environment("search")
    env.reset(TASK)
    assert env.step("I think it was someone.") == StepOutcome.finish(0.0, "no search and no answer")
    limited = create_environment("search", {"max-turns": "1"})
    limited.reset(TASK)
    assert limited.step("<search>x</search>").reason == "turn limit reached without an answer"


def test_normalization_follows_squad() -> None:
    assert exact_match("The  Ming Dynasty!", ["ming dynasty"]) == 1.0
    assert token_f1("Ming", ["Ming dynasty"]) == pytest.approx(2 / 3)
    assert token_f1("", ["x"]) == 0.0


def test_search_task_fields_are_checked() -> None:
    with pytest.raises(TaskError, match="answer"):
        create_environment("search").reset({"question": "q", "answer": [""]})
    with pytest.raises(TaskError, match="question"):
        create_environment("search").reset({"answer": "a"})
