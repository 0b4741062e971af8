"""slime on Heddle: its rollout function and its weight sync.

- ``--rollout-function-path heddle.integrations.slime.generate_rollout``:
  ``generate_rollout(args, rollout_id, data_source, evaluation=False)`` runs slime's rollout
  loop on Heddle (``heddle.integrations.slime_loop``: over-sampling, dynamic filter, sample
  hooks, reward, aborted groups) and returns ``rollout_batch_size`` groups of filled samples
  (``heddle.integrations.slime_samples``), as slime's ``RolloutFnTrainOutput`` with the
  rollout's metrics when slime is importable, else the plain list (slime's ``call_rollout_fn``
  wraps it). Each group is one prompt's ``n_samples_per_prompt`` samples (group size = the
  group's length).
- ``--update-weight-transport disk --update-weight-disk-dir DIR
  --custom-update-weight-post-write-path heddle.integrations.slime.publish_weights``: after
  slime writes the actor's weights to ``DIR/weight_v<N>`` (``N`` counting up from 1, the launch
  weights), rank 0 publishes that folder as Heddle weight version ``N``; with
  ``heddle_wait_workers: W`` it waits until W workers loaded it. A sample's
  ``weight_versions`` are then slime's own version numbers.

Prompts: the samples' ``tokens`` when every group has them (the trainer's ids), else their
``prompt`` when every one is a chat (``[{"role", "content"}]``), else the environment builds the
prompt from the task. The task is ``metadata["heddle_task"]`` when given, else
``{"question": <prompt text>, "answer": label}``. Options come from ``args`` (slime's flags and
``heddle_*`` keys of a ``--custom-config-path`` file; ``rollout_options``). ``evaluation=True``
raises ``ValueError``: slime's ``--eval-function-path`` keeps its own evaluation rollout, and so
does ``--custom-generate-function-path`` (Heddle's workers generate).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from heddle.client import HeddleClient
from heddle.config import load_settings
from heddle.integrations.batch import BatchRequest, run_sync
from heddle.integrations.slime_hooks import after_rollout
from heddle.integrations.slime_loop import LoopResult, SlimeLoop
from heddle.integrations.slime_samples import STATUS_OF_FINISH_REASON, fill_groups
from heddle.integrations.weights import WeightSync, publish_and_wait
from heddle.rollout.submission import TaskOptions

__all__ = ["STATUS_OF_FINISH_REASON", "fill_groups", "generate_rollout", "publish_weights"]


def generate_rollout(args: Any, rollout_id: int, data_buffer: Any, evaluation: bool = False) -> Any:
    """slime's rollout function (module docstring). Groups left over go back to
    ``data_buffer`` with ``--partial-rollout``, as slime's own rollout does."""
    if evaluation:
        raise ValueError(
            "heddle.integrations.slime runs training rollouts; keep slime's evaluation with "
            "--eval-function-path slime.rollout.sglang_rollout.generate_rollout"
        )
    if getattr(args, "custom_generate_function_path", None):
        raise ValueError("--custom-generate-function-path has no effect: Heddle's workers generate")
    result = run_sync(_run(args, rollout_id, data_buffer))
    if result.leftovers:
        data_buffer.add_samples(result.leftovers)
    for group in result.data:
        for sample in group:
            sample.metadata["heddle_metrics"] = result.metrics
    return _train_output(result)


async def _run(args: Any, rollout_id: int, data_buffer: Any) -> LoopResult:
    settings = load_settings(nats_url=getattr(args, "heddle_nats_url", None))
    trainer = str(getattr(args, "heddle_trainer", "slime"))
    async with HeddleClient(settings, trainer=trainer) as client:
        loop = SlimeLoop(args, rollout_id, data_buffer, client,
                         lambda groups: batch_request(args, groups, rollout_id))  # fmt: skip
        result = await loop.run()
    after_rollout(args, result.data, result.every, data_buffer)
    return result


def _train_output(result: LoopResult) -> Any:
    try:
        from slime.rollout.base_types import RolloutFnTrainOutput
    except ImportError:
        return result.data
    return RolloutFnTrainOutput(samples=result.data, metrics=result.metrics)


_VERSION_DIR = re.compile(r"weight_v(\d+)$")


def publish_weights(args: Any, version_dir: str, rollout_engines: Any = None) -> None:
    """slime's post-write hook (module docstring); every trainer rank calls it, rank 0
    publishes. ``ValueError`` for a folder not named as slime names its versions."""
    if not _is_rank_zero():
        return
    match = _VERSION_DIR.search(Path(version_dir).name)
    if match is None:
        raise ValueError(f"{version_dir!r} is not slime's weight_v<N> folder")
    sync = WeightSync(
        nats_url=getattr(args, "heddle_nats_url", None),
        trainer=str(getattr(args, "heddle_trainer", "slime")),
        wait_workers=int(getattr(args, "heddle_wait_workers", 0) or 0),
        wait_timeout_s=float(getattr(args, "heddle_wait_timeout_s", 600.0) or 600.0),
    )
    run_sync(publish_and_wait(sync, int(match.group(1)), Path(version_dir)))


def _is_rank_zero() -> bool:
    try:
        import torch.distributed as dist
    except ImportError:
        return True
    return not dist.is_available() or not dist.is_initialized() or dist.get_rank() == 0


def rollout_options(args: Any, group_size: int) -> TaskOptions:
    """Heddle's task options from slime's flags: ``rollout_max_response_len`` caps each
    response (and each generation), ``rollout_temperature``, ``rollout_seed``; ``heddle_max_steps``,
    ``heddle_max_total_tokens`` where given (else 32768, or twice the response cap when that
    is more)."""
    max_response = getattr(args, "rollout_max_response_len", None) or 1024
    return TaskOptions(
        group_size=group_size,
        max_steps=int(getattr(args, "heddle_max_steps", 16)),
        max_new_tokens=int(max_response),
        max_total_tokens=int(
            getattr(args, "heddle_max_total_tokens", None) or max(32768, 2 * int(max_response))
        ),
        max_response_tokens=int(max_response),
        temperature=float(getattr(args, "rollout_temperature", 1.0)),
        seed=int(getattr(args, "rollout_seed", 0) or 0),
    )


def batch_request(args: Any, groups: Sequence[Sequence[Any]], rollout_id: int) -> BatchRequest:
    """The Heddle batch of slime's groups (module docstring: tasks and prompts)."""
    sizes = {len(group) for group in groups}
    if len(sizes) != 1 or 0 in sizes:
        raise ValueError(f"every group needs the same number of samples (>= 1), got {sizes}")
    firsts = [group[0] for group in groups]
    prompt_ids = [list(s.tokens) for s in firsts] if all(s.tokens for s in firsts) else None
    chats = [s.prompt for s in firsts] if all(isinstance(s.prompt, list) for s in firsts) else None
    return BatchRequest(
        tasks=[_task(sample) for sample in firsts],
        environment=str(getattr(args, "heddle_environment", "math")),
        task_options=rollout_options(args, sizes.pop()),
        prompt_token_ids=prompt_ids,
        messages=None if prompt_ids is not None else chats,
        policy=str(getattr(args, "heddle_policy", "heddle")),
        tokenizer=str(getattr(args, "heddle_tokenizer", "byte")),
        labels={"trainer": "slime", "slime_rollout_id": str(rollout_id)},
    )


def _task(sample: Any) -> Mapping[str, Any]:
    metadata = sample.metadata or {}
    if "heddle_task" in metadata:
        return dict(metadata["heddle_task"])
    prompt = sample.prompt
    if isinstance(prompt, list):
        users = [m["content"] for m in prompt if m.get("role") == "user"]
        prompt = users[-1] if users else ""
    return {"question": str(prompt), "answer": "" if sample.label is None else sample.label}
