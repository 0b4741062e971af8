"""Worker agents as Ray actors on a local Ray (CPUs only, sim engine): a rollout runs on them,
one actor is killed mid-rollout and replaced, and the rollout completes with nothing lost and
nothing delivered twice (the replacement, same worker id, takes the killed one's commands back
or the control plane re-places them: either way every trajectory completes once). Skipped where
Ray is not installed (``pip install -e '.[ray]'``), except under ``HEDDLE_REQUIRE_RAY=1``
(.ci/run sets it): then missing Ray fails."""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from holdings import holdings

from heddle.client import HeddleClient
from heddle.config import Settings
from heddle.controlplane import ControlPlaneConfig, PredictorConfig
from heddle.errors import UserError
from heddle.rollout.deployment import LocalDeployment
from heddle.rollout.driver import RunHooks, RunOptions, run_rollout
from heddle.rollout.progress import ProgressState
from heddle.rollout.submission import RolloutPlan, trace_specs
from heddle.rollout.submit import CLI_TRAINER
from heddle.workers.agent.config import WorkerConfig
from heddle.workers.ray_workers import ActorResources, RayWorkerPool, resources_for
from heddle.workloads import generate

try:
    import ray
except ImportError:
    if os.environ.get("HEDDLE_REQUIRE_RAY") == "1":
        raise
    pytest.skip("Ray is not installed (pip install -e '.[ray]')", allow_module_level=True)

pytestmark = pytest.mark.timeout(240)

TIME_SCALE = 300.0
"""Slow enough that the trace's long trajectory (36 steps, a few hundred model seconds) spans
several progress reports (one every ~150 model seconds): at 1000x it could start and end
between two, leaving nothing to kill."""
NUM_TRAJECTORIES = 8
ENGINE_OPTIONS = {"time_scale": str(TIME_SCALE), "model": "qwen3-8b"}


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=80 << 20)
    yield
    ray.shutdown()


TRACE = generate("search", NUM_TRAJECTORIES, seed=4)


def test_placement_groups_are_sized_to_the_tensor_parallel_degree() -> None:
    assert resources_for("sglang", {"tp": "4"}, 2.0) == ActorResources(2.0, 4)
    assert resources_for("sglang", {}, 1.0).bundle() == {"CPU": 1.0, "GPU": 1.0}
    assert resources_for("sim", {"tp": "2"}, 0.5).bundle() == {"CPU": 0.5}
    with pytest.raises(UserError, match="tp"):
        resources_for("sglang", {"tp": "0"}, 1.0)
    with pytest.raises(UserError, match="NATS"):
        RayWorkerPool(Settings(), [], "sim", {}, ActorResources())


async def test_a_killed_actor_is_replaced_and_the_rollout_loses_nothing(
    local_ray: None, nats_url: str, tmp_path: Path
) -> None:
    settings = Settings(nats_url=nats_url, data_dir=tmp_path / "data")
    configs = [
        WorkerConfig(worker_id=f"ray{i}", engine_name="sim", heartbeat_s=0.5, telemetry_s=0.1)
        for i in (0, 1)
    ]
    restarts: list[tuple[str, int]] = []
    resources = resources_for("sim", ENGINE_OPTIONS, 1.0)
    pool = RayWorkerPool(
        settings,
        configs,
        "sim",
        ENGINE_OPTIONS,
        resources,
        on_restart=lambda *r: restarts.append(r),
    )
    await pool.start()
    stop = asyncio.Event()
    supervisor = asyncio.create_task(pool.supervise(stop))
    received: list[str] = []
    killed: list[tuple[str, int, int]] = []

    async def collect(rollout_id: str, deployment: LocalDeployment) -> None:
        async def completions() -> None:
            # run_rollout submits as the command line does: that trainer owns the rollout
            async with HeddleClient(settings, trainer=CLI_TRAINER) as client:
                async for trajectory in client.completions(rollout_id):
                    received.append(trajectory.traj_id)

        collecting.append(asyncio.create_task(completions()))

    async def kill_one(state: ProgressState, deployment: LocalDeployment) -> None:
        """At the first report where a worker holds a trajectory with 3+ generations to go, kill
        the actor whose worker holds the most such (waiting for completions first can leave
        nothing to kill)."""
        if killed:
            return
        held = await holdings(settings, state.rollout_id, TRACE, min_steps_left=3)
        if not held:
            return
        worker_id, num_held = held.most_common(1)[0]
        actor = pool.actor(worker_id)
        killed.append((worker_id, await actor.pid.remote(), num_held))
        ray.kill(actor)

    collecting: list[asyncio.Task[None]] = []
    options = RunOptions(
        plan=RolloutPlan("heddle", trace_specs(TRACE), "workload:search", TIME_SCALE),
        pool=None,  # the Ray actors are the workers
        control_plane=ControlPlaneConfig(
            cost_model="qwen3-8b", predictor=PredictorConfig("noisy_oracle"), worker_timeout_s=8.0
        ),
        timeout_s=150,
        show_progress=False,
    )
    try:
        hooks = RunHooks(on_submitted=collect, on_progress=kill_one)
        result = await run_rollout(settings, options, hooks)
        await asyncio.wait_for(collecting[0], 60)
        (worker_id, killed_pid, num_held), *_ = killed
        replacement_pid = await pool.actor(worker_id).pid.remote()
    finally:
        stop.set()
        await supervisor
        await pool.stop()
    assert len(killed) == 1 and replacement_pid != killed_pid
    assert restarts == [(worker_id, 1)]
    summary = result.summary
    assert summary.num_completed == NUM_TRAJECTORIES and summary.num_failed == 0
    assert num_held > 0, "the killed actor held unfinished trajectories"
    assert sorted(Counter(received).values()) == [1] * NUM_TRAJECTORIES, "each exactly once"


def test_the_cli_refuses_an_embedded_nats_and_per_process_options(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    import heddle.cli  # noqa: F401  (registers the commands)
    from heddle.cli.apps import app

    runner = CliRunner()
    embedded = runner.invoke(
        app, ["--data-dir", str(tmp_path), "workers", "run", "1", "--ray", "local"]
    )
    assert "NATS server the Ray nodes can reach" in str(embedded.exception)
    both = runner.invoke(app, ["workers", "run", "1", "--ray", "local", "--processes"])
    assert "drop --processes" in str(both.exception)
