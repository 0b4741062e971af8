"""deploy/'s compose file, Kubernetes manifests and NATS Helm values: valid against their
schemas (offline: the compose specification's JSON schema as check-jsonschema vendors it, the
Kubernetes OpenAPI schemas kubernetes-validate ships), and every image, command, option and
environment variable they name exists in this project."""

from __future__ import annotations

import json
import os
import re
from importlib import resources
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml
from typer.testing import CliRunner

from heddle.cli.apps import app

from .manifests import (
    COMPOSE_FILE,
    DEPLOY,
    DOCKERFILES,
    KUBERNETES_DIR,
    PROJECT_IMAGES,
    ROOT,
    Process,
    check_heddle_argv,
    compose_processes,
    documented_auth_commands,
    expanded_names,
    heddle_env_names,
    kubernetes_documents,
    kubernetes_pod_names,
    kubernetes_processes,
    kustomize_tags,
    load_compose,
    project_version,
    split_volume,
)

KUBERNETES_VERSION = "1.33.0"
"""The oldest Kubernetes the manifests target (tools.yaml needs user-namespaced pods)."""
AWAITED_ENV = {"HEDDLE_NATS_CREDS", "HEDDLE_NATS_TLS_CA"}
"""Added by `heddle deploy auth`'s branch (heddle/cli/deploy.py): tolerated as unknown only
while that module is absent; once it exists they must be real."""
THIRD_PARTY_IMAGES = ("nats", "postgres", "python", "lmsysorg/sglang")


def _all_processes() -> list[Process]:
    return compose_processes() + kubernetes_processes()


def _heddle_processes() -> list[Process]:
    return [p for p in _all_processes() if p.image.split(":")[0] in PROJECT_IMAGES]


def test_compose_file_matches_the_compose_specification() -> None:
    schema_file = resources.files("check_jsonschema") / "builtin_schemas/vendor/compose-spec.json"
    schema = json.loads(schema_file.read_text())
    jsonschema.validate(load_compose(), schema)


def test_a_broken_compose_file_is_refused() -> None:
    """The schema check can fail: a misspelt service key is rejected."""
    schema_file = resources.files("check_jsonschema") / "builtin_schemas/vendor/compose-spec.json"
    broken = load_compose()
    broken["services"]["control"]["comand"] = ["heddle", "up"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, json.loads(schema_file.read_text()))


@pytest.mark.parametrize(
    ("name", "document"),
    [
        pytest.param(n, d, id=f"{n}:{d['kind']}/{d['metadata']['name']}")
        for n, d in kubernetes_documents()
    ],
)
def test_kubernetes_objects_validate_strictly(name: str, document: dict[str, object]) -> None:
    kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)


def test_strict_kubernetes_validation_can_fail() -> None:
    _, deployment = next((n, d) for n, d in kubernetes_documents() if d["kind"] == "Deployment")
    broken = json.loads(json.dumps(deployment))
    broken["spec"]["template"]["spec"]["containers"][0]["comand"] = ["heddle"]
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)


def test_every_process_runs_a_real_heddle_command() -> None:
    processes = _heddle_processes()
    assert {p.argv[1] for p in processes} >= {"up", "db", "worker", "tools"}
    for process in processes:
        check_heddle_argv(process.argv, process.where)


def test_a_misspelt_option_is_caught() -> None:
    with pytest.raises(AssertionError, match="--pools"):
        check_heddle_argv(["heddle", "tools", "serve", "--pools", "x"], "here")
    with pytest.raises(AssertionError, match="no subcommand"):
        check_heddle_argv(["heddle", "tool", "serve"], "here")
    with pytest.raises(ValueError, match="tpp"):
        check_heddle_argv(["heddle", "worker", "--engine", "sglang", "--tpp", "2"], "here")


def test_every_heddle_environment_variable_is_read_by_the_project() -> None:
    known = heddle_env_names()
    awaiting_auth = not (ROOT / "heddle" / "cli" / "deploy.py").exists()
    for process in _heddle_processes():
        for name in process.env:
            if name.startswith("HEDDLE_"):
                tolerated = awaiting_auth and name in AWAITED_ENV
                assert name in known or tolerated, f"{process.where}: {name} is not read by heddle"
            else:
                # A helper variable: it must feed the argv through $(NAME).
                assert name in expanded_names(process.argv), f"{process.where}: {name} is unused"


def _identity_of(process: Process) -> str:
    """The credential a process must present: its command's identity (heddle/deploy/roles.py)."""
    argv = process.argv
    if argv[1] == "worker":
        return f"worker-{argv[argv.index('--id') + 1]}"
    return {"up": "control_plane", "db": "ledger_projector", "tools": "tool_executor"}[argv[1]]


def test_every_process_talks_to_nats_with_its_own_identity_credential() -> None:
    for process in _heddle_processes():
        if process.argv[1:3] == ["db", "upgrade"]:
            assert not process.credentials, process.where  # PostgreSQL only
            continue
        path = process.env.get("HEDDLE_NATS_CREDS", "")
        assert path in process.credentials, f"{process.where}: nothing mounted at {path!r}"
        assert list(process.credentials) == [path], f"{process.where} sees other credentials"
        assert process.credentials[path] == f"{_identity_of(process)}.nk", process.where


def _run_documented(command: list[str], out: Path) -> None:
    assert command[:3] == ["heddle", "deploy", "auth"], command
    args = list(command[1:])
    args[args.index("--out") + 1] = str(out)
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output


def test_compose_mounts_what_heddle_deploy_auth_writes_as_documented(tmp_path: Path) -> None:
    """The header's command, run as written: every file a service mounts from its output
    exists, and the NATS config includes the one the nodes mount."""
    (command,) = documented_auth_commands(COMPOSE_FILE.read_text())
    out = tmp_path / "auth"
    _run_documented(command, out)
    nats_conf = (DEPLOY / "compose" / "nats" / "nats.conf").read_text()
    include = next(line.split()[1] for line in nats_conf.splitlines() if line.startswith("include"))
    mounted: set[str] = set()
    for name, service in load_compose()["services"].items():
        for volume in service.get("volumes", []):
            source, target = split_volume(volume)
            if source.startswith("${AUTH_DIR:-./auth}/"):
                file_name = source.split("/")[-1]
                assert (out / file_name).is_file(), f"{name} mounts {file_name}, not written"
                mounted.add(file_name)
                if name.startswith("nats-"):
                    assert str(Path("/etc/nats") / include).endswith(target.lstrip("/")), target
    assert "auth.conf" in mounted
    assert {p.name for p in out.glob("*.nk")} >= {m for m in mounted if m.endswith(".nk")}


def test_compose_seeds_are_readable_by_their_containers_user(tmp_path: Path) -> None:
    """After the header's steps (the command, then chown), each service's user reads its seed
    (mode 0600): the heddle image runs as 10001 (its Dockerfile's USER), heddle-sglang as
    root."""
    text = COMPOSE_FILE.read_text()
    (command,) = documented_auth_commands(text)
    out = tmp_path / "auth"
    _run_documented(command, out)
    chown = re.search(r"^#\s+chown (\d+) deploy/compose/auth/\*\.nk", text, re.MULTILINE)
    assert chown is not None, "the header no longer says who owns the seeds"
    owner = int(chown.group(1))
    if os.geteuid() == 0:
        for seed in out.glob("*.nk"):
            os.chown(seed, owner, -1)
    users = {image: _dockerfile_user(image) for image in PROJECT_IMAGES}
    for name, service in load_compose()["services"].items():
        user = int(
            str(service.get("user", users.get(service["image"].split(":")[0], 0))).split(":")[0]
        )
        for volume in service.get("volumes", []):
            source = split_volume(volume)[0]
            if not source.endswith(".nk"):
                continue
            mode = (out / source.split("/")[-1]).stat().st_mode
            assert mode & 0o077 == 0, f"{source} is readable by others"
            assert user in (0, owner), f"{name} runs as {user}, the seeds belong to {owner}"


def _dockerfile_user(image: str) -> int:
    lines = (DOCKERFILES / f"{image}.Dockerfile").read_text().splitlines()
    users = [line.split()[1] for line in lines if line.startswith("USER ")]
    return int(users[-1]) if users else 0


def test_kubernetes_mounts_what_heddle_deploy_auth_writes_as_documented(tmp_path: Path) -> None:
    """config.yaml's command, run as written: every secret key a container mounts (a worker's
    per pod name) and the NATS auth config the Helm values include are in its output, and the
    documentation gives the same command."""
    text = (KUBERNETES_DIR / "config.yaml").read_text()
    (command,) = documented_auth_commands(text)
    assert " ".join(command) in (ROOT / "docs" / "deploy-kubernetes.md").read_text()
    out = tmp_path / "auth"
    _run_documented(command, out)
    pods = kubernetes_pod_names()
    for process in kubernetes_processes():
        for key in process.credentials.values():
            if "$(POD_NAME)" in key:
                statefulset = process.where.split(":")[1].split("/")[0]
                names = [key.replace("$(POD_NAME)", pod) for pod in pods[statefulset]]
            else:
                names = [key]
            for file_name in names:
                assert (out / file_name).is_file(), f"{process.where} mounts {file_name}"
    values = yaml.safe_load((KUBERNETES_DIR / "nats" / "values.yaml").read_text())
    included = Path(values["config"]["merge"]["00$include"]).name
    assert (out / included).is_file()
    assert (
        f"--from-file={included}=DIR/{included}"
        in (KUBERNETES_DIR / "nats" / "values.yaml").read_text()
    )


def test_project_images_are_built_here_at_the_project_version() -> None:
    version = project_version()
    tags = kustomize_tags()
    for process in _all_processes():
        name, _, tag = process.image.partition(":")
        if name in PROJECT_IMAGES:
            assert (DOCKERFILES / f"{name}.Dockerfile").is_file(), process.where
            assert (tag or tags.get(name)) == version, f"{process.where}: {process.image}"
        else:
            assert name in THIRD_PARTY_IMAGES, f"{process.where}: unknown image {process.image}"
            assert tag and tag != "latest", f"{process.where}: {process.image} is not pinned"
    for dockerfile in DOCKERFILES.glob("*.Dockerfile"):
        base = next(
            line.split()[1]
            for line in dockerfile.read_text().splitlines()
            if line.startswith("FROM ")
        )
        assert base.split(":")[0] in THIRD_PARTY_IMAGES and ":" in base, dockerfile.name


def test_executors_run_at_the_documented_bwrap_level() -> None:
    executors = [p for p in _heddle_processes() if p.argv[1:3] == ["tools", "serve"]]
    assert len(executors) == 2  # compose and Kubernetes
    for process in executors:
        level = process.argv[process.argv.index("--isolation") + 1]
        assert level == "bwrap", process.where
        assert "--allow-unisolated" not in process.argv, process.where
    doc = (ROOT / "docs" / "deploy-kubernetes.md").read_text()
    assert "--isolation bwrap" in doc


def test_workers_request_as_many_gpus_as_their_tensor_parallel_degree() -> None:
    for name, document in kubernetes_documents():
        if document["kind"] != "StatefulSet":
            continue
        container = document["spec"]["template"]["spec"]["containers"][0]
        tp = int(container["args"][container["args"].index("--tp") + 1])
        assert container["resources"]["limits"]["nvidia.com/gpu"] == tp, name
    for service in load_compose()["services"].values():
        if "--tp" in service.get("command", []):
            tp = int(service["command"][service["command"].index("--tp") + 1])
            devices = service["deploy"]["resources"]["reservations"]["devices"][0]["device_ids"]
            assert len(devices) == tp


# Keys of the official chart's values.yaml (nats-io/k8s, helm/charts/nats, chart 2.x) used by
# nats/values.yaml; under `merge` and `patch` the content is free-form nats.conf / JSON patch.
_CHART_KEYS = {
    "config.cluster.enabled",
    "config.cluster.replicas",
    "config.jetstream.enabled",
    "config.jetstream.fileStore.enabled",
    "config.jetstream.fileStore.dir",
    "config.jetstream.fileStore.pvc.enabled",
    "config.jetstream.fileStore.pvc.size",
    "config.jetstream.memoryStore.enabled",
    "config.merge",
    "container.patch",
    "podTemplate.patch",
    "podTemplate.topologySpreadConstraints",
    "promExporter.enabled",
}


def _leaf_paths(values: dict[str, object], prefix: str = "") -> set[str]:
    paths = set()
    for key, value in values.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and key not in ("merge", "topologySpreadConstraints"):
            paths |= _leaf_paths(value, f"{path}.")
        else:
            paths.add(path)
    return paths


def test_nats_helm_values_ask_for_a_three_node_jetstream_cluster_on_files() -> None:
    values = yaml.safe_load((KUBERNETES_DIR / "nats" / "values.yaml").read_text())
    assert _leaf_paths(values) <= _CHART_KEYS, _leaf_paths(values) - _CHART_KEYS
    assert values["config"]["cluster"] == {"enabled": True, "replicas": 3}
    jetstream = values["config"]["jetstream"]
    assert jetstream["enabled"] and jetstream["fileStore"]["enabled"]
    assert not jetstream["memoryStore"]["enabled"]
    assert values["config"]["merge"]["00$include"].endswith("/auth.conf")
    config_env = next(d["data"] for _, d in kubernetes_documents() if d["kind"] == "ConfigMap")
    assert config_env["HEDDLE_NATS_URL"] == "nats://heddle-nats:4222"  # the release's service
