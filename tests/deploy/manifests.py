"""Reading deploy/'s manifests and checking what they name against the project.

A *process* is one container that runs a project image: its image, its argv (command + args)
and its environment variable names. ``check_heddle_argv`` walks an argv through the real Typer
application (the click tree ``heddle`` runs), so a subcommand, option or option value the CLI
does not accept is reported, and a worker's engine options are checked against the engine's
own option type.
"""

from __future__ import annotations

import re
import shlex
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer
import yaml

import heddle.cli  # noqa: F401  (registers every command module on the app)
from heddle.cli.apps import app
from heddle.cli.worker import parse_engine_args
from heddle.workers.engines import engine_entry
from heddle.workers.engines.options import parse_options

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
COMPOSE_FILE = DEPLOY / "compose" / "compose.yaml"
KUBERNETES_DIR = DEPLOY / "kubernetes"
DOCKERFILES = DEPLOY / "docker"
PROJECT_IMAGES = ("heddle", "heddle-sglang")
"""Images built from this repository: ``deploy/docker/<name>.Dockerfile``."""
_EXPANSION = re.compile(r"\$\((\w+)\)")
_AUTH_COMMAND = re.compile(r"^#\s+(heddle deploy auth .*)$", re.MULTILINE)
_AUTH_DIR = "${AUTH_DIR:-./auth}/"


def project_version() -> str:
    return str(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"])


@dataclass(frozen=True, slots=True)
class Process:
    where: str
    """File and service or container name, for messages."""
    image: str
    argv: list[str]
    env: dict[str, str]
    """Variable name -> value (``valueFrom`` entries as ``<from ...>``)."""
    credentials: dict[str, str]
    """Container path -> the file of ``heddle deploy auth``'s output mounted there (a name
    with ``$(VAR)`` where Kubernetes expands it per pod)."""


def load_compose() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE_FILE.read_text())
    assert isinstance(data, dict)
    return data


def kubernetes_documents() -> Iterator[tuple[str, dict[str, Any]]]:
    """(file name, object) for every object the kustomization lists."""
    kustomization = yaml.safe_load((KUBERNETES_DIR / "kustomization.yaml").read_text())
    for name in kustomization["resources"]:
        for document in yaml.safe_load_all((KUBERNETES_DIR / name).read_text()):
            if document:
                yield name, document


def kustomize_tags() -> dict[str, str]:
    kustomization = yaml.safe_load((KUBERNETES_DIR / "kustomization.yaml").read_text())
    return {entry["name"]: entry["newTag"] for entry in kustomization.get("images", [])}


def compose_processes() -> list[Process]:
    processes = []
    for name, service in load_compose()["services"].items():
        command = service.get("command", [])
        argv = command if isinstance(command, list) else command.split()
        env = {key: str(value) for key, value in (service.get("environment") or {}).items()}
        credentials = {}
        for volume in service.get("volumes", []):
            source, target = split_volume(volume)
            if source.startswith(_AUTH_DIR):
                credentials[target] = source.removeprefix(_AUTH_DIR)
        processes.append(
            Process(f"compose.yaml:{name}", service["image"], list(argv), env, credentials)
        )
    return processes


def split_volume(entry: str) -> tuple[str, str]:
    """(source, target) of a compose volume, with ``${VAR:-default}`` sources kept whole."""
    masked = re.sub(r"\$\{[^}]*\}", lambda m: m.group(0).replace(":", "\0"), entry)
    source, target = masked.split(":")[:2]
    return source.replace("\0", ":"), target.replace("\0", ":")


def documented_auth_commands(text: str) -> list[list[str]]:
    """The ``heddle deploy auth`` command lines a file's comments give, as argv."""
    return [shlex.split(line) for line in _AUTH_COMMAND.findall(text)]


def _pod_spec(document: dict[str, Any]) -> dict[str, Any] | None:
    spec = document.get("spec", {})
    if "template" in spec:
        return dict(spec["template"]["spec"])
    return None


def _container_env(container: dict[str, Any]) -> dict[str, str]:
    env = {}
    for entry in container.get("env", []):
        env[entry["name"]] = entry.get("value", f"<from {sorted(entry.get('valueFrom', {}))}>")
    return env


def kubernetes_processes() -> list[Process]:
    config_env = {}
    for _, document in kubernetes_documents():
        if document["kind"] == "ConfigMap" and document["metadata"]["name"] == "heddle-env":
            config_env = dict(document["data"])
    processes = []
    for name, document in kubernetes_documents():
        pod = _pod_spec(document)
        for container in (pod or {}).get("containers", []):
            env = _container_env(container)
            if any("heddle-env" in str(source) for source in container.get("envFrom", [])):
                env = config_env | env
            argv = [*container.get("command", []), *container.get("args", [])]
            where = f"{name}:{document['metadata']['name']}/{container['name']}"
            credentials = _secret_files(pod or {}, container)
            processes.append(Process(where, container["image"], argv, env, credentials))
    return processes


def _secret_files(pod: dict[str, Any], container: dict[str, Any]) -> dict[str, str]:
    """Container path -> secret key of each file the container sees of ``heddle-nats-creds``
    (the volume's items, or the one key a ``subPathExpr`` mount picks)."""
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    files = {}
    for mount in container.get("volumeMounts", []):
        secret = volumes.get(mount["name"], {}).get("secret", {})
        if secret.get("secretName") != "heddle-nats-creds":
            continue
        if "subPathExpr" in mount or "subPath" in mount:
            files[mount["mountPath"]] = mount.get("subPathExpr") or mount["subPath"]
            continue
        for item in secret.get("items", []):
            files[f"{mount['mountPath']}/{item['path']}"] = item["key"]
    return files


def kubernetes_pod_names() -> dict[str, list[str]]:
    """Pod names of each StatefulSet (``<name>-<ordinal>``), by StatefulSet name."""
    return {
        document["metadata"]["name"]: [
            f"{document['metadata']['name']}-{i}" for i in range(document["spec"]["replicas"])
        ]
        for _, document in kubernetes_documents()
        if document["kind"] == "StatefulSet"
    }


def expanded_names(argv: list[str]) -> set[str]:
    """Variables an argv uses through Kubernetes' ``$(NAME)`` expansion."""
    return {match for token in argv for match in _EXPANSION.findall(token)}


def _parse(command: Any, args: list[str], where: str) -> Any:
    """The click context of ``command`` over ``args``: options parsed and converted, nothing
    invoked. Typer ships its own copy of click, so its errors are caught by their base class."""
    try:
        return command.make_context(command.name or "heddle", list(args))
    except Exception as exc:
        format_message = getattr(exc, "format_message", None)
        message = format_message() if callable(format_message) else str(exc)
        raise AssertionError(f"{where}: {' '.join(args)}: {message}") from None


def check_heddle_argv(argv: list[str], where: str) -> None:
    """AssertionError unless ``heddle`` accepts ``argv``: its subcommands, options and their
    values as the CLI parses them, and a worker's engine options (ValueError for those)."""
    assert argv and argv[0] == "heddle", f"{where}: runs {argv[:1]}, not heddle"
    args = [_EXPANSION.sub("1", token) for token in argv[1:]]  # Kubernetes fills these in
    command = typer.main.get_command(app)
    while hasattr(command, "commands"):
        context = _parse(command, args, where)
        rest = [*getattr(context, "_protected_args", []), *context.args]
        assert rest and rest[0] in command.commands, f"{where}: no subcommand {rest[:1]}"
        command, args = command.commands[rest[0]], rest[1:]
    extras = list(_parse(command, args, where).args)
    if extras:
        _check_engine_options(argv, extras, where)


def _check_engine_options(argv: list[str], extras: list[str], where: str) -> None:
    engine = argv[argv.index("--engine") + 1] if "--engine" in argv else "sim"
    options = parse_engine_args(extras)
    parse_options(engine_entry(engine).options_type(), options, what=f"{where}: engine {engine}")


def heddle_env_names() -> set[str]:
    """Every ``HEDDLE_*`` name the package's source mentions."""
    names: set[str] = set()
    for path in (ROOT / "heddle").rglob("*.py"):
        names.update(re.findall(r"\bHEDDLE_[A-Z0-9_]+\b", path.read_text()))
    return names
