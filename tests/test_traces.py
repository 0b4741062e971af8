from pathlib import Path

import pytest

from heddle.traces import (
    MAX_LINE_BYTES,
    TraceError,
    TraceStep,
    TraceTrajectory,
    read_trace,
    write_trace,
)


def test_round_trip(tmp_path: Path) -> None:
    trajectories = [
        TraceTrajectory(
            id="t1",
            group="p1",
            prompt_tokens=10,
            steps=[
                TraceStep(output_tokens=5, tool_s=1.5, tool_output_tokens=3),
                TraceStep(output_tokens=7),
            ],
        ),
        TraceTrajectory(id="t2", prompt_tokens=4, steps=[TraceStep(output_tokens=1)]),
    ]
    path = tmp_path / "trace.jsonl"
    assert write_trace(path, trajectories) == 2
    assert read_trace(path) == trajectories
    assert trajectories[0].num_output_tokens == 12
    assert trajectories[0].num_context_tokens == 10 + 5 + 3 + 7


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ('{"id": "a", "prompt_tokens": 1, "steps": []}', ":2: steps: needs at least one step"),
        (
            '{"id": "a", "prompt_tokens": "x", "steps": []}',
            ":2: Expected `int`, got `str` - at `$.prompt_tokens`",
        ),
        (
            '{"id": "a", "prompt_tokens": 1, "steps": [{"output_tokens": -1}]}',
            ":2: steps[0].output_tokens: must be >= 0",
        ),
        (
            '{"id": "a", "prompt_tokens": 1, "steps": [{"output_tokens": 1, "tool_s": NaN}]}',
            ":2: not valid JSON",
        ),
        (
            '{"id": "a", "prompt_tokens": 1, "steps": [{"output_tokens": 1, "bogus": 1}]}',
            "Object contains unknown field `bogus` - at `$.steps[0]`",
        ),
        (
            '{"id": "t0", "prompt_tokens": 1, "steps": [{"output_tokens": 1}]}',
            ":2: id: duplicate id",
        ),
        # Out of range: refused when read, never run (a huge integer used to end in a
        # traceback, a tool of 1e12 s ran forever).
        (
            '{"id": "a", "prompt_tokens": 100000000000000000000, "steps": [{"output_tokens": 1}]}',
            ":2: prompt_tokens: must be in [0, 16777216]",
        ),
        (
            '{"id": "a", "prompt_tokens": 1, "steps": [{"output_tokens": 9223372036854775807}]}',
            ":2: steps: the context reaches",
        ),
        (
            '{"id": "a", "prompt_tokens": 1, "steps": [{"output_tokens": 1, "tool_s": 1e12}]}',
            ":2: steps[0].tool_s: must be a number of seconds in [0, 86400]",
        ),
    ],
)
def test_bad_lines_name_line_and_field(tmp_path: Path, line: str, expected: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(
        '{"id": "t0", "prompt_tokens": 1, "steps": [{"output_tokens": 1}]}\n' + line + "\n"
    )
    with pytest.raises(TraceError) as info:
        read_trace(path)
    assert expected in str(info.value)


def test_a_line_over_the_limit_is_refused_unread(tmp_path: Path) -> None:
    """A 10 MB line: refused naming its line, read no further than the limit."""
    path = tmp_path / "long.jsonl"
    good = '{"id": "t0", "prompt_tokens": 1, "steps": [{"output_tokens": 1}]}\n'
    long = '{"id": "a", "prompt_tokens": 1, "steps": [{"output_tokens": 1, "output_text": "'
    path.write_text(good + long + "y" * 10_000_000 + '"}]}\n')
    with pytest.raises(TraceError, match=rf":2: the line is longer than {MAX_LINE_BYTES} bytes"):
        read_trace(path)
    path.write_text(good + '{"id": "b", "group": "' + "g" * (MAX_LINE_BYTES - 100) + '", '
                    '"prompt_tokens": 1, "steps": [{"output_tokens": 1}]}\n')  # fmt: skip
    assert len(read_trace(path)) == 2  # just under the limit


def test_missing_and_empty_files(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="cannot read"):
        read_trace(tmp_path / "nope.jsonl")
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(TraceError, match="no trajectories"):
        read_trace(tmp_path / "empty.jsonl")


def test_text_round_trips_and_old_lines_still_load(tmp_path: Path) -> None:
    old_line = (
        b'{"id":"a","group":"g","prompt_tokens":3,"steps":'
        b'[{"output_tokens":2,"tool_s":0.5,"tool_output_tokens":1},{"output_tokens":4}]}\n'
    )
    old_path = tmp_path / "old.jsonl"
    old_path.write_bytes(old_line)
    (old,) = read_trace(old_path)
    assert not old.has_text
    assert old.steps[0].output_text == old.steps[0].tool_text == ""
    texted = TraceTrajectory(
        id="b",
        prompt_tokens=3,
        steps=[
            TraceStep(
                output_tokens=2,
                tool_s=0.5,
                tool_output_tokens=1,
                output_text="Plan: x",
                tool_text="1 failed",
            ),
            TraceStep(output_tokens=4, output_text="done"),
        ],
    )
    path = tmp_path / "texted.jsonl"
    write_trace(path, [old, texted])
    lines = path.read_bytes().splitlines()
    assert b"output_text" not in lines[0]  # a trace without text writes no text fields
    assert b'"tool_text":"1 failed"' in lines[1]
    assert read_trace(path) == [old, texted]
    assert texted.has_text


def test_a_gz_path_is_compressed_and_reads_back_the_same(tmp_path: Path) -> None:
    trace = [
        TraceTrajectory(
            id=f"t{i}",
            group="g",
            prompt_tokens=100,
            steps=[TraceStep(output_tokens=50, tool_s=1.5, tool_output_tokens=20)] * 40
            + [TraceStep(output_tokens=7)],
        )
        for i in range(20)
    ]
    plain, packed = tmp_path / "t.jsonl", tmp_path / "t.jsonl.gz"
    write_trace(plain, trace)
    write_trace(packed, trace)
    assert read_trace(packed) == trace == read_trace(plain)
    assert packed.read_bytes()[:2] == b"\x1f\x8b"
    assert packed.stat().st_size * 5 < plain.stat().st_size
    first = packed.read_bytes()
    write_trace(packed, trace)
    assert packed.read_bytes() == first  # no timestamp: the same trace, the same bytes


def test_a_corrupt_gz_file_is_a_trace_error(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl.gz"
    path.write_bytes(b"\x1f\x8b not really gzip")
    with pytest.raises(TraceError, match="cannot read trace file"):
        read_trace(path)
