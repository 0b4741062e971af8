"""Heddle's router models against the real ``sglang-router`` (the router slime launches).

Stub workers on loopback hold requests open, so the test sets the in-flight load the router
sees; a replay shaped like a slime GRPO run (groups sharing a prompt behind a common system
prompt, multi-turn trajectories whose requests extend, a burst that piles onto one worker) goes
through the real router and through Heddle's model, request by request, and the picks must
agree. Worker identity is mapped through the stubs' names; for policies that break load ties
by the router's own worker order (its registry map, fixed per process), that order is read off
the first requests (each to the least-loaded, first-in-order worker) and is the model's worker
numbering. The consistent-hash ring is modelled on the workers' URLs, as the router hashes them.
"""

from __future__ import annotations

import queue
import random
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

import pytest

from heddle.policy.placement.cache_aware import CacheAwareRouter
from heddle.policy.placement.routing import Router, RouteRequest, make_router

pytest.importorskip(
    "sglang_router.router", reason="sglang-router (the real router, a dev extra) is not installed"
)

from .router_harness import RouterClient, StubWorker, running_router

NUM_WORKERS = 4
MIN_AGREEMENT = 0.95
CACHE_THRESHOLD = 0.3  # the router's default, which the model shares
SYSTEM_PROMPT = "<|im_start|>system\nYou are a careful software agent; think, then act.<|im_end|>\n"


@dataclass(frozen=True)
class Send:
    rid: str
    text: str
    request: RouteRequest


@dataclass(frozen=True)
class Release:
    rids: tuple[str, ...]


Action = Send | Release


def _filler(rng: random.Random, n: int) -> str:
    return "".join(rng.choice("abcdefghij klmnopqrstuvwxyz") for _ in range(n))


def slime_like_run(seed: int = 0) -> list[Action]:
    """GRPO groups start together (a burst), then trajectories come back turn by turn."""
    rng = random.Random(seed)
    common = len(SYSTEM_PROMPT)
    texts: dict[str, str] = {}
    groups: dict[str, tuple[str, int]] = {}
    actions: list[Action] = []
    in_flight: list[str] = []
    count = 0

    def send(traj: str, text: str) -> None:
        nonlocal count
        rid = f"r{count}"
        count += 1
        group, prompt = groups[traj]
        texts[traj] = text
        actions.append(Send(rid, text, RouteRequest(traj, group, prompt, len(text), common)))
        in_flight.append(rid)

    traj_of: dict[str, str] = {}
    for g in range(10):
        # Each group's and each trajectory's text starts with its own character, so texts
        # diverge exactly where the model says (sampled outputs share no prefix).
        prompt = SYSTEM_PROMPT + chr(0x4E00 + g) + _filler(rng, 99)
        for k in range(8):
            traj = f"session-{g}-{k}"
            groups[traj] = (f"g{g}", len(prompt))
            send(traj, prompt)
            traj_of[in_flight[-1]] = traj
    finished: set[str] = set()
    for round_index in range(5):
        done = rng.sample(in_flight, k=max(1, int(0.4 * len(in_flight))))
        actions.append(Release(tuple(done)))
        for rid in done:
            in_flight.remove(rid)
        for rid in done:
            traj = traj_of[rid]
            if round_index >= 1 and rng.random() < 0.2:
                finished.add(traj)
                continue
            own = "" if len(texts[traj]) > groups[traj][1] else chr(0x5000 + len(traj_of))
            send(traj, texts[traj] + own + _filler(rng, rng.randint(30, 600)))
            traj_of[in_flight[-1]] = traj
    actions.append(Release(tuple(in_flight)))
    return actions


@dataclass
class Tally:
    """Agreement of our picks with the router's, by decision path."""

    agreed: int = 0
    total: int = 0
    paths: Counter[str] = field(default_factory=Counter)
    disagreements: list[str] = field(default_factory=list)
    disagreeing_rates: list[float] = field(default_factory=list)

    def add(self, rid: str, ours: int, theirs: int, path: str, rate: float) -> None:
        self.total += 1
        self.agreed += ours == theirs
        self.paths[path] += 1
        if ours != theirs:
            self.disagreeing_rates.append(rate)
            self.disagreements.append(
                f"{rid} ({path}, match {rate:.3f}): ours w{ours}, router w{theirs}"
            )

    @property
    def rate(self) -> float:
        return self.agreed / max(1, self.total)

    def report(self, policy: str) -> str:
        return (
            f"{policy}: {self.agreed}/{self.total} agree ({self.rate:.1%}); paths "
            f"{dict(self.paths)}; disagreements {self.disagreements}"
        )


@dataclass
class Stubs:
    arrivals: queue.Queue[tuple[str, str]]
    workers: list[StubWorker]


@pytest.fixture
def stubs() -> Iterator[Stubs]:
    arrivals: queue.Queue[tuple[str, str]] = queue.Queue()
    workers: list[StubWorker] = []
    try:
        for i in range(NUM_WORKERS):
            workers.append(StubWorker(f"w{i}", arrivals))
        yield Stubs(arrivals, workers)
    finally:
        for worker in workers:
            worker.close()


class Replay:
    """Drives one router and one model through the actions, tracking the in-flight loads."""

    def __init__(self, client: RouterClient, stubs: Stubs, *, tracks_load: bool) -> None:
        self.client = client
        self.tracks_load = tracks_load  # the router counts in-flight only for cache_aware
        self.as_ids = False
        self.url_of = {worker.name: worker.url for worker in stubs.workers}
        self.order: list[str] = []  # worker names in model index order
        self.loads: Counter[str] = Counter()
        self.worker_of: dict[str, str] = {}

    def send(self, rid: str, text: str, routing_key: str | None = None) -> str:
        name = self.client.send(rid, text, routing_key, as_ids=self.as_ids)
        self.worker_of[rid] = name
        self.loads[name] += 1
        return name

    def release(self, rids: tuple[str, ...] | list[str]) -> None:
        self.client.release(rids)
        for rid in rids:
            self.loads[self.worker_of.pop(rid)] -= 1
        if self.tracks_load:
            self.client.wait_loads({self.url_of[n]: self.loads[n] for n in self.url_of})

    def load_vector(self) -> list[float]:
        return [float(self.loads[name]) for name in self.order]

    def learn_order(self) -> list[RouteRequest]:
        """Fresh texts with distinct first characters match nothing: each goes to the least
        loaded worker, the first in the router's order on ties, so these picks are the order."""
        requests = []
        for k in range(NUM_WORKERS):
            text = chr(0x2600 + k) + "calibration"
            self.order.append(self.send(f"cal{k}", text))
            requests.append(RouteRequest(f"cal{k}", f"cal{k}", len(text), len(text)))
        assert sorted(self.order) == sorted(self.url_of), f"order {self.order}"
        return requests


def _replay(
    model: Router, replay: Replay, actions: list[Action], keyed: bool, follow: bool
) -> Tally:
    """Route every request through both. ``follow``: the model's tree records where the
    router actually sent each request, so one disagreement does not cascade into later ones
    (without it, the model runs on its own picks: the stricter test)."""
    tally = Tally()
    for action in actions:
        if isinstance(action, Release):
            replay.release(action.rids)
            continue
        loads = replay.load_vector()
        key = action.request.traj_id if keyed else None
        if not isinstance(model, CacheAwareRouter):
            ours = model.route(action.request, loads)
            theirs = replay.order.index(replay.send(action.rid, action.text, key))
            tally.add(action.rid, ours, theirs, "-", 0.0)
            continue
        decision = model.decide(action.request, loads)
        theirs = replay.order.index(replay.send(action.rid, action.text, key))
        model.record(action.request, replace(decision, worker=theirs) if follow else decision)
        tally.add(action.rid, decision.worker, theirs, decision.path, decision.match_rate)
    return tally


def _run(
    policy: str,
    router_policy: str,
    stubs: Stubs,
    *,
    learn: bool,
    keyed: bool = False,
    as_ids: bool = False,
    follow: bool = False,
) -> Tally:
    actions = slime_like_run()
    with running_router(router_policy, stubs.workers) as url:
        client = RouterClient(url, stubs.workers, stubs.arrivals)
        replay = Replay(client, stubs, tracks_load=router_policy == "cache_aware")
        replay.as_ids = as_ids
        name_of = {worker.url: worker.name for worker in stubs.workers}
        listed = [name_of[u] for u in client.listed_urls()]
        if learn:
            calibration = replay.learn_order()
            # The order requests reveal is the order the router lists its workers in: the
            # same registry map, iterated the same way.
            assert replay.order == listed, f"picked in order {replay.order}, listed {listed}"
        else:
            replay.order, calibration = listed, []
        names = [replay.url_of[name] for name in replay.order]
        model = make_router(policy, NUM_WORKERS, random.Random(0), worker_names=names)
        for k, request in enumerate(calibration):
            # The model sees the same first requests, at the loads they met: they are where
            # its tie rule (the first least-loaded worker) must name the k-th worker.
            loads = [1.0] * k + [0.0] * (NUM_WORKERS - k)
            assert model.route(request, loads) == k
        replay.release([f"cal{k}" for k in range(len(calibration))])
        return _replay(model, replay, actions, keyed, follow)


def test_cache_aware_agrees_with_the_router(stubs: Stubs) -> None:
    tally = _run("cache_aware", "cache_aware", stubs, learn=True)
    print(tally.report("cache_aware"))
    # The replay must exercise both of the policy's paths, or agreement says little.
    assert tally.paths["load_balance"] >= 10, tally.report("cache_aware")
    assert tally.paths["prefix_match"] >= 10, tally.report("cache_aware")
    assert tally.paths["low_match"] >= 5, tally.report("cache_aware")
    assert tally.rate >= MIN_AGREEMENT, tally.report("cache_aware")


def test_consistent_hash_agrees_with_the_router(stubs: Stubs) -> None:
    tally = _run("consistent_hash", "consistent_hashing", stubs, learn=False, keyed=True)
    print(tally.report("consistent_hash"))
    assert tally.rate >= MIN_AGREEMENT, tally.report("consistent_hash")


def test_round_robin_agrees_with_the_router(stubs: Stubs) -> None:
    tally = _run("round_robin", "round_robin", stubs, learn=True)
    print(tally.report("round_robin"))
    assert tally.rate >= MIN_AGREEMENT, tally.report("round_robin")


def test_cache_aware_agrees_when_requests_carry_input_ids(stubs: Stubs) -> None:
    """slime sends ``input_ids``; the router matches their space-joined decimal text, so its
    characters per token vary, and texts that diverge at ids sharing leading digits match a few
    characters further, into another trajectory's node. The model counts tokens and lets texts
    diverge exactly: this measures what that costs, with the model's tree following the
    router's actual picks so each disagreement is counted once."""
    tally = _run("cache_aware", "cache_aware", stubs, learn=True, as_ids=True, follow=True)
    report = tally.report("cache_aware (input_ids)")
    print(report)
    assert tally.paths["load_balance"] >= 10, report
    assert tally.rate >= 0.85, report
