from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from heddle.ids import check_token
from heddle.traces import read_trace, write_trace
from heddle.workloads import WORKLOADS, generate, workload_names, workload_spec
from heddle.workloads.generator import _assemble_steps

NAMES = ("coding", "search", "math")


def test_registry_names_the_three_workloads() -> None:
    assert workload_names() == sorted(NAMES)
    assert all(WORKLOADS[name].name == name for name in NAMES)


def test_unknown_workload_names_the_choices() -> None:
    with pytest.raises(ValueError, match="choose one of coding, math, search"):
        generate("chess", 8, seed=0)


@pytest.mark.parametrize(("count", "size"), [(0, None), (8, 0)])
def test_bad_sizes_raise(count: int, size: int | None) -> None:
    with pytest.raises(ValueError, match="must be >= 1"):
        generate("math", count, seed=0, group_size=size)


@pytest.mark.parametrize("name", NAMES)
def test_same_seed_same_trace_other_seed_other_trace(name: str) -> None:
    assert generate(name, 64, seed=3) == generate(name, 64, seed=3)
    assert generate(name, 64, seed=3) != generate(name, 64, seed=4)


@pytest.mark.parametrize("name", NAMES)
def test_a_shorter_trace_is_a_prefix_of_a_longer_one(name: str) -> None:
    size = workload_spec(name).group_size
    assert generate(name, 4 * size, seed=1) == generate(name, 9 * size, seed=1)[: 4 * size]


@pytest.mark.parametrize("name", NAMES)
def test_round_trip_through_the_trace_format(name: str, tmp_path: Path) -> None:
    trace = generate(name, 100, seed=5)
    path = tmp_path / f"{name}.jsonl"
    assert write_trace(path, trace) == 100
    assert read_trace(path) == trace


@pytest.mark.parametrize(("name", "size"), [("coding", None), ("search", 16), ("math", 4)])
def test_group_structure(name: str, size: int | None) -> None:
    group_size = size or workload_spec(name).group_size
    trace = generate(name, 10 * group_size + 3, seed=2, group_size=size)
    sizes = Counter(t.group for t in trace)
    assert list(sizes.values()) == [group_size] * 10 + [3]
    assert len({t.id for t in trace}) == len(trace)
    for trajectory in trace:
        check_token(trajectory.id, "trajectory id")
        check_token(trajectory.group, "group id")
        assert trajectory.id.startswith(trajectory.group)
    prompts: dict[str, set[int]] = {}
    for trajectory in trace:
        prompts.setdefault(trajectory.group, set()).add(trajectory.prompt_tokens)
    assert all(len(lengths) == 1 for lengths in prompts.values()), "one prompt per group"


@pytest.mark.parametrize("name", NAMES)
def test_caps_and_step_shape(name: str) -> None:
    spec = workload_spec(name)
    max_tool_s = max(tool.max_time_s for tool in spec.tools)
    for trajectory in generate(name, 400, seed=11):
        assert 1 <= len(trajectory.steps) <= spec.turns.max_turns
        assert trajectory.num_output_tokens <= spec.max_response_tokens
        last = trajectory.steps[-1]
        assert last.tool_s == 0 and last.tool_output_tokens == 0
        for step in trajectory.steps:
            assert 1 <= step.output_tokens <= spec.max_output_tokens_per_turn
        for step in trajectory.steps[:-1]:
            assert 1 <= step.tool_output_tokens <= spec.max_tool_output_tokens
            assert 0 < step.tool_s <= max_tool_s


@given(
    outputs=st.lists(st.integers(1, 3000), min_size=1, max_size=30),
    cap=st.integers(1, 20000),
)
def test_truncation_keeps_a_prefix_up_to_the_cap(outputs: list[int], cap: int) -> None:
    observations = np.arange(1, len(outputs) + 1)
    times = np.full(len(outputs), 0.5)
    steps = _assemble_steps(np.array(outputs), observations, times, cap)
    kept = [step.output_tokens for step in steps]
    assert sum(kept) == min(sum(outputs), cap)
    assert kept[:-1] == outputs[: len(kept) - 1]
    assert 1 <= kept[-1] <= outputs[len(kept) - 1]
    assert [s.tool_output_tokens for s in steps[:-1]] == list(observations[: len(steps) - 1])
    assert steps[-1].tool_s == 0 and steps[-1].tool_output_tokens == 0


@pytest.mark.parametrize("name", NAMES)
def test_another_epoch_resamples_the_same_prompts(name: str) -> None:
    first = generate(name, 64, seed=3)
    second = generate(name, 64, seed=3, epoch=1)
    assert [(t.id, t.group, t.prompt_tokens) for t in first] == [
        (t.id, t.group, t.prompt_tokens) for t in second
    ]
    assert [t.steps for t in first] != [t.steps for t in second]


def test_negative_seed_or_epoch_raises() -> None:
    with pytest.raises(ValueError, match="seed and epoch must be >= 0"):
        generate("math", 8, seed=0, epoch=-1)
