"""Every `heddle ...` command line in docs/deploy.md parses with the real CLI (commands,
subcommands and options exist), and the `nats` commands it gives for scripts run without a
terminal."""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from heddle.bus import Bus
from heddle.cli.apps import app

DOC = Path(__file__).parents[2] / "docs" / "deploy.md"
_COMMAND = re.compile(r"(?:^ {4}|`)(heddle (?:[^`#\n|])+)", re.MULTILINE)


def doc_commands() -> list[str]:
    found = {match.group(1).strip() for match in _COMMAND.finditer(DOC.read_text())}
    return sorted(command for command in found if "..." not in command)


@pytest.mark.parametrize("command", doc_commands())
def test_the_command_exists(command: str, tmp_path: Path) -> None:
    # Credential and CA paths must exist for the CLI to accept them: stand-ins here.
    stand_in = tmp_path / "file.pem"
    stand_in.write_text("")
    tokens = [
        str(stand_in) if token.endswith((".pem", ".nk")) else token
        for token in shlex.split(command)[1:]
    ]
    result = CliRunner().invoke(app, [*tokens, "--help"])
    assert result.exit_code == 0, f"{command}: {result.output}"


def test_the_doc_has_commands() -> None:
    assert len(doc_commands()) >= 8


_SCRIPTED_NATS = re.compile(r"`(nats stream (?:subjects|get) HEDDLE_EVENTS[^`]*)`")
NATS_CLI = shutil.which("nats")


@pytest.mark.skipif(
    NATS_CLI is None and not os.environ.get("HEDDLE_REQUIRE_NATS_CLI"),
    reason="the nats CLI is not installed (.ci/run installs it)",
)
async def test_the_nats_commands_given_for_scripts_run_without_a_terminal(
    bus: Bus, nats_url: str
) -> None:
    """``nats stream view`` pages interactively and fails without a terminal: the doc gives
    other commands for scripts, and they must run with none."""
    commands = _SCRIPTED_NATS.findall(DOC.read_text())
    assert len(commands) >= 2
    await bus.publish_raw("heddle.evt.deadletter.operator", b'{"reason": "a probe"}', "dl-1")
    for command in commands:
        argv = [NATS_CLI or "nats", "--server", nats_url, *shlex.split(command)[1:]]
        done = await asyncio.to_thread(
            subprocess.run, argv, stdin=subprocess.DEVNULL, capture_output=True, text=True
        )
        assert done.returncode == 0, f"{command}: {done.stderr}"
        assert "deadletter" in done.stdout or "a probe" in done.stdout, done.stdout
