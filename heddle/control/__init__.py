"""The control plane: pure deciders ``(state, event) -> outputs`` shared by live consumers and
the simulator (``placement``: the placement decider, its strategies, admission and placers),
resource plans and the system bundles."""

from heddle.control.control_plane import ControlOptions, ControlPlane, build_control_plane
from heddle.control.decider import Decider, Output, dispatch_table, replay
from heddle.control.placement import PlacementDecider
from heddle.control.prediction import PredictionDecider
from heddle.control.priority import PriorityConfig, PriorityDecider
from heddle.control.rollout import RolloutDecider
from heddle.control.systems import SYSTEMS, SystemSpec, system_spec
from heddle.control.transfer import TransferDecider
from heddle.control.weights import WeightsDecider

__all__ = [
    "SYSTEMS",
    "ControlOptions",
    "ControlPlane",
    "Decider",
    "Output",
    "PlacementDecider",
    "PredictionDecider",
    "PriorityConfig",
    "PriorityDecider",
    "RolloutDecider",
    "SystemSpec",
    "TransferDecider",
    "WeightsDecider",
    "build_control_plane",
    "dispatch_table",
    "replay",
    "system_spec",
]
