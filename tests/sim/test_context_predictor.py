"""The context predictor in the simulator: the trace's text reaches it, and the service's
latency decides whose answer counts (huge latency: the online model's run; none: the run of a
predictor that always answers with the context model)."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest

import heddle.sim.on_workers as on_workers
from heddle.experiments.sweep import SweepConfig, run_sweep
from heddle.policy.prediction import Outcome, Predictor, Progress, predict_tool_s
from heddle.sim import SimConfig, simulate
from heddle.sim.results import SimResult
from heddle.traces import TraceTrajectory
from heddle.workloads.text import TEXT_KINDS, text_kind_of
from heddle.workloads.zoo import with_family_text, zoo_family

CONFIG = SimConfig(model="qwen3-8b", num_gpus=4, seed=1)


def family_traces(family: str, count: int) -> tuple[list[TraceTrajectory], list[TraceTrajectory]]:
    zoo = zoo_family(family)
    params = zoo.draw(random.Random(5))
    rollout = with_family_text(family, zoo.generate(params, count, 5), 0.9, 5)
    history = with_family_text(family, zoo.generate(params, count, 5, epoch=1), 0.9, 6)
    return rollout, history


@pytest.fixture(scope="module")
def traces() -> tuple[list[TraceTrajectory], list[TraceTrajectory]]:
    return family_traces("swe", 24)


class TextReader:
    """A stand-in context model that reads the text: it scales the fallback's answer by the
    length of the latest tool result (long failure lists: more to come)."""

    def __init__(self) -> None:
        self.texts: list[tuple[str, str]] = []
        """(plan, latest tool result) of each prediction asked."""

    def __call__(self, progress: Progress, baseline: tuple[float, float]) -> tuple[float, float]:
        self.texts.append((progress.first_output_text, progress.last_tool_text))
        return baseline[0] * (1 + len(progress.last_tool_text)) / 40, baseline[1]


class AlwaysContext:
    """The plain context run's predictor: the context model answers every prediction after
    the first generation, at once."""

    def __init__(self, fallback: Predictor, answer: TextReader) -> None:
        self.fallback, self.answer = fallback, answer
        self.name = "context"

    def predict(self, progress: Progress) -> float:
        return self._answer(progress)[0]

    def predict_tool_s(self, progress: Progress) -> float:
        return self._answer(progress)[1]

    def _answer(self, progress: Progress) -> tuple[float, float]:
        baseline = (self.fallback.predict(progress), predict_tool_s(self.fallback, progress))
        return self.answer(progress, baseline) if progress.num_steps else baseline

    def observe(self, outcome: Outcome) -> None:
        self.fallback.observe(outcome)


def fingerprint(result: SimResult) -> tuple[object, ...]:
    """What the policy's decisions show in a run: every completion's time, and more."""
    return (
        result.makespan_s,
        result.active_over_time,
        result.tp_degrees,
        result.num_preemptions,
        result.num_migrations,
    )


def context_run(
    trace: Sequence[TraceTrajectory], history: Sequence[TraceTrajectory], latency_ms: float
) -> tuple[SimResult, TextReader]:
    reader = TextReader()
    config = SimConfig(
        model=CONFIG.model,
        num_gpus=CONFIG.num_gpus,
        seed=CONFIG.seed,
        predictor="context",
        predictor_latency_ms=latency_ms,
    )
    return simulate(trace, "heddle", config, history=history, context=reader), reader


def test_with_a_huge_latency_the_online_model_answers_every_prediction(
    traces: tuple[list[TraceTrajectory], list[TraceTrajectory]],
) -> None:
    trace, history = traces
    late, reader = context_run(trace, history, latency_ms=1e12)
    online = simulate(trace, "heddle", CONFIG, history=history)
    assert reader.texts == []
    assert fingerprint(late) == fingerprint(online)


def test_with_no_latency_the_run_is_the_plain_context_run(
    traces: tuple[list[TraceTrajectory], list[TraceTrajectory]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    trace, history = traces
    timed, reader = context_run(trace, history, latency_ms=0.0)
    # the trace's texts reach the model: the plan always, a tool result once a call returned
    assert reader.texts and all(plan for plan, _ in reader.texts)
    assert any(tool for _, tool in reader.texts)
    plain_reader = TextReader()
    configured = on_workers.make_simulation_predictor

    def always_context(
        simulated: Sequence[TraceTrajectory], config: SimConfig, *args: object
    ) -> Predictor:
        if simulated is not trace:  # the plan check's runs on the history ask the online model
            return configured(simulated, config, *args)  # type: ignore[arg-type]
        fallback = on_workers.fit(on_workers.make_predictor("online"), history)
        return AlwaysContext(fallback, plain_reader)

    monkeypatch.setattr(on_workers, "make_simulation_predictor", always_context)
    plain = simulate(trace, "heddle", CONFIG, history=history)
    assert set(plain_reader.texts) == set(reader.texts)  # it asks twice per prediction
    assert fingerprint(timed) == fingerprint(plain)


def test_a_latency_between_the_tool_times_asks_the_model_for_some_predictions_only(
    traces: tuple[list[TraceTrajectory], list[TraceTrajectory]],
) -> None:
    trace, history = traces
    tool_times = sorted(s.tool_s for t in trace for s in t.steps[:-1])
    median_ms = tool_times[len(tool_times) // 2] * 1000
    _, everything = context_run(trace, history, latency_ms=0.0)
    _, some = context_run(trace, history, latency_ms=median_ms)
    assert 0 < len(some.texts) < len(everything.texts)


def test_the_context_predictor_needs_the_model(
    traces: tuple[list[TraceTrajectory], list[TraceTrajectory]],
) -> None:
    trace, history = traces
    config = SimConfig(model=CONFIG.model, num_gpus=4, predictor="context")
    with pytest.raises(ValueError, match="needs the model"):
        simulate(trace, "heddle", config, history=history)


def test_mix_text_follows_each_member_and_keeps_the_numbers() -> None:
    zoo = zoo_family("mix")
    plain = zoo.generate(zoo.draw(random.Random(2)), 200, 2)
    texted = with_family_text("mix", plain, 0.9, 2)
    assert [t.id for t in texted] == [t.id for t in plain]
    assert all(t.has_text for t in texted)
    for before, after in zip(plain, texted, strict=True):
        numbers = [(s.output_tokens, s.tool_s, s.tool_output_tokens) for s in before.steps]
        assert numbers == [(s.output_tokens, s.tool_s, s.tool_output_tokens) for s in after.steps]
    kinds = {t.id: text_kind_of(t.id.split("-")[0]) for t in texted}
    assert len(set(kinds.values())) >= 2
    for t in texted:  # each plan names items of its own member's vocabulary
        assert any(item in t.steps[0].output_text for item in TEXT_KINDS[kinds[t.id]].items)


def test_a_sweep_cell_runs_the_context_model_it_is_given() -> None:
    readers: list[TextReader] = []

    def trained_on(history: Sequence[TraceTrajectory], trace: Sequence[TraceTrajectory]):
        assert not {t.id for t in history} & {t.id for t in trace}  # the previous step's prompts
        assert len(history) == len(trace)
        readers.append(TextReader())
        return readers[-1]

    config = SweepConfig(
        families=("search",),
        models=("qwen3-8b",),
        gpu_counts=(4,),
        kv_ratios=(2.0,),
        num_cells=1,
        systems=("heddle",),
        predictor="context",
        text_signal=0.9,
        steps_per_cell=50,
        min_trajectories=16,
        max_trajectories=32,
        num_heldout_cells=0,
        with_corpus=False,
    )
    [result] = run_sweep(config, jobs=1, run=lambda cell, c: _run(cell, c, trained_on))
    assert result.errors == {} and "heddle" in result.runs
    assert readers and readers[0].texts


def _run(cell, config, context):  # type: ignore[no-untyped-def]
    from heddle.experiments.sweep import run_cell

    return run_cell(cell, config, context=context)
