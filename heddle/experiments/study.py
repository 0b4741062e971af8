"""The policy study: every system under every predictor on a set of workloads, side by side with
the lower bounds, as markdown tables (the figures behind the policy's issue targets).

    python -m heddle.experiments.study --settings coding:1024:qwen3-32b,coding:256:qwen3-32b \\
        --predictors oracle,noisy_oracle,online --jobs 2

Each setting is ``workload:trajectories:model`` on ``--gpus`` H200s, seed ``--seed``; learning
predictors are fitted on the previous epoch of the same prompts (as ``heddle sim compare``).
Systems that use no predictions run once per setting and appear under every predictor. Runs are
independent simulations, spread over ``--jobs`` processes.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

from heddle.control.systems import system_spec
from heddle.sim.config import SimConfig
from heddle.sim.on_workers import lower_bound_s
from heddle.sim.run import simulate
from heddle.workloads import generate

DEFAULT_SYSTEMS = (
    "heddle,heddle-no-sched,heddle-no-place,heddle-least-load,heddle-no-resource,rr,"
    "fix-1,fix-8,verl,slime,slime-least-inflight,autellix"
)


@dataclass(frozen=True, slots=True)
class Setting:
    workload: str
    num_trajectories: int
    model: str
    num_gpus: int = 16
    seed: int = 0

    @property
    def label(self) -> str:
        return f"{self.workload} {self.num_trajectories} {self.model} {self.num_gpus}xH200"


@dataclass(frozen=True, slots=True)
class Row:
    setting: Setting
    predictor: str
    system: str
    makespan_s: float
    tp_degrees: tuple[int, ...]
    compute_lower_bound_s: float
    lower_bound_s: float
    slowest_queue_s: float
    num_recomputed_tokens: int
    wall_s: float


def run_one(setting: Setting, system: str, predictor: str) -> Row:
    """One simulated rollout and its bounds."""
    trace = generate(setting.workload, setting.num_trajectories, setting.seed)
    history = generate(setting.workload, setting.num_trajectories, setting.seed, epoch=1)
    config = SimConfig(
        model=setting.model, num_gpus=setting.num_gpus, seed=setting.seed, predictor=predictor
    )
    start = time.perf_counter()
    result = simulate(trace, system, config, history=history)
    return Row(
        setting=setting,
        predictor=predictor,
        system=system,
        makespan_s=result.makespan_s,
        tp_degrees=tuple(result.tp_degrees),
        compute_lower_bound_s=lower_bound_s(trace, config, kv_aware=False),
        lower_bound_s=result.lower_bound_s,
        slowest_queue_s=result.slowest.queue_s,
        num_recomputed_tokens=result.num_recomputed_tokens,
        wall_s=time.perf_counter() - start,
    )


def plan(
    settings: Sequence[Setting], systems: Sequence[str], predictors: Sequence[str]
) -> list[tuple[Setting, str, str]]:
    """The runs to make: predictor-free systems once per setting (first predictor)."""
    runs = []
    for setting in settings:
        for system in systems:
            uses = system_spec(system).uses_predictions
            for predictor in predictors if uses else predictors[:1]:
                runs.append((setting, system, predictor))
    return runs


def run_study(
    settings: Sequence[Setting], systems: Sequence[str], predictors: Sequence[str], jobs: int = 1
) -> list[Row]:
    runs = plan(settings, systems, predictors)
    if jobs <= 1:
        return [run_one(*run) for run in runs]
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(run_one, *zip(*runs, strict=True)))


def tables(rows: Sequence[Row], predictors: Sequence[str]) -> str:
    """One markdown table per setting: a row per system, a column group per predictor."""
    out: list[str] = []
    settings = list(dict.fromkeys(row.setting for row in rows))
    for setting in settings:
        mine = [row for row in rows if row.setting == setting]
        by_key = {(row.system, row.predictor): row for row in mine}
        any_row = mine[0]
        bounds = (
            f"compute-only {any_row.compute_lower_bound_s:.0f} s, "
            f"KV-aware {any_row.lower_bound_s:.0f} s"
        )
        out.append(f"\n### {setting.label} (lower bound: {bounds})\n")
        header = ["system"] + [
            f"{p}: makespan s / x verl / x slime / over LB compute / over LB KV" for p in predictors
        ]
        out.append("| " + " | ".join(header) + " |")
        out.append("|" + "---|" * len(header))
        systems = list(dict.fromkeys(row.system for row in mine))
        for system in systems:
            cells = [system]
            for predictor in predictors:
                row = by_key.get((system, predictor)) or by_key.get((system, predictors[0]))
                if row is None:
                    cells.append("")
                    continue
                verl = _baseline(by_key, "verl", predictors[0])
                slime = _baseline(by_key, "slime", predictors[0])
                cells.append(
                    f"{row.makespan_s:.0f} / {_ratio(verl, row)} / {_ratio(slime, row)} / "
                    f"{row.makespan_s / row.compute_lower_bound_s:.2f} / "
                    f"{row.makespan_s / row.lower_bound_s:.2f}"
                )
            out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def _baseline(by_key: dict[tuple[str, str], Row], system: str, predictor: str) -> Row | None:
    return by_key.get((system, predictor))


def _ratio(baseline: Row | None, row: Row) -> str:
    """Throughput ratio of ``row`` over the baseline (same tokens: makespan ratio)."""
    return f"{baseline.makespan_s / row.makespan_s:.2f}" if baseline else "-"


def parse_setting(text: str, num_gpus: int, seed: int) -> Setting:
    workload, num, model = text.split(":")
    return Setting(workload, int(num), model, num_gpus, seed)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--settings", default="coding:1024:qwen3-32b")
    parser.add_argument("--systems", default=DEFAULT_SYSTEMS)
    parser.add_argument("--predictors", default="oracle,noisy_oracle,online")
    parser.add_argument("--gpus", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=1)
    args = parser.parse_args(argv)
    settings = [parse_setting(s, args.gpus, args.seed) for s in args.settings.split(",")]
    predictors = args.predictors.split(",")
    rows = run_study(settings, args.systems.split(","), predictors, args.jobs)
    print(tables(rows, predictors))
    for row in rows:
        print(
            f"# {row.setting.label} {row.predictor} {row.system}: {row.makespan_s:.1f} s "
            f"tp {list(row.tp_degrees)} slowest queue {row.slowest_queue_s:.0f} s "
            f"recomputed {row.num_recomputed_tokens} ({row.wall_s:.0f} s wall)",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
