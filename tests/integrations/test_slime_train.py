"""slime's training loop on CPU against a real Heddle (torch engine, the tiny model): two
rollouts and two training steps in the order of slime's ``train.py``, its weights synced by
slime's disk transport with Heddle's post-write hook.

slime itself cannot run here: it is not on PyPI (the PyPI ``slime`` is another project) and its
only training backend is Megatron on CUDA. So this test is the closest CPU stand-in for its
``train.py`` (docs/integrations.md, "What was run"): ``actor_model.update_weights()`` once
before the loop, then per rollout ``generate_rollout`` (Heddle's, as slime's RolloutManager
calls it), one policy-gradient step on the samples (GRPO advantages over each group, the
samples' loss masks, plus a small likelihood term), and ``update_weights()``. That writes a
Hugging Face checkpoint to ``--update-weight-disk-dir``/``weight_v<N>`` and calls
``--custom-update-weight-post-write-path`` with ``(args, version_dir, rollout_engines)``, as
slime's ``UpdateWeightFromDisk`` does. Rollout ``r`` then runs on slime's weight version
``r + 1`` (the launch weights are version 1), and each sample says so in ``weight_versions``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
from slime_types import DataSource, Sample
from tiny_hf import write_tiny_model

from heddle.bus import Bus, ReplayQuery
from heddle.config import Settings
from heddle.controlplane import ControlPlaneConfig, PredictorConfig
from heddle.events import WeightsLoaded, WeightsPublished
from heddle.examples.grpo_train import group_advantages, sequence_logprobs
from heddle.integrations.slime import generate_rollout
from heddle.integrations.slime_hooks import load_function
from heddle.rollout.inprocess import InProcessDeployment, InProcessOptions

GROUP, PROMPTS, ROLLOUTS = 4, 2, 2


def slime_args(disk: Path) -> SimpleNamespace:
    """slime's flags for this run, as ``parse_args`` leaves them on ``args``."""
    return SimpleNamespace(
        rollout_batch_size=PROMPTS,
        n_samples_per_prompt=GROUP,
        rollout_max_response_len=4,
        rollout_temperature=1.0,
        update_weight_transport="disk",
        update_weight_disk_dir=str(disk),
        custom_update_weight_post_write_path="heddle.integrations.slime.publish_weights",
        heddle_environment="token_class",
        heddle_max_steps=1,
        heddle_wait_workers=1,
        heddle_wait_timeout_s=300.0,
    )


class Actor:
    """The trainer's half: the model, an optimizer, slime's disk weight sync."""

    def __init__(self, folder: Path, args: SimpleNamespace) -> None:
        from transformers import AutoModelForCausalLM

        self.module = AutoModelForCausalLM.from_pretrained(folder)
        self.optimizer = torch.optim.Adam(self.module.parameters(), lr=1e-2)
        self.args = args
        self.version = 0

    def update_weights(self) -> Path:
        self.version += 1
        version_dir = Path(self.args.update_weight_disk_dir) / f"weight_v{self.version:06d}"
        self.module.save_pretrained(version_dir)
        hook = load_function(self.args.custom_update_weight_post_write_path)
        hook(self.args, str(version_dir), [])
        return version_dir

    def train(self, groups: list[list[Any]]) -> float:
        """GRPO's policy gradient, plus a small likelihood term so every step moves the
        weights even when each group's rewards tie (then every advantage is 0)."""
        batch = [_trajectory(sample, g) for g, group in enumerate(groups) for sample in group]
        advantages = torch.tensor(group_advantages(batch))
        self.module.train()
        logprobs = sequence_logprobs(self.module, batch).sum(dim=1)
        loss = -(advantages * logprobs).mean() - 1e-2 * logprobs.mean()
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        self.module.eval()
        return float(loss.detach())


def _trajectory(sample: Any, group: int) -> SimpleNamespace:
    """A sample as ``policy_gradient_step`` reads a trajectory."""
    prompt_length = len(sample.tokens) - sample.response_length
    return SimpleNamespace(
        prompt_token_ids=sample.tokens[:prompt_length],
        response_token_ids=sample.tokens[prompt_length:],
        loss_mask=sample.loss_mask,
        reward=float(sample.reward),
        group_id=str(group),
    )


def data_source() -> DataSource:
    tasks = [{"target": i % 4, "id": f"c{i}"} for i in range(PROMPTS * ROLLOUTS)]
    prompts = [Sample(prompt=[{"role": "user", "content": str(t["target"])}],
                      metadata={"heddle_task": t}) for t in tasks]  # fmt: skip
    return DataSource(prompts, n_samples_per_prompt=GROUP)


def train(args: SimpleNamespace, model: Path) -> tuple[list[list[list[Any]]], list[Path]]:
    """slime's ``train.py`` loop, minus Ray and Megatron (module docstring)."""
    actor, source = Actor(model, args), data_source()
    versions = [actor.update_weights()]  # "Always push actor weights to rollout"
    rollouts = []
    for rollout_id in range(ROLLOUTS):
        groups = generate_rollout(args, rollout_id, source)
        rollouts.append(groups)
        actor.train(groups)
        versions.append(actor.update_weights())
    return rollouts, versions


async def events(settings: Settings, subject: str) -> list[Any]:
    async with Bus(settings) as bus:
        query = ReplayQuery(filter_subjects=(subject,), start_sequence=1)
        return [record.message async for record in bus.replay_events(query)]


async def test_slime_train_loop_advances_weight_versions(nats_url: str, tmp_path: Path) -> None:
    model = write_tiny_model(tmp_path / "model")
    settings = Settings(nats_url=nats_url, data_dir=tmp_path / "heddle")
    options = InProcessOptions(
        num_workers=1, engine="torch", engine_options={"model": str(model)},
        control_plane=ControlPlaneConfig(predictor=PredictorConfig("oracle"), worker_timeout_s=60),
    )  # fmt: skip
    args = slime_args(tmp_path / "disk")
    args.heddle_nats_url = nats_url
    async with InProcessDeployment(settings, options):
        rollouts, version_dirs = await asyncio.to_thread(train, args, model)
    for rollout_id, groups in enumerate(rollouts):
        samples = [sample for group in groups for sample in group]
        assert len(samples) == PROMPTS * GROUP
        assert {tuple(s.weight_versions) for s in samples} == {(str(rollout_id + 1),)}
    published = await events(settings, "heddle.evt.weights.*.published")
    assert [e.weight_version for e in published if isinstance(e, WeightsPublished)] == [1, 2, 3]
    loaded = await events(settings, "heddle.evt.weights.*.loaded.*")
    assert sorted(e.weight_version for e in loaded if isinstance(e, WeightsLoaded)) == [1, 2, 3]
    first, last = (load_weights(path) for path in (version_dirs[0], version_dirs[-1]))
    assert any(not torch.equal(first[name], last[name]) for name in first)  # the actor moved


def load_weights(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))
