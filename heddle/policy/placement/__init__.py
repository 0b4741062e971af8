"""Placement (docs/paper.md, s.5): which worker runs each trajectory.

Heddle's presorted partition and its helpers:

- ``presorted``: the min-makespan split of trajectories sorted by predicted length into
  contiguous runs, one per worker (``blocks``, ``bottleneck`` and ``bisection`` are its core;
  ``reference`` is the paper's DP, the reference the fast solvers are tested against).
- ``hetero``, ``worker_mix``: the same over workers of different TP degrees.
- ``robust``: hedged and interleaved splits when lengths are predictions and KV is finite.
- ``rebalance``: moves in a tool gap when they shorten the slower of two workers.

The baselines' routers (what verl, slime and SGLang's router do, per request):

- ``routing`` (least-load, cache affinity, hashing, random), ``cache_aware`` (SGLang router's
  policy, modelled exactly), ``route_types`` (what a router sees and answers).

The control plane's side is ``heddle.control.placement``.
"""
