"""The role table against the subjects each kind of process publishes (NATS wildcard
matching: ``*`` one token, ``>`` one or more), and ``heddle deploy auth``'s files."""

from __future__ import annotations

import stat
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from heddle.cli.apps import app
from heddle.deploy.auth import AUTH_CONFIG_NAME, credential_path, render_authorization, write_auth
from heddle.deploy.roles import ROLE_NAMES, role
from heddle.events.subjects import (
    rollout_subject,
    tool_subject,
    trajectory_subject,
    worker_command_subject,
    worker_event_subject,
)


def matches(pattern: str, subject: str) -> bool:
    want, have = pattern.split("."), subject.split(".")
    for index, token in enumerate(want):
        if token == ">":
            return len(have) > index
        if index >= len(have) or (token != "*" and token != have[index]):
            return False
    return len(want) == len(have)


def may_publish(role_name: str, subject: str) -> bool:
    return any(matches(pattern, subject) for pattern in role(role_name).publish)


tokens = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_", min_size=1, max_size=12)
ACTIONS = ("run", "preempt", "migrate_out", "migrate_in", "abort", "drain", "reprioritize")


@given(worker_id=tokens, rollout_id=tokens, traj_id=tokens, action=st.sampled_from(ACTIONS))
def test_only_the_control_plane_and_operators_command_workers(
    worker_id: str, rollout_id: str, traj_id: str, action: str
) -> None:
    command = worker_command_subject(worker_id, action)
    allowed = {name for name in ROLE_NAMES if may_publish(name, command)}
    assert allowed == {"control_plane", "operator"}
    for kind in ("submitted", "finished", "cancelled"):
        subject = rollout_subject(rollout_id, kind)
        assert not may_publish("worker", subject)
        assert not may_publish("tool_executor", subject)
    assert may_publish("trainer", rollout_subject(rollout_id, "submitted"))
    assert not may_publish("trainer", rollout_subject(rollout_id, "cancelled"))
    assert not may_publish("trainer", trajectory_subject(rollout_id, traj_id, "completed"))


@given(worker_id=tokens, rollout_id=tokens, traj_id=tokens)
def test_each_role_publishes_its_own_events(worker_id: str, rollout_id: str, traj_id: str) -> None:
    step = trajectory_subject(rollout_id, traj_id, "generated")
    assert may_publish("worker", step)
    assert may_publish("worker", worker_event_subject(worker_id, "registered"))
    assert may_publish("worker", tool_subject("default"))
    assert not may_publish("worker", worker_event_subject(worker_id, "drain_requested"))
    assert not may_publish("worker", trajectory_subject(rollout_id, traj_id, "placed"))
    assert may_publish("tool_executor", trajectory_subject(rollout_id, traj_id, "tool_returned"))
    assert not may_publish("tool_executor", step)
    assert not may_publish("ledger_projector", step)
    assert may_publish("operator", worker_event_subject(worker_id, "drain_requested"))


def test_no_role_but_the_admins_may_delete_or_purge_streams() -> None:
    for name in ("ledger_projector", "worker", "tool_executor", "trainer"):
        assert not may_publish(name, "$JS.API.STREAM.DELETE.HEDDLE_EVENTS")
        assert not may_publish(name, "$JS.API.STREAM.PURGE.HEDDLE_EVENTS")
        assert not may_publish(name, "$JS.API.STREAM.UPDATE.HEDDLE_EVENTS")
    assert may_publish("operator", "$JS.API.STREAM.DELETE.HEDDLE_EVENTS")


def test_the_cli_writes_one_secret_per_role_and_keeps_earlier_ones(tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "auth"
    result = runner.invoke(app, ["deploy", "auth", "--out", str(out)])
    assert result.exit_code == 0, result.output
    config = (out / AUTH_CONFIG_NAME).read_text()
    for name in ROLE_NAMES:
        path = credential_path(out, name)
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert path.read_text().startswith("SU")
        assert f"# {name}:" in config
    again = runner.invoke(app, ["deploy", "auth", "--out", str(out)])
    assert again.exit_code != 0
    assert "--overwrite" in str(again.exception)


def test_the_config_names_public_keys_only(tmp_path: Path) -> None:
    credentials = write_auth(tmp_path)
    config = render_authorization(credentials)
    for credential in credentials:
        assert credential.public_key in config
        assert credential.seed not in config
