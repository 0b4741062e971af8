"""Scheduling (docs/paper.md, s.4): which request runs first on a worker.

- ``priority``: progressive priority scheduling (PPS, longest predicted remaining first) and
  the baselines' orders (FCFS, round robin, PLAS, SPF, multi-level least attained).
- ``preemption``: which running requests yield their batch slot to which waiting ones.

The control plane's side is ``heddle.control.priority`` (with ``heddle.control.pace``); the
engines apply the order (``heddle.workers.engines``).
"""
