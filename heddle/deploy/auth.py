"""``heddle deploy auth``: a nats-server authorization config and one credential per identity.

Each identity (``heddle.deploy.roles``: a shared role, each worker, each trainer) becomes an
nkey user of the server's ``authorization`` block with its role's permissions; its credential
is the user's nkey seed, a file of one line ``SU...`` that every Heddle process takes as
``--nats-creds`` (or ``HEDDLE_NATS_CREDS``) and the NATS CLI as ``--nkey`` (with
``--inbox-prefix _INBOX.<public key>`` for the roles limited to their own inboxes: the config
names each user's key). The server keeps only public keys, so its config holds no secret; the
seeds must go to their processes only (mode 0600).

Files written to the output folder:

- ``auth.conf``: the ``authorization { users = [...] }`` block; ``include`` it from the
  server's configuration (on every node of a cluster);
- ``<label>.nk``: the seed of each identity: ``control_plane.nk``, ``ledger_projector.nk``,
  ``tool_executor.nk``, ``weights_publisher.nk``, ``operator.nk``, ``worker-<id>.nk`` per
  worker, ``trainer-<name>.nk`` per trainer.

Seeds already in the folder are kept (their identities stay in ``auth.conf``), so a later run
with ``--worker w05`` adds one worker; ``overwrite`` gives every identity a new seed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import nkeys

from heddle.bus.connection import inbox_prefix
from heddle.deploy.roles import NAMED_KINDS, ROLE_KINDS, SHARED_KINDS, Identity, Role, role_for
from heddle.errors import UserError

AUTH_CONFIG_NAME = "auth.conf"
CREDENTIAL_SUFFIX = ".nk"


@dataclass(frozen=True, slots=True)
class Credential:
    role: Role
    public_key: str
    """The user's nkey (``U...``): what the server config names."""
    seed: str
    """The secret (``SU...``): what the process presents."""


def new_seed() -> str:
    """A fresh nkey user seed (32 random bytes from the OS)."""
    return nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER).decode()


def credential(identity: Identity, seed: str) -> Credential:
    public_key = nkeys.from_seed(seed.encode()).public_key.decode()
    return Credential(role_for(identity, inbox_prefix(public_key)), public_key, seed)


def render_authorization(credentials: Iterable[Credential]) -> str:
    """The ``authorization`` block (nats-server config syntax; strings quoted as JSON)."""
    lines = [
        "# Heddle's identities, written by `heddle deploy auth` (docs/deploy.md).",
        "authorization {",
        "  users = [",
    ]
    for entry in credentials:
        role = entry.role
        publish = f"allow: {_subjects(role.publish)}"
        if role.publish_deny:
            publish += f", deny: {_subjects(role.publish_deny)}"
        lines += [
            f"    # {role.name}: {role.description}",
            "    {",
            f"      nkey: {json.dumps(entry.public_key)}",
            "      permissions: {",
            f"        publish: {{ {publish} }}",
            f"        subscribe: {{ allow: {_subjects(role.subscribe)} }}",
            "      }",
            "    }",
        ]
    lines += ["  ]", "}", ""]
    return "\n".join(lines)


def _subjects(subjects: tuple[str, ...]) -> str:
    return "[" + ", ".join(json.dumps(subject) for subject in dict.fromkeys(subjects)) + "]"


def identities(workers: Iterable[str] = (), trainers: Iterable[str] = ()) -> list[Identity]:
    """Every shared role, then one identity per worker id and per trainer name (in order,
    duplicates once)."""
    named = [Identity("worker", w) for w in workers] + [Identity("trainer", t) for t in trainers]
    return [Identity(kind) for kind in SHARED_KINDS] + list(dict.fromkeys(named))


def write_auth(
    out_dir: Path,
    *,
    workers: Iterable[str] = (),
    trainers: Iterable[str] = (),
    overwrite: bool = False,
) -> list[Credential]:
    """Write ``auth.conf`` and a seed per identity into ``out_dir``: the shared roles, the
    given workers and trainers, and those whose seeds are there already (kept unless
    ``overwrite``, which gives every identity a new seed)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    existing = read_seeds(out_dir)
    wanted = identities(workers, trainers)
    wanted += [identity for identity in existing if identity not in wanted]
    credentials = []
    for identity in wanted:
        seed = existing.get(identity)
        if seed is None or overwrite:
            seed = new_seed()
            _write_secret(credential_path(out_dir, identity), seed + "\n")
        credentials.append(credential(identity, seed))
    (out_dir / AUTH_CONFIG_NAME).write_text(render_authorization(credentials))
    return credentials


def read_seeds(out_dir: Path) -> dict[Identity, str]:
    """The seeds of an earlier run in ``out_dir``, by identity; ``UserError`` for a ``.nk``
    file that names no identity or holds no seed."""
    seeds: dict[Identity, str] = {}
    for path in sorted(out_dir.glob(f"*{CREDENTIAL_SUFFIX}")):
        identity = identity_of(path.name)
        seed = path.read_text().strip()
        if not seed.startswith("SU"):
            raise UserError(f"{path} holds no nkey user seed: remove it or pass --overwrite")
        seeds[identity] = seed
    return seeds


def identity_of(file_name: str) -> Identity:
    """The identity a credential file is for (``worker-gpu0.nk``: worker ``gpu0``)."""
    stem = file_name.removesuffix(CREDENTIAL_SUFFIX)
    for kind in NAMED_KINDS:
        if stem.startswith(f"{kind}-"):
            return Identity(kind, stem.removeprefix(f"{kind}-"))
    if stem in SHARED_KINDS:
        return Identity(stem)
    raise UserError(
        f"{file_name}: not a credential of `heddle deploy auth` (roles: {', '.join(ROLE_KINDS)})"
    )


def credential_path(out_dir: Path, identity: Identity) -> Path:
    return out_dir / f"{identity.label}{CREDENTIAL_SUFFIX}"


def _write_secret(path: Path, text: str) -> None:
    path.unlink(missing_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(text)
