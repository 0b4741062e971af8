"""verl's own entry point, as a user runs it: ``python -m verl.trainer.main_ppo`` with verl's
default trainer (``trainer.use_v1=true``: ``TaskRunnerV1``, TransferQueue, its replay buffer, an
FSDP2 actor) on CPU with a tiny model, two training steps, Heddle as the agent-loop manager and
as the rollout (``rollout.name=heddle``, docs/integrations.md).

Heddle runs the same model folder on its torch engine (one worker). Each step verl hands the
prompts to ``HeddleAgentLoopManager``, reads the trajectories back from TransferQueue, computes
log-probs, GRPO advantages and the actor's loss, updates the actor and syncs the weights, which
Heddle's rollout adapter publishes as version ``step``; the worker loads them before the next
rollout. So rollout 1 runs on version 0, rollout 2 on version 1, and version 2 differs from
version 1 (the actor moved).

verl knows no CPU platform; ``verl_cpu/verl_cpu_platform.py`` registers one (test only). Skips
without verl or TransferQueue; fails instead when HEDDLE_REQUIRE_VERL=1 (.ci/run).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest
from tiny_hf import write_tiny_model

from heddle.bus import Bus, ReplayQuery
from heddle.config import Settings
from heddle.controlplane import ControlPlaneConfig, PredictorConfig
from heddle.events import Completed, RolloutSubmitted, WeightsLoaded, WeightsPublished
from heddle.rollout.inprocess import InProcessDeployment, InProcessOptions

try:
    import pandas as pd
    import transfer_queue  # noqa: F401
    import verl  # noqa: F401
except ImportError as exc:
    if os.environ.get("HEDDLE_REQUIRE_VERL") == "1":
        raise
    pytest.skip(f"verl or transfer_queue missing ({exc}): see .ci/run", allow_module_level=True)

pytestmark = pytest.mark.timeout(900)

REPO = Path(__file__).resolve().parents[2]
PLATFORM_DIR = Path(__file__).resolve().parent / "verl_cpu"
STEPS, PROMPTS, N = 2, 2, 4
MANAGER = "heddle.integrations.verl.HeddleAgentLoopManager"


def overrides(tmp: Path, model: Path, data: Path) -> list[str]:
    """What a user sets (docs/integrations.md, "verl's V1 trainer"), then what a 2-core CPU
    host needs: sizes, one storage unit and reward worker, verl's CPU engine settings."""
    return [
        f"+actor_rollout_ref.rollout.agent.agent_loop_manager_class={MANAGER}",
        "actor_rollout_ref.rollout.name=heddle",
        f"+actor_rollout_ref.rollout.engine_kwargs.heddle.weights_dir={tmp / 'weights'}",
        "+actor_rollout_ref.rollout.engine_kwargs.heddle.wait_workers=1",
        "+heddle.environment=token_class",
        f"data.train_files={data}",
        f"data.val_files={data}",
        f"data.train_batch_size={PROMPTS}",
        "data.max_prompt_length=32",
        "data.max_response_length=8",
        "data.dataloader_num_workers=0",
        f"actor_rollout_ref.model.path={model}",
        "actor_rollout_ref.model.use_remove_padding=False",
        "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",
        "actor_rollout_ref.actor.strategy=fsdp2",
        "actor_rollout_ref.actor.optim.lr=1e-3",
        "actor_rollout_ref.actor.entropy_coeff=0.01",  # a gradient even when every reward ties
        f"actor_rollout_ref.actor.ppo_mini_batch_size={PROMPTS}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={PROMPTS * N}",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={PROMPTS * N}",
        f"actor_rollout_ref.rollout.n={N}",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        "actor_rollout_ref.rollout.prompt_length=32",
        "actor_rollout_ref.rollout.response_length=8",
        "actor_rollout_ref.actor.use_kl_loss=False",
        "algorithm.adv_estimator=grpo",
        "algorithm.use_kl_in_reward=False",
        "trainer.device=cpu",
        "trainer.n_gpus_per_node=1",
        "trainer.nnodes=1",
        f"trainer.total_training_steps={STEPS}",
        "trainer.val_before_train=False",
        "trainer.test_freq=-1",
        "trainer.save_freq=-1",
        "trainer.logger=[console]",
        f"trainer.default_local_dir={tmp / 'checkpoints'}",
        "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
        "reward.num_workers=1",
        "+ray_kwargs.ray_init.num_gpus=1",
        "+ray_kwargs.ray_init.num_cpus=8",
    ]


def write_dataset(path: Path) -> Path:
    """verl's RLHF dataset columns; each task a ``token_class`` target, its prompt the class."""
    rows = []
    for i in range(PROMPTS * STEPS):
        target = i % 4
        rows.append({
            "data_source": "heddle/token_class",
            "prompt": [{"role": "user", "content": str(target)}],
            "reward_model": {"style": "rule", "ground_truth": str(target)},
            "extra_info": {"index": i, "heddle_task": {"target": target, "id": f"c{i}"}},
        })  # fmt: skip
    pd.DataFrame(rows).to_parquet(path)
    return path


def child_environment(nats_url: str) -> dict[str, str]:
    path = [str(REPO), str(PLATFORM_DIR), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {
        **os.environ,
        "HEDDLE_NATS_URL": nats_url,
        "PYTHONPATH": os.pathsep.join(path),
        "VERL_PLATFORM": "cpu",
        "VERL_USE_EXTERNAL_MODULES": "heddle.integrations.verl_plugin,verl_cpu_platform",
        "RAY_DEDUP_LOGS": "0",
        "TOKENIZERS_PARALLELISM": "false",
    }


async def run_main_ppo(tmp: Path, model: Path, nats_url: str) -> tuple[int, str]:
    """verl's run and its output. Written to a file as it goes, so a run that does not end
    in time fails with what it printed, not with a bare ``TimeoutError``."""
    data = write_dataset(tmp / "train.parquet")
    log = tmp / "main_ppo.log"
    with log.open("wb") as out:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "verl.trainer.main_ppo", *overrides(tmp, model, data),
            cwd=str(tmp), env=child_environment(nats_url), stdout=out, stderr=out,
            start_new_session=True,  # its Ray processes go with it when it is killed
        )  # fmt: skip
        try:
            await asyncio.wait_for(process.wait(), timeout=840)
        except TimeoutError:
            os.killpg(process.pid, signal.SIGKILL)
            await process.wait()
            output = log.read_text(errors="replace")
            pytest.fail(f"verl's main_ppo did not end in 840 s; its output:\n{output[-8000:]}")
    return int(process.returncode or 0), log.read_text(errors="replace")


async def stream_events(settings: Settings, subject: str) -> list[Any]:
    async with Bus(settings) as bus:
        query = ReplayQuery(filter_subjects=(subject,), start_sequence=1)
        return [record.message async for record in bus.replay_events(query)]


def tensors(path: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    return load_file(str(path / "model.safetensors"))


async def test_main_ppo_v1_trains_on_heddle_rollouts(nats_url: str, tmp_path: Path) -> None:
    model = write_tiny_model(tmp_path / "model")
    settings = Settings(nats_url=nats_url, data_dir=tmp_path / "heddle")
    options = InProcessOptions(
        num_workers=1, engine="torch", engine_options={"model": str(model)},
        # verl's processes share the host's cores: a late heartbeat is load, not a failure.
        control_plane=ControlPlaneConfig(predictor=PredictorConfig("oracle"), worker_timeout_s=120),
    )  # fmt: skip
    async with InProcessDeployment(settings, options):
        returncode, output = await run_main_ppo(tmp_path, model, nats_url)
    assert returncode == 0, output[-6000:]
    for step in range(1, STEPS + 1):  # verl's own step metrics: its loss ran on the batch
        assert f"step:{step} -" in output and "actor/pg_loss" in output

    submitted = await stream_events(settings, "heddle.evt.rollout.*.submitted")
    rollouts = [e for e in submitted if isinstance(e, RolloutSubmitted)]
    assert len(rollouts) == STEPS
    assert [e.labels["global_steps"] for e in rollouts] == [str(s) for s in range(1, STEPS + 1)]
    for step, rollout in enumerate(rollouts, start=1):
        subject = f"heddle.evt.traj.{rollout.rollout_id}.*.completed.*"
        completed = await stream_events(settings, subject)
        versions = {tuple(e.weight_versions) for e in completed if isinstance(e, Completed)}
        assert len(completed) == PROMPTS * N and versions == {(step - 1,)}

    published = await stream_events(settings, "heddle.evt.weights.*.published")
    assert [e.weight_version for e in published if isinstance(e, WeightsPublished)] == [1, 2]
    loaded = await stream_events(settings, "heddle.evt.weights.*.loaded.*")
    assert sorted(e.weight_version for e in loaded if isinstance(e, WeightsLoaded)) == [1, 2]
    first, second = tensors(tmp_path / "weights" / "v1"), tensors(tmp_path / "weights" / "v2")
    assert first.keys() == second.keys()
    assert any(not (first[k] == second[k]).all() for k in first)  # the actor moved
