"""How a control plane process is configured (``ControlPlaneService``'s options; ``heddle up``
builds one from its flags). Construction checks the cost-model preset and the liveness timings
(``ValueError`` naming the problem)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from heddle.control.reshard import DEFAULT_ENGINE_RESTART_S
from heddle.controlplane.gating import DeliveryConfig
from heddle.controlplane.live_predictor import PredictorConfig
from heddle.controlplane.store_guard import StoreGuardConfig
from heddle.policy.cost.model import preset


@dataclass(frozen=True, slots=True)
class HostConfig:
    durable_prefix: str = "control"
    """The host's durable is ``<prefix>-plane`` (``<prefix>-<slot>`` for a single unit,
    ``heddle.controlplane.host``)."""
    batch_size: int = 64
    """Most events decided (and their outputs published) per acknowledgement. Small batches
    bound how long one batch holds the event loop, so a step event waits at most for a short
    burst of other decisions."""
    max_ack_pending: int = 4096
    ack_wait_s: float = 120.0
    """Longer than the bus's publish retry deadline, so a batch whose outputs are still being
    retried is not redelivered meanwhile."""
    fetch_wait_s: float = 1.0
    since_sequence: int = 1
    """Events before this stream sequence belong to other runs: never replayed nor decided
    (a control plane of one isolated run, e.g. each run of ``heddle rollout compare``)."""

    def durable(self, name: str) -> str:
        return f"{self.durable_prefix}-{name}"


@dataclass(frozen=True, slots=True)
class ControlPlaneConfig:
    cost_model: str = "qwen3-32b"
    """Cost-model preset of the workers' model (placement and plans): ``heddle.policy.cost.model``
    ``MODELS``; live workers of another model should name the closest preset."""
    hardware: str = "h200"
    predictor: PredictorConfig = field(default_factory=PredictorConfig)
    seed: int = 0
    """Seeds the random routers of baseline bundles."""
    transfer_kv: bool = True
    """Migrations move the KV cache (False: the target re-prefills)."""
    engine_restart_s: float = DEFAULT_ENGINE_RESTART_S
    """What a re-shard's engine switch costs, weights aside (``heddle.control.reshard``): the
    workers' engines relaunching in this deployment."""
    worker_timeout_s: float = 10.0
    """A worker silent this long is declared failed (its trajectories are re-placed)."""
    liveness_check_s: float = 0.5
    project_ledger: bool = True
    """Run the ledger projector in this process."""
    learn_from_ledger: bool = True
    """Teach the predictor earlier rollouts' completed trajectories from the ledger at start."""
    history: tuple[Path, ...] = ()
    """Trace files of earlier rollouts: the predictor and the planners' ratios learn from them."""
    host: HostConfig = field(default_factory=HostConfig)
    status_interval_s: float = 1.0
    metrics_port: int = 0
    """Serve Prometheus metrics on this port (0: off; see ``heddle.observability``)."""
    serve_operations: bool = True
    """Serve the operations service (``nats micro ls`` lists it as ``heddle``)."""
    store: StoreGuardConfig = field(default_factory=StoreGuardConfig)
    """How the JetStream store is watched (a full disk) and a wedged one reset."""
    delivery: DeliveryConfig = field(default_factory=DeliveryConfig)
    """The trainers' delivery streams (``HEDDLE_OUT_<trainer>``): how long they keep a record."""

    def __post_init__(self) -> None:
        preset(self.cost_model, self.hardware, 1)  # ValueError naming the choices
        if not self.worker_timeout_s > 0 or not self.liveness_check_s > 0:
            raise ValueError("worker_timeout_s and liveness_check_s must be > 0")
        if not self.engine_restart_s >= 0:
            raise ValueError(f"engine_restart_s must be >= 0, got {self.engine_restart_s}")
