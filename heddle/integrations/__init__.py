"""Heddle as the rollout backend of existing trainers: ``heddle.integrations.slime``
(``--rollout-function-path`` and the disk weight sync's post-write hook) and
``heddle.integrations.verl`` (verl's replaceable ``AgentLoopManager``, for its V1 and legacy
trainers, and ``rollout.name=heddle``). docs/integrations.md gives each trainer's configuration
and the contract relied on.

Modules: ``batch`` (one trainer batch as one rollout), ``weights`` (publishing a trainer's
weights and waiting for the workers); slime: ``slime`` (its entry points), ``slime_loop`` (its
rollout loop on Heddle), ``slime_samples`` (``Sample`` from a trajectory), ``slime_hooks`` (its
user functions); verl: ``verl`` (the manager and the legacy ``CheckpointEngineManager``),
``verl_batch`` (a legacy ``DataProto`` in and out), ``verl_v1`` (the V1 trainer's TransferQueue
rows), ``verl_rollout`` and ``verl_plugin`` (``rollout.name=heddle``), ``verl_compat`` (what is
taken from verl, in one place).
"""
