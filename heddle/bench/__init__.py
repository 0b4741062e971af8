"""Benchmarks and the paper's figures: code that measures Heddle, never code a deployment runs.

The ``heddle bench ...`` and ``heddle sim figures`` commands (``heddle/cli/bench_*.py``,
``heddle/cli/sim_figures.py``) parse flags and print; the measurements live here:

- ``bus``: ``heddle bench bus``, publish, raw pull, ledger projection and replay rates of step
  events, each pass a ``Phase`` (``phases``: wall and CPU time, also the embedded nats-server's);
  ``nats_cli``: natscli's own ``nats bench js`` on the same server, for the bus's limit;
- ``control``: ``heddle bench control``, the deployed control plane's step event -> command
  latency under a paper-scale load played by this process (``control_player``);
- ``engine``: ``heddle bench engine``, the torch engine's decode F(b), prefill, resume and
  migration costs (their types in ``engine_figures``, a cheap import);
- ``chaos`` / ``chaos_trainer``: ``heddle bench chaos``, rollouts while processes are SIGKILLed
  at random, and the trainer whose record is counted against what was submitted;
  ``chaos_faults``: its faults of the bus (nats-server restarts, a full disk), ``small_disk``:
  the tmpfs it fills;
  ``chaos_zombies``: workers paused past their failure and let run on; ``chaos_forgeries``:
  forged, early and duplicate events, and whether they were refused; ``chaos_deliveries``:
  what a plain durable consumer of the trainer's delivery stream receives;
- ``cluster``: ``heddle bench cluster``, a rollout on a 3-node JetStream cluster (R3 streams)
  with a node and then a stream leader SIGKILLed, against the single-server run
  (``stream_watch``: the stream's content and leader, as the bench observes them);
- ``predictor`` / ``predictor_serve``: ``heddle bench predictor``, the context predictor's
  Fig. 13 per family and text signal, and its service's latency through NATS; ``text_reader``:
  its predictor handed the numbers each text was written from (what the text holds);
- ``lifecycle``: ``heddle bench lifecycle``, the disk a simulated training run leaves with and
  without retention, archive and purge throughput;
- ``reshard``: ``heddle bench reshard``, tail re-sharding cell by cell against heddle without it,
  at several engine restart costs;
- ``tools``: ``heddle bench tools``, sandbox calls cold vs from the warm pool; ``tools_nats``:
  the same through NATS (``ToolCall`` -> ``ToolReturned``);
- ``hops``: ``heddle bench hops``, the files one trajectory step opens from a tool result to the
  next generation, in order; ``hops_trace``: the profile hook that records them, ``hops_path``:
  which of the recorded calls carry the step;
- ``fidelity``: ``heddle bench fidelity``, live runs against the simulator, and the control
  plane's cost per step;
- ``figures``: ``heddle sim figures``, the paper's experiments re-done in simulation;
- ``waits``: what the chaos and cluster benchmarks wait for: a rollout's end in the stream,
  and the ledger projector's position reaching it.

Arrows point into the product packages only: nothing outside ``heddle.bench`` and ``heddle.cli``
imports from here.
"""
