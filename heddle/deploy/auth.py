"""``heddle deploy auth``: a nats-server authorization config and one credential per role.

Each role (``heddle.deploy.roles``) becomes an nkey user of the server's ``authorization``
block with that role's publish and subscribe permissions; its credential is the user's nkey
seed, a file of one line ``SU...`` that every Heddle process takes as ``--nats-creds`` (or
``HEDDLE_NATS_CREDS``) and the NATS CLI as ``--nkey``. The server keeps only public keys, so
its config holds no secret; the seeds must go to their processes only (mode 0600).

Files written to the output folder:

- ``auth.conf``: the ``authorization { users = [...] }`` block; ``include`` it from the
  server's configuration (on every node of a cluster).
- ``<role>.nk``: the seed of each role.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import nkeys

from heddle.deploy.roles import ROLES, Role
from heddle.errors import UserError

AUTH_CONFIG_NAME = "auth.conf"


@dataclass(frozen=True, slots=True)
class RoleCredential:
    role: Role
    public_key: str
    """The user's nkey (``U...``): what the server config names."""
    seed: str
    """The secret (``SU...``): what the process presents."""


def new_credential(role: Role) -> RoleCredential:
    """A fresh nkey user for ``role`` (32 random bytes from the OS)."""
    seed = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER)
    public_key = nkeys.from_seed(seed).public_key
    return RoleCredential(role, public_key.decode(), seed.decode())


def render_authorization(credentials: list[RoleCredential]) -> str:
    """The ``authorization`` block (nats-server config syntax; strings quoted as JSON)."""
    lines = [
        "# Heddle's roles, written by `heddle deploy auth` (docs/deploy.md).",
        "authorization {",
        "  users = [",
    ]
    for credential in credentials:
        role = credential.role
        lines += [
            f"    # {role.name}: {role.description}",
            "    {",
            f"      nkey: {json.dumps(credential.public_key)}",
            "      permissions: {",
            f"        publish: {{ allow: {_subjects(role.publish)} }}",
            f"        subscribe: {{ allow: {_subjects(role.subscribe)} }}",
            "      }",
            "    }",
        ]
    lines += ["  ]", "}", ""]
    return "\n".join(lines)


def _subjects(subjects: tuple[str, ...]) -> str:
    return "[" + ", ".join(json.dumps(subject) for subject in subjects) + "]"


def write_auth(out_dir: Path, *, overwrite: bool = False) -> list[RoleCredential]:
    """Write ``auth.conf`` and one ``<role>.nk`` per role into ``out_dir``; ``UserError`` when
    files are there already (unless ``overwrite``: rotating every credential at once)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / AUTH_CONFIG_NAME, *(credential_path(out_dir, r.name) for r in ROLES)]
    existing = [path.name for path in paths if path.exists()]
    if existing and not overwrite:
        raise UserError(
            f"{out_dir} already holds {', '.join(existing)}: pick another folder, or pass "
            "--overwrite to replace every credential"
        )
    credentials = [new_credential(role) for role in ROLES]
    for credential in credentials:
        _write_secret(credential_path(out_dir, credential.role.name), credential.seed + "\n")
    (out_dir / AUTH_CONFIG_NAME).write_text(render_authorization(credentials))
    return credentials


def credential_path(out_dir: Path, role_name: str) -> Path:
    return out_dir / f"{role_name}.nk"


def _write_secret(path: Path, text: str) -> None:
    path.unlink(missing_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(text)
