"""Completed trajectories from the event stream, with the tools' text."""

from __future__ import annotations

import events_factory as b
from msgspec.structs import replace

from heddle.context_model.stream import traces_from_events


def test_completed_trajectories_become_trace_lines_with_their_tool_text() -> None:
    events = [
        b.submitted("t0", 0, prompt=40),
        b.submitted("t1", 1),
        b.generated("t0", 0, 30),
        replace(b.tool_returned("t0", 0, tokens=5), output="2 failed: parser.py"),
        b.generated("t0", 1, 12),
        b.completed("t0", 2, 42),
        b.generated("t1", 0, 9),  # never completes: its remaining length is unknown
    ]
    (trace,) = traces_from_events(events)
    assert trace.id == "r1:t0" and trace.prompt_tokens == 40 and trace.group == "g0"
    assert [s.output_tokens for s in trace.steps] == [30, 12]
    assert (trace.steps[0].tool_s, trace.steps[0].tool_output_tokens) == (1.0, 5)
    assert trace.steps[0].tool_text == "2 failed: parser.py"
    assert trace.steps[1].tool_text == ""
