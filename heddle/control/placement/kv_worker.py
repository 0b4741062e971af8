"""A worker's admitted KV, as KV admission (``heddle.control.placement.kv_admission``) counts it:
each trajectory's ``Footprint`` over its predicted remaining time, a shared prompt once per worker,
and the most the residents hold together at any projected instant."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from heddle.control.placement.admission import Key

MAX_PROJECTION_POINTS = 32
"""Instants at which a worker's projected KV is checked (departures, thinned to quantiles)."""


@dataclass(frozen=True, slots=True)
class Footprint:
    """The KV a trajectory holds from now on: ``context_tokens`` now, growing linearly by
    ``growth_tokens`` until it ends after ``duration_s`` (its predicted remaining time) and frees
    it all. ``duration_s = inf``: it never ends in the projection (a flat or unknown one)."""

    context_tokens: float
    growth_tokens: float = 0.0
    duration_s: float = math.inf
    shared_tokens: float = 0.0
    """Of ``context_tokens``, a prompt the worker holds once for all its footprints of
    ``shared_key`` (counted only with a ``shared_key``)."""
    shared_key: str = ""

    @property
    def peak_tokens(self) -> float:
        return self.context_tokens + self.growth_tokens

    @property
    def own(self) -> Footprint:
        """The footprint without its shared prompt (itself when it shares none)."""
        if not self.shared_key:
            return self
        own_context = self.context_tokens - self.shared_tokens
        return Footprint(own_context, self.growth_tokens, self.duration_s)

    @classmethod
    def flat(cls, num_tokens: float) -> Footprint:
        return cls(num_tokens)


@dataclass(slots=True)
class WorkerBudget:
    budget: float
    """``overcommit`` times the KV capacity (0: unknown, always room)."""
    projection: bool = False
    load: float = 0.0
    """The residents' summed peaks, each shared prompt counted once."""
    residents: dict[Key, Footprint] = field(default_factory=dict)
    sharing: dict[str, dict[Key, Footprint]] = field(default_factory=dict)
    """Per shared key, the residents that share its prompt."""
    prompts: dict[str, float] = field(default_factory=dict)
    """Per shared key, the prompt tokens held for them (the largest they count)."""
    fitting: dict[Footprint, bool] = field(default_factory=dict)
    """``fits`` answers since the residents last changed: a held queue's head is asked about
    every worker on every admission pass, and most workers did not change in between."""

    def room(self) -> float:
        return self.budget - self.load if self.budget > 0 else float("inf")

    def added_tokens(self, footprint: Footprint) -> float:
        """How much ``footprint`` adds to the summed peaks (its prompt, if shared, only where
        it exceeds the one already held)."""
        if not footprint.shared_key:
            return footprint.peak_tokens
        held = self.prompts.get(footprint.shared_key, 0.0)
        return footprint.own.peak_tokens + max(0.0, footprint.shared_tokens - held)

    def fits(self, footprint: Footprint) -> bool:
        if not self.residents or self.budget <= 0:
            return True
        if self.added_tokens(footprint) <= self.room():
            return True  # even the summed peaks fit
        if not self.projection:
            return False
        answer = self.fitting.get(footprint)
        if answer is None:
            held = held_footprints([*self.residents.values(), footprint])
            answer = projected_peak(held) <= self.budget
            self.fitting[footprint] = answer
        return answer

    def put(self, key: Key, footprint: Footprint) -> None:
        """Admit ``key`` with ``footprint``, or replace its footprint."""
        self._drop(key)
        self.residents[key] = footprint
        self.load += footprint.own.peak_tokens
        if footprint.shared_key:
            self.sharing.setdefault(footprint.shared_key, {})[key] = footprint
            self._hold_prompt(footprint.shared_key)
        self.fitting.clear()

    def remove(self, key: Key) -> None:
        if not self._drop(key):
            return
        if not self.residents:
            self.load = 0.0  # no drift from float sums
        self.fitting.clear()

    def _drop(self, key: Key) -> bool:
        old = self.residents.pop(key, None)
        if old is None:
            return False
        self.load -= old.own.peak_tokens
        if old.shared_key:
            members = self.sharing[old.shared_key]
            del members[key]
            if not members:
                del self.sharing[old.shared_key]
            self._hold_prompt(old.shared_key)
        return True

    def _hold_prompt(self, shared_key: str) -> None:
        members = self.sharing.get(shared_key, {})
        tokens = max((f.shared_tokens for f in members.values()), default=0.0)
        self.load += tokens - self.prompts.pop(shared_key, 0.0)
        if members:
            self.prompts[shared_key] = tokens


def held_footprints(footprints: Iterable[Footprint]) -> list[Footprint]:
    """What a worker holding ``footprints`` holds: each one's own part, and each shared prompt
    once, for as long as the last footprint that shares it (the largest share any counts)."""
    held: list[Footprint] = []
    prompts: dict[str, tuple[float, float]] = {}
    for footprint in footprints:
        held.append(footprint.own)
        if footprint.shared_key:
            tokens, until = prompts.get(footprint.shared_key, (0.0, 0.0))
            prompts[footprint.shared_key] = (
                max(tokens, footprint.shared_tokens),
                max(until, footprint.duration_s),
            )
    held += [Footprint(tokens, 0.0, until) for tokens, until in prompts.values()]
    return held


def projected_peak(footprints: list[Footprint]) -> float:
    """The most KV the footprints hold together at any time: the sum just before a departure
    (each grows until it leaves, so the maximum is at one), at most ``MAX_PROJECTION_POINTS``
    departures (quantiles of them) and now."""
    context = np.array([f.context_tokens for f in footprints])
    growth = np.array([f.growth_tokens for f in footprints])
    ends = np.array([f.duration_s for f in footprints])
    finite = np.unique(ends[np.isfinite(ends)])
    if len(finite) > MAX_PROJECTION_POINTS:
        finite = np.quantile(finite, np.linspace(0.0, 1.0, MAX_PROJECTION_POINTS))
    points = np.concatenate(([0.0], finite))[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        fraction = np.where(ends > 0, np.minimum(points / ends, 1.0), 1.0)
    held = context + growth * fraction
    present = ends >= points
    return float((held * present).sum(axis=1).max())
