"""The engine registry and typed option parsing."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from heddle.workers.engines import (
    ENGINES,
    EngineOptionError,
    engine_entry,
    engine_names,
)
from heddle.workers.engines.options import describe_options, parse_options


@dataclass(frozen=True, slots=True)
class _Options:
    time_scale: float = 1.0
    max_running: int = 8
    name: str = "x"
    profile: Path | None = None
    verbose: bool = False
    hardware: Literal["h100", "h200"] = "h200"
    tp: Literal[1, 2, 4] = 1
    limit: int = field(default=3, metadata={"help": "a limit"})

    def __post_init__(self) -> None:
        if self.time_scale <= 0:
            raise ValueError("time_scale must be > 0")


def test_parses_every_supported_type_and_dash_spellings() -> None:
    options = parse_options(
        _Options,
        {
            "time-scale": "2.5",
            "max_running": "1_000",
            "name": "abc",
            "profile": "/tmp/p.json",
            "verbose": "yes",
            "hardware": "h100",
            "tp": "4",
        },
    )
    assert options == _Options(
        time_scale=2.5,
        max_running=1000,
        name="abc",
        profile=Path("/tmp/p.json"),
        verbose=True,
        hardware="h100",
        tp=4,
    )
    assert parse_options(_Options, {"profile": "none"}).profile is None
    assert parse_options(_Options, {}) == _Options()


@pytest.mark.parametrize(
    ("raw", "needle"),
    [
        ({"nope": "1"}, "unknown option --nope; accepted: --hardware"),
        ({"max_running": "many"}, "option --max_running: 'many' is not an integer"),
        ({"time_scale": "nan"}, "not a finite number"),
        ({"verbose": "maybe"}, "not a boolean"),
        ({"hardware": "a100"}, "'a100' is not one of h100, h200"),
        ({"tp": "3"}, "'3' is not one of 1, 2, 4"),
        ({"time_scale": "-1"}, "time_scale must be > 0"),
    ],
)
def test_bad_options_name_the_problem(raw: dict[str, str], needle: str) -> None:
    with pytest.raises(EngineOptionError) as info:
        parse_options(_Options, raw, what="engine 'x'")
    assert needle in str(info.value)
    assert str(info.value).startswith("engine 'x'")


@given(st.integers(min_value=-(10**12), max_value=10**12), st.booleans())
def test_int_and_bool_round_trip(value: int, flag: bool) -> None:
    parsed = parse_options(_Options, {"max_running": str(value), "verbose": str(flag)})
    assert parsed.max_running == value
    assert parsed.verbose is flag


def test_describe_lists_fields_with_help() -> None:
    infos = {info.name: info for info in describe_options(_Options)}
    assert infos["limit"].help == "a limit"
    assert infos["time-scale"].type_name == "float"
    assert infos["hardware"].type_name == "h100|h200"
    assert infos["profile"].default == "None"
    assert infos["profile"].type_name == "Path | none"


def test_registry_names_and_unknown_engine() -> None:
    assert "sim" in engine_names()
    assert engine_names() == sorted(ENGINES)
    with pytest.raises(EngineOptionError, match="unknown engine 'tpu'; choose one of"):
        engine_entry("tpu")
