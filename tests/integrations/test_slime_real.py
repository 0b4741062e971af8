"""The slime train loop of ``test_slime_train`` with slime's own classes: its ``Sample``, its
``RolloutDataSourceWithBuffer`` reading a JSONL prompt file with the tiny model's tokenizer, its
DAPO filter (``check_reward_nonzero_std_with_fallback``) and its rule-based reward model
(``--rm-type math`` through ``slime.rollout.rm_hub.async_rm``, on the decoded responses);
``generate_rollout`` returns slime's ``RolloutFnTrainOutput``.

slime is not on PyPI, so this runs only where a THUDM/slime checkout is importable
(``PYTHONPATH=<slime checkout>``; its rollout modules import on CPU); it skips elsewhere, CI
included (docs/integrations.md, "What was run")."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from test_slime_train import GROUP, PROMPTS, ROLLOUTS, Actor, slime_args
from tiny_hf import write_tiny_model

from heddle.config import Settings
from heddle.controlplane import ControlPlaneConfig, PredictorConfig
from heddle.integrations.slime import generate_rollout
from heddle.rollout.inprocess import InProcessDeployment, InProcessOptions

try:
    from slime.rollout.base_types import RolloutFnTrainOutput
    from slime.rollout.data_source import RolloutDataSourceWithBuffer
    from slime.utils.types import Sample
except ImportError as exc:
    pytest.skip(f"THUDM/slime is not importable ({exc})", allow_module_level=True)


def slime_data_source(folder: Path, model: Path) -> RolloutDataSourceWithBuffer:
    prompts = folder / "prompts.jsonl"
    with prompts.open("w") as out:
        for i in range(PROMPTS * ROLLOUTS * 2):
            task = {"target": i % 4, "id": f"c{i}"}
            row = {"prompt": str(i % 4), "label": str(i % 4), "metadata": {"heddle_task": task}}
            out.write(json.dumps(row) + "\n")
    args = SimpleNamespace(
        rollout_global_dataset=True, prompt_data=str(prompts), hf_checkpoint=str(model),
        dump_details=None, rollout_max_prompt_len=None, input_key="prompt",
        multimodal_keys=None, label_key="label", metadata_key="metadata", tool_key=None,
        apply_chat_template=False, apply_chat_template_kwargs={}, rollout_seed=0,
        rollout_shuffle=False, buffer_filter_path=None, n_samples_per_prompt=GROUP,
    )  # fmt: skip
    return RolloutDataSourceWithBuffer(args)


def train(args: SimpleNamespace, model: Path, source: RolloutDataSourceWithBuffer) -> list:
    actor, outputs = Actor(model, args), []
    actor.update_weights()
    for rollout_id in range(ROLLOUTS):
        output = generate_rollout(args, rollout_id, source)
        outputs.append(output)
        actor.train(output.samples)
        actor.update_weights()
    return outputs


async def test_slime_classes_filter_and_reward_model(nats_url: str, tmp_path: Path) -> None:
    model = write_tiny_model(tmp_path / "model")
    settings = Settings(nats_url=nats_url, data_dir=tmp_path / "heddle")
    options = InProcessOptions(
        num_workers=1, engine="torch", engine_options={"model": str(model)},
        control_plane=ControlPlaneConfig(predictor=PredictorConfig("oracle"), worker_timeout_s=60),
    )  # fmt: skip
    args = slime_args(tmp_path / "disk")
    args.heddle_nats_url = nats_url
    args.rm_type = "math"
    args.custom_rm_path = args.reward_key = None  # slime's defaults, read by its rm and filter
    args.group_rm = False
    args.over_sampling_batch_size = PROMPTS * 2
    args.dynamic_sampling_filter_path = (
        "slime.rollout.filter_hub.dynamic_sampling_filters.check_reward_nonzero_std_with_fallback"
    )
    source = slime_data_source(tmp_path, model)
    async with InProcessDeployment(settings, options):
        outputs = await asyncio.to_thread(train, args, model, source)
    for rollout_id, output in enumerate(outputs):
        assert isinstance(output, RolloutFnTrainOutput) and len(output.samples) == PROMPTS
        samples = [sample for group in output.samples for sample in group]
        assert all(isinstance(sample, Sample) and sample.response for sample in samples)
        assert {tuple(s.weight_versions) for s in samples} == {(str(rollout_id + 1),)}
        assert {s.reward for s in samples} <= {0, 1}  # slime's math grader, not the environment
