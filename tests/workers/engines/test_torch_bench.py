"""`heddle bench engine` on the tiny model: figures, and a profile the policy loader accepts."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

import heddle.cli.bench_engine  # noqa: F401  (registers the command)
from heddle.cli.apps import app
from heddle.errors import UserError
from heddle.policy.cost.profiles import parse_profile

_SMALL = [
    "--batch-sizes",
    "1,3",
    "--context-tokens",
    "8",
    "--decode-tokens",
    "4",
    "--prefill-tokens",
    "16",
    "--resume-tokens",
    "16",
    "--repeats",
    "1",
    "--num-threads",
    "1",
]


def test_bench_engine_prints_figures_and_writes_a_loadable_profile(tmp_path: Path) -> None:
    profile_path = tmp_path / "profiles" / "tiny.json"
    args = ["bench", "engine", "--engine", "torch", "--model", "tiny", "--json"]
    result = CliRunner().invoke(app, [*args, *_SMALL, "--profile-out", str(profile_path)])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert [point["batch_size"] for point in report["decode"]] == [1, 3]
    assert report["decode"][0]["interference"] == 1.0
    assert all(point["itl_ms"] > 0 for point in report["decode"])
    assert report["prefill_tokens_per_s"] > 0
    assert report["resume"]["kept_kv_ms"] > 0 and report["resume"]["recompute_ms"] > 0
    assert report["migration"]["payload_bytes"] > 16 * 2048  # 16+ tokens of 2 KiB KV each
    assert report["profile"] == str(profile_path)

    profile = parse_profile(profile_path.read_text(), "json", source=str(profile_path))
    assert profile.model == "tiny" and profile.tp_degrees == [1]
    cost = profile.cost_model(1)
    assert cost.interference(3) >= 1.0
    assert cost.prefill_s(1000) > 0 and cost.max_kv_tokens > 0


def test_bench_engine_refuses_bad_arguments_with_user_errors(tmp_path: Path) -> None:
    runner = CliRunner()
    out = ["--profile-out", str(tmp_path / "p.json")]
    for extra, message in (
        (["--engine", "sim"], "only the torch engine"),
        (["--batch-sizes", "1,x"], "positive integers"),
        (["--dtype", "int8"], "--dtype"),
        (["--repeats", "0"], "repeats"),
    ):
        result = runner.invoke(app, ["bench", "engine", *extra, *out])
        assert isinstance(result.exception, UserError), result.output
        assert message in str(result.exception)
