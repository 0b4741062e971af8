"""Resource management (docs/paper.md, s.6): how many workers of which TP degree a GPU budget
becomes.

- ``problem``: the search objective (a block of trajectories priced at one TP degree) and the
  exact cover of a budget.
- ``budget_search``: the exact search over every TP configuration at once.
- ``plan_estimate``, ``plan_choice``: a fast makespan estimate of a plan, and the choice among
  the exact candidates by it.
- ``annealing``: the paper's sort-initialised simulated annealing, kept as the reference.
- ``nodes``: a plan's workers packed into nodes (which GPUs each one runs on).
- ``reshard``: tail re-sharding's estimate (ours): whether merging a node's workers into one of
  a higher TP degree finishes their stragglers sooner, the switch included.

The control plane's side is ``heddle.control.resources``.
"""
