"""``heddle bench hops``: the path's figures, which calls it keeps, and a real trace of a step."""

from __future__ import annotations

import asyncio
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from heddle.bench.hops import HopsConfig, run_hops
from heddle.bench.hops_path import (
    CONTROL_PLANE_PART,
    TOOLS_PART,
    WORKER_PART,
    hop_figures,
    path_calls,
    path_parts,
    task_summaries,
)
from heddle.bench.hops_trace import Birth, Call, Window


def reference_figures(files: list[str]) -> tuple[list[str], int, int]:
    """First-visit order, hops and returns, counted the plain way."""
    order = [file for index, file in enumerate(files) if file not in files[:index]]
    changes = [index for index in range(1, len(files)) if files[index] != files[index - 1]]
    returns = [index for index in changes if files[index] in files[:index]]
    return order, len(changes), len(returns)


@given(st.lists(st.sampled_from(["a.py", "b.py", "c.py", "d.py"]), max_size=30))
def test_hop_figures_match_a_plain_count(files: list[str]) -> None:
    figures = hop_figures(files)
    assert (figures.files, figures.num_hops, figures.num_returns) == reference_figures(files)


def test_a_return_names_the_file_left_and_the_file_reentered() -> None:
    figures = hop_figures(["a.py", "b.py", "b.py", "a.py", "c.py"])
    assert figures.files == ["a.py", "b.py", "c.py"]
    assert (figures.num_hops, figures.returns) == (3, ["b.py -> a.py"])


# Tasks of the synthetic window: the executor (0), the deciders (1, before the window), their
# publisher (2, created by 1), the projector (3), the worker's consumer (4, before the window),
# its command handler (5, created by 4), the step (6, created by 5), the nats reader (7).
EXECUTOR, DECIDERS, PUBLISHER, PROJECTOR, CONSUMER, HANDLER, STEP, READER = range(8)
CALLS = (
    Call(EXECUTOR, "bus/bus.py", "publish", 0, carries=True),
    Call(EXECUTOR, "bus/wire.py", "send", 0),
    Call(READER, "bus/pull.py", "receive", 1),
    Call(EXECUTOR, "tools/executor.py", "ack", 2),  # its publish acknowledged: beside
    Call(DECIDERS, "controlplane/host.py", "run", 3),
    Call(DECIDERS, "control/router.py", "decide", 3, carries=True),  # 5: creates the publisher
    Call(DECIDERS, "control/priority.py", "decide", 3),  # the slower deciders: beside
    Call(PROJECTOR, "ledger/projector.py", "project", 4),
    Call(PUBLISHER, "controlplane/gating.py", "prepare", 5, carries=True),
    Call(PUBLISHER, "bus/outbox.py", "publish_many", 6, carries=True),  # after an await
    Call(PUBLISHER, "bus/outbox.py", "publish_many", 7),  # resumed once acknowledged: beside
    Call(PUBLISHER, "controlplane/latency.py", "add", 7),  # beside
    Call(CONSUMER, "bus/runner.py", "fetch", 8),  # 12: creates the handler
    Call(CONSUMER, "bus/pull.py", "fetch", 8),  # back to fetching: beside
    Call(HANDLER, "agent/commands.py", "handle", 9, carries=True),  # 14: creates the step
    Call(STEP, "agent/steps.py", "run", 10),
    Call(HANDLER, "agent/commands.py", "settled", 10),  # waits for the step: beside
    Call(STEP, "agent/history.py", "context", 11),
    Call(STEP, "engines/sim.py", "generate", 11),
)
WINDOW = Window(
    calls=CALLS,
    tasks={number: f"task{number}" for number in range(8)},
    births={PUBLISHER: Birth(DECIDERS, 6), HANDLER: Birth(CONSUMER, 13), STEP: Birth(HANDLER, 15)},
    handover_tasks=frozenset({DECIDERS, PUBLISHER, CONSUMER, HANDLER}),
    step=0,
)


def test_the_path_keeps_the_calls_that_carry_the_step() -> None:
    assert path_parts(WINDOW) == {
        STEP: WORKER_PART, HANDLER: WORKER_PART, CONSUMER: WORKER_PART,
        DECIDERS: CONTROL_PLANE_PART, PUBLISHER: CONTROL_PLANE_PART, EXECUTOR: TOOLS_PART,
    }  # fmt: skip
    assert [call.file for call in path_calls(WINDOW)] == [
        "bus/bus.py", "bus/wire.py",
        "controlplane/host.py", "control/router.py", "controlplane/gating.py", "bus/outbox.py",
        "bus/runner.py", "agent/commands.py", "agent/steps.py", "agent/history.py",
        "engines/sim.py",
    ]  # fmt: skip


def test_the_tasks_beside_the_path_are_listed_with_all_their_calls() -> None:
    beside = {summary.task: summary for summary in task_summaries(WINDOW) if not summary.part}
    assert set(beside) == {"task3", "task7"}
    assert beside["task3"].files == ["ledger/projector.py"]


def test_a_trace_of_one_step_runs_from_the_bus_to_the_engine(tmp_path: Path) -> None:
    config = HopsConfig(steps=2, tool_s=2.0, time_scale=4.0, timeout_s=120.0)
    result = asyncio.run(run_hops(config, tmp_path))
    assert [step.step for step in result.steps] == [0]
    hops = result.last
    assert hops.files[0].startswith("heddle/bus/")  # the executor hands its result to the bus
    assert hops.files[-1] == "heddle/workers/engines/simulated.py"  # the engine's generate
    assert list(hops.parts) == [TOOLS_PART, CONTROL_PLANE_PART, WORKER_PART]
    assert any(file.startswith("heddle/control/") for file in hops.parts[CONTROL_PLANE_PART])
    assert any(file.startswith("heddle/workers/agent/") for file in hops.parts[WORKER_PART])
    assert hops.num_hops >= hops.num_files - 1 >= 2
    assert set(hops.files) <= set(hops.window_files)
