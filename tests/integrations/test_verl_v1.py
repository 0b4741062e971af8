"""verl's V1 trainer's side of the manager and the rollout, against a real Heddle (sim engine):
the prompts as ``TaskRunnerV1`` builds them (``tu.get_tensordict`` of the collated rows, a
``uid`` each, ``global_steps``) go out as one rollout; what comes back is put into TransferQueue
as verl's TQ worker puts it: per prompt ``running`` then ``finished``, per trajectory the key
``<uid>_<session>_0`` with its fields and tags, an aborted trajectory masked with its reason.
The sink records instead of writing a TransferQueue (``test_verl_main_ppo`` runs the real one);
its fields still go through verl's ``list_of_dict_to_tensordict``.

``rollout.name=heddle``: the plugin registers it in verl's two registries, and the in-worker
adapter saves and publishes the weights verl syncs (tied tensors included).

Skips without verl; fails instead when HEDDLE_REQUIRE_VERL=1."""

from __future__ import annotations

import asyncio
import os
import tomllib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from integration_helpers import abort_when_started, expected_loss_mask, trace_task

from heddle.bus import Bus, ReplayQuery
from heddle.config import Settings
from heddle.events import WeightsPublished
from heddle.integrations import verl_compat
from heddle.rollout.inprocess import InProcessDeployment

try:
    import torch
    from verl.utils import tensordict_utils as tu
except ImportError as exc:
    if os.environ.get("HEDDLE_REQUIRE_VERL") == "1":
        raise
    pytest.skip(f"verl is not installed ({exc}): pip install -e '.[verl]'", allow_module_level=True)

from test_verl import verl_config

N = 2
WHOLE, HELD = [10, 7], [5, 5]


class RecordingSink:
    """What would be written to TransferQueue, in order."""

    def __init__(self) -> None:
        self.statuses: list[tuple[str, str, str]] = []
        self.rows: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}

    def prompt_status(self, uids: list[str], partition_id: str, status: str) -> None:
        self.statuses += [(uid, partition_id, status) for uid in uids]

    def trajectories(self, keys: Any, partition_id: str, fields: Any, tags: Any) -> None:
        verl_compat.list_of_dict_to_tensordict(list(fields))  # what the real sink stores
        for key, field, tag in zip(keys, fields, tags, strict=True):
            self.rows[key] = (field, tag)


def v1_prompts() -> Any:
    """Two prompts as ``PPOTrainer._fetch_one_gen_batch`` hands them over."""
    tasks = [trace_task("whole", WHOLE), trace_task("held", HELD, tool_s=800.0)]
    rows = {
        "raw_prompt": [[{"role": "user", "content": t["id"]}] for t in tasks],
        "data_source": ["heddle/trace"] * 2,
        "reward_model": [{"ground_truth": "", "style": "rule"} for _ in tasks],
        "extra_info": [{"index": i, "heddle_task": t} for i, t in enumerate(tasks)],
        "index": [0, 1],
        "uid": ["u-whole", "u-held"],
    }
    batch = {key: _objects(values) for key, values in rows.items()}
    tensordict = tu.get_tensordict(batch)
    tu.assign_non_tensor_data(tensordict, "global_steps", 3)
    return tensordict


def _objects(values: list[Any]) -> np.ndarray:
    array = np.empty(len(values), dtype=object)
    array[:] = values
    return array


async def test_v1_prompts_stream_into_transfer_queue(
    heddle: InProcessDeployment, settings: Settings, tmp_path: Path
) -> None:
    from heddle.integrations.verl import HeddleAgentLoopManager

    manager = HeddleAgentLoopManager.create(config=verl_config(tmp_path / "weights"))
    manager.sink = sink = RecordingSink()
    aborter = asyncio.create_task(abort_when_started(settings, ["t000002", "t000003"]))
    assert await asyncio.to_thread(manager.generate_sequences, v1_prompts()) is None
    await aborter
    await asyncio.to_thread(manager.streams[0].join, 120)
    assert not manager.streams[0].is_alive()
    assert sink.statuses[:2] == [("u-whole", "train", "running"), ("u-held", "train", "running")]
    assert sorted(sink.statuses[2:]) == [("u-held", "train", "finished"),
                                         ("u-whole", "train", "finished")]  # fmt: skip
    assert sorted(sink.rows) == ["u-held_0_0", "u-held_1_0", "u-whole_0_0", "u-whole_1_0"]
    whole, whole_tags = sink.rows["u-whole_1_0"]
    mask = expected_loss_mask(WHOLE)
    assert whole["response_mask"].tolist() == whole["loss_mask"].tolist() == mask
    assert len(whole["prompts"]) + len(mask) == len(whole["input_ids"])
    assert whole["position_ids"].tolist() == list(range(len(whole["input_ids"])))
    assert whole["rollout_log_probs"].shape == whole["rm_scores"].shape == (len(mask),)
    assert whole["session_id"] == 1 and whole["uid"] == "u-whole" and whole["num_turns"] == 4
    assert whole["global_steps"] == 3 and whole["extra_info"]["index"] == 0
    assert whole["heddle_finish_reason"] == "stop" and whole["heddle_traj_id"] == "t000001"
    lengths = {"prompt_len": len(whole["prompts"]), "response_len": len(mask),
               "seq_len": len(whole["input_ids"])}  # fmt: skip
    versions = {"min_global_steps": 0, "max_global_steps": 0}
    assert whole_tags == {"status": "success", "global_steps": 3, **lengths, **versions}
    held, _ = sink.rows["u-held_0_0"]
    assert held["heddle_reason"].startswith("aborted")
    assert held["response_mask"].sum() == 0 and held["rm_scores"].sum() == 0


def test_uneven_group_sizes_are_refused(tmp_path: Path) -> None:
    from heddle.integrations.verl_v1 import prompt_batch

    batch = v1_prompts()
    tu.assign_non_tensor_data(batch, "validate", True)
    config = verl_config(tmp_path)
    assert prompt_batch(batch, config.actor_rollout_ref.rollout).partition_id == "val"
    batch.set("__rollout_n__", torch.tensor([1, 2]))
    with pytest.raises(ValueError, match="one group size"):
        prompt_batch(batch, config.actor_rollout_ref.rollout)


def test_the_plugin_registers_rollout_heddle() -> None:
    from verl.workers.rollout.base import get_rollout_class
    from verl.workers.rollout.replica import RolloutReplica, get_rollout_replica_class

    import heddle.integrations.verl_plugin  # noqa: F401
    from heddle.integrations.verl_rollout import HeddleServerAdapter

    assert get_rollout_class("heddle", "async") is HeddleServerAdapter
    assert issubclass(get_rollout_replica_class("heddle"), RolloutReplica)
    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    plugins = pyproject["project"]["entry-points"]["verl.plugins"]
    assert plugins == {"heddle": "heddle.integrations.verl_plugin"}


async def test_the_adapter_publishes_synced_weights(
    heddle: InProcessDeployment, settings: Settings, tmp_path: Path
) -> None:
    from safetensors.torch import load_file
    from verl.utils.config import omega_conf_to_dataclass

    from heddle.integrations.verl_rollout import HeddleServerAdapter

    config = verl_config(tmp_path).actor_rollout_ref
    config.rollout.name = "heddle"
    rollout = omega_conf_to_dataclass(config.rollout)
    rollout.engine_kwargs = {"heddle": {"weights_dir": str(tmp_path / "w")}}
    adapter = HeddleServerAdapter(rollout, None, None)  # the model config is not read
    embedding = torch.arange(6.0).reshape(3, 2)

    def weights() -> Any:  # tied: one tensor under two names
        yield from [("embed.weight", embedding), ("lm_head.weight", embedding)]

    await adapter.update_weights(weights(), global_steps=0)  # verl's sync before step 1
    await adapter.update_weights(weights(), global_steps=3)
    assert adapter.published == [3] and not (tmp_path / "w" / "v0").exists()
    saved = load_file(str(tmp_path / "w" / "v3" / "model.safetensors"))
    assert saved["embed.weight"].tolist() == saved["lm_head.weight"].tolist()
    async with Bus(settings) as bus:
        query = ReplayQuery(filter_subjects=("heddle.evt.weights.*.published",), start_sequence=1)
        published = [r.message async for r in bus.replay_events(query)]
    assert [p.weight_version for p in published if isinstance(p, WeightsPublished)] == [3]
    with pytest.raises(ValueError, match="named tensors"):
        await adapter.update_weights(weights(), wire_format="delta_flush", global_steps=4)
