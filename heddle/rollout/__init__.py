"""The main job: run a rollout end to end (``heddle rollout run``), compare policies on one trace,
submit to a running control plane.

- ``submission``: trajectory specs from a trace or tasks, and the events that open a rollout;
- ``processes``: launching the control plane, workers and tool executors as child processes;
- ``progress``: following a rollout live (completions, tokens/s, per-worker batches);
- ``summary``: a finished rollout's figures from the stream (makespan in model seconds,
  throughput, the slowest trajectory's breakdown, re-placements and their re-prefill);
- ``runner``: ``run_rollout`` (start what is needed, submit, follow, summarise) and
  ``compare_policies``.
"""
