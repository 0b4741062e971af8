"""Sort-initialised simulated annealing over TP configurations (the paper, s.6): its search,
kept as the reference the planner is measured against. The planner itself
(``heddle.control.resources``) uses the exact search of ``heddle.policy.resources.budget_search``,
which finds the optimum of the same objective for every budget (the tests check it is never worse
than this annealer) in a fraction of the time: the annealer prices each configuration it visits with
a heterogeneous placement over all its workers, so its cost grows steeply with the budget.

State: a multiset of TP degrees using the GPU budget (kept sorted descending: the paper's
"sort-initialised" state, and the order its mapping assigns groups to workers). Objective: the
placement makespan of ``heddle.policy.resources.problem``. The search:

* starts from random degrees drawn from the allowed set until the budget is spent, sorted;
* sets the initial temperature to that state's makespan, so early moves that worsen the
  makespan by a fraction ``x`` are accepted with probability ``exp(-x)``;
* proposes one of three moves: *split* a worker into two of half the degree, *merge* two equal
  workers into one of twice the degree, *re-allocate* the pooled GPUs of two workers into a
  random new set of degrees;
* accepts improvements always and a worse state with probability ``exp(-delta / temperature)``;
* cools geometrically and stops once the temperature falls below ``epsilon`` times the initial.

The result is the best state seen, compared (exactly evaluated) with the homogeneous baselines
Fix-1 and Fix-8, so it is never worse than either. Every random draw comes from the injected
``random.Random``: a seed reproduces the plan.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from heddle.policy.cost.model import CostModel
from heddle.policy.resources.problem import (
    ResourcePlan,
    ResourceProblem,
    canonical,
    fixed_configuration,
)

Configuration = tuple[int, ...]


@dataclass(frozen=True, slots=True)
class AnnealingConfig:
    cooling: float = 0.9
    """Temperature multiplier per round (0 < cooling < 1)."""
    moves_per_temperature: int = 4
    """Proposals per temperature."""
    epsilon: float = 1e-3
    """Stop once the temperature is below this fraction of the initial one."""

    def __post_init__(self) -> None:
        if not 0.0 < self.cooling < 1.0:
            raise ValueError(f"cooling must be in (0, 1), got {self.cooling}")
        if self.moves_per_temperature < 1:
            raise ValueError(
                f"moves_per_temperature must be >= 1, got {self.moves_per_temperature}"
            )
        if not 0.0 < self.epsilon < 1.0:
            raise ValueError(f"epsilon must be in (0, 1), got {self.epsilon}")


@dataclass(frozen=True, slots=True)
class AnnealingResult:
    plan: ResourcePlan
    """The returned plan: the best of the annealed state, Fix-1 and Fix-8."""
    annealed: Configuration
    annealed_makespan_s: float
    initial: Configuration
    num_proposals: int


def anneal(
    problem: ResourceProblem, rng: random.Random, config: AnnealingConfig = AnnealingConfig()
) -> AnnealingResult:
    """Search the TP configurations of ``problem`` (module docstring)."""
    initial = random_configuration(problem, rng)
    current, current_s = initial, problem.makespan_s(initial)
    best, best_s = current, current_s
    temperature = current_s
    floor = config.epsilon * temperature
    num_proposals = 0
    while temperature > floor and math.isfinite(temperature):
        for _ in range(config.moves_per_temperature):
            candidate = neighbour(problem, current, rng)
            candidate_s = problem.makespan_s(candidate)
            num_proposals += 1
            if _accepts(candidate_s - current_s, temperature, rng):
                current, current_s = candidate, candidate_s
                if current_s < best_s:
                    best, best_s = current, current_s
        temperature *= config.cooling
    contenders = {best, fixed_configuration(problem, 1), fixed_configuration(problem, 8)}
    winner = min(contenders, key=lambda key: (problem.makespan_s(key, exact=True), key))
    return AnnealingResult(
        plan=problem.plan(winner),
        annealed=best,
        annealed_makespan_s=problem.makespan_s(best, exact=True),
        initial=initial,
        num_proposals=num_proposals,
    )


def plan_resources(
    lengths: Sequence[float],
    num_gpus: int,
    cost_models: Mapping[int, CostModel],
    context_tokens: int,
    rng: random.Random,
    config: AnnealingConfig = AnnealingConfig(),
) -> ResourcePlan:
    """One call from predicted lengths to a TP plan: TP degree per worker (largest first), the
    trajectory indices each runs, and the placement makespan in seconds."""
    problem = ResourceProblem(lengths, num_gpus, cost_models, context_tokens)
    return anneal(problem, rng, config).plan


def _accepts(delta_s: float, temperature: float, rng: random.Random) -> bool:
    if delta_s <= 0.0:
        return True
    if not math.isfinite(delta_s) or temperature <= 0.0:
        return False
    return rng.random() < math.exp(-delta_s / temperature)


def random_configuration(problem: ResourceProblem, rng: random.Random) -> Configuration:
    """Random allowed degrees until fewer GPUs than the smallest degree remain; sorted."""
    return canonical(_fill(problem, problem.num_gpus, rng))


def _fill(problem: ResourceProblem, num_gpus: int, rng: random.Random) -> list[int]:
    degrees: list[int] = []
    left = num_gpus
    while left >= problem.min_degree:
        degree = rng.choice([tp for tp in problem.tp_degrees if tp <= left])
        degrees.append(degree)
        left -= degree
    return degrees


def neighbour(problem: ResourceProblem, state: Configuration, rng: random.Random) -> Configuration:
    """One random split, merge or re-allocation (among those that apply); ``state`` if none."""
    moves: list[Callable[[ResourceProblem, Configuration, random.Random], Configuration | None]]
    moves = [_split, _merge, _reallocate]
    rng.shuffle(moves)
    for move in moves:
        moved = move(problem, state, rng)
        if moved is not None:
            return moved
    return state


def _split(
    problem: ResourceProblem, state: Configuration, rng: random.Random
) -> Configuration | None:
    allowed = set(problem.tp_degrees)
    choices = [i for i, tp in enumerate(state) if tp % 2 == 0 and tp // 2 in allowed]
    if not choices:
        return None
    index = rng.choice(choices)
    half = state[index] // 2
    return canonical([*state[:index], *state[index + 1 :], half, half])


def _merge(
    problem: ResourceProblem, state: Configuration, rng: random.Random
) -> Configuration | None:
    allowed = set(problem.tp_degrees)
    mergeable = sorted({tp for tp in state if state.count(tp) >= 2 and 2 * tp in allowed})
    if not mergeable:
        return None
    degree = rng.choice(mergeable)
    rest = list(state)
    rest.remove(degree)
    rest.remove(degree)
    return canonical([*rest, 2 * degree])


def _reallocate(
    problem: ResourceProblem, state: Configuration, rng: random.Random
) -> Configuration | None:
    if len(state) < 2:
        return None
    first, second = rng.sample(range(len(state)), 2)
    pooled = state[first] + state[second]
    rest = [tp for i, tp in enumerate(state) if i not in (first, second)]
    moved = canonical([*rest, *_fill(problem, pooled, rng)])
    return moved if moved != state else None
