"""System bundles: Heddle, its ablations and the baselines, as one registry shared by the
simulator and live runs (``RolloutSubmitted.policy`` names one).

A bundle fixes a system's own choices: the priorities it sends
(``heddle.policy.scheduling.priority``; a preemptive policy lets the engines preempt), the placement
(``presorted`` or a ``heddle.policy.placement.routing`` router), whether migrations run, KV
admission in the control plane and the resource plan (``annealed`` TP degrees or homogeneous). How
the engines behave (prefix eviction, what preemption does to KV, whether KV moves on migration) is
not a system's choice: it is the comparison's engine model (``heddle.policy.engine_models``), the
same for every bundle. Baselines follow the code of the systems they name; they are never tuned
down, and a homogeneous degree of 0 gives each the best homogeneous TP for the workload.

- ``heddle``: progressive prediction + PPS with preemption (paper s.4), presorted placement with
  migration (s.5) plus re-balancing moves in tool gaps (``heddle.policy.placement.rebalance``,
  ours), annealed heterogeneous TP (s.6), and KV admission in the control plane: a trajectory starts
  only when its worker's projected KV has room for it (``heddle.control.placement.kv_admission``),
  so engines do not thrash when a rollout's contexts outgrow the cluster's KV.
- ``heddle-no-admission``: heddle that starts every trajectory at once, leaving KV pressure to
  the engines (which then evict and re-prefill).
- ``heddle-static-cap``: heddle with KV admission replaced by the static cap on running
  trajectories a baseline gets (slime's semaphore: trajectories start in plan order while fewer
  than the cap run), chosen on the history as a baseline's is
  (``heddle.sim.concurrency_caps``): predictive admission against a knob any baseline has
  (issue 36, item 5).
- ``heddle-no-sched``: FCFS at the trajectory level instead of PPS.
- ``heddle-no-place``: verl's cache-affinity router instead of presorted placement and migration.
- ``heddle-least-load``: a least-load router re-balancing every step instead of placement (the
  paper's Fig. 15 least-load baseline).
- ``heddle-no-rebalance``: migrations by predicted rank only (the paper's s.5.3 rule).
- ``heddle-no-resource``: homogeneous TP instead of the annealed plan.
- ``heddle-no-reshard``: heddle without tail re-sharding (``heddle.control.reshard``, ours, beyond
  the paper: as the rollout drains, a node's workers merge into one of a higher TP degree when
  the stragglers' predicted saving pays for the switch by a margin).
- ``verl``: ``volcengine/verl`` ``verl/experimental/agent_loop/agent_loop.py``:
  ``AsyncLLMServerManager._choose_server`` keeps an LRU map request id -> server (sticky
  sessions: every turn of a trajectory goes back for its prefix cache) and sends new sessions to
  the head of a least-requests heap (verl 0.9.1 moved it to ``verl/workers/rollout/router.py``,
  ``GlobalRequestLoadBalancer.acquire_server``: the same rule, ties at random); the SGLang/vLLM
  server queues each turn's request FCFS (step-centric: back of the queue every turn);
  homogeneous TP; no migration. Concurrency: the synchronous agent loop has no bound on running
  trajectories (0.9.1 ``AgentLoopWorker.generate_sequences`` gathers its whole chunk at once;
  ``rollout.max_num_seqs``, default 256, caps the engine's running requests, not trajectories),
  so its default is off; its fully asynchronous rollouter bounds the prompts in flight
  (``verl/experimental/fully_async_policy/fully_async_rollouter.py``: ``max_concurrent_samples``
  = ``async_training.concurrent_samples_per_replica``, default 16, times the replicas; a sample
  is a whole GRPO group), which the plan check may choose, or a cap of its own on the history
  (``heddle.sim.concurrency_caps``).
- ``slime``: the router slime launches (PyPI ``sglang-router`` 0.3.2, the SGLang model gateway,
  ``smg-project/smg``) with its default policy, ``cache_aware``
  (``heddle.policy.placement.cache_aware``: the least-loaded worker when in-flight loads are
  imbalanced by more than 64 and 1.5x, else the worker holding the longest prefix match over 30% of
  the request, else the least loaded; checked against the real router,
  ``tests/policy/test_router_agreement.py``), engine FCFS, homogeneous TP. Concurrency: slime
  generates each whole multi-turn sample under one semaphore (``THUDM/slime``
  ``slime/rollout/sglang_rollout.py``: ``generate_and_rm`` under ``state.semaphore``, which
  ``GenerateState`` sizes ``--sglang-server-concurrency`` times ``get_rollout_num_engines``);
  the flag defaults to 512 per engine (``slime/backends/sglang_utils/arguments.py``) and its
  docs advise 160 to stay within SGLang's CUDA-graph batch sizes
  (``docs/en/examples/qwen3-4B.md``); the plan check chooses among these, off, and caps of its
  own on the history (``heddle.sim.concurrency_caps``).
- ``slime-consistent-hash``: the same router with ``consistent_hashing`` on the session, as
  slime's docs advise for multi-turn (``docs/en/advanced/sglang-config.md``): blake3 of the key
  modulo the live workers, as the router does outside its IGW mode; slime's semaphore.
- ``slime-least-inflight``: slime's own ``SlimeRouter`` (``THUDM/slime``
  ``slime/router/router.py``, ``--use-slime-router``): every request to the worker with the fewest
  in-flight requests, no stickiness, so turns re-prefill wherever they land; slime's semaphore.
- ``thunderagent``: ThunderAgent (ICML 2026, arXiv 2602.13692; ``ThunderAgent-org/ThunderAgent``):
  program-aware scheduling in front of the engines: a program starts on the backend with the
  fewest active tokens that has room, stays there for its prefix cache, and under KV pressure
  whole programs are paused at tool boundaries and resumed by best-fit decreasing when room frees
  (``heddle.control.placement.program_gate``, each rule cited there); engine FCFS, homogeneous
  TP. It reports 1.5-3.6x over vLLM in serving and 1.8-3.9x in RL rollout; an independent
  re-measurement (``zetxqx/thunderagent-original-verification``, ``13-llm-d-router-sweep``)
  found it equal below the point where sessions x context exceed the KV pool and 1.2-1.6x past it.
- ``rr``: Heddle's placement and resources with step-centric round-robin scheduling.
- ``autellix``: Autellix (arXiv 2502.13965): program-level least attained service in multi-level
  queues with promotion of starved programs, preemptive (s.4;
  ``heddle.policy.scheduling.priority``), and locality-aware load balancing (s.5): a program whose
  context has grown past ``2048`` tokens stays on the engine holding its KV, shorter ones go to the
  least-loaded engine (the threshold is our reading of the paper: an assumption); homogeneous TP.
- ``fix-1`` / ``fix-8``: Heddle's scheduling and placement on homogeneous TP1 / TP8 (s.7.4).

Every system's plan is checked alike on the history (``heddle.sim.planning``): its TP plan, for
a bundle with a concurrency control (``ConcurrencyControl``) the cap, and for a bundle with KV
admission its admission setting (``heddle.sim.admission_choice``), so each system runs the
configuration its users would pick with the previous step in hand.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from heddle.control.resources import ResourceMode

PRESORTED = "presorted"
SystemKind = Literal["heddle", "ablation", "variant", "baseline"]
"""``heddle`` itself; an ``ablation`` (one Heddle mechanism replaced); a ``variant`` (heddle with
an option changed, or on fixed TP); a ``baseline`` (another system, run at its best)."""
AUTELLIX_LOCALITY_THRESHOLD_TOKENS = 2048


@dataclass(frozen=True, slots=True)
class ConcurrencyControl:
    """A baseline's own bound on the trajectories it runs at once
    (``heddle.control.placement.cap``), in the units its code counts."""

    per_group: bool
    """The unit is a GRPO group (verl's fully-async samples), else a trajectory (slime's)."""
    default_per_worker: int = 0
    """The code's default, per engine (0: no bound by default)."""
    documented_per_worker: int = 0
    """A setting its docs or other modes name, per engine (0: none)."""


SLIME_SEMAPHORE = ConcurrencyControl(
    per_group=False, default_per_worker=512, documented_per_worker=160
)
VERL_SAMPLES = ConcurrencyControl(per_group=True, default_per_worker=0, documented_per_worker=16)
STATIC_CAP = ConcurrencyControl(per_group=False)
"""A cap on running trajectories with no default of its own (``heddle-static-cap``)."""


@dataclass(frozen=True, slots=True)
class SystemSpec:
    name: str
    summary: str
    kind: SystemKind = "variant"
    priority: str = "pps"
    """A ``heddle.policy.scheduling.priority`` policy; its ``is_preemptive`` sets the engines'
    preemption."""
    placement: str = PRESORTED
    """``presorted`` or a ``heddle.policy.placement.routing`` router name."""
    migration: bool = True
    resources: ResourceMode = "annealed"
    tp_degree: int = 0
    """Homogeneous TP degree (0: the best homogeneous degree for the workload)."""
    locality_threshold_tokens: int | None = None
    preempts_losing_kv: bool = False
    """Whether its engines preempt where preemption drops the victim's KV (the ``sglang``
    engine model retracts it: what it generated is recomputed). Heddle's bundles do not: the
    recompute costs more than running the higher priority a step later (sweep cells of web
    agents under KV pressure: 1,783 s preempting, 735 s not; the best baseline 1,744 s);
    they still admit by priority. Baselines preempt as their own code does."""
    admission: bool = True
    """Presorted placement starts a trajectory only when a worker's projected KV has room for
    it (``heddle.control.placement.kv_admission``); routed placements (the baselines, and the
    ablations that replace placement) start everything at once."""
    rebalance: bool = True
    """Presorted placement with migration also moves a trajectory in its tool gap when that
    shortens its batch's finish (``heddle.policy.placement.rebalance``)."""
    reshard: bool = False
    """Tail re-sharding (``heddle.control.reshard``): as the rollout drains, merge a node's
    workers into one of a higher TP degree when the stragglers' predicted saving pays for the
    switch by a margin. Heddle and its ablations (but ``heddle-no-reshard``) run it; the
    baselines and the fixed-TP variants do not."""
    concurrency: ConcurrencyControl | None = None
    """A baseline's own cap on running trajectories (None: it has none)."""
    program_gate: bool = False
    """ThunderAgent's pause/resume of whole programs (``heddle.control.placement.program_gate``)
    in place of admission."""

    @property
    def uses_predictions(self) -> bool:
        return self.placement == PRESORTED or self.priority in ("pps", "spf")

    @property
    def admits(self) -> bool:
        """Whether this bundle's placement runs KV admission."""
        return self.admission and self.placement == PRESORTED


def _heddle(name: str, summary: str, **changes: object) -> SystemSpec:
    spec = SystemSpec(name=name, summary=summary, reshard=True)
    return replace(spec, **changes)  # type: ignore[arg-type]


def _baseline(name: str, summary: str, **changes: object) -> SystemSpec:
    base = SystemSpec(
        name=name,
        summary=summary,
        priority="round_robin",
        placement="cache_affinity",
        migration=False,
        resources="homogeneous",
        kind="baseline",
        preempts_losing_kv=True,
    )
    return replace(base, **changes)  # type: ignore[arg-type]


SYSTEMS: dict[str, SystemSpec] = {
    spec.name: spec
    for spec in (
        _heddle("heddle", "PPS + presorted placement with migration + annealed TP", kind="heddle"),
        _heddle(
            "heddle-no-sched", "heddle with trajectory-level FCFS", priority="fcfs", kind="ablation"
        ),
        _heddle(
            "heddle-no-place",
            "heddle with verl's cache-affinity router, no migration",
            placement="cache_affinity",
            migration=False,
            kind="ablation",
        ),
        _heddle(
            "heddle-least-load",
            "heddle with a least-load router re-balancing every step",
            placement="least_load",
            migration=False,
            kind="ablation",
        ),
        _heddle(
            "heddle-no-rebalance",
            "heddle migrating by predicted rank only (the paper's rule)",
            rebalance=False,
            kind="ablation",
        ),
        _heddle(
            "heddle-no-resource",
            "heddle on homogeneous TP",
            resources="homogeneous",
            kind="ablation",
        ),
        _heddle(
            "heddle-no-admission",
            "heddle starting every trajectory at once",
            admission=False,
            kind="ablation",
        ),
        _heddle(
            "heddle-no-reshard",
            "heddle keeping its TP plan to the end (no tail re-sharding)",
            reshard=False,
            kind="ablation",
        ),
        _heddle(
            "heddle-static-cap",
            "heddle with a static trajectory cap (chosen on the history) for KV admission",
            admission=False,
            concurrency=STATIC_CAP,
            kind="ablation",
        ),
        _baseline(
            "verl",
            "sticky sessions + least requests, engine FCFS, homogeneous TP, group cap",
            concurrency=VERL_SAMPLES,
        ),
        _baseline(
            "slime",
            "SGLang router's cache_aware (its default), sample semaphore",
            placement="cache_aware",
            concurrency=SLIME_SEMAPHORE,
        ),
        _baseline(
            "slime-consistent-hash",
            "SGLang router's consistent hashing on the session (slime's multi-turn advice)",
            placement="consistent_hash",
            concurrency=SLIME_SEMAPHORE,
        ),
        _baseline(
            "slime-least-inflight",
            "slime's own router: least in-flight",
            placement="least_load",
            concurrency=SLIME_SEMAPHORE,
        ),
        _baseline(
            "thunderagent",
            "program-aware pause/resume under KV pressure, sticky backends",
            placement="least_load",
            locality_threshold_tokens=0,
            program_gate=True,
        ),
        _heddle(
            "rr",
            "heddle with step-centric round-robin scheduling",
            priority="round_robin",
            kind="ablation",
        ),
        _baseline(
            "autellix",
            "PLAS (preemptive) + locality-aware balancing, homogeneous TP",
            priority="plas",
            placement="least_load",
            locality_threshold_tokens=AUTELLIX_LOCALITY_THRESHOLD_TOKENS,
        ),
        _heddle(
            "fix-1",
            "heddle on homogeneous TP1",
            resources="homogeneous",
            tp_degree=1,
            reshard=False,
        ),
        _heddle(
            "fix-8",
            "heddle on homogeneous TP8",
            resources="homogeneous",
            tp_degree=8,
            reshard=False,
        ),
    )
}
"""Bundles by name (the CLI's ``--systems`` choices)."""


def system_spec(name: str) -> SystemSpec:
    spec = SYSTEMS.get(name)
    if spec is None:
        raise ValueError(f"unknown system {name!r}; choose from {', '.join(SYSTEMS)}")
    return spec
