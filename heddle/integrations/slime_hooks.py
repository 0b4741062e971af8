"""slime's user functions, called where slime's own rollout calls them (its flags name them by
dotted path; the signatures are slime's, docs/integrations.md):

- ``--rollout-sample-hook-path`` (repeatable): ``hook(args, sample, *, rollout_id=None,
  evaluation=False) -> Sample | None``, sync or async, on each generated sample before its
  reward; keyword arguments the hook does not declare are not passed.
- the reward: slime's reward models when the run names one (``--custom-rm-path``,
  ``--rm-type``, ``--group-rm``): ``slime.rollout.rm_hub.async_rm(args, sample)`` per sample, or
  ``batched_async_rm(args, group)`` on the whole group with ``--group-rm``. Without slime
  importable only ``--custom-rm-path`` can be called (``rm(args, sample)``, or ``rm(args,
  samples)`` with ``--group-rm``). Otherwise Heddle's environment's reward stands.
  ``heddle_reward: environment | slime`` chooses explicitly.
- ``--dynamic-sampling-filter-path``: ``filter(args, group) -> DynamicFilterOutput | bool``;
  a group is dropped unless ``keep``, or unless ``keep_when_insufficient`` and the groups in
  flight no longer exceed the batch (slime's ``should_drop_dynamic_filter_output``).
- ``--rollout-sample-filter-path``: ``filter(args, data)`` on the kept groups (it sets
  ``remove_sample``); ``--rollout-all-samples-process-path``: ``process(args, all_groups,
  data_source)`` on every group generated, kept or dropped.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


def load_function(path: str) -> Any:
    """The attribute a dotted path names (``module.sub.function``), as slime resolves its
    flags."""
    module_path, _, name = path.rpartition(".")
    if not module_path:
        raise ValueError(f"{path!r} is not a dotted path to a function")
    return getattr(importlib.import_module(module_path), name)


async def _maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


def _accepted(function: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    parameters = inspect.signature(function).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return kwargs
    names = {p.name for p in parameters}
    return {k: v for k, v in kwargs.items() if k in names}


async def apply_sample_hooks(args: Any, sample: Any, rollout_id: int) -> Any:
    """``sample`` through each ``--rollout-sample-hook-path`` hook, in order."""
    for path in getattr(args, "rollout_sample_hook_path", None) or []:
        hook = load_function(path)
        kwargs = _accepted(hook, {"rollout_id": rollout_id, "evaluation": False})
        result = await _maybe_await(hook(args, sample, **kwargs))
        if result is not None:
            if type(result) is not type(sample):
                raise TypeError(f"rollout sample hook {path!r} returned {type(result).__name__}")
            sample = result
    return sample


def reward_source(args: Any) -> str:
    """``slime`` when the run names a reward model of slime's, else ``environment``."""
    chosen = getattr(args, "heddle_reward", None)
    if chosen is not None:
        if chosen not in ("environment", "slime"):
            raise ValueError(f"heddle_reward is 'environment' or 'slime', not {chosen!r}")
        return str(chosen)
    names_one = any(getattr(args, key, None) for key in ("custom_rm_path", "rm_type", "group_rm"))
    return "slime" if names_one else "environment"


async def score_group(args: Any, group: list[Any]) -> None:
    """Set each sample's reward with slime's reward model (``reward_source`` is ``slime``)."""
    if getattr(args, "group_rm", False):
        rewards = await _group_rewards(args, group)
        for sample, reward in zip(group, rewards, strict=True):
            sample.reward = reward
        return
    for sample in group:
        sample.reward = await _sample_reward(args, sample)


async def _group_rewards(args: Any, group: list[Any]) -> Sequence[Any]:
    try:
        from slime.rollout.rm_hub import batched_async_rm
    except ImportError:
        return list(await _maybe_await(_custom_rm(args)(args, group)))
    return list(await batched_async_rm(args, group))


async def _sample_reward(args: Any, sample: Any) -> Any:
    try:
        from slime.rollout.rm_hub import async_rm
    except ImportError:
        return await _maybe_await(_custom_rm(args)(args, sample))
    return await async_rm(args, sample)


def _custom_rm(args: Any) -> Any:
    path = getattr(args, "custom_rm_path", None)
    if not path:
        raise ValueError(
            "slime's built-in reward models need slime importable; give --custom-rm-path, "
            "or heddle_reward: environment"
        )
    return load_function(path)


@dataclass(frozen=True)
class FilterVerdict:
    keep: bool
    reason: str | None = None
    keep_when_insufficient: bool = False


def dynamic_verdict(args: Any, group: list[Any]) -> FilterVerdict:
    """The ``--dynamic-sampling-filter-path`` verdict on ``group`` (keep when none is set)."""
    path = getattr(args, "dynamic_sampling_filter_path", None)
    if not path:
        return FilterVerdict(True)
    output = load_function(path)(args, group)
    if isinstance(output, bool):
        return FilterVerdict(output)
    return FilterVerdict(
        keep=bool(output.keep),
        reason=getattr(output, "reason", None),
        keep_when_insufficient=bool(getattr(output, "keep_when_insufficient", False)),
    )


def drops(verdict: FilterVerdict, *, in_flight: int, target: int) -> bool:
    """Whether a group with ``verdict`` is dropped, ``in_flight`` groups being kept or still
    running for a batch of ``target``."""
    if verdict.keep:
        return False
    return not (verdict.keep_when_insufficient and in_flight <= target)


def after_rollout(args: Any, data: list[list[Any]], every: list[list[Any]], source: Any) -> None:
    """``--rollout-sample-filter-path`` on the kept groups, then
    ``--rollout-all-samples-process-path`` on every group generated."""
    sample_filter = getattr(args, "rollout_sample_filter_path", None)
    if sample_filter:
        load_function(sample_filter)(args, data)
    process = getattr(args, "rollout_all_samples_process_path", None)
    if process:
        load_function(process)(args, every, source)
