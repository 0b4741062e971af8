"""Heddle as the rollout backend of existing trainers: ``heddle.integrations.slime``
(``--rollout-function-path``) and ``heddle.integrations.verl`` (verl's replaceable
``AgentLoopManager``). docs/integrations.md gives each trainer's configuration and the contract
relied on. ``heddle.integrations.batch`` is what both share: one trainer batch as one rollout.

Modules: ``batch`` (one trainer batch as one rollout), ``slime`` (slime's rollout function),
``verl`` (the replacement ``AgentLoopManager`` and ``CheckpointEngineManager``), ``verl_batch`` (a
verl ``DataProto`` in, a ``DataProto`` of trajectories out), ``verl_compat`` (everything taken from
verl, in one place).
"""
