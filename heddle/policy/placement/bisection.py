"""Bisection over makespans: the exact optimum of a feasibility test that is monotone in the
makespan (if some plan meets ``t``, one meets every ``t' > t``)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Protocol, TypeVar


class HasMakespan(Protocol):
    @property
    def makespan(self) -> float: ...


PlanT = TypeVar("PlanT", bound=HasMakespan)


def bisect_makespan(best: PlanT, low: float, feasible: Callable[[float], PlanT | None]) -> PlanT:
    """The best plan ``feasible`` finds: bisection between an infeasible ``low`` and the best
    plan so far, snapping the upper end to the real makespan of each feasible probe, until no
    float lies strictly between them. ``best`` must be feasible."""
    probe = math.nextafter(best.makespan, -math.inf)
    while probe > low:
        found = feasible(probe)
        if found is None:
            low = probe
        else:
            best = found
        probe = low / 2 + best.makespan / 2
        if not low < probe < best.makespan:
            probe = math.nextafter(best.makespan, -math.inf)
    return best
