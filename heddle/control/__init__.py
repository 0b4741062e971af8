"""The control plane: pure deciders ``(state, event) -> outputs`` shared by live consumers and
the simulator, the placement strategies behind them, resource plans and the system bundles."""

from heddle.control.control_plane import ControlOptions, ControlPlane, build_control_plane
from heddle.control.decider import Decider, Output, dispatch_table, replay
from heddle.control.placement import PlacementDecider
from heddle.control.prediction import PredictionDecider
from heddle.control.priority import PriorityConfig, PriorityDecider
from heddle.control.rollout import RolloutDecider
from heddle.control.systems import SYSTEMS, SystemSpec, system_spec
from heddle.control.transfer import TransferDecider

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
    "build_control_plane",
    "dispatch_table",
    "replay",
    "system_spec",
]
