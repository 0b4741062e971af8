"""Placement (paper s.5): where trajectories start, where each step runs, when they move, and when
they may start at all.

Map:

- ``decider``: ``PlacementDecider``, which keeps the records and hands each event to a strategy.
- ``state``: those records (workers, in-flight requests, draining workers, rollouts and their
  trajectories), shared by the strategies; ``weight_swaps`` (``WeightSwaps``): which workers
  must still swap weights and whose KV a swap makes stale.
- The strategies, one per kind of decision:
  ``initial`` (``InitialPlacement``: a ready rollout's placement, then admission's starts),
  ``step_routing`` (``StepRouting``: each step's worker), ``migration`` (``MigrationRequests``:
  moves on new predictions), ``replacement`` (``FailureReplacement``: a failed worker's
  trajectories), ``drain`` (``OperatorDrain``: the operator's drain and undrain); ``hosting``
  emits the ``TrajectoryPlaced`` + ``StartTrajectory`` they share.
- Admission, consulted through one interface: ``admission`` (the ``Admission`` protocol and
  ``AdmitAll``), ``kv_gate`` (``KvAdmissionGate``, Heddle's), ``kv_admission`` (its algorithm:
  a held queue in priority order), ``kv_worker`` (a worker's projected KV, a shared prompt once),
  ``cap`` (``TrajectoryCap``: a
  baseline's own bound on running trajectories), ``program_gate`` (``ProgramGate``:
  ThunderAgent's pause/resume of whole programs; ``programs`` keeps its records).
- Placers, built per rollout: ``placer`` (the ``Placer`` protocol and its values),
  ``presorted_placer`` (``PresortedPlacer``, Heddle's; ``remaining`` keeps its per-worker
  remaining lengths), ``routed`` (``RouterPlacer``, the baselines' routers).
"""

from heddle.control.placement.admission import Admission, AdmissionRequest, AdmitAll, Admitted
from heddle.control.placement.cap import CapConfig, TrajectoryCap
from heddle.control.placement.decider import PlacementDecider
from heddle.control.placement.kv_admission import AdmissionConfig, KvAdmission
from heddle.control.placement.kv_gate import KvAdmissionGate
from heddle.control.placement.kv_worker import (
    MAX_PROJECTION_POINTS,
    Footprint,
    held_footprints,
    projected_peak,
)
from heddle.control.placement.placer import Assignment, PlacementRequest, Placer, WorkerInfo
from heddle.control.placement.presorted_placer import PresortedPlacer
from heddle.control.placement.program_gate import ProgramGate, ProgramGateConfig
from heddle.control.placement.routed import RouterPlacer

__all__ = [
    "MAX_PROJECTION_POINTS",
    "Admission",
    "AdmissionConfig",
    "AdmissionRequest",
    "AdmitAll",
    "Admitted",
    "Assignment",
    "CapConfig",
    "Footprint",
    "KvAdmission",
    "KvAdmissionGate",
    "PlacementDecider",
    "PlacementRequest",
    "Placer",
    "PresortedPlacer",
    "ProgramGate",
    "ProgramGateConfig",
    "RouterPlacer",
    "TrajectoryCap",
    "WorkerInfo",
    "held_footprints",
    "projected_peak",
]
