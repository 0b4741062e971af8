"""The discrete-event simulator: the control plane's deciders on a virtual clock, with a
simulated data plane of batching-model workers, elastic tools and KV transfers.

    >>> from heddle.sim import SimConfig, simulate
    >>> result = simulate(trace, "heddle", SimConfig(model="qwen3-32b", num_gpus=16))

Modules: ``run`` (``simulate``: one rollout of a trace under one system bundle, its workers
planned), ``on_workers`` (the same on given workers: the bundle's control plane and predictor,
the run and its lower bound), ``simulator`` (the event loop: deciders and data plane on a virtual
clock), ``command_delays`` (when a command the control plane sends arrives), ``timers`` (the
call-backs the data plane asks for), ``config`` (``SimConfig``: cluster, predictor, transfers,
tools), ``dataplane`` (the simulated data plane), ``sim_worker`` (a simulated worker: a batching
model and its generation jobs), ``tool_pool`` (elastic warm tool executors with cold starts),
``kv_moves`` (how a migrating context reaches its target), ``weight_loads`` (weight loads and the
staleness bound), ``reshards`` (workers retiring and relaunching at a higher TP degree), ``facts``
(the events the data plane publishes), ``trajectories`` (a simulated trajectory), ``accounting``
(where its time went, column by column), ``results`` (what a simulated rollout reports),
``planning`` (choosing TP degrees, a baseline's concurrency cap and heddle's admission, checked on
the history), ``concurrency_caps`` (the caps a baseline's check tries), ``admission_choice``
(the admission settings a KV-admitting bundle's check tries) and ``profile`` (simulating each
worker group on its own).

Sweeps, studies, the hunter and the corpus run the simulator from above (``heddle.experiments``).
"""

from heddle.sim.config import SimConfig
from heddle.sim.on_workers import lower_bound_s, make_simulation_predictor
from heddle.sim.planning import choose_workers, plan_workers
from heddle.sim.results import Breakdown, SimResult
from heddle.sim.run import simulate
from heddle.sim.simulator import Run, SimulationError, Simulator
from heddle.sim.trajectories import build_trajectories

__all__ = [
    "Breakdown",
    "Run",
    "SimConfig",
    "SimResult",
    "SimulationError",
    "Simulator",
    "build_trajectories",
    "choose_workers",
    "lower_bound_s",
    "make_simulation_predictor",
    "plan_workers",
    "simulate",
]
