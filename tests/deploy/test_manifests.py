"""deploy/'s compose file, Kubernetes manifests and NATS Helm values: valid against their
schemas (offline: the compose specification's JSON schema as check-jsonschema vendors it, the
Kubernetes OpenAPI schemas kubernetes-validate ships), and every image, command, option and
environment variable they name exists in this project."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

from .manifests import (
    COMPOSE_FILE,
    CREDENTIAL_ROLES,
    DEPLOY,
    DOCKERFILES,
    KUBERNETES_DIR,
    PROJECT_IMAGES,
    ROOT,
    Process,
    check_heddle_argv,
    compose_processes,
    expanded_names,
    heddle_env_names,
    kubernetes_documents,
    kubernetes_processes,
    kustomize_tags,
    load_compose,
    project_version,
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


def test_every_process_talks_to_nats_with_its_own_role_credential() -> None:
    for process in _heddle_processes():
        if process.argv[1:3] == ["db", "upgrade"]:
            continue  # the migration touches only PostgreSQL
        creds = process.env.get("HEDDLE_NATS_CREDS", "")
        assert Path(creds).name in {f"{role}.creds" for role in CREDENTIAL_ROLES}, process.where
        role = Path(creds).stem
        expected = {"up": "control", "db": "projector", "worker": "worker", "tools": "executor"}
        assert role == expected[process.argv[1]], f"{process.where} uses {role}.creds"


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


def test_compose_mounts_the_auth_output_by_its_file_names() -> None:
    text = COMPOSE_FILE.read_text()
    nats_conf = (DEPLOY / "compose" / "nats" / "nats.conf").read_text()
    assert "include ./auth/nats-auth.conf" in nats_conf
    for service in load_compose()["services"].values():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.endswith(".creds"):
                assert Path(source).stem in CREDENTIAL_ROLES
    assert "heddle deploy auth --out" in text


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
    assert values["config"]["merge"]["00$include"].endswith("/nats-auth.conf")
    config_env = next(d["data"] for _, d in kubernetes_documents() if d["kind"] == "ConfigMap")
    assert config_env["HEDDLE_NATS_URL"] == "nats://heddle-nats:4222"  # the release's service
