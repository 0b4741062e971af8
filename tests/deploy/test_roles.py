"""The role table against the subjects each kind of process publishes (NATS wildcard
matching: ``*`` one token, ``>`` one or more; deny over allow), and ``heddle deploy auth``'s
files. tests/deploy/test_permission_matrix.py asks a real server the same questions."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from heddle.cli.apps import app
from heddle.deploy.auth import (
    AUTH_CONFIG_NAME,
    credential_path,
    identities,
    identity_of,
    read_seeds,
    render_authorization,
    write_auth,
)
from heddle.deploy.roles import ROLE_KINDS, Identity, Role, role_for
from heddle.events import Abort, MigrateIn, TrajectorySpec
from heddle.events.subjects import (
    rollout_subject,
    subject_for_command,
    tool_subject,
    trajectory_subject,
    worker_command_subject,
    worker_event_subject,
    worker_role,
)
from heddle.workers.agent import records
from heddle.workers.agent.trajectory_log import TrajectoryLog


def matches(pattern: str, subject: str) -> bool:
    want, have = pattern.split("."), subject.split(".")
    for index, token in enumerate(want):
        if token == ">":
            return len(have) > index
        if index >= len(have) or (token != "*" and token != have[index]):
            return False
    return len(want) == len(have)


def may_publish(role: Role, subject: str) -> bool:
    if any(matches(pattern, subject) for pattern in role.publish_deny):
        return False
    return any(matches(pattern, subject) for pattern in role.publish)


def shared(kind: str) -> Role:
    return role_for(Identity(kind))


tokens = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_", min_size=1, max_size=12)
ACTIONS = ("run", "preempt", "migrate_out", "migrate_in", "abort", "drain", "reprioritize")


@given(worker_id=tokens, rollout_id=tokens, action=st.sampled_from(ACTIONS))
def test_only_the_control_plane_and_operators_command_workers(
    worker_id: str, rollout_id: str, action: str
) -> None:
    command = worker_command_subject(worker_id, action)
    roles = [shared(kind) for kind in ROLE_KINDS if kind not in ("worker", "trainer")]
    roles += [role_for(Identity("worker", "w00")), role_for(Identity("trainer", "grpo"))]
    allowed = {role.identity.kind for role in roles if may_publish(role, command)}
    assert allowed == {"control_plane", "operator"}
    for kind in ("submitted", "finished", "cancelled"):
        subject = rollout_subject(rollout_id, kind)
        for role in roles:
            if role.identity.kind not in ("control_plane", "operator"):
                assert not may_publish(role, subject), (role.name, subject)


@given(worker_id=tokens, other=tokens, rollout_id=tokens, traj_id=tokens)
def test_a_worker_publishes_as_itself_only(
    worker_id: str, other: str, rollout_id: str, traj_id: str
) -> None:
    if other == worker_id:
        other += "x"
    role = role_for(Identity("worker", worker_id))
    generated = trajectory_subject(rollout_id, traj_id, "generated")
    assert may_publish(role, f"{generated}.{worker_role(worker_id)}")
    assert not may_publish(role, f"{generated}.{worker_role(other)}")  # in another's name
    assert not may_publish(role, generated)  # in no one's
    assert may_publish(role, worker_event_subject(worker_id, "registered"))
    assert not may_publish(role, worker_event_subject(other, "registered"))
    assert may_publish(role, tool_subject("default"))
    assert not may_publish(role, trajectory_subject(rollout_id, traj_id, "placed"))
    assert not may_publish(role, trajectory_subject(rollout_id, traj_id, "submitted"))
    # Commands to its peers: the ones its code sends, in its own name.
    assert may_publish(role, f"{worker_command_subject(other, 'migrate_in')}.{worker_id}")
    assert not may_publish(role, f"{worker_command_subject(other, 'migrate_in')}.{other}")
    assert not may_publish(role, f"{worker_command_subject(other, 'drain')}.{worker_id}")


def test_the_hand_over_a_worker_sends_is_one_its_role_allows() -> None:
    spec = TrajectorySpec(group_id="g", index=0, environment="trace", prompt_token_ids=[1])
    log = TrajectoryLog(rollout_id="r1", traj_id="t1", spec=spec)
    migrate_in = records.migrate_in(
        log,
        spec=spec,
        source_worker_id="w00",
        target_worker_id="w01",
        migration_id="m1",
        cache_key="",
        priority=0.0,
        now=1.0,
    )
    assert isinstance(migrate_in, MigrateIn)
    subject = subject_for_command(migrate_in)
    assert subject == "heddle.cmd.worker.w01.migrate_in.w00"
    assert may_publish(role_for(Identity("worker", "w00")), subject)
    assert not may_publish(role_for(Identity("worker", "w01")), subject)
    forwarded = Abort(
        command_id="c", rollout_id="r1", traj_id="t1", issued_at=1.0, worker_id="w01", sent_by="w00"
    )
    assert may_publish(role_for(Identity("worker", "w00")), subject_for_command(forwarded))


def test_no_role_but_the_admins_may_delete_or_purge_streams() -> None:
    roles = [shared(k) for k in ("ledger_projector", "tool_executor", "weights_publisher")]
    roles += [role_for(Identity("worker", "w00")), role_for(Identity("trainer", "grpo"))]
    for role in roles:
        for verb in ("DELETE", "PURGE", "UPDATE"):
            assert not may_publish(role, f"$JS.API.STREAM.{verb}.HEDDLE_EVENTS"), role.name
        assert not may_publish(role, "$JS.API.CONSUMER.DELETE.HEDDLE_EVENTS.control-plane")
        assert not may_publish(role, "$JS.API.CONSUMER.MSG.NEXT.HEDDLE_EVENTS.control-plane")
    assert may_publish(shared("operator"), "$JS.API.STREAM.DELETE.HEDDLE_EVENTS")


def test_trainers_reach_their_own_records_and_endpoints_only() -> None:
    grpo = role_for(Identity("trainer", "grpo"))
    assert may_publish(grpo, "heddle.ops.submit.grpo")
    assert not may_publish(grpo, "heddle.ops.submit.ppo")
    assert not may_publish(grpo, "heddle.ops.rollout.cancel")
    assert may_publish(grpo, "$JS.API.CONSUMER.MSG.NEXT.HEDDLE_OUT_grpo.mine")
    assert not may_publish(grpo, "$JS.API.CONSUMER.MSG.NEXT.HEDDLE_OUT_ppo.theirs")
    assert not may_publish(grpo, "heddle.evt.weights.2.published")
    assert may_publish(shared("weights_publisher"), "heddle.evt.weights.2.published")


def test_an_identity_names_a_role() -> None:
    with pytest.raises(ValueError, match="needs a name"):
        Identity("worker")
    with pytest.raises(ValueError, match="shared"):
        Identity("operator", "alice")
    with pytest.raises(ValueError, match="unknown role"):
        Identity("admin")
    with pytest.raises(ValueError, match="not a valid id"):
        Identity("worker", "w.00")
    assert identity_of("worker-gpu-0.nk") == Identity("worker", "gpu-0")
    assert identity_of("ledger_projector.nk") == Identity("ledger_projector")


def test_the_cli_writes_one_secret_per_identity_and_keeps_earlier_ones(tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "auth"
    args = ["deploy", "auth", "--out", str(out), "--worker", "w00,w01", "--trainer", "grpo"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    config = (out / AUTH_CONFIG_NAME).read_text()
    wanted = identities(["w00", "w01"], ["grpo"])
    for identity in wanted:
        path = credential_path(out, identity)
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert path.read_text().startswith("SU")
        assert f"# {identity.label}:" in config
    seeds = read_seeds(out)
    assert set(seeds) == set(wanted)
    # A later run adds a worker and keeps every earlier seed (and its user in the config).
    again = runner.invoke(app, ["deploy", "auth", "--out", str(out), "--workers", "w02"])
    assert again.exit_code == 0, again.output
    after = read_seeds(out)
    assert {i: s for i, s in after.items() if i in seeds} == seeds
    assert Identity("worker", "w02") in after
    assert (out / AUTH_CONFIG_NAME).read_text().count("nkey:") == len(after)
    rotated = runner.invoke(app, ["deploy", "auth", "--out", str(out), "--overwrite"])
    assert rotated.exit_code == 0
    assert not set(read_seeds(out).values()) & set(after.values())


def test_a_bad_worker_id_is_refused(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["deploy", "auth", "--out", str(tmp_path), "--worker", "a.b"])
    assert result.exit_code != 0
    assert "not a valid id" in result.output


def test_the_config_names_public_keys_only(tmp_path: Path) -> None:
    entries = write_auth(tmp_path, workers=["w00"], trainers=["grpo"])
    config = render_authorization(entries)
    for entry in entries:
        assert entry.public_key in config
        assert entry.seed not in config
