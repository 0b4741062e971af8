"""Every `heddle ...` command line in docs/deploy.md parses with the real CLI (commands,
subcommands and options exist)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

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
