"""A live ``--policy slime`` over SGLang engines routes through the real ``sglang-router``, as
slime does: the rollout launches the router in front of the servers (protocol doubles here),
every generation goes through it (the router's own count equals what the servers saw), the
rollout completes and the router is stopped."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from heddle.config import Settings
from heddle.controlplane import ControlPlaneConfig, PredictorConfig
from heddle.errors import UserError
from heddle.rollout import router as router_module
from heddle.rollout.deployment import WorkerPool
from heddle.rollout.driver import RunOptions, run_rollout
from heddle.rollout.router import RouterSpec, routed_policy
from heddle.rollout.submission import RolloutPlan, trace_specs
from heddle.workloads import generate

pytest.importorskip("sglang_router.launch_router", reason="sglang-router (a dev extra) is missing")

sys.path.insert(0, str(Path(__file__).parents[1] / "workers" / "engines"))
from sglang_double import DoubleConfig, SglangDouble

pytestmark = pytest.mark.timeout(240)
NUM_TRAJECTORIES = 6


@pytest.fixture
def doubles() -> Iterator[list[SglangDouble]]:
    config = DoubleConfig(
        tokens_per_s=2000.0, max_running=16, context_length=65536, vocab_size=256
    )  # token ids the byte tokenizer decodes
    servers = [SglangDouble(config).start() for _ in range(2)]
    yield servers
    for server in servers:
        server.stop()


def options(policy: str, urls: list[str]) -> RunOptions:
    trace = generate("search", NUM_TRAJECTORIES, seed=1)
    return RunOptions(
        # SGLang engines run in real time: the rollout takes the deployment's time scale, 1
        plan=RolloutPlan(policy, trace_specs(trace), "workload:search"),
        pool=WorkerPool(len(urls), "sglang", {"url": ",".join(urls)}, heartbeat_s=0.5),
        control_plane=ControlPlaneConfig(
            cost_model="qwen3-8b", predictor=PredictorConfig("noisy_oracle")
        ),
        timeout_s=180,
        show_progress=False,
    )


@pytest.mark.parametrize(
    ("policy", "router_policy"),
    [("slime", "cache_aware"), ("slime-consistent-hash", "consistent_hashing")],
)
async def test_a_live_slime_rollout_routes_through_the_launched_router(
    settings: Settings, doubles: list[SglangDouble], policy: str, router_policy: str
) -> None:
    result = await run_rollout(settings, options(policy, [d.url for d in doubles]))
    summary = result.summary
    assert summary.is_finished and summary.num_completed == NUM_TRAJECTORIES
    router = result.router
    assert router is not None and router.policy == router_policy
    bodies = [body for double in doubles for body in double.bodies]
    num_generations = len(bodies)
    # Trajectories move between worker agents (the placement model's picks), but nobody warms
    # a server up: the router, not the agent, picks the server of the next step.
    assert all(body["sampling_params"]["max_new_tokens"] > 0 for body in bodies)
    assert num_generations >= sum(len(t.steps) for t in generate("search", NUM_TRAJECTORIES, 1))
    assert router.num_routed_requests == num_generations  # every one went through the router
    assert summary.warmed_up_tokens == 0
    assert result.to_json()["router"]["num_routed_requests"] == num_generations
    keys = [(key, index) for index, d in enumerate(doubles) for key in d.routing_keys]
    assert all(key for key, _ in keys)  # every request names its trajectory (the session)
    if router_policy == "consistent_hashing":  # a session always hashes to the same server
        assert len({key for key, _ in keys}) == NUM_TRAJECTORIES == len(set(keys))


def test_only_slime_over_sglang_routes_through_the_real_router() -> None:
    assert routed_policy("slime", "sglang") == "cache_aware"
    assert routed_policy("slime", "sim") is None  # the simulator's model routes
    assert routed_policy("heddle", "sglang") is None
    assert routed_policy("slime-consistent-hash", "sglang") == "consistent_hashing"
    assert routed_policy("slime-least-inflight", "sglang") is None  # slime's own router
    spec = RouterSpec("cache_aware", ("http://a:1", "http://b:2"), 30000, 30001, "py")
    assert spec.command()[:8] == (
        "py", "-m", "sglang_router.launch_router", "--policy", "cache_aware",
        "--worker-urls", "http://a:1", "http://b:2",
    )  # fmt: skip
    hashing = RouterSpec("consistent_hashing", ("http://a:1",), 30000, 30001, "py").command()
    assert hashing[1] == "-c" and hashing[3:6] == (
        "consistent_hashing",
        "--worker-urls",
        "http://a:1",
    )


def test_slime_over_sglang_needs_one_server_per_worker() -> None:
    with pytest.raises(ValueError, match="one sglang --url per worker"):
        WorkerPool(3, "sglang", {"url": "http://a:1,http://b:2"})
    with pytest.raises(ValueError, match="one sglang --url per worker"):
        WorkerPool(3, "sglang", {"url": "http://a:1"}).server_urls()
    pool = WorkerPool(2, "sglang", {"url": "http://a:1,http://b:2"})
    assert pool.options_for(1)["url"] == "http://b:2"
    launched = WorkerPool(2, "sglang", {"launch": "true", "model": "m"}).with_server_ports()
    ports = [launched.options_for(i)["port"] for i in range(2)]
    assert launched.server_urls() == tuple(f"http://127.0.0.1:{port}" for port in ports)


def test_a_missing_router_package_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(router_module.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(UserError, match="pip install 'sglang-router"):
        router_module.require_router_package()
