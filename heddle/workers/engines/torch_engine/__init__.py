"""The ``torch`` engine: continuous batching on PyTorch + transformers, for CPU and one GPU.

Real forward passes with priority scheduling, preemption that keeps the KV cache, prefix re-use
across a trajectory's turns and KV export/import for migration. Importing this package is cheap;
torch and transformers load with the modules that need them. The pieces, one resource each:

- ``options``: the typed options (a cheap import, used by the engine registry and the CLI).
- ``tiny`` / ``loading``: the built-in seeded random model or a local model; KV layout, fingerprint.
- ``kv``: the slot pool of the running batch and ``KVBlock``s outside it.
- ``slot_cache``: a ``transformers.Cache`` that reads and writes the slot pool in place.
- ``forward``: chunked prefill of one slot and one batched decode forward over all slots.
- ``sampler``: temperature / top-p with counter-based per-request seeds; logprobs.
- ``sequence``, ``prefix_store``, ``scheduler``: request state, cached prefixes, and the pure
  scheduling decisions (priority, preemption, KV budget).
- ``kv_manager``: moves KV between slots, parked blocks and cached prefixes.
- ``snapshot``: KV export/import bytes (msgpack header + raw tensor bytes, no pickle).
- ``weights``: weight swaps: read a state dict, check it fits the model, copy it in.
- ``core``: the synchronous step loop, with its counters in ``stats`` and its request checks in
  ``validation``; ``engine``: the ``Engine`` protocol around it, in a thread.

The measurements behind ``heddle bench engine`` live in ``heddle.bench.engine``.
"""
