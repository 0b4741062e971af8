"""The real NATS CLI in tests: finding the binary, a private context, running doc commands.

``nats_binary()`` finds ``nats`` (PATH, then ``$GOPATH/bin`` and ``~/go/bin``, where
``go install github.com/nats-io/natscli/nats@v0.5.0`` puts it); without it the caller skips with
the reason, or fails when ``HEDDLE_REQUIRE_NATS_CLI=1`` (.ci/run sets it). ``doc_commands``
reads the ``nats`` commands of a markdown section's indented code blocks, so what the tests run
is what the doc says.
"""

from __future__ import annotations

import asyncio
import os
import pty
import re
import select
import shlex
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

NATSCLI_VERSION = "v0.5.0"
REQUIRE_NATS_CLI = os.environ.get("HEDDLE_REQUIRE_NATS_CLI") == "1"


def nats_binary() -> str:
    """The ``nats`` binary, or a skip (a failure under ``HEDDLE_REQUIRE_NATS_CLI=1``)."""
    candidates = [shutil.which("nats")]
    for root in (os.environ.get("GOPATH"), str(Path.home() / "go")):
        if root:
            candidates.append(str(Path(root) / "bin" / "nats"))
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    reason = (
        "no `nats` binary (natscli): install it with "
        f"`go install github.com/nats-io/natscli/nats@{NATSCLI_VERSION}`"
    )
    if REQUIRE_NATS_CLI:
        pytest.fail(f"HEDDLE_REQUIRE_NATS_CLI=1 but {reason}")
    pytest.skip(reason)


def doc_commands(path: Path, heading: str) -> list[list[str]]:
    """The ``nats`` command lines of the indented code blocks under ``heading`` (to the next
    heading of the same level), split like a shell (quotes removed, ``# comments`` dropped)."""
    text = path.read_text()
    start = text.index(heading)
    level = heading.split(" ", 1)[0]
    end = text.find(f"\n{level} ", start + len(heading))
    section = text[start : end if end >= 0 else len(text)]
    commands = []
    for line in section.splitlines():
        if line.startswith("    nats "):
            commands.append(shlex.split(line, comments=True))
    return commands


def substitute(argv: list[str], values: dict[str, str]) -> list[str]:
    """Replace the doc's placeholders (``<rid>``, ...) in every argument."""
    pattern = re.compile("|".join(re.escape(key) for key in values))
    return [pattern.sub(lambda m: values[m.group(0)], arg) for arg in argv]


@dataclass(frozen=True, slots=True)
class Output:
    returncode: int | None
    """None: the command was still running (a subscription) when its output was taken."""
    text: str
    """stdout and stderr together."""


class NatsCli:
    """Runs ``nats`` with a private configuration home (its contexts live there)."""

    def __init__(self, binary: str, home: Path) -> None:
        self.binary = binary
        self.env = {**os.environ, "XDG_CONFIG_HOME": str(home), "HOME": str(home)}
        self.env.pop("NATS_URL", None)
        self.env.pop("NATS_CONTEXT", None)

    async def run(self, argv: list[str], *, timeout_s: float = 30.0) -> Output:
        """Run to completion (``argv`` starts with ``nats``)."""
        process = await self._start(argv)
        try:
            out, _ = await asyncio.wait_for(process.communicate(), timeout_s)
        except TimeoutError:
            process.kill()
            out, _ = await process.communicate()
            return Output(None, out.decode(errors="replace"))
        return Output(process.returncode, out.decode(errors="replace"))

    async def watch(self, argv: list[str], expect: str, *, timeout_s: float = 30.0) -> Output:
        """Run a command that does not end by itself (``nats sub``) until its output contains
        ``expect`` (or the timeout), then stop it."""
        process = await self._start(argv)
        assert process.stdout is not None
        text = ""
        try:
            async with asyncio.timeout(timeout_s):
                while expect not in text:
                    chunk = await process.stdout.read(65536)
                    if not chunk:
                        break
                    text += chunk.decode(errors="replace")
        except TimeoutError:
            pass
        finally:
            if process.returncode is None:
                process.kill()
            await process.wait()
        return Output(None, text)

    async def on_terminal(self, argv: list[str], expect: str, *, timeout_s: float = 30.0) -> Output:
        """Run a command that wants a terminal (``nats stream view`` pages interactively) on a
        pseudo-terminal until its output contains ``expect`` (or the timeout), then stop it."""
        return await asyncio.to_thread(self._on_terminal, argv, expect, timeout_s)

    def _on_terminal(self, argv: list[str], expect: str, timeout_s: float) -> Output:
        assert argv[0] == "nats", argv
        master, slave = pty.openpty()
        process = subprocess.Popen(
            [self.binary, *argv[1:]], stdin=slave, stdout=slave, stderr=slave, env=self.env
        )
        os.close(slave)
        text, deadline = "", time.monotonic() + timeout_s
        try:
            while expect not in text and time.monotonic() < deadline:
                ready, _, _ = select.select([master], [], [], 0.2)
                if not ready:
                    if process.poll() is not None:
                        break
                    continue
                try:
                    text += os.read(master, 65536).decode(errors="replace")
                except OSError:  # the terminal closed: the command ended
                    break
        finally:
            process.kill()
            process.wait()
            os.close(master)
        return Output(None, text)

    async def _start(self, argv: list[str]) -> asyncio.subprocess.Process:
        assert argv[0] == "nats", argv
        return await asyncio.create_subprocess_exec(
            self.binary,
            *argv[1:],
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env=self.env,
        )
