"""Heddle as verl's rollout: a replacement ``AgentLoopManager`` and ``CheckpointEngineManager``
that verl's trainer loads by dotted name (docs/integrations.md has the configuration)::

    actor_rollout_ref.rollout.agent.agent_loop_manager_class=heddle.integrations.verl.HeddleAgentLoopManager
    actor_rollout_ref.rollout.checkpoint_manager_class=heddle.integrations.verl.HeddleCheckpointManager

``HeddleAgentLoopManager.create(config=..., llm_client=..., teacher_client=...,
reward_loop_worker_handles=...)`` takes what verl 0.9.1's trainer passes its manager (the LLM
and teacher clients are not used: Heddle's workers generate). ``generate_sequences(prompts)``
turns the batch (rows repeated ``rollout.n`` times per ``uid``) into one Heddle rollout with that
group size, streams its trajectories and returns verl's ``DataProto``
(``heddle.integrations.verl_batch``), the rollout's figures in ``meta_info["timing"]`` (which
verl's trainer adds to its step metrics). Settings: the config's ``heddle`` section
(``nats_url``, ``trainer``, ``environment``, ``policy``, ``tokenizer``, ``max_steps``,
``max_new_tokens``, ``seed``, ``pad_token_id``, ``weights_dir``), else ``HEDDLE_*``.

``HeddleCheckpointManager.update_weights(global_steps)`` saves the actor's weights with
verl's ``actor_wg.save_checkpoint`` under ``heddle.weights_dir`` (a folder every Heddle worker
reads) and publishes ``<dir>/global_step_<n>/actor/huggingface`` as Heddle weight version
``n`` (``HeddleClient.publish_weights``), so the next batch runs on it. verl hands this manager
its ``checkpoint_engine`` config, so its settings are ``checkpoint_engine.engine_kwargs.heddle``
(``weights_dir``, ``nats_url``, ``trainer``). The replica calls
verl makes around generation (sleep, wake up, abort, resume) have nothing to do: Heddle's
workers load weights between generations by themselves.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from heddle.client import HeddleClient
from heddle.config import load_settings
from heddle.events import WeightsPublished
from heddle.integrations import verl_compat, verl_v1
from heddle.integrations.batch import BatchResult, run_batch, run_sync
from heddle.integrations.verl_batch import request_of, to_data_proto


def heddle_section(config: Any) -> Mapping[str, Any]:
    """The ``heddle`` section of verl's config ({} when absent)."""
    section = config.get("heddle") if hasattr(config, "get") else None
    return dict(section) if section else {}


def checkpoint_section(config: Any) -> Mapping[str, Any]:
    """The ``heddle`` entry of a ``CheckpointEngineConfig``'s ``engine_kwargs`` (verl hands its
    checkpoint manager that config, not the trainer's); {} when absent."""
    engine_kwargs = getattr(config, "engine_kwargs", None) or {}
    section = engine_kwargs.get("heddle") if hasattr(engine_kwargs, "get") else None
    return dict(section) if section else {}


def _client(heddle: Mapping[str, Any], default_trainer: str) -> HeddleClient:
    settings = load_settings(nats_url=heddle.get("nats_url"))
    return HeddleClient(settings, trainer=str(heddle.get("trainer", default_trainer)))


class HeddleAgentLoopManager:
    """verl's ``AgentLoopManager`` interface, backed by Heddle (module docstring)."""

    def __init__(
        self,
        config: Any,
        llm_client: Any = None,
        teacher_client: Any = None,
        reward_loop_worker_handles: Any = None,
    ) -> None:
        verl_compat.require_verl()
        self.config = config
        self.rollout_config = config.actor_rollout_ref.rollout
        self.heddle = heddle_section(config)
        self.reward_loop_worker_handles = reward_loop_worker_handles
        self.last_result: BatchResult | None = None
        self.sink: verl_v1.TransferQueueSink | None = None
        self.streams: list[threading.Thread] = []
        self.rollout_ids: list[str] = []
        """The V1 trainer's rollouts, in submission order."""

    @classmethod
    def create(cls, *args: Any, **kwargs: Any) -> HeddleAgentLoopManager:
        """What verl's trainer calls (``AgentLoopManager.create(config=..., ...)``)."""
        return cls(*args, **kwargs)

    def generate_sequences(self, prompts: Any) -> Any:
        """One Heddle rollout for ``prompts``. The legacy trainer's ``DataProto``: verl's
        ``DataProto`` of its trajectories, one row per input row, in order (callable with or
        without ``await``, as verl's own). The V1 trainer's ``TensorDict``: None once the
        rollout is submitted; its trajectories go to TransferQueue as they finish
        (``heddle.integrations.verl_v1``)."""
        if not verl_compat.is_data_proto(prompts):
            return self._generate_into_transfer_queue(prompts)
        return _auto_generate(self, prompts)

    def _generate_into_transfer_queue(self, prompts: Any) -> None:
        batch = verl_v1.prompt_batch(prompts, self.rollout_config)
        request = verl_v1.request_of_rows(batch, self.rollout_config, self.heddle)
        rollout = verl_v1.V1Rollout(
            batch, request, _client(self.heddle, "verl"), self._sink(),
            int(self.rollout_config.response_length),
        )  # fmt: skip
        rollout_id, thread = verl_v1.start(rollout)
        self.streams.append(thread)
        self.rollout_ids.append(rollout_id)

    def _sink(self) -> verl_v1.TransferQueueSink:
        if self.sink is None:
            self.sink = verl_v1.TransferQueueSink()
        return self.sink

    async def generate_sequences_async(self, prompts: Any) -> Any:
        request = request_of(prompts, self.rollout_config, self.heddle)
        async with _client(self.heddle, "verl") as client:
            result = await run_batch(client, request)
        self.last_result = result
        keep_input = self.reward_loop_worker_handles is None
        return to_data_proto(
            result.trajectories,
            self.rollout_config,
            pad_token_id=int(self.heddle.get("pad_token_id", 0)),
            input_non_tensor=prompts.non_tensor_batch if keep_input else None,
            metrics=result.metrics,
        )


def _auto_generate(manager: HeddleAgentLoopManager, prompts: Any) -> Any:
    return verl_compat.auto_await(manager.generate_sequences_async)(prompts)


WeightExporter = Callable[[int], Path]
"""Writes the actor's weights of step ``n`` and returns the path Heddle's workers load."""


class HeddleCheckpointManager:
    """verl's ``CheckpointEngineManager`` interface, publishing weights to Heddle."""

    def __init__(
        self,
        config: Any,
        actor_wg: Any,
        replicas: Any = None,
        *,
        heddle: Mapping[str, Any] | None = None,
        exporter: WeightExporter | None = None,
    ) -> None:
        self.config = config
        self.actor_wg = actor_wg
        self.replicas = replicas or []
        self.heddle = dict(heddle) if heddle is not None else checkpoint_section(config)
        self.exporter = exporter or self._save_with_verl
        self.published: list[WeightsPublished] = []

    def _save_with_verl(self, global_steps: int) -> Path:
        weights_dir = self.heddle.get("weights_dir")
        if not weights_dir:
            raise ValueError("set heddle.weights_dir: a folder every Heddle worker can read")
        actor = Path(str(weights_dir)) / f"global_step_{global_steps}" / "actor"
        self.actor_wg.save_checkpoint(str(actor), None, global_steps)
        return actor / "huggingface"

    def update_weights(self, global_steps: int | None = None) -> dict[str, float]:
        """Export the actor's weights of ``global_steps`` and publish them as that Heddle
        weight version; verl's sync metrics ({} here, as verl's naive backend returns)."""
        version = int(global_steps or 0)
        path = self.exporter(version)
        published = run_sync(self._publish(version, path))
        self.published.append(published)
        return {}

    async def _publish(self, version: int, path: Path) -> WeightsPublished:
        async with _client(self.heddle, "verl") as client:
            return await client.publish_weights(version, path)

    # verl calls these around generation; Heddle's workers need none of them.
    def sleep_replicas(self) -> None: ...
    def wake_up_replicas(self) -> None: ...
    def abort_replicas(self, reject_request: bool = False) -> None: ...
    def resume_generation_replicas(self) -> None: ...
    def release_kv_cache_replicas(self) -> None: ...
    def resume_kv_cache_replicas(self) -> None: ...
    def add_replicas(self, replicas: Any) -> None: ...
    def remove_replicas(self, replicas: Any) -> None: ...
