"""A submission's checks (pure): unknown fields are found at any depth and named by path, the
time scale is the deployment's, numbers out of range and prompts beyond the model are refused
naming the trajectory and field, and the opening events have derived ids and the owner."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from heddle.control.ops_requests import RequestRefused
from heddle.control.submissions import DeploymentLimits, check_submission, submission_events
from heddle.control.submit_requests import (
    SubmitRequest,
    decode_submission,
    encode_submission,
)
from heddle.events import (
    ChatMessage,
    RolloutSubmitted,
    SamplingParams,
    TrajectorySpec,
    TrajectorySubmitted,
)
from heddle.events.strict import unknown_fields

specs = st.builds(
    TrajectorySpec,
    group_id=st.text("abc", min_size=1, max_size=4),
    index=st.just(0),
    environment=st.sampled_from(["math", "trace"]),
    task=st.dictionaries(st.text("xyz", min_size=1, max_size=3), st.integers(0, 9), max_size=3),
    prompt_token_ids=st.lists(st.integers(0, 1000), max_size=40),
    messages=st.lists(
        st.builds(ChatMessage, role=st.just("user"), content=st.text(max_size=5)), max_size=2
    ),
    max_steps=st.integers(1, 100),
    sampling=st.builds(SamplingParams, temperature=st.floats(0, 2), seed=st.integers(0, 99)),
)  # fmt: skip


def _as_json(spec: TrajectorySpec) -> dict[str, Any]:
    decoded: dict[str, Any] = msgspec.json.decode(msgspec.json.encode(spec))
    return decoded


def _struct_paths(value: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Brute force: every object in a spec's JSON that stands for a struct, with its path."""
    found: list[tuple[str, dict[str, Any]]] = [("", value), ("sampling", value["sampling"])]
    found += [(f"messages[{i}]", m) for i, m in enumerate(value["messages"])]
    return found


@given(spec=specs)
def test_a_spec_as_written_has_no_unknown_field(spec: TrajectorySpec) -> None:
    assert unknown_fields(_as_json(spec), TrajectorySpec) == []


@given(spec=specs, where=st.integers(0, 10), key=st.text("qrs", min_size=1, max_size=5))
def test_a_key_the_schema_lacks_is_named_where_it_is(
    spec: TrajectorySpec, where: int, key: str
) -> None:
    value = _as_json(spec)
    paths = _struct_paths(value)
    path, holder = paths[where % len(paths)]
    holder[key] = 1
    assert unknown_fields(value, TrajectorySpec) == [f"{path}.{key}" if path else key]


@given(spec=specs, key=st.text("qrs", min_size=1, max_size=5))
def test_free_form_fields_take_any_key(spec: TrajectorySpec, key: str) -> None:
    value = _as_json(spec)
    value["task"][key] = {"nested": {"anything": 1}}
    request = {"rollout_id": "r", "trajectories": [value], "labels": {key: "v"}}
    assert unknown_fields(request, SubmitRequest) == []


def _request(*trajectories: TrajectorySpec, **changes: Any) -> SubmitRequest:
    fields: dict[str, Any] = {"rollout_id": "r1", "trajectories": list(trajectories), **changes}
    return SubmitRequest(**fields)


def _spec(index: int = 0, **changes: Any) -> TrajectorySpec:
    fields: dict[str, Any] = {"group_id": "g", "index": index, "environment": "math", **changes}
    return TrajectorySpec(**fields)


@pytest.mark.parametrize(
    ("requested", "deployed", "expected"),
    [(None, (), 1.0), (7.0, (), 7.0), (None, (50.0,), 50.0), (50.0, (50.0,), 50.0),
     (20.0, (20.0, 50.0), 20.0)],
)  # fmt: skip
def test_the_time_scale_is_the_deployments(
    requested: float | None, deployed: tuple[float, ...], expected: float
) -> None:
    limits = DeploymentLimits(time_scales=deployed)
    assert check_submission(_request(_spec(), time_scale=requested), limits) == expected


@pytest.mark.parametrize(
    ("requested", "deployed", "fragment"),
    [(20.0, (50.0,), "differs from the deployment's 50"), (None, (20.0, 50.0), "different"),
     (0.0, (), "finite number > 0"), (float("inf"), (), "finite number > 0")],
)  # fmt: skip
def test_another_time_scale_is_refused(
    requested: float | None, deployed: tuple[float, ...], fragment: str
) -> None:
    with pytest.raises(RequestRefused, match=fragment):
        check_submission(_request(_spec(), time_scale=requested), DeploymentLimits(deployed))


BAD_SPECS: list[tuple[dict[str, Any], str]] = [
    ({"index": 2}, "index: 2"),
    ({"max_steps": 0}, "max_steps"),
    ({"max_steps": 10**40}, "max_steps"),
    ({"max_new_tokens": 2**40}, "max_new_tokens"),
    ({"max_response_tokens": 0}, "max_response_tokens"),
    ({"max_attempts": 0}, "max_attempts"),
    ({"attempt": 1}, "attempt"),
    ({"max_staleness": -1}, "max_staleness"),
    ({"tool_pool": "no pool"}, "tool_pool"),
    ({"group_id": ""}, "group_id"),
    ({"prompt_token_ids": [1, -2]}, "prompt_token_ids"),
    ({"prompt_token_ids": [2**40]}, "prompt_token_ids"),
    ({"prompt_token_ids": [1] * 10, "max_total_tokens": 10}, "no room"),
    ({"prompt_token_ids": [1] * 4000, "max_total_tokens": 8000}, "context of 4000 tokens"),
    ({"sampling": SamplingParams(temperature=float("nan"))}, "temperature"),
    ({"sampling": SamplingParams(top_p=0.0)}, "top_p"),
    ({"sampling": SamplingParams(seed=2**70)}, "seed"),
    ({"task": {"blob": "x" * 5000}}, "more than one event holds"),
    ({"environment": ""}, "environment"),
    ({"messages": [ChatMessage(role="robot", content="hi")]}, "messages[0].role"),
]  # fmt: skip


@pytest.mark.parametrize(("changes", "fragment"), BAD_SPECS)
def test_a_spec_out_of_range_is_refused_naming_its_trajectory(
    changes: dict[str, Any], fragment: str
) -> None:
    limits = DeploymentLimits(max_context_tokens=4000, max_event_bytes=4096)
    request = _request(_spec(0), _spec(**{"index": 1, **changes}))
    with pytest.raises(RequestRefused, match=r"trajectory 1 \(t000001\)") as refused:
        check_submission(request, limits)
    assert refused.value.code == 400 and fragment in refused.value.message


def test_a_rollout_out_of_range_is_refused() -> None:
    for request, fragment in [
        (_request(_spec(), policy="nope"), "unknown policy"),
        (_request(), "1 to"),
        (_request(_spec(), rollout_id="a b"), "rollout id"),
        (_request(_spec(), labels={str(i): "" for i in range(100)}), "labels"),
    ]:
        with pytest.raises(RequestRefused, match=fragment):
            check_submission(request, DeploymentLimits())


def test_a_request_round_trips_and_is_decoded_strictly() -> None:
    request = _request(_spec(prompt_token_ids=list(range(300))), labels={"step": "3"})
    assert decode_submission(encode_submission(request)) == request
    raw = msgspec.json.decode(encode_submission(request))
    raw["trajectories"][0]["sampling"]["temprature"] = 1.0
    with pytest.raises(RequestRefused, match=r"trajectories\[0\]\.sampling\.temprature"):
        decode_submission(msgspec.json.encode(raw))
    with pytest.raises(RequestRefused, match="Expected `int`"):
        decode_submission(b'{"rollout_id":"r","trajectories":[{"group_id":"g","index":"0",'
                          b'"environment":"math"}]}')  # fmt: skip


def test_events_open_the_rollout_with_derived_ids_and_its_owner() -> None:
    request = _request(_spec(0), _spec(1), policy="slime")
    events = submission_events(request, trainer="grpo", time_scale=50.0, now=42.0)
    opened = events[0]
    assert isinstance(opened, RolloutSubmitted)
    assert (opened.num_trajectories, opened.policy, opened.trainer) == (2, "slime", "grpo")
    assert opened.time_scale == 50.0
    ids = ["r1:submitted", "r1:t000000:submitted", "r1:t000001:submitted"]
    assert [e.event_id for e in events] == ids
    assert all(isinstance(e, TrajectorySubmitted) for e in events[1:])
    again = submission_events(request, trainer="grpo", time_scale=50.0, now=43.0)
    assert [e.event_id for e in again] == ids
