"""The discrete-event simulator: the control plane's deciders on a virtual clock, with a
simulated data plane of batching-model workers, elastic tools and KV transfers.

    >>> from heddle.sim import SimConfig, simulate
    >>> result = simulate(trace, "heddle", SimConfig(model="qwen3-32b", num_gpus=16))
"""

from heddle.sim.config import SimConfig
from heddle.sim.planning import choose_workers, plan_workers
from heddle.sim.results import Breakdown, SimResult
from heddle.sim.run import lower_bound_s, make_simulation_predictor, simulate
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
