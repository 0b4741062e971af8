"""deploy/compose/compose.yaml run as written (tests/deploy/compose_run.py says what differs from
Docker): ``heddle deploy auth`` as its header says, then the three NATS nodes with the file's own
config, command and mounts (they form the JetStream cluster, with the generated users), the
control plane, the ledger projector and worker ``gpu0``, each with the one credential the file
mounts for it. The worker registers, and an operator sees it through the control plane's
operations service; the projector writes it into the ledger."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from heddle.bus.server import find_nats_server
from heddle.cli.apps import app

from .compose_run import Plan, Process, network_sandbox, service_mounts, write_plan
from .manifests import COMPOSE_FILE, ROOT, documented_auth_commands, load_compose

COMPOSE_DIR = COMPOSE_FILE.parent
HEDDLE = [sys.executable, "-c", "from heddle.cli import main; main()"]
REQUIRED = "bwrap" in os.environ.get("HEDDLE_REQUIRE_ISOLATION", "")


def _can_sandbox() -> str:
    if shutil.which("bwrap") is None:
        return "bubblewrap is not installed"
    if os.geteuid() != 0:
        return "the network namespace and the containers' mounts need root"
    return ""


def heddle_service(
    name: str, service: dict[str, Any], variables: dict[str, str], tmp: Path
) -> Process:
    """A heddle service's process: its command and environment, its mounts, a writable data
    dir, a SQLite ledger shared by the control plane and the projector, and the sim engine
    for a worker."""
    command = list(service["command"])
    if command[1] == "worker":
        command = [*command[: command.index("--engine")], "--engine", "sim"]
    env = {key: str(value) for key, value in service["environment"].items()}
    env["HEDDLE_DATABASE_URL"] = f"sqlite:///{tmp / 'ledger.db'}"
    data_dir = tmp / f"{name}-data"
    data_dir.mkdir()
    mounts = service_mounts(service, variables, COMPOSE_DIR, tmp / "volumes")
    mounts.append((str(data_dir), env["HEDDLE_DATA_DIR"]))
    env |= {"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT), "HOME": str(data_dir)}
    ready = "control plane ready" if command[1] == "up" else ""
    return Process(name, [*HEDDLE, *command[1:]], env, mounts, ready)


def nats_node(
    name: str, index: int, service: dict[str, Any], variables: dict[str, str], tmp: Path
) -> Process:
    address = f"127.0.0.{index + 2}"
    argv = [
        str(find_nats_server()),
        *service["command"],
        "-a", address, "--cluster_listen", f"nats://{address}:6222",
    ]  # fmt: skip
    env = {key: str(value) for key, value in service["environment"].items()}
    mounts = service_mounts(service, variables, COMPOSE_DIR, tmp / "volumes" / name)
    return Process(name, argv, env, mounts, "metadata leader" if index == 2 else "")


def check(name: str, args: list[str], auth_dir: Path, url: str, expect: str) -> Process:
    """An operator's command, from outside the compose file: it must print ``expect``."""
    env = {
        "PATH": os.environ["PATH"],
        "PYTHONPATH": str(ROOT),
        "HEDDLE_NATS_URL": url,
        "HEDDLE_NATS_CREDS": "/run/heddle/operator.nk",
    }
    mounts = [(str(auth_dir / "operator.nk"), "/run/heddle/operator.nk")]
    return Process(name, [*HEDDLE, *args], env, mounts, expect=expect)


@pytest.mark.timeout(300)
def test_the_compose_file_runs_as_written(tmp_path: Path) -> None:
    reason = _can_sandbox()
    if reason:
        if REQUIRED:
            pytest.fail(f"HEDDLE_REQUIRE_ISOLATION asks for bwrap: {reason}")
        pytest.skip(reason)
    (command,) = documented_auth_commands(COMPOSE_FILE.read_text())
    auth_dir = tmp_path / "auth"
    args = list(command[1:])
    args[args.index("--out") + 1] = str(auth_dir)
    written = CliRunner().invoke(app, args)
    assert written.exit_code == 0, written.output

    services = load_compose()["services"]
    models = tmp_path / "models"
    models.mkdir()
    variables = {"AUTH_DIR": str(auth_dir), "MODELS_DIR": str(models), "MODEL_PATH": "/models/x"}
    nodes = [
        nats_node(name, index, services[name], variables, tmp_path)
        for index, name in enumerate(("nats-1", "nats-2", "nats-3"))
    ]
    heddle = [
        heddle_service(name, services[name], variables, tmp_path)
        for name in ("control", "projector", "worker-0")
    ]
    url = str(services["control"]["environment"]["HEDDLE_NATS_URL"])
    checks = [
        check("ops-status", ["ops", "status"], auth_dir, url, expect='"gpu0"'),
        check(
            "ledger-status",
            [
                "--database-url",
                f"sqlite:///{tmp_path / 'ledger.db'}",
                "status",
                "--json",
                "--no-nats",
            ],
            auth_dir,
            url,
            expect='"worker_id":"gpu0"',
        ),
    ]
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    hosts = tmp_path / "hosts"
    hosts.write_text(
        "127.0.0.1 localhost\n" + "".join(f"127.0.0.{i + 2} nats-{i + 1}\n" for i in range(3))
    )
    plan = Plan(processes=[*nodes, *heddle, *checks], log_dir=str(log_dir))
    write_plan(plan, tmp_path / "plan.json")
    runner = Path(__file__).with_name("compose_run.py")
    result = subprocess.run(
        [*network_sandbox(hosts), "--", sys.executable, str(runner), str(tmp_path / "plan.json")],
        capture_output=True,
        text=True,
        timeout=280,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    verdict = json.loads(result.stdout.strip().splitlines()[-1])
    assert verdict["ok"], verdict
