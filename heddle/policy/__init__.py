"""The pure policy core: algorithms shared by the control plane, the engines and the simulator.

No I/O, no clock, no global randomness (callers inject ``now`` and a seeded ``random.Random``).

- ``cost_model``, ``profiles`` (``field_checks``): time costs of one worker (calibrated presets,
  measured profiles).
- ``placement`` (``blocks``, ``bottleneck``, ``placement_reference``, ``placement_hetero``,
  ``worker_mix``): min-makespan grouping of trajectories onto workers.
- ``migration``, ``transfers``: re-placement after new predictions; KV transfer batches.
- ``priority``, ``preemption``: PPS and baselines, preemption choice.
- ``routing``: the anchors' placement baselines (least-load, cache affinity, hashing, random).
- ``resources``, ``annealing``: TP configuration of a GPU budget.
- ``lower_bound``: the makespan lower bound every benchmark reports against.
- ``batching``: continuous batching of one worker (the simulator's engine model).
- ``predictors``: remaining-length predictors.
"""
