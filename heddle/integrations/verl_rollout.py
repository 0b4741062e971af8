"""``actor_rollout_ref.rollout.name=heddle``: verl's rollout backend when Heddle generates.

verl builds a rollout engine in each actor worker (``get_rollout_class(name, mode)``) and
rollout replicas in the trainer (``RolloutReplicaRegistry``); both are looked up by name, and
verl 0.9.1 knows ``vllm``, ``sglang`` and ``trtllm`` only. ``register`` adds ``heddle`` to both
(``heddle.integrations.verl_plugin`` calls it in every process that imports verl), so no
inference engine starts beside the trainer:

- ``HeddleReplica`` launches no server: Heddle's workers are the servers, and
  ``HeddleAgentLoopManager`` talks to them.
- ``HeddleServerAdapter`` is the in-worker end of verl's weight sync. verl's
  ``update_weights`` (after each training step, the V1 trainer's naive backend and the legacy
  trainer alike) hands it the actor's whole weights, named as the Hugging Face model's; rank 0
  writes them to ``<weights_dir>/v<step>/model.safetensors`` and publishes them as Heddle
  weight version ``<step>`` (``HeddleClient.publish_weights``). With ``wait_workers: N`` it
  then waits until N workers loaded them, so the next rollout's first generation runs on them.

Settings: ``actor_rollout_ref.rollout.engine_kwargs.heddle`` (``weights_dir``, required: a
folder every Heddle worker reads; ``nats_url``; ``trainer``; ``wait_workers``;
``wait_timeout_s``). Step 0 (verl's sync before the first step) publishes nothing: version 0 is
the weights Heddle's workers started with.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from heddle.integrations import verl_compat

if TYPE_CHECKING:
    from heddle.integrations.weights import WeightSync

ROLLOUT_NAME = "heddle"
SERVER_ADAPTER = "heddle.integrations.verl_rollout.HeddleServerAdapter"


def register() -> None:
    """Make ``rollout.name=heddle`` known to verl's two registries (idempotent)."""
    from verl.workers.rollout import base
    from verl.workers.rollout.replica import RolloutReplicaRegistry

    base._ROLLOUT_REGISTRY[(ROLLOUT_NAME, "async")] = SERVER_ADAPTER
    RolloutReplicaRegistry.register(ROLLOUT_NAME, _replica_class)


def _replica_class() -> type:
    from verl.workers.rollout.replica import RolloutReplica

    class HeddleReplica(RolloutReplica):
        """A replica with no server: Heddle's workers generate."""

        async def launch_servers(self) -> None:
            self.servers = []
            self._server_address = f"heddle-{self.replica_rank}"
            self._server_handle = None  # type: ignore[assignment]

    return HeddleReplica


def weight_settings(rollout_config: Any) -> Mapping[str, Any]:
    """``engine_kwargs.heddle`` of verl's rollout config ({} when absent)."""
    engine_kwargs = getattr(rollout_config, "engine_kwargs", None) or {}
    section = engine_kwargs.get("heddle") if hasattr(engine_kwargs, "get") else None
    return dict(section) if section else {}


def on_cpu(named_tensors: Iterable[tuple[str, Any]]) -> dict[str, Any]:
    """The tensors, copied to the CPU (drained in the caller's thread: a sharded engine's
    generator gathers across ranks as it goes). Tied weights (an embedding shared with the LM
    head) come as one tensor under two names: each name gets its own copy, as safetensors
    stores no shared memory."""
    tensors: dict[str, Any] = {}
    seen: set[int] = set()
    for name, tensor in named_tensors:
        on_cpu = tensor.detach().to("cpu").contiguous()
        pointer = on_cpu.untyped_storage().data_ptr()
        tensors[name] = on_cpu.clone() if pointer in seen else on_cpu
        seen.add(pointer)
    return tensors


def save_weights(tensors: Mapping[str, Any], folder: Path) -> Path:
    """Write ``tensors`` as ``folder/model.safetensors``; the folder. Written under a
    temporary name and renamed, so a worker never reads half a file."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    partial = folder / "model.safetensors.partial"
    save_file(dict(tensors), str(partial))
    partial.replace(folder / "model.safetensors")
    return folder


def weight_sync(settings: Mapping[str, Any]) -> WeightSync:
    """``engine_kwargs.heddle`` as a ``WeightSync``."""
    from heddle.integrations.weights import WeightSync

    return WeightSync(
        nats_url=settings.get("nats_url"),
        trainer=str(settings.get("trainer", "verl")),
        wait_workers=int(settings.get("wait_workers", 0)),
        wait_timeout_s=float(settings.get("wait_timeout_s", 600.0)),
    )


def _base_rollout() -> type:
    verl_compat.require_verl()
    from verl.workers.rollout.base import BaseRollout

    return BaseRollout


class HeddleServerAdapter(_base_rollout()):  # type: ignore[misc]
    """verl's in-worker rollout for ``rollout.name=heddle`` (module docstring)."""

    def __init__(self, config: Any, model_config: Any, device_mesh: Any, *args: Any, **kwargs: Any):
        super().__init__(config, model_config, device_mesh, *args, **kwargs)
        self.heddle = weight_settings(self.config)
        self.published: list[int] = []

    async def resume(self, tags: list[str]) -> None:
        """Nothing to bring back: no weights or KV cache live here."""

    async def release(self) -> None:
        """Nothing to free."""

    async def update_weights(
        self, weights: Any, wire_format: str = "named_tensors", **kwargs: Any
    ) -> None:
        """Rank 0 saves and publishes the weights of ``global_steps`` (module docstring); every
        rank drains the generator, which may gather across ranks."""
        if wire_format != "named_tensors":
            raise ValueError(f"rollout.name=heddle takes whole named tensors, not {wire_format}")
        version = int(kwargs.get("global_steps") or 0)
        if not _is_rank_zero() or version < 1:
            for _ in weights:
                pass
            return
        weights_dir = self.heddle.get("weights_dir")
        if not weights_dir:
            raise ValueError(
                "set actor_rollout_ref.rollout.engine_kwargs.heddle.weights_dir: a folder "
                "every Heddle worker can read"
            )
        tensors = on_cpu(weights)
        folder = Path(str(weights_dir)) / f"v{version}"
        await asyncio.to_thread(save_weights, tensors, folder)
        from heddle.integrations.weights import publish_and_wait

        await publish_and_wait(weight_sync(self.heddle), version, folder)
        self.published.append(version)


def _is_rank_zero() -> bool:
    import torch.distributed as dist

    return not dist.is_available() or not dist.is_initialized() or dist.get_rank() == 0
