"""The prediction decider's texts and the served context model's stand-in."""

from __future__ import annotations

import events_factory as b
from msgspec.structs import replace

from heddle.control.prediction import PredictionDecider
from heddle.events import Predicted, TrajectorySubmitted
from heddle.policy.prediction import ServedContextPredictor
from heddle.policy.prediction.online import OnlinePredictor


def _submitted_with_text() -> TrajectorySubmitted:
    event = b.submitted("t0", 0)
    task = {
        "id": "t0",
        "prompt_tokens": 100,
        "steps": [
            {
                "output_tokens": 30,
                "tool_s": 1.0,
                "output_text": "Plan: fix parser.py",
                "tool_text": "2 failed: parser.py",
            },
            {"output_tokens": 20, "tool_s": 1.0, "output_text": "Fixing parser.py next."},
            {"output_tokens": 5, "output_text": "Done; submitting."},
        ],
    }
    return replace(event, spec=replace(event.spec, task=task))


def test_the_decider_answers_with_the_fallback_and_queues_requests_with_the_text() -> None:
    served = ServedContextPredictor(OnlinePredictor())
    decider = PredictionDecider(served)
    served.scope("r1")
    (first,) = decider.decide(_submitted_with_text())
    assert isinstance(first, Predicted) and first.predictor == "online"
    assert served.take_requests() == []  # nothing to read before the first generation
    decider.decide(b.generated("t0", 0, 30))
    (second,) = decider.decide(b.tool_called("t0", 0))
    assert isinstance(second, Predicted) and second.predictor == "online"
    (request,) = served.take_requests()
    assert (request.rollout_id, request.step) == ("r1", 0)
    assert request.progress.first_output_text == "Plan: fix parser.py"
    assert request.progress.last_tool_text == ""
    assert served.take_requests() == []  # the outbox empties
    decider.decide(b.tool_returned("t0", 0))
    decider.decide(b.generated("t0", 1, 20))
    decider.decide(b.tool_called("t0", 1))
    (later,) = served.take_requests()
    assert later.step == 1
    assert later.progress.first_output_text == "Plan: fix parser.py"
    assert later.progress.last_output_text == "Fixing parser.py next."
    assert later.progress.last_tool_text == "2 failed: parser.py"  # from the trace task


def test_a_tool_s_own_text_wins_over_the_trace_s() -> None:
    decider = PredictionDecider(ServedContextPredictor(OnlinePredictor()))
    decider.decide(_submitted_with_text())
    decider.decide(b.generated("t0", 0, 30))
    decider.decide(replace(b.tool_returned("t0", 0), output="ImportError in cli.py"))
    ((progress, _),) = decider.snapshot().values()
    assert progress.last_tool_text == "ImportError in cli.py"


def test_trajectories_without_text_predict_as_before() -> None:
    decider = PredictionDecider(OnlinePredictor())
    decider.decide(b.submitted("t0", 0))
    decider.decide(b.generated("t0", 0, 30))
    ((progress, _),) = decider.snapshot().values()
    assert (progress.first_output_text, progress.last_output_text) == ("", "")
