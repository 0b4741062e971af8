"""verl's trainer, as far as rollout goes, against a real Heddle (sim engine): verl's own config
(hydra, verl's ppo_trainer.yaml) names the replaced manager, verl loads it by that name, and
``generate_sequences`` on a ``DataProto`` built and repeated the way verl's trainer does returns
verl's batch: shapes, the response mask against the trajectories' tool spans, log-probs, reward
scores, group ids, a trajectory cut at verl's ``response_length`` and one aborted (masked, with
its reason). The checkpoint manager publishes the actor's weights as a Heddle weight version.

Skips without verl (``pip install -e '.[verl]'``); fails instead when HEDDLE_REQUIRE_VERL=1."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from integration_helpers import abort_when_started, expected_loss_mask, trace_task

from heddle.bus import ReplayQuery
from heddle.client import HeddleClient
from heddle.config import Settings
from heddle.events import WeightsPublished
from heddle.rollout.inprocess import InProcessDeployment

try:
    import verl
    from verl.protocol import DataProto
    from verl.utils.import_utils import load_class_from_fqn
except ImportError as exc:
    if os.environ.get("HEDDLE_REQUIRE_VERL") == "1":
        raise
    pytest.skip(f"verl is not installed ({exc}): pip install -e '.[verl]'", allow_module_level=True)

MANAGER = "heddle.integrations.verl.HeddleAgentLoopManager"
CHECKPOINTS = "heddle.integrations.verl.HeddleCheckpointManager"
PROMPT_LENGTH, RESPONSE_LENGTH, N = 64, 48, 2
WHOLE, CUT, HELD = [10, 7], [30, 30], [5, 5]  # CUT reaches 48 response tokens in its 2nd step


def verl_config(weights_dir: Path) -> Any:
    from hydra import compose, initialize_config_dir

    config_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    overrides = [
        f"+actor_rollout_ref.rollout.agent.agent_loop_manager_class={MANAGER}",
        f"+actor_rollout_ref.rollout.checkpoint_manager_class={CHECKPOINTS}",
        f"+actor_rollout_ref.rollout.checkpoint_engine.engine_kwargs.heddle.weights_dir={weights_dir}",
        f"actor_rollout_ref.rollout.prompt_length={PROMPT_LENGTH}",
        f"actor_rollout_ref.rollout.response_length={RESPONSE_LENGTH}",
        f"actor_rollout_ref.rollout.n={N}",
        "+heddle.environment=trace",
    ]
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return compose("ppo_trainer", overrides=overrides)


def trainer_batch() -> Any:
    """The dataset rows as verl's RLHFDataset gives them, with a uid each and repeated
    ``rollout.n`` times interleaved, as ``RayPPOTrainer.fit`` does before generating."""
    tasks = [
        trace_task("whole", WHOLE),
        trace_task("cut", CUT),
        trace_task("held", HELD, tool_s=800.0),  # aborted during its 2 s (wall) tool call
    ]
    rows = {
        "raw_prompt": [[{"role": "user", "content": t["id"]}] for t in tasks],
        "data_source": ["heddle/trace"] * 3,
        "reward_model": [{"ground_truth": "", "style": "rule"} for _ in tasks],
        "extra_info": [{"index": i, "heddle_task": t} for i, t in enumerate(tasks)],
        "uid": [f"u{i}" for i in range(3)],
    }
    arrays = {}
    for key, values in rows.items():
        array = np.empty(len(values), dtype=object)
        array[:] = values
        arrays[key] = array
    batch = DataProto.from_single_dict(arrays)
    batch.meta_info["global_steps"] = 1
    return batch.repeat(repeat_times=N, interleave=True)


async def test_generate_sequences_returns_verls_batch(
    heddle: InProcessDeployment, settings: Settings, tmp_path: Path
) -> None:
    config = verl_config(tmp_path / "weights")
    manager_class = load_class_from_fqn(
        config.actor_rollout_ref.rollout.agent.agent_loop_manager_class
    )
    manager = manager_class.create(
        config=config, llm_client=None, teacher_client=None, reward_loop_worker_handles=None
    )
    aborter = asyncio.create_task(abort_when_started(settings, ["t000004", "t000005"]))
    output = await asyncio.to_thread(manager.generate_sequences, trainer_batch())
    await aborter
    trajectories = manager.last_result.trajectories
    batch, extra = output.batch, output.non_tensor_batch
    assert batch["prompts"].shape == (6, PROMPT_LENGTH)
    assert batch["responses"].shape == batch["response_mask"].shape == (6, RESPONSE_LENGTH)
    assert batch["input_ids"].shape == batch["attention_mask"].shape == (6, 112)
    assert batch["position_ids"].shape == (6, 112)
    assert list(extra["heddle_group_id"]) == ["g00000"] * 2 + ["g00001"] * 2 + ["g00002"] * 2
    assert list(extra["uid"]) == ["u0", "u0", "u1", "u1", "u2", "u2"]
    assert list(extra["heddle_finish_reason"]) == ["stop"] * 2 + ["length"] * 2 + ["aborted"] * 2
    prompt = list(b"<|user|>\nwhole\n<|assistant|>\n")
    assert batch["prompts"][0, -len(prompt) :].tolist() == prompt
    assert batch["attention_mask"][0, : PROMPT_LENGTH - len(prompt)].sum() == 0
    for row, outputs in [(0, WHOLE), (1, WHOLE), (2, CUT), (3, CUT)]:
        mask = expected_loss_mask(outputs)[:RESPONSE_LENGTH]
        padded = mask + [0] * (RESPONSE_LENGTH - len(mask))
        assert batch["response_mask"][row].tolist() == padded
        logprobs = batch["rollout_log_probs"][row]
        assert logprobs[: len(mask)].tolist() == pytest.approx(trajectories[row].response_logprobs)
        assert logprobs[torch_mask(padded) == 0].abs().sum() == 0  # tools and padding: 0.0
        assert batch["heddle_logprob_mask"][row].tolist() == padded
        scores = batch["rm_scores"][row]
        assert scores.sum().item() == trajectories[row].reward == 0.0
    assert int(batch["attention_mask"][2, PROMPT_LENGTH:].sum()) == RESPONSE_LENGTH  # cut at 48
    assert list(extra["__num_turns__"][:4]) == [4, 4, 4, 4]  # prompt, generation, tool, generation
    for row in (4, 5):  # aborted: tokens kept, nothing trained on
        assert batch["response_mask"][row].sum() == 0 and batch["rm_scores"][row].sum() == 0
        assert extra["heddle_reason"][row].startswith("aborted")
        assert int(batch["attention_mask"][row, PROMPT_LENGTH:].sum()) == len(
            trajectories[row].response_token_ids
        )
    timing = output.meta_info["timing"]
    assert timing["heddle/makespan_s"] > 0 and timing["heddle/finish_reason/aborted"] == 2.0
    assert timing["heddle/num_trajectories"] == 6.0


def torch_mask(values: list[int]) -> Any:
    import torch

    return torch.tensor(values)


class RecordingActor:
    """Stands in for verl's actor worker group: writes a checkpoint folder as
    ``save_checkpoint`` does (a real one needs GPUs and a model)."""

    def __init__(self) -> None:
        self.saved: list[tuple[str, int]] = []

    def save_checkpoint(self, local_path: str, hdfs_path: Any, global_step: int) -> None:
        hf_dir = Path(local_path) / "huggingface"
        hf_dir.mkdir(parents=True)
        (hf_dir / "config.json").write_text("{}")
        self.saved.append((local_path, global_step))


async def test_the_checkpoint_manager_publishes_weight_versions(
    heddle: InProcessDeployment, settings: Settings, tmp_path: Path
) -> None:
    from verl.utils.config import omega_conf_to_dataclass

    config = verl_config(tmp_path / "weights")
    checkpoint_config = omega_conf_to_dataclass(config.actor_rollout_ref.rollout.checkpoint_engine)
    manager_class = load_class_from_fqn(config.actor_rollout_ref.rollout.checkpoint_manager_class)
    actor = RecordingActor()
    manager = manager_class(config=checkpoint_config, actor_wg=actor, replicas=[])
    manager.sleep_replicas()
    assert await asyncio.to_thread(manager.update_weights, 3) == {}
    expected = tmp_path / "weights" / "global_step_3" / "actor"
    assert actor.saved == [(str(expected), 3)]
    async with HeddleClient(settings, trainer="check") as client:
        query = ReplayQuery(filter_subjects=("heddle.evt.weights.3.published",), start_sequence=1)
        published = [r.message async for r in client.bus.replay_events(query)]
    assert len(published) == 1 and isinstance(published[0], WeightsPublished)
    assert str(expected / "huggingface") in str(published[0].source)
