"""The workload zoo: parameterised agent families to judge a scheduler on workloads it was never
tuned on.

    >>> import random
    >>> from heddle.workloads.zoo import zoo_family
    >>> family = zoo_family("search")
    >>> params = family.draw(random.Random(7))       # one parameter draw
    >>> trace = family.generate(params, 256, seed=7)  # GRPO groups of params.group_size
    >>> history = family.generate(params, 256, seed=7, epoch=1)  # same prompts, new samples

Families (``ZOO``): ``swe``, ``search``, ``math``, ``web`` (records and ranges in
``heddle.workloads.zoo_params``) and ``mix`` (2-4 of them in drawn proportions); ``wide``
(``heddle.workloads.zoo_wide``) is the hunter's search space, not a realistic family: it runs
when named and never joins a mix. Presets narrow a
family's ranges to a case described in words; the three below are the agent workloads on which
Heddle lost to verl before, regenerated from their descriptions:

* ``search-tail``: a search agent where ~3% of trajectories run 40-100 short turns among 2-6-turn
  ones;
* ``swe-long``: a SWE agent with multi-minute test runs and up to 150 turns;
* ``math-python``: a math agent with short python calls (ReTool's recipe: 16 samples, 16k).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial

import numpy as np

from heddle.traces import TraceTrajectory
from heddle.workloads.agent_shape import sample_shape
from heddle.workloads.text import text_kind_of, with_text
from heddle.workloads.zoo_params import (
    QWEN3_YARN_CONTEXT_TOKENS,
    MathParams,
    SearchParams,
    SweParams,
    WebParams,
)
from heddle.workloads.zoo_ranges import Range, draw_params
from heddle.workloads.zoo_wide import WideParams

LeafParams = SweParams | SearchParams | MathParams | WebParams | WideParams


@dataclass(frozen=True, slots=True)
class MixMember:
    family: str
    weight: float
    """Expected share of the mix's trajectories."""
    params: LeafParams


@dataclass(frozen=True, slots=True)
class MixParams:
    """A mixture: 2-4 distinct leaf families with Dirichlet(1) weights, each with its own draw."""

    members: tuple[MixMember, ...]

    MIN_MEMBERS = 2
    MAX_MEMBERS = 4


ZooParams = LeafParams | MixParams


@dataclass(frozen=True, slots=True)
class Family:
    """One zoo family: how to draw its parameters and how to generate a trace from them."""

    name: str
    description: str
    draw: Callable[[random.Random], ZooParams]
    """A parameter record from a seeded ``random.Random`` (the only randomness it uses)."""

    def generate(
        self, params: ZooParams, num_trajectories: int, seed: int, epoch: int = 0
    ) -> list[TraceTrajectory]:
        """``num_trajectories`` trajectories in GRPO groups (ids and groups prefixed with the
        family's name). Same arguments, same trace; another ``epoch`` re-samples the same
        prompts (a history for the predictors that learn)."""
        return generate_params(params, self.name, num_trajectories, seed, epoch)


def generate_params(
    params: ZooParams, name: str, num_trajectories: int, seed: int, epoch: int = 0
) -> list[TraceTrajectory]:
    if isinstance(params, MixParams):
        return _generate_mix(params, name, num_trajectories, seed, epoch)
    return sample_shape(params.to_shape(name), num_trajectories, seed, epoch)


def _generate_mix(
    params: MixParams, name: str, num_trajectories: int, seed: int, epoch: int
) -> list[TraceTrajectory]:
    """Each member generates its share (largest remainder of weight x total) from its own seed
    stream; members' prompts never mix, so a group stays within one family."""
    counts = _apportion([m.weight for m in params.members], num_trajectories)
    trace: list[TraceTrajectory] = []
    for index, (member, count) in enumerate(zip(params.members, counts, strict=True)):
        if count == 0:
            continue
        member_seed = int(np.random.SeedSequence([seed, index]).generate_state(1)[0])
        prefix = f"{name}.{member.family}"
        trace.extend(generate_params(member.params, prefix, count, member_seed, epoch))
    return trace


def _apportion(weights: list[float], total: int) -> list[int]:
    """Whole counts summing to ``total`` in proportion to ``weights`` (largest remainder)."""
    scale = total / sum(weights)
    counts = [int(w * scale) for w in weights]
    by_remainder = sorted(range(len(weights)), key=lambda i: (counts[i] - weights[i] * scale, i))
    for index in by_remainder[: total - sum(counts)]:
        counts[index] += 1
    return counts


def _draw_mix(rng: random.Random) -> MixParams:
    num_members = rng.randint(MixParams.MIN_MEMBERS, MixParams.MAX_MEMBERS)
    names = rng.sample(sorted(_LEAVES), num_members)
    gammas = [rng.gammavariate(1.0, 1.0) for _ in names]
    members = tuple(
        MixMember(name, gamma / sum(gammas), draw_params(_LEAVES[name], rng))
        for name, gamma in zip(names, gammas, strict=True)
    )
    return MixParams(members)


def _fixed(value: float, is_integer: bool = False) -> Range:
    return Range(value, value, is_integer=is_integer)


_LEAVES: dict[str, type[LeafParams]] = {
    "swe": SweParams,
    "search": SearchParams,
    "math": MathParams,
    "web": WebParams,
}
_DESCRIPTIONS = {
    "swe": "SWE/coding agent: heavy-tailed multi-minute test runs, 10-150 turns, long contexts",
    "search": "search agent: 2-6 short turns, 1-5% of samples run 40-100 turns",
    "math": "math agent: short python calls, a few turns, some ~16k-token reasoning steps",
    "web": "web browsing agent: page dumps of several k tokens per turn, moderate turns",
}
PRESET_RANGES: dict[str, tuple[str, Mapping[str, Range]]] = {
    "search-tail": ("search", {"tail_share": Range(0.03, 0.03)}),
    "swe-long": (
        "swe",
        {
            "median_turns": Range(30, 60, is_log=True),
            "max_turns": _fixed(150, is_integer=True),
            "test_share": Range(0.2, 0.35),
            "test_median_s": Range(60, 180, is_log=True),
            # short observations, so that 150 turns fit in the context
            "observation_median_tokens": Range(200, 400, is_log=True),
            "max_context_tokens": _fixed(QWEN3_YARN_CONTEXT_TOKENS, is_integer=True),
        },
    ),
    "math-python": (
        "math",
        {
            "group_size": _fixed(16, is_integer=True),  # cal s.2: ReTool, 16 samples
            "max_response_tokens": _fixed(16384, is_integer=True),  # cal s.2: ReTool, 16k
            "python_median_s": Range(0.2, 1.0, is_log=True),
        },
    ),
}
"""Preset name: (its family, the ranges it narrows; each inside the family's own)."""
_PRESET_DESCRIPTIONS = {
    "search-tail": "search agent where ~3% of samples run 40-100 short turns (lost to verl)",
    "swe-long": "SWE agent with multi-minute test runs and up to 150 turns (lost to verl)",
    "math-python": "math agent with short python calls, ReTool's recipe (lost to verl)",
}


WIDE = "wide"
_WIDE_DESCRIPTION = "the hunter's space: every dimension of issue 36, far past realistic ranges"


def _build_zoo() -> dict[str, Family]:
    zoo = {
        name: Family(name, _DESCRIPTIONS[name], partial(draw_params, cls))
        for name, cls in _LEAVES.items()
    }
    zoo["mix"] = Family("mix", "mixtures of swe, search, math and web in drawn shares", _draw_mix)
    zoo[WIDE] = Family(WIDE, _WIDE_DESCRIPTION, partial(draw_params, WideParams))
    for name, (base, ranges) in PRESET_RANGES.items():
        draw = partial(draw_params, _LEAVES[base], overrides=ranges)
        zoo[name] = Family(name, _PRESET_DESCRIPTIONS[name], draw)
    return zoo


ZOO: dict[str, Family] = _build_zoo()
"""Families and presets by name (the sweep's ``--families`` choices)."""
BROAD_FAMILIES = ("swe", "search", "math", "web", "mix")
"""The sweep's default families (presets run when named)."""
LOST_TO_VERL = tuple(_PRESET_DESCRIPTIONS)


def zoo_family(name: str) -> Family:
    try:
        return ZOO[name]
    except KeyError:
        raise ValueError(f"unknown zoo family {name!r}; choose one of {', '.join(ZOO)}") from None


def leaf_params_type(name: str) -> type[LeafParams] | None:
    """The parameter record of a leaf family or preset (None for ``mix``)."""
    if name == WIDE:
        return WideParams
    base = PRESET_RANGES[name][0] if name in PRESET_RANGES else name
    return _LEAVES.get(base)


def with_family_text(
    family: str, trace: Sequence[TraceTrajectory], signal: float, seed: int
) -> list[TraceTrajectory]:
    """``trace`` of a zoo family with the text layer (``heddle.workloads.text``) at ``signal``:
    the family's text kind, or for ``mix`` each member's (named by its trajectories' ids,
    ``mix.<member>-...``, texted among its own), order kept."""
    if family != "mix":
        return with_text(trace, text_kind_of(family), signal, seed)
    members: dict[str, list[int]] = {}
    for index, trajectory in enumerate(trace):
        members.setdefault(text_kind_of(trajectory.id.split("-")[0]), []).append(index)
    texted: list[TraceTrajectory] = list(trace)
    for kind, indices in members.items():
        for index, trajectory in zip(
            indices, with_text([trace[i] for i in indices], kind, signal, seed), strict=True
        ):
            texted[index] = trajectory
    return texted
