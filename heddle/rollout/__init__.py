"""The main job: run a rollout end to end (``heddle rollout run``), compare policies on one trace,
submit to a running control plane; and the pieces a benchmark or a notebook reuses.

- ``submission``: trajectory specs from a trace or tasks; ``submit``: a rollout opened,
  cancelled or summarised through the control plane's operations service (the one door);
  ``trainer_records``: what the control plane reads for trainers (a failed trajectory's
  record, a rollout's summary), whose role reads only their delivery stream;
- ``sources`` / ``flags``: what the CLI's source flags name (workload, trace file, task file);
- ``processes`` / ``deployment``: the control plane (``heddle up``), the ledger projector,
  worker agents and tool executors as child processes, each waited for; ``worker_pool``: which
  workers, with which engine options, in how many processes; ``router``: the real
  ``sglang-router`` in front of the SGLang servers; ``control_plane``: requiring a running
  control plane, refusing a second;
- ``inprocess``: the same services on one event loop (tests, notebooks);
- ``progress``: following a rollout live (completions, tokens/s, per-worker batches);
- ``time_scale``: ``--time-scale auto``, the fastest time scale this machine keeps;
- ``summary``: a rollout's figures folded from its events (makespan in model seconds,
  throughput, re-placements and their re-prefill); ``slowest``: the slowest trajectory's
  breakdown and how far a live run fell behind its time scale; ``breakdown``: where a
  trajectory's live time went beyond the cost model and the tools;
- ``driver``: ``run_rollout`` (start what is needed, submit, follow, summarise, cancel on
  failure) with hooks for crash tests and a timeline writer;
- ``compare``: the same trajectories under several policies, fresh runs each, next to the
  simulator's prediction; ``report`` renders both.
"""
