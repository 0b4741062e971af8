"""Credentials, replica counts and permission errors of ``heddle.bus.connection`` (no server)."""

from __future__ import annotations

from pathlib import Path

import nkeys
import pytest

from heddle.bus.connection import (
    connect_options,
    inbox_prefix,
    parse_violation,
    replicas_for,
    tls_context,
)
from heddle.config import Settings, load_settings
from heddle.deploy.auth import credential, new_seed
from heddle.deploy.roles import Identity
from heddle.errors import UserError


def test_an_nkey_seed_file_becomes_the_seed_option_and_its_own_inboxes(tmp_path: Path) -> None:
    entry = credential(Identity("worker", "w00"), new_seed())
    path = tmp_path / "worker-w00.nk"
    path.write_text(entry.seed + "\n")
    options = connect_options(Settings(nats_creds=path))
    assert options == {"nkeys_seed_str": entry.seed, "inbox_prefix": inbox_prefix(entry.public_key)}
    assert nkeys.from_seed(entry.seed.encode()).public_key.decode() == entry.public_key
    # The role lets it read replies under that prefix, and nowhere else.
    assert entry.role.subscribe == (f"_INBOX.{entry.public_key}.>",)


def test_a_creds_file_is_handed_to_nats_py_as_it_is(tmp_path: Path) -> None:
    path = tmp_path / "user.creds"
    path.write_text("-----BEGIN NATS USER JWT-----\neyJ0eXAi\n------END NATS USER JWT------\n")
    assert connect_options(Settings(nats_creds=path)) == {"user_credentials": str(path)}


def test_a_file_that_is_no_credential_is_a_user_error(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("password=hunter2\n")
    with pytest.raises(UserError, match=r"neither a NATS \.creds file"):
        connect_options(Settings(nats_creds=path))
    with pytest.raises(UserError, match="cannot read"):
        connect_options(Settings(nats_creds=tmp_path / "missing.nk"))


def test_a_bad_ca_file_is_a_user_error(tmp_path: Path) -> None:
    path = tmp_path / "ca.pem"
    path.write_text("not a certificate")
    with pytest.raises(UserError, match="TLS CA"):
        tls_context(path)


def test_replicas_follow_the_servers_cluster() -> None:
    assert replicas_for({"server_id": "x"}) == 1
    assert replicas_for({"server_id": "x", "cluster": "heddle"}) == 3


def test_permission_violations_are_parsed() -> None:
    text = "nats: 'Permissions Violation for Publish to \"heddle.cmd.worker.w1.abort\"'"
    violation = parse_violation(text)
    assert violation is not None
    assert (violation.operation, violation.subject) == ("publish", "heddle.cmd.worker.w1.abort")
    assert "permissions violation" in violation.message()
    assert parse_violation("nats: 'Authorization Violation'") is None


def test_settings_read_the_connection_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HEDDLE_NATS_CREDS", "/secrets/worker.nk")
    monkeypatch.setenv("HEDDLE_NATS_TLS_CA", "/secrets/ca.pem")
    monkeypatch.setenv("HEDDLE_NATS_REPLICAS", "3")
    settings = load_settings()
    assert settings.nats_creds == Path("/secrets/worker.nk")
    assert settings.nats_tls_ca == Path("/secrets/ca.pem")
    assert settings.nats_replicas == 3
    monkeypatch.setenv("HEDDLE_NATS_REPLICAS", "three")
    with pytest.raises(UserError, match="HEDDLE_NATS_REPLICAS"):
        load_settings()
