"""Rollout workers: the agent, the engines it drives, environments and tool executors.

Subpackages: ``agent/`` (the rollout worker agent: runs the trajectories placed on one engine),
``engines/`` (the engine registry and the ``sim``, ``torch`` and ``sglang`` engines),
``environments/`` (what a trajectory is about: prompts, tool calls, reward), ``tools/`` (tool
executors: sandboxed code, local search, trace replay).

Modules: ``tokenizers`` (text <-> token ids for contexts and observations), ``ray_workers`` (worker
agents as Ray actors, ``heddle workers run N --ray``).
"""
