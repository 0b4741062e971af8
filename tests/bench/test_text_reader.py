import pytest

from heddle.bench.predictor import (
    PredictorBenchConfig,
    _figures,
    _numeric_guesses,
    _reader_guesses,
    cell_texts,
)
from heddle.bench.text_reader import TextReader, read_after
from heddle.context_model.train import REPORTED_STEPS
from heddle.policy.prediction.online import OnlinePredictor


def test_a_prediction_reads_every_output_and_the_tool_results_returned() -> None:
    quantities = [(1.0, 10.0), (2.0, 20.0), (3.0, None)]
    assert read_after(quantities, 1) == [1.0]
    assert read_after(quantities, 2) == [1.0, 10.0, 2.0]
    assert read_after(quantities, 3) == [1.0, 10.0, 2.0, 20.0, 3.0]
    with pytest.raises(ValueError, match=">= 1 step"):
        read_after(quantities, 0)


def _pearson_after_two_steps(signal: float) -> tuple[float, float]:
    """(text reader, online model) Pearson r after step 2 on a search cell at ``signal``."""
    config = PredictorBenchConfig(families=("search",), num_trajectories=128)
    texts = cell_texts("search", signal, config)
    online = OnlinePredictor()
    for trajectory in texts.train:
        online.observe_trace(trajectory)
    reader = TextReader.fit(texts.train, texts.train_quantities, REPORTED_STEPS)
    guesses = _reader_guesses(reader, online, texts.test, texts.test_quantities)
    read = _figures(texts.test, guesses)
    numeric = _figures(texts.test, _numeric_guesses(online, texts.test))
    read_r, numeric_r = read["pearson_r"][1], numeric["pearson_r"][1]
    assert read_r is not None and numeric_r is not None
    return read_r, numeric_r


def test_the_reader_earns_what_the_text_carries_and_nothing_without_it() -> None:
    # On search the step counts say little about the steps to come (r near 0); the text at
    # full signal reports them, without signal it reports noise, which ranks no better.
    told, numeric = _pearson_after_two_steps(1.0)
    assert abs(numeric) < 0.2
    assert told > numeric + 0.5
    noise, _ = _pearson_after_two_steps(0.0)
    assert abs(noise) < 0.2


def test_fitting_needs_a_running_trajectory_and_a_step_read() -> None:
    with pytest.raises(ValueError, match="no running trajectory"):
        TextReader.fit([], {}, REPORTED_STEPS)
    with pytest.raises(ValueError, match=">= 1 step"):
        TextReader.fit([], {}, (0, 1))
