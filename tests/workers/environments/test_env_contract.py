"""The environment contract: outcome kinds, call order, replay and the registry."""

from __future__ import annotations

from pathlib import Path

import pytest

from heddle.events import PythonTool, ToolReturned
from heddle.workers.engines.options import EngineOptionError
from heddle.workers.environments import (
    ENVIRONMENTS,
    SAMPLE_TASKS,
    EnvironmentStateError,
    Observation,
    StepOutcome,
    TaskError,
    create_environment,
    environment_names,
    read_tasks,
    replay,
    validate_task,
)
from heddle.workers.environments.math_env import MathEnvironment
from heddle.workers.tokenizers import ByteTokenizer

TASK = {"question": "What is 2 + 2?", "answer": 4}


def returned(output: str, step: int = 0) -> ToolReturned:
    """A tool result as the executor would publish it (for call-order tests only)."""
    return ToolReturned(
        event_id=f"r:t:{step}:tool_returned",
        occurred_at=0.0,
        traj_id="t",
        step=step,
        call_id="k",
        tool="python",
        status="ok",
        output=output,
    )


def test_outcome_is_exactly_one_kind() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        StepOutcome()
    with pytest.raises(ValueError, match="exactly one"):
        StepOutcome(done=True, tool_request=PythonTool(code=""))
    assert StepOutcome.finish(1.0, "x").done
    assert StepOutcome.call(PythonTool(code="1")).tool_request == PythonTool(code="1")


def test_observation_tokens() -> None:
    tokenizer = ByteTokenizer()
    assert Observation(text="hi").tokens(tokenizer) == [104, 105]
    assert Observation(text="ignored", token_ids=(1, 2)).tokens(tokenizer) == [1, 2]


def test_calls_out_of_order_fail_loudly() -> None:
    env = MathEnvironment()
    with pytest.raises(EnvironmentStateError, match="step called while new"):
        env.step("Answer: 4")
    env.reset(TASK)
    with pytest.raises(EnvironmentStateError, match="observe called while awaiting generation"):
        env.observe(returned("4"))
    with pytest.raises(EnvironmentStateError, match="reset twice"):
        env.reset(TASK)
    assert env.step("Answer: 4").done
    with pytest.raises(EnvironmentStateError, match="step called while done"):
        env.step("Answer: 4")


def test_replay_rebuilds_the_state_the_live_run_reached() -> None:
    history: list[str | ToolReturned] = ["```python\nprint(2+2)\n```", returned("4\n")]
    live = MathEnvironment()
    live.reset(TASK)
    live.step(history[0])  # type: ignore[arg-type]
    live_outcome = live.observe(history[1])  # type: ignore[arg-type]
    state = replay(MathEnvironment(), TASK, history)
    assert state.last_outcome == live_outcome
    assert state.prompt.text.endswith("Problem: What is 2 + 2?\n")
    resumed = MathEnvironment()
    replay(resumed, TASK, history)
    assert resumed.step("\\boxed{4}") == StepOutcome.finish(1.0, "answered")


def test_replay_rejects_a_history_that_does_not_fit() -> None:
    with pytest.raises(EnvironmentStateError, match="observe called while awaiting generation"):
        replay(MathEnvironment(), TASK, [returned("4")])
    with pytest.raises(EnvironmentStateError, match="step called while awaiting tool"):
        replay(MathEnvironment(), TASK, ["```python\nprint(1)\n```", "Answer: 4"])
    with pytest.raises(EnvironmentStateError, match="follows the end"):
        replay(MathEnvironment(), TASK, ["Answer: 4", "Answer: 5"])
    pending = replay(MathEnvironment(), TASK, ["```python\nprint(1)\n```"])
    assert pending.last_outcome is not None
    assert pending.last_outcome.tool_request == PythonTool(code="print(1)\n")


def test_registry_names_and_options() -> None:
    assert environment_names() == ["coding", "math", "search", "token_class", "trace"]
    env = create_environment("math", {"max-turns": "3"})
    assert isinstance(env, MathEnvironment)
    assert env.options.max_turns == 3
    with pytest.raises(EngineOptionError, match="environment 'math': unknown option --turns"):
        create_environment("math", {"turns": "3"})
    with pytest.raises(ValueError, match="unknown environment 'chess'"):
        create_environment("chess")
    assert {info.name for info in ENVIRONMENTS["search"].describe()} >= {"corpus", "top-k"}


@pytest.mark.parametrize("name", sorted(SAMPLE_TASKS))
def test_sample_task_files_are_valid(name: str) -> None:
    tasks = read_tasks(SAMPLE_TASKS[name], name)
    assert len(tasks) >= 5
    for task in tasks:
        create_environment(name).reset(task)


def test_tasks_that_do_not_fit_name_the_field(tmp_path: Path) -> None:
    cases: dict[str, tuple[dict[str, object], str]] = {
        "math": ({"question": "q"}, "answer"),
        "coding": ({"prompt": "p", "tests": 3}, "tests"),
        "search": ({"question": "q", "answer": []}, "answer"),
        "trace": ({"id": "x", "prompt_tokens": 1, "steps": [{"output_tokens": -1}]}, "steps"),
    }
    for name, (task, field) in cases.items():
        with pytest.raises(TaskError, match=field):
            validate_task(name, task)
    bad_file = tmp_path / "tasks.jsonl"
    bad_file.write_text('{"question": "q", "answer": 1}\n\n{"question": 2, "answer": 1}\n')
    with pytest.raises(TaskError, match=r"tasks.jsonl:3: math task: .*question"):
        read_tasks(bad_file, "math")
    with pytest.raises(TaskError, match="cannot read"):
        read_tasks(tmp_path / "missing.jsonl", "math")
