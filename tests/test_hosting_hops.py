"""How many hosting layers a live delivery crosses to reach a decider: at most two modules
outside ``heddle/control`` (the bus's runner, then the host), traced on a real delivery through
a real JetStream durable. A hosting layer added between them (a fan-out, a per-slot shell, a
second runner) makes this fail. Before issue 38 there were four: ``consumers/host.py``,
``consumers/pipeline.py``, ``consumers/fanout.py``, ``consumers/slots.py``."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from pathlib import Path

import events_factory as b
import pytest
from waiting import until

import heddle
from heddle.bus import Bus
from heddle.control import ControlOptions, Output
from heddle.control.bundle_router import PLACEMENT, BundleRouter
from heddle.controlplane.host import DeciderConsumer
from heddle.controlplane.plane_config import HostConfig
from heddle.events import Event, RolloutSubmitted, TrajectorySpec, TrajectorySubmitted
from heddle.policy.prediction.online import OnlinePredictor
from heddle.sim import SimConfig

MAX_HOSTING_MODULES = 2
PACKAGE = Path(heddle.__file__).parent
CONTROL = PACKAGE / "control"
BUS = PACKAGE / "bus"


def hosting_modules() -> list[str]:
    """The hosting layers on the call stack from the bus's runner (where a delivery enters) to
    here, outermost first: each object of ``heddle`` outside ``heddle/control`` whose methods
    are on the stack (named by its class's module: a runner's base class is the same layer),
    and each module whose functions are."""
    stack = list(reversed(inspect.stack()))  # outermost first
    entry = next(i for i, info in enumerate(stack) if Path(info.filename).is_relative_to(BUS))
    layers: dict[object, str] = {}
    for info in stack[entry:]:
        path = Path(info.filename)
        if not path.is_relative_to(PACKAGE) or path.is_relative_to(CONTROL):
            continue
        owner = info.frame.f_locals.get("self")
        if owner is not None and type(owner).__module__.startswith("heddle."):
            key: object = id(owner)
            module = type(owner).__module__.replace(".", "/") + ".py"
        else:
            key = module = str(path.relative_to(PACKAGE.parent))
        layers.setdefault(key, module)
    return list(dict.fromkeys(layers.values()))


Decide = Callable[[object, Event], list[Output]]


def recording(calls: list[tuple[str, list[str]]], name: str, decide: Decide) -> Decide:
    """``decide`` noting, when a live delivery (not a replay) called it, the hosting modules."""

    def traced(self: object, event: Event) -> list[Output]:
        if any(Path(info.filename).is_relative_to(BUS) for info in inspect.stack()):
            calls.append((name, hosting_modules()))
        return decide(self, event)

    return traced


def opened(rollout_id: str) -> list[Event]:
    spec = TrajectorySpec(group_id="g", index=0, environment="trace", prompt_token_ids=[1])
    return [
        RolloutSubmitted(
            event_id=f"{rollout_id}:s", rollout_id=rollout_id, occurred_at=1.0, policy="heddle",
            num_trajectories=1,
        ),
        TrajectorySubmitted(
            event_id=f"{rollout_id}:t0:s", rollout_id=rollout_id, occurred_at=1.0, traj_id="t0",
            spec=spec,
        ),
    ]  # fmt: skip


async def test_a_delivery_reaches_every_decider_through_at_most_two_hosting_modules(
    bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = SimConfig(model="qwen3-8b")
    options = ControlOptions(cost_for_tp=config.cost_for_tp, predictor=OnlinePredictor())
    router = BundleRouter(options, first=(PLACEMENT,))
    calls: list[tuple[str, list[str]]] = []
    events = [b.worker("w0", at=0.5), *opened("r1")]
    kinds = {type(event) for event in events}
    reached: set[str] = set()
    for decider in router.bundle("heddle").deciders:  # every kind a bundle holds
        cls = type(decider)
        monkeypatch.setattr(cls, "decide", recording(calls, decider.name, cls.decide))
        if decider.handles & kinds:
            reached.add(decider.name)
    router.bundles.clear()  # built again on the rollout's submission, with the traced class
    consumer = DeciderConsumer(bus, router.stages, HostConfig(fetch_wait_s=0.2), first=(PLACEMENT,))
    running = asyncio.create_task(consumer.run())
    try:
        await until(lambda: _is_live(consumer))
        await bus.publish_many(events)

        async def all_reached() -> bool:
            return {name for name, _ in calls} >= reached

        await until(all_reached, "every decider of these events reached by a live delivery")
    finally:
        consumer.stop()
        await running
    paths = {tuple(modules) for _, modules in calls}
    assert paths == {("heddle/bus/pipelined_runner.py", "heddle/controlplane/host.py")}
    assert all(len(modules) <= MAX_HOSTING_MODULES for modules in paths)


async def _is_live(consumer: DeciderConsumer) -> bool:
    return consumer.stats.is_live
