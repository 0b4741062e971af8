"""The pure policy core: algorithms shared by the control plane, the engines and the simulator.

No I/O, no clock, no global randomness (callers inject ``now`` and a seeded ``random.Random``).
One package per mechanism of the paper (docs/paper.md), each with its map:

- ``prediction``: remaining-length predictors (s.4.1).
- ``scheduling``: PPS, the baselines' orders and preemption (s.4).
- ``placement``: the presorted partition, re-balancing and the baselines' routers (s.5).
- ``migration``: migration planning and KV transfer batches (s.5.3).
- ``resources``: the TP configuration of a GPU budget (s.6).
- ``cost``: one worker's cost model (docs/calibration.md).
- ``batching``: continuous batching of one worker (the simulator's engine model), and
  ``engine_models``: the engine behaviour a run sets for every system (prefix cache, what
  preemption does to KV, whether a migration moves KV).
- ``lower_bound`` (with ``kv_work``, and ``bound_facts``: what it reads of a workload and what
  each engine's prompt sharing saves): the makespan lower bound every benchmark reports against.
- ``field_checks``: validation of user-written file fields.
"""
