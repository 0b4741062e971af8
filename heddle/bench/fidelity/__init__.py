"""``heddle bench fidelity``: how closely the live system follows the simulator, and what the
control plane costs per step.

- ``makespan``: one trace and policy run live (sim engines, time-scaled, ``run_rollout``) and
  simulated on the same cluster; the makespans and their ratio;
- ``gaps``: where a live run spends wall time the cost model does not know (tool dispatch,
  routing, engine lateness), from its recorded events;
- ``engine``: the same, on real torch engines under a KV budget, policy by policy, against the
  simulator's engine model ``torch`` costed by a profile measured in the same run
  (``engine_profile``) on a small agentic trace (``engine_trace``), with the run's options
  (``engine_options``);
- ``overhead``: step event -> command latency at a paper-scale load (``heddle.bench.control``).
"""
