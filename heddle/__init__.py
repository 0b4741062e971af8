"""Heddle: a trajectory-centric rollout orchestrator for agentic RL.

Subpackages: ``events/`` (the event contract: events, commands, subjects, codec), ``bus/`` (the
event bus, the only code that imports ``nats``), ``ledger/`` (the SQL projection, the only code that
imports ``sqlalchemy``), ``policy/`` (the pure algorithms), ``control/`` (the pure deciders),
``controlplane/`` (the control plane process around them), ``workers/`` (rollout worker agents,
engines, environments, tool executors), ``rollout/`` (the main job, end to end), ``sim/`` (the
discrete-event simulator), ``experiments/`` (sweeps, studies and the hunter on the simulator),
``workloads/`` (synthetic agentic workloads), ``context_model/`` (the learned context
predictor), ``replay/`` (ledgers rebuilt from the stream, trace export), ``timeline/`` (Gantt
timelines of recorded rollouts), ``whatif/`` (re-simulating a recorded rollout), ``observability/``
(Prometheus metrics), ``deploy/`` (per-role NATS permissions), ``integrations/`` (slime and verl on
Heddle), ``examples/`` (a GRPO loop), ``bench/`` (benchmarks and the paper's figures), ``cli/`` (the
``heddle`` command), ``lifecycle/`` (archiving rollouts to Parquet, purging them behind a ledger
snapshot, retention).

Modules: ``client`` (the trainers' Python API), ``completions`` (the terminal events
``HeddleClient.completions`` reads), ``weights`` (publishing weight versions, the trainer's side),
``config`` (``Settings``: the only reader of ``HEDDLE_*`` variables), ``errors`` (errors a user can
fix), ``ids`` (identifiers and deterministic id derivation), ``traces`` (the JSONL trace format).
"""

__version__ = "0.1.0"
