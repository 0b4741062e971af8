"""The SGLang router's cache_aware policy: the span model against a literal radix tree."""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace

from hypothesis import given, settings
from hypothesis import strategies as st

from heddle.policy.placement.cache_aware import CacheAwareRouter, PrefixModel
from heddle.policy.placement.route_types import RouteRequest

INF = float("inf")
Symbol = tuple[str, str, int]


@dataclass
class _Node:
    text: tuple[Symbol, ...]
    last_tenant: int | None
    children: dict[Symbol, _Node] = field(default_factory=dict)


class RadixTree:
    """Reference: the gateway's tree (``smg`` ``src/policies/tree.rs``) over symbol strings.

    A node keeps the tenant that created it; a split's upper half keeps the original's; a match
    answers the tenant of the node where it ends (a partial match ends in the node it enters).
    """

    def __init__(self) -> None:
        self.root = _Node((), None)

    def insert(self, text: tuple[Symbol, ...], tenant: int) -> None:
        node, rest = self.root, text
        while rest:
            child = node.children.get(rest[0])
            if child is None:
                node.children[rest[0]] = _Node(rest, tenant)
                return
            shared = _shared(rest, child.text)
            if shared < len(child.text):
                upper = _Node(child.text[:shared], child.last_tenant)
                child.text = child.text[shared:]
                upper.children[child.text[0]] = child
                node.children[rest[0]] = upper
                child = upper
            node, rest = child, rest[shared:]

    def match(self, text: tuple[Symbol, ...]) -> tuple[int, int | None]:
        node, rest, matched = self.root, text, 0
        while rest:
            child = node.children.get(rest[0])
            if child is None:
                break
            shared = _shared(rest, child.text)
            matched, node = matched + shared, child
            if shared < len(child.text):
                break
            rest = rest[shared:]
        return matched, node.last_tenant


def _shared(a: tuple[Symbol, ...], b: tuple[Symbol, ...]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def text_of(request: RouteRequest) -> tuple[Symbol, ...]:
    common, prompt = request.num_common_prefix_tokens, request.num_prompt_tokens
    return tuple(
        ("c", "", i)
        if i < common
        else ("g", request.group_key, i)
        if i < prompt
        else ("o", request.traj_id, i)
        for i in range(request.num_text_tokens)
    )


@st.composite
def request_streams(draw: st.DrawFn) -> list[tuple[RouteRequest, int]]:
    """Interleaved multi-turn trajectories in groups, each request with a worker to insert."""
    common = draw(st.integers(0, 3))
    num_groups = draw(st.integers(1, 3))
    prompts = [common + draw(st.integers(0, 4)) for _ in range(num_groups)]
    lengths: dict[str, int] = {}
    stream = []
    for _ in range(draw(st.integers(1, 25))):
        group = draw(st.integers(0, num_groups - 1))
        traj = f"t{group}.{draw(st.integers(0, 2))}"
        lengths[traj] = max(lengths.get(traj, prompts[group]), prompts[group]) + draw(
            st.integers(0, 5)
        )
        request = RouteRequest(traj, f"g{group}", prompts[group], lengths[traj], common)
        stream.append((request, draw(st.integers(0, 3))))
    return stream


@settings(max_examples=300)
@given(stream=request_streams())
def test_span_model_matches_the_radix_tree(stream: list[tuple[RouteRequest, int]]) -> None:
    model, tree = PrefixModel(), RadixTree()
    for request, worker in stream:
        matched, creator = model.match(request)
        ref_matched, ref_creator = tree.match(text_of(request))
        assert matched == ref_matched
        if matched > 0:
            assert creator == ref_creator
        model.insert(request, worker)
        tree.insert(text_of(request), worker)


def _router(num_workers: int = 3) -> CacheAwareRouter:
    return CacheAwareRouter([f"w{i}" for i in range(num_workers)], random.Random(0))


def test_a_group_follows_its_first_member_until_the_load_is_imbalanced() -> None:
    router = _router()
    loads = [0.0, 0.0, 0.0]
    picks = []
    for member in range(70):
        worker = router.route(RouteRequest(f"t{member}", "g", 1000, 1000), loads)
        picks.append(worker)
        loads[worker] += 1
    # The whole prompt matches: all to worker 0 until 65 - 0 > 64 and 65 > 0 * 1.5.
    assert picks[:65] == [0] * 65
    assert picks[65] == 1 and picks[66] == 2


def test_a_low_match_goes_to_the_least_loaded_worker() -> None:
    router = _router()
    router.route(RouteRequest("a", "g", 100, 100), [0.0, 0.0, 0.0])
    # Same group, but its own 300 tokens leave the match at 100 / 400 = 0.25 <= 0.3.
    assert router.route(RouteRequest("b", "g", 100, 400), [1.0, 2.0, 0.0]) == 2
    # 100 / 300 > 0.3: back to the prompt's creator despite its load.
    assert router.route(RouteRequest("c", "g", 100, 300), [5.0, 2.0, 0.0]) == 0


def test_a_trajectory_follows_its_latest_stretch() -> None:
    router = _router()
    assert router.route(RouteRequest("a", "g", 100, 100), [0.0, 0.0, 0.0]) == 0
    # Imbalanced (abs threshold 1 here is reached by hand): the next turn moves to worker 2.
    strict = CacheAwareRouter(["w0", "w1", "w2"], random.Random(0), balance_abs_threshold=1)
    strict.route(RouteRequest("a", "g", 100, 100), [0.0, 0.0, 0.0])
    assert strict.route(RouteRequest("a", "g", 100, 200), [9.0, 9.0, 0.0]) == 2
    # Balanced again: the match ends in the stretch worker 2 created, so it stays there.
    assert strict.route(RouteRequest("a", "g", 100, 250), [0.0, 0.0, 0.0]) == 2


def test_a_shared_system_prompt_draws_new_groups_to_its_creator() -> None:
    router = _router()
    router.route(RouteRequest("a", "g1", 1000, 1000, 400), [0.0, 0.0, 0.0])
    # A new group matches only the 400 common tokens: 0.4 > 0.3, so to worker 0 too.
    assert router.route(RouteRequest("b", "g2", 1000, 1000, 400), [3.0, 0.0, 0.0]) == 0
    # Without the shared prefix the new group goes to the least-loaded worker.
    fresh = _router()
    fresh.route(RouteRequest("a", "g1", 1000, 1000), [0.0, 0.0, 0.0])
    assert fresh.route(RouteRequest("b", "g2", 1000, 1000), [3.0, 0.0, 0.0]) == 1


def test_down_workers_are_ignored() -> None:
    router = _router()
    router.route(RouteRequest("a", "g", 100, 100), [0.0, 0.0, 0.0])
    # Worker 0 (the match) is down: the first live worker, and worker 0 is forgotten.
    assert router.route(RouteRequest("b", "g", 100, 100), [INF, 3.0, 1.0]) == 1
    assert router.route(RouteRequest("c", "g", 100, 100), [0.0, 3.0, 1.0]) == 0
    # Worker 0 is down again: its infinite load is no imbalance (which would send the request
    # to the least-loaded worker, 2); the match names worker 0, so the first live one answers.
    assert router.route(RouteRequest("c", "g", 100, 150), [INF, 1.0, 0.0]) == 1


def test_decide_changes_nothing_and_record_applies_it() -> None:
    router = _router()
    first = RouteRequest("a", "g", 100, 100)
    decision = router.decide(first, [0.0, 0.0, 0.0])
    assert (decision.worker, decision.path, decision.match_rate) == (0, "low_match", 0.0)
    assert router.decide(first, [0.0, 0.0, 0.0]) == decision  # nothing recorded yet
    router.record(first, replace(decision, worker=2))  # the request went to worker 2
    follow = router.decide(RouteRequest("b", "g", 100, 100), [0.0, 0.0, 0.0])
    assert (follow.worker, follow.path, follow.match_rate) == (2, "prefix_match", 1.0)
    busy = router.decide(RouteRequest("b", "g", 100, 100), [0.0, 0.0, 65.0])
    assert (busy.worker, busy.path) == (0, "load_balance")
