"""The trajectory log: a fold over step events that the agent uses live and to resume."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from heddle.events import (
    Completed,
    EventT,
    Failed,
    Generated,
    GenerationInterrupted,
    GenerationStarted,
    Migrated,
    ToolCalled,
    ToolReturned,
    TrajectoryPhase,
    TrajectoryPlaced,
    TrajectorySpec,
    TrajectorySubmitted,
)
from heddle.ids import derive_id
from heddle.workers.agent.trajectory_log import HistoryError, TrajectoryLog, rebuild

R, T = "r1", "t000001"
tokens = st.lists(st.integers(min_value=0, max_value=300), max_size=6)


def _id(step: int | None, kind: str) -> str:
    return derive_id(R, T, step, kind)


def _events(prompt: list[int], steps: list[tuple[list[int], list[int], bool]]) -> list[EventT]:
    """A full history: each step = (observation tokens, output tokens, ends with a tool call)."""
    spec = TrajectorySpec(group_id="g", index=0, environment="trace", prompt_token_ids=prompt)
    events: list[EventT] = [
        TrajectorySubmitted(
            event_id=_id(None, "submitted"), rollout_id=R, traj_id=T, occurred_at=1.0, spec=spec
        ),
        TrajectoryPlaced(
            event_id=_id(None, "placed"), rollout_id=R, traj_id=T, occurred_at=1.5, worker_id="w0"
        ),
    ]
    for step, (observation, output, has_tool) in enumerate(steps):
        events.append(
            GenerationStarted(
                event_id=_id(step, "generation_started"),
                rollout_id=R,
                traj_id=T,
                occurred_at=2.0,
                step=step,
                worker_id="w0",
                input_token_ids=observation,
                num_context_tokens=0,
            )
        )
        events.append(
            Generated(
                event_id=_id(step, "generated"),
                rollout_id=R,
                traj_id=T,
                occurred_at=3.0,
                step=step,
                worker_id="w0",
                output_token_ids=output,
                output_logprobs=[-0.5] * len(output),
            )
        )
        if has_tool:
            call_id = _id(step, "call")
            events.append(
                ToolCalled(
                    event_id=_id(step, "tool_called"),
                    rollout_id=R,
                    traj_id=T,
                    occurred_at=4.0,
                    step=step,
                    worker_id="w0",
                    call_id=call_id,
                    tool="trace",
                )
            )
            events.append(
                ToolReturned(
                    event_id=_id(step, "tool_returned"),
                    rollout_id=R,
                    traj_id=T,
                    occurred_at=5.0,
                    step=step,
                    call_id=call_id,
                    tool="trace",
                    status="ok",
                    duration_s=1.0,
                )
            )
    return events


step_lists = st.lists(st.tuples(tokens, tokens, st.booleans()), min_size=1, max_size=5)


@given(tokens, step_lists, st.data())
def test_fold_rebuilds_context_and_ignores_duplicates(
    prompt: list[int], steps: list[tuple[list[int], list[int], bool]], data: st.DataObject
) -> None:
    events = _events(prompt, steps)
    duplicated: list[EventT] = []
    for event in events:
        duplicated.extend([event] * data.draw(st.integers(min_value=1, max_value=3)))
    log = rebuild(R, T, duplicated)

    expected = list(prompt)
    for observation, output, _ in steps:
        expected += observation + output
    assert log.context_token_ids() == expected
    assert log.prompt_token_ids() == prompt + steps[0][0]

    response, logprobs, mask = log.response()
    assert len(response) == len(logprobs) == len(mask)
    assert prompt + steps[0][0] + response == expected
    assert sum(mask) == sum(len(output) for _, output, _ in steps)
    assert all(lp == 0.0 for lp, m in zip(logprobs, mask, strict=True) if m == 0)
    assert log.num_steps == len(steps)
    assert log.owner_worker_id == "w0"
    assert log.worker_history() == ["w0"]


@given(tokens, step_lists)
def test_phase_follows_each_prefix_of_the_history(
    prompt: list[int], steps: list[tuple[list[int], list[int], bool]]
) -> None:
    log = TrajectoryLog(rollout_id=R, traj_id=T)
    assert log.phase is TrajectoryPhase.READY
    for event in _events(prompt, steps):
        log.apply(event)
        expected = {
            GenerationStarted: TrajectoryPhase.GENERATING,
            Generated: TrajectoryPhase.GENERATED,
            ToolCalled: TrajectoryPhase.IN_TOOL,
            ToolReturned: TrajectoryPhase.READY,
        }.get(type(event))
        if expected is not None:
            assert log.phase is expected
        if expected is TrajectoryPhase.READY:
            assert log.current_step == event.step + 1  # type: ignore[attr-defined]


def test_outcomes_migrations_and_retryable_failures() -> None:
    log = rebuild(R, T, _events([1, 2], [([], [3], True)]))
    log.apply(
        Migrated(
            event_id="m",
            rollout_id=R,
            traj_id=T,
            occurred_at=6.0,
            source_worker_id="w0",
            target_worker_id="w1",
            transfer_s=0.25,
        )
    )
    assert (log.owner_worker_id, log.num_migrations, log.migration_s) == ("w1", 1, 0.25)
    retry = Failed(
        event_id="f1",
        rollout_id=R,
        traj_id=T,
        occurred_at=7.0,
        step=1,
        reason="draining",
        worker_id="w1",
        retryable=True,
    )
    assert not log.apply(retry)  # handed back: not an outcome
    assert log.phase is TrajectoryPhase.READY and log.owner_worker_id == ""
    done = Completed(
        event_id="c", rollout_id=R, traj_id=T, occurred_at=8.0, num_steps=1, worker_id="w2",
        epoch=1,
    )  # fmt: skip
    assert not log.apply(done)  # w2 does not hold it yet
    placed = TrajectoryPlaced(
        event_id="p2", rollout_id=R, traj_id=T, occurred_at=7.5, worker_id="w2", epoch=1
    )
    assert log.apply(placed) and log.apply(done)
    assert log.phase is TrajectoryPhase.DONE
    assert not log.apply(
        Failed(
            event_id="f2", rollout_id=R, traj_id=T, occurred_at=9.0, step=1, reason="late",
            worker_id="w2", epoch=1,
        )
    )  # fmt: skip
    assert isinstance(log.outcome, Completed)


def test_gaps_and_forgeries_are_not_folded_and_foreign_events_are_refused() -> None:
    """What the trajectory's lease refuses (a gap, a step of a worker that does not hold it,
    a result for a future step) never enters the log: a resumed worker rebuilds the history
    the control plane acts on."""
    log = rebuild(R, T, _events([1, 2], [([], [3], True)])[:3])  # step 0 started on w0
    started = log.steps[0].started
    gap = msgspec.structs.replace(started, event_id="g2", step=2)
    forged = Generated(
        event_id="x",
        rollout_id=R,
        traj_id=T,
        occurred_at=0.0,
        step=0,
        worker_id="w9",
        output_token_ids=[7, 7],
    )
    future = ToolReturned(
        event_id="tr",
        rollout_id=R,
        traj_id=T,
        occurred_at=0.0,
        step=3,
        call_id="c",
        tool="trace",
        status="ok",
    )
    assert not any(log.apply(event) for event in (gap, forged, future))
    assert log.num_steps == 1 and log.steps[0].generated is None
    assert log.phase is TrajectoryPhase.GENERATING
    with pytest.raises(HistoryError, match="belongs to r1/other"):
        log.apply(
            Completed(event_id="c", rollout_id=R, traj_id="other", occurred_at=0.0, num_steps=0)
        )


def _brute_force_context(log: TrajectoryLog) -> list[int]:
    context = list(log.spec.prompt_token_ids) if log.spec else []
    for step in log.steps:
        context += step.started.input_token_ids
        context += step.generated.output_token_ids if step.generated else []
    return context


@given(tokens, step_lists, st.data())
def test_the_kept_context_equals_a_rebuild_after_every_fold(
    prompt: list[int], steps: list[tuple[list[int], list[int], bool]], data: st.DataObject
) -> None:
    """Context read between folds, outputs folded late (after later steps started), the spec
    given after the steps: the context kept up to date equals one built from scratch."""
    events = [e for e in _events(prompt, steps) if not isinstance(e, TrajectorySubmitted)]
    late = [e for e in events if isinstance(e, Generated) and data.draw(st.booleans())]
    order = [e for e in events if e not in late] + late
    log = TrajectoryLog(rollout_id=R, traj_id=T)
    for event in order:
        log.apply(event)
        if data.draw(st.booleans()):
            assert log.context_token_ids() == _brute_force_context(log)
            assert log.num_context_tokens == len(_brute_force_context(log))
    log.spec = TrajectorySpec(group_id="g", index=0, environment="trace", prompt_token_ids=prompt)
    assert log.context_token_ids() == _brute_force_context(log)
    copy = log.context_token_ids()
    copy.append(-1)  # a caller's copy is its own
    assert log.context_token_ids() == _brute_force_context(log)


def _interrupted(step: int, output: list[int], part: int) -> GenerationInterrupted:
    return GenerationInterrupted(
        event_id=_id(step, f"interrupted{part}"),
        rollout_id=R,
        traj_id=T,
        occurred_at=2.5,
        step=step,
        worker_id="w0",
        output_token_ids=output,
        output_logprobs=[-1.0] * len(output),
    )


@given(prompt=tokens, observation=tokens, parts=st.lists(tokens, min_size=1, max_size=3))
def test_an_interrupted_generation_keeps_its_output_in_the_context_until_generated(
    prompt: list[int], observation: list[int], parts: list[list[int]]
) -> None:
    """Interrupted parts join the context in order; the step's Generated (the whole output)
    replaces them; a live fold and a rebuild agree, redeliveries change nothing."""
    rest = [7, 8]
    whole = [token for part in parts for token in part] + rest
    history = _events(prompt, [(observation, whole, False)])
    started, generated = history[2], history[3]
    live = rebuild(R, T, history[:3])
    for index, part in enumerate(parts):
        assert live.apply(_interrupted(0, part, index))
        assert not live.apply(_interrupted(0, part, index))  # a redelivery
    assert live.phase is TrajectoryPhase.GENERATING
    assert live.context_token_ids() == prompt + observation + whole[: -len(rest)]
    assert live.steps[0].partial_logprobs == [-1.0] * (len(whole) - len(rest))
    assert live.apply(generated)
    assert live.context_token_ids() == prompt + observation + whole
    assert live.steps[0].partial_token_ids == []
    interrupted = [_interrupted(0, part, index) for index, part in enumerate(parts)]
    rebuilt = rebuild(R, T, [*history[:2], started, *interrupted, generated])
    assert rebuilt.context_token_ids() == live.context_token_ids()
    assert rebuilt.response()[0] == whole  # step 0's observation belongs to the prompt
