"""Live shells around the pure deciders of ``heddle.control``: the control plane process.

- ``host``: decider units (the stages of ``heddle.control.bundle_router``'s one bundle per policy,
  liveness, the operators' view, weights) on one durable JetStream pull consumer (the control
  plane's: ``control-plane``): replay to its position, then decide live, each event decoded once
  and handed to every unit that handles it, the router's placement stage first, driven by
  ``heddle.bus.PipelinedRunner`` (``decider_decoders``: token lists the deciders only count are
  not parsed; ``consumer_stats``: what ``heddle status`` shows of the consumer);
- ``gating``: the event gate in front of the deciders (refused events dead-lettered, stale
  writers fenced) and the delivery of each trajectory's accepted end to its trainer's stream;
- ``liveness``: declares workers whose heartbeats stopped failed (their trajectories re-placed);
  ``liveness_checks``: when the control plane runs that check;
- ``live_predictor`` / ``ledger_history``: the predictor the control plane runs and what it
  learns from;
- ``ledger_restore``: an empty ledger starts from the latest ledger snapshot (a purged stream);
- ``control_options``: the options the router builds its bundles with (the live deployment's);
- ``projector`` (with ``projector_gaps``): the ledger projector, the durable consumer that feeds
  ``heddle.ledger.LedgerWriter`` (``catch_up`` projects what is pending and returns);
  ``ledger_recovery``: its keeper, which rebuilds a damaged ledger from the stream or stops with
  the reason (``ledger_health``: what it reports to ``heddle status``); ``projector_process``:
  the two as a process (``python -m heddle.controlplane.projector_process``, ``heddle db project``);
- ``operations``: the operations micro service (``heddle.ops.<endpoint>``, ``heddle ops``);
  ``submissions``: its door for rollouts (``heddle.ops.submit.<trainer>``: checked, then opened);
- ``service``: ``ControlPlaneService``, everything above plus the ledger projector, supervised
  (``supervision``), configured by ``ControlPlaneConfig`` (``plane_config``);
- ``filters``: a consumer's filter subjects, from the event types it handles;
- ``latency``: the control plane's cumulative latency histograms (decision latency, consumer age);
- ``context_model_client``: the shell around the served context model: requests sent without
  waiting, each answer published as ``Predicted`` when it arrives in time;
- ``durable_position``: where the deciders' durable resumes, and what a lost one reports;
- ``store_guard``: the JetStream store watched (a full disk reported, producers paused, the
  embedded server's JetStream reset once space is back);
- ``status``: where its state is read (``<data_dir>/control-plane.json``, durable positions);
  ``snapshot``: what ``heddle status`` shows, from the ledger, that state and NATS.
"""

from heddle.controlplane.host import PLANE, ConsumerStats, DeciderConsumer
from heddle.controlplane.live_predictor import LIVE_PREDICTORS, PredictionHooks, PredictorConfig
from heddle.controlplane.liveness import WorkerLiveness
from heddle.controlplane.plane_config import HostConfig
from heddle.controlplane.service import ControlPlaneConfig, ControlPlaneService
from heddle.controlplane.status import (
    ControlPlaneStatus,
    consumer_positions,
    read_status,
    status_path,
)

__all__ = [
    "LIVE_PREDICTORS",
    "PLANE",
    "ConsumerStats",
    "ControlPlaneConfig",
    "ControlPlaneService",
    "ControlPlaneStatus",
    "DeciderConsumer",
    "HostConfig",
    "PredictionHooks",
    "PredictorConfig",
    "WorkerLiveness",
    "consumer_positions",
    "read_status",
    "status_path",
]
