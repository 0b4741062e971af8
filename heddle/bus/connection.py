"""How a ``Bus`` authenticates and encrypts its connection, reads permission errors, and picks
the replica count of what it creates.

Credentials, the standard NATS ways: a user and password in the URL
(``nats://user:password@host:4222``), or a credential file (``Settings.nats_creds``) that is
either a ``.creds`` file (a user JWT and its nkey seed, decentralised JWT auth as ``nsc``
writes) or an nkey seed file (``SU...``: an nkey user of the server's ``authorization`` block,
as ``heddle deploy auth`` writes). An nkey user's reply inboxes are ``_INBOX.<its public key>.*``
(``inbox_prefix``): the roles of ``heddle deploy auth`` may subscribe there only, so no identity
reads the replies and pull deliveries of another. TLS: with ``Settings.nats_tls_ca`` the client
verifies the server's certificate against that CA (the URL may say ``tls://`` or ``nats://``).
"""

from __future__ import annotations

import re
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nkeys

from heddle.config import Settings
from heddle.errors import UserError

CLUSTER_REPLICAS = 3
"""Replicas on a cluster: a majority of three survives one node lost."""
_JWT_MARKER = "-----BEGIN NATS USER JWT-----"
_SEED_PATTERN = re.compile(r"\bSU[A-Z2-7]{56}\b")
_VIOLATION_PATTERN = re.compile(
    r"permissions violation for (publish|subscription) to \"?([^\"\s]+)\"?", re.IGNORECASE
)


class PermissionDenied(UserError):
    """The server refused this credential a publish or a subscription (the message names the
    subject and the role's permissions to check)."""


@dataclass(frozen=True, slots=True)
class Violation:
    """A permission violation the server reported on this connection."""

    operation: str
    """``publish`` or ``subscription``."""
    subject: str

    def message(self) -> str:
        return (
            f"NATS refused this credential {self.operation} to {self.subject!r} (permissions "
            "violation): the role's permissions do not allow it; see `heddle deploy auth` and "
            "docs/deploy.md for what each role may do"
        )


def parse_violation(error_text: str) -> Violation | None:
    """The violation an error callback's message describes, or None for any other error."""
    match = _VIOLATION_PATTERN.search(error_text)
    if match is None:
        return None
    return Violation(match.group(1).lower(), match.group(2))


def connect_options(settings: Settings) -> dict[str, Any]:
    """nats-py ``connect`` keyword arguments for the credentials and TLS of ``settings``."""
    options: dict[str, Any] = {}
    if settings.nats_creds is not None:
        options.update(_credential_options(settings.nats_creds))
    if settings.nats_tls_ca is not None:
        options["tls"] = tls_context(settings.nats_tls_ca)
    return options


def _credential_options(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise UserError(f"cannot read the NATS credential file {path}: {exc.strerror}") from None
    if _JWT_MARKER in text:
        return {"user_credentials": str(path)}
    seeds = _SEED_PATTERN.findall(text)
    if len(seeds) == 1:
        public_key = nkeys.from_seed(seeds[0].encode()).public_key.decode()
        return {"nkeys_seed_str": seeds[0], "inbox_prefix": inbox_prefix(public_key)}
    raise UserError(
        f"{path} is neither a NATS .creds file (user JWT and seed) nor an nkey seed file "
        "(one line starting SU...)"
    )


def inbox_prefix(public_key: str) -> str:
    """Where an nkey user's reply inboxes live: ``_INBOX.<public key>`` (its role subscribes to
    ``_INBOX.<public key>.>`` only; the ``nats`` CLI takes it as ``--inbox-prefix``)."""
    return f"_INBOX.{public_key}"


def tls_context(ca_path: Path) -> ssl.SSLContext:
    """A client context that trusts only the CA in ``ca_path`` (and checks the host name)."""
    try:
        return ssl.create_default_context(cafile=str(ca_path))
    except (OSError, ssl.SSLError) as exc:
        raise UserError(f"cannot load the NATS TLS CA certificate {ca_path}: {exc}") from None


def replicas_for(server_info: dict[str, Any]) -> int:
    """Replica count for a server that sent ``server_info`` (its INFO): 3 when it is part of
    a cluster, 1 on a single server."""
    return CLUSTER_REPLICAS if server_info.get("cluster") else 1


def describe_error(exc: BaseException) -> str:
    """A connection error in words (TLS verification and authorization spelled out)."""
    text = repr(exc)
    if "plaintext connection is refused" in str(exc):
        return str(exc)
    if isinstance(exc, ssl.SSLCertVerificationError) or "CERTIFICATE_VERIFY_FAILED" in text:
        return f"the server's TLS certificate is not trusted (give its CA, --nats-tls-ca): {exc}"
    if "Authorization" in text or "authorization" in text:
        return f"authorization refused (check --nats-creds or the URL's user and password): {exc}"
    return text
