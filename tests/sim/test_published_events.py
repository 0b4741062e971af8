"""What the simulated data plane publishes, byte for byte: three seeded runs (migrations, a
re-shard that interrupts generations, a staleness bound that fails trajectories) are recorded and
each event kind's encoded events are pinned by a digest.

The digests were taken before the simulator built its events with the shared builders
(``heddle.events.builders``), so they hold the simulator to what it published then. A change
that means to alter what the simulator publishes updates them: ``python
tests/sim/test_published_events.py`` prints the current ones."""

from __future__ import annotations

import hashlib
from collections import defaultdict

from sim_traces import trajectory

from heddle.control.bundle import ControlOptions, build_bundle
from heddle.control.systems import system_spec
from heddle.events import Event, ToolCalled, ToolReturned
from heddle.events.codec import encode
from heddle.sim import SimConfig, Simulator, make_simulation_predictor, plan_workers
from heddle.sim.run import control_for
from heddle.sim.weight_loads import WeightPlan
from heddle.workloads import generate

MODEL = "qwen3-8b"

DIGESTS = {
    "Completed": "6e87c76c1c97dfbaae1eeb24043a8e01a3b31d2f9fc67b4ce67d9ff95045bb1a",
    "Failed": "b23e03a44f95b5bb7aaf25edb358448d19ab839721e592842da26a7c5cd9d76e",
    "Generated": "2224af99598b887f6da82025df1bcaef73ed974ece5185cee22b3c5bf00fa938",
    "GenerationInterrupted": "336f118a173092d27da4f2b61cf6f546077be10be271f3c0720b30f1a03eefd9",
    "GenerationStarted": "8baee36264bbf9ff0aea9e79428129016eeb184d0392add25c0c2636c55c5a7c",
    "Migrated": "0b3a1f2037666edef346689dda767ba3473f54b8beca38f4a44e619db551d416",
    "ToolCalled": "178c8c581d639c3d3bcfdd6c5225493e163b241c151fe42892c2b789b54f4d59",
    "ToolReturned": "ebb8042e9a244a29c4cfe30a240fb1c5d20a0418f416eb288d3d327e5e08358f",
    "WorkerRegistered": "89e24c167d0df01ce91dd2f4fee98fc2d6e862aed0983bd19c0dd12733ef1e93",
    "WorkerRetired": "82d531ec305550bfe51b282d5c9cd50e15c75c7cd32ed759c1d87977c969fc2b",
}
"""The digest (``digests``) of each kind the data plane publishes, over the three runs, taken at
main 3132bfe (the control plane's kinds are left to the deciders' tests). ``ToolReturned`` and
``WorkerRegistered`` were taken again when the simulator took the tool executor's and the
worker's builders: their ids follow the live rules since (``<call>:tool_returned``,
``<worker>:<incarnation>:registered``); every other byte of them is unchanged."""


def migrating_run() -> list[Event]:
    """A noisy predictor on KV-moving engines: migrations, and every step's events."""
    trace = generate("coding", 48, seed=5)
    config = SimConfig(
        model=MODEL,
        num_gpus=8,
        record_events=True,
        predictor="noisy_oracle",
        predictor_sigma=1.0,
        engine_model="torch",
    )
    spec = system_spec("heddle")
    predictor = make_simulation_predictor(trace, config)
    options = ControlOptions(
        cost_for_tp=config.cost_for_tp, predictor=predictor, engine_model=config.engine_model
    )
    workers = plan_workers(trace, spec, config, predictor)
    return Simulator(trace, build_bundle(spec, options), workers, config).run().events


def resharding_run() -> list[Event]:
    """A tail of stragglers on eight TP1 workers merged into one TP8: interrupted steps."""
    trace = [
        trajectory(f"t{i}", 1000, [((16_000 if i < 3 else 600) // 3, 1.0, 200)] * 3)
        for i in range(64)
    ]
    config = SimConfig(
        model="qwen3-32b", num_gpus=8, predictor="oracle", engine_restart_s=30.0, record_events=True
    )
    control, degrees = control_for(trace, system_spec("heddle"), config, (), [1] * 8)
    return Simulator(trace, control, degrees, config).run().events


def stale_run() -> list[Event]:
    """Two weight versions under a staleness bound of one: trajectories fail as stale."""
    trace = [trajectory(f"t{i}", 500, [(1000, 20.0, 100)] * 6) for i in range(6)]
    config = SimConfig(model=MODEL, num_gpus=2, weight_load_s=1.0, record_events=True)
    control, degrees = control_for(trace, system_spec("verl"), config)
    plan = WeightPlan(publications=((30.0, 1), (60.0, 2)), max_staleness=1)
    return Simulator(trace, control, degrees, config, plan).run().events


def digests() -> dict[str, str]:
    """Each data-plane kind's sha256 over its encoded events, in the order they were published
    (each event prefixed by its length)."""
    encoded: dict[str, list[bytes]] = defaultdict(list)
    for run in (migrating_run, resharding_run, stale_run):
        for event in run():
            kind = type(event).__name__
            if kind in DIGESTS:
                data = encode(event)
                encoded[kind].append(len(data).to_bytes(8, "big") + data)
    return {kind: hashlib.sha256(b"".join(parts)).hexdigest() for kind, parts in encoded.items()}


def test_the_simulator_publishes_what_it_published_before() -> None:
    assert digests() == DIGESTS


def test_the_simulator_answers_a_call_as_the_tool_executor_does() -> None:
    """Each ``ToolReturned`` answers the step's ``ToolCalled`` and is named by its call, as the
    executor names its results (``<call>:tool_returned``)."""
    events = resharding_run()
    calls = {(e.traj_id, e.step): e.call_id for e in events if isinstance(e, ToolCalled)}
    results = [e for e in events if isinstance(e, ToolReturned)]
    assert results
    for result in results:
        assert result.call_id == calls[(result.traj_id, result.step)]
        assert result.event_id == f"{result.call_id}:tool_returned"


if __name__ == "__main__":
    for kind, digest in digests().items():
        print(f'    "{kind}": "{digest}",')
