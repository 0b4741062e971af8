"""Migration (docs/paper.md, s.5.3): moving trajectories after their predictions change.

- ``planner``: which trajectory should move where, incrementally after every prediction.
- ``transfers``: endpoint-exclusive batches of the KV-cache transfers those moves need.

The control plane's side is ``heddle.control.transfer``.
"""
