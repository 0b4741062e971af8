"""A corrupt ledger, recognised and set aside.

The ledger is a view of the event stream, so a damaged one is rebuilt from the stream rather
than repaired: ``corruption_of`` tells a database's "this file is damaged" (SQLite's
SQLITE_CORRUPT and SQLITE_NOTADB; PostgreSQL's data_corrupted and index_corrupted) from every
other error, ``reading`` turns it into ``LedgerCorrupt`` (a one-line error for the CLI),
``quick_check`` looks for damage no write has met yet, and ``set_aside`` moves a damaged SQLite
file (with its WAL) out of the way under a dated name, so that a fresh ledger can take its place
and the damaged one stays for inspection. Who decides to rebuild is the projector's keeper
(``heddle.controlplane.ledger_recovery``).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from heddle.errors import UserError
from heddle.ledger.database import Ledger

_SQLITE_DAMAGED = {sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB}
_POSTGRES_DAMAGED = {"XX001", "XX002"}
"""SQLSTATE data_corrupted and index_corrupted."""
_SIDE_FILES = ("-wal", "-shm", "-journal")


class LedgerCorrupt(UserError):
    """The ledger's database is damaged (the message names it and the database's words)."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"the ledger at {url} is corrupt: {reason}")
        self.url = url
        self.reason = reason


def corruption_of(exc: BaseException) -> str | None:
    """The database's words when ``exc`` (or what it wraps) says the data is damaged."""
    for error in (exc, getattr(exc, "orig", None), exc.__cause__):
        if isinstance(error, sqlite3.DatabaseError):
            code = getattr(error, "sqlite_errorcode", None)
            if code in _SQLITE_DAMAGED:
                return str(error)
        if getattr(error, "sqlstate", None) in _POSTGRES_DAMAGED:
            return str(error).strip().splitlines()[0]
    return None


@contextlib.contextmanager
def reading(url: str) -> Iterator[None]:
    """Raise ``LedgerCorrupt`` for damage met inside the block; other errors pass as they are."""
    try:
        yield
    except Exception as exc:
        reason = corruption_of(exc)
        if reason is None:
            raise
        raise LedgerCorrupt(url, reason) from exc


def quick_check(ledger: Ledger) -> str | None:
    """SQLite's ``PRAGMA quick_check`` of the whole file (about 2 s for 330 MB): its first
    findings when the file is damaged, else None (and None for PostgreSQL)."""
    if not ledger.is_sqlite:
        return None
    try:
        with ledger.engine.connect() as connection:
            findings = list(connection.exec_driver_sql("PRAGMA quick_check").scalars())
    except Exception as exc:
        reason = corruption_of(exc)
        if reason is None:
            raise
        return reason
    return None if findings == ["ok"] else "; ".join(str(f) for f in findings[:3])


def sqlite_file(url: str) -> Path | None:
    """The file of a SQLite ledger URL (None for other databases and in-memory ones)."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        return None
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    return Path(parsed.database)


@dataclass(frozen=True, slots=True)
class FileIdentity:
    """Which file a path named when the ledger was opened (device and inode)."""

    device: int
    inode: int

    @classmethod
    def of(cls, path: Path) -> FileIdentity | None:
        try:
            stat = path.stat()
        except FileNotFoundError:
            return None
        return cls(stat.st_dev, stat.st_ino)


def set_aside(path: Path, now_s: float | None = None) -> Path:
    """Move ``path`` (and its WAL, shared-memory and journal files) to
    ``<name>.corrupt-<UTC date-time>``; the new path of the database file."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(time.time() if now_s is None else now_s))
    target = path.with_name(f"{path.name}.corrupt-{stamp}")
    suffix = 0
    while target.exists():
        suffix += 1
        target = path.with_name(f"{path.name}.corrupt-{stamp}-{suffix}")
    for side in _SIDE_FILES:
        with contextlib.suppress(FileNotFoundError):
            os.replace(f"{path}{side}", f"{target}{side}")
    os.replace(path, target)
    return target


def set_aside_once(path: Path, opened: FileIdentity | None) -> Path | None:
    """``set_aside(path)`` unless the file there is no longer the one opened as ``opened``
    (another process set the damaged one aside and made a fresh ledger first: None). Holds
    ``<path>.lock`` meanwhile, so processes sharing the file move it once."""
    lock = path.with_name(f"{path.name}.lock")
    with lock.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            current = FileIdentity.of(path)
            if current is None or current != opened:
                return None
            return set_aside(path)
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
