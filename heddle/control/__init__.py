"""The control plane: pure deciders ``(state, event) -> outputs`` shared by live consumers and
the simulator (``placement``: the placement decider, its strategies, admission and placers),
resource plans and the system bundles.

Modules: ``decider`` (the decider protocol), ``prediction`` (re-predicts a trajectory's remaining
output after every step), ``priority`` (trajectory facts -> priorities under one policy),
``placement/`` (see above), ``reshard/`` (tail re-sharding: merging a node's workers into one of a
higher TP degree as a rollout drains, ours), ``transfer`` (schedules migrations' KV transfers,
endpoint-exclusive, longest first), ``rollout`` (emits ``RolloutFinished``), ``weights`` (tells
live workers to load the latest weight version), ``operations`` (the operators' view and the
decider carrying out their requests), ``ops_requests`` (operations service requests validated into
operator events), ``ops_views`` (what that view knows of rollouts, trajectories and workers),
``ops_outputs`` (the commands or events operator events turn into), ``submit_requests`` (a
trainer's submission request, strictly decoded), ``submissions`` (checking it against the
deployment, and the events that open its rollout), ``pace`` (a rollout's measured seconds per
output token), ``resources`` (the resource plan at rollout start: TP degrees from a GPU budget),
``systems`` (the system bundles: Heddle, ablations, baselines), ``bundle`` (one bundle's
deciders in dispatch order and the engines' batching settings), ``output_gate`` (what a bundle
may emit: nothing more for a cancelled rollout or a finished trajectory), ``bundle_router``
(the live control plane's one bundle per policy in use, events routed by their rollout),
``gate`` (whether a stored event is a fact to act on: the event gate the deciders and the ledger
put every event through), ``leases`` (a trajectory's lease: which worker and hosting may write
its next events).
"""

from heddle.control.bundle import ControlOptions, DeciderBundle, build_bundle
from heddle.control.decider import Decider, Output, dispatch_table, rebuild_decider
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
    "Decider",
    "DeciderBundle",
    "Output",
    "PlacementDecider",
    "PredictionDecider",
    "PriorityConfig",
    "PriorityDecider",
    "RolloutDecider",
    "SystemSpec",
    "TransferDecider",
    "WeightsDecider",
    "build_bundle",
    "dispatch_table",
    "rebuild_decider",
    "system_spec",
]
