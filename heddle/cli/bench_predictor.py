"""`heddle bench predictor`: the paper's Fig. 13 per zoo family and text signal strength, the
prediction service's latency, and the time to train on 20k examples
(``heddle.bench.predictor``, ``heddle.bench.predictor_serve``)."""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from heddle.cli.apps import bench_app
from heddle.errors import UserError
from heddle.workloads.text import BENCH_SIGNALS, SIGNAL_LEVELS


def _split(value: str, choices: Any, what: str) -> tuple[str, ...]:
    names = tuple(name.strip() for name in value.split(",") if name.strip())
    unknown = [name for name in names if name not in choices]
    if unknown or not names:
        raise UserError(f"unknown {what} {unknown}; choose from {', '.join(choices)}")
    return names


def _run(config: Any, num_timing_examples: int, concurrency: int, folder: Path) -> dict[str, Any]:
    from heddle.bench.predictor import predictor_cell_traces, run_predictor_cell, time_training
    from heddle.bench.predictor_serve import measure_serving, timed_requests
    from heddle.context_model.model import ContextModel
    from heddle.policy.prediction.online import OnlinePredictor

    families: dict[str, Any] = {}
    for family in config.families:
        for signal in config.signals:
            cell = run_predictor_cell(family, signal, config, folder)
            families[f"{family}@{signal}"] = entry = {
                "family": family,
                "signal": cell.signal,
                "num_train_examples": cell.num_train_examples,
                "train_s": round(cell.train_s, 3),
                "best_epoch": cell.best_epoch,
                "win_share": cell.win_share,
                "predictors": cell.figures,
            }
            typer.echo(json.dumps({f"{family}@{signal}": entry}), err=True)  # progress
    family, signal = config.families[0], config.signals[-1]
    train_trace, test_trace = predictor_cell_traces(family, SIGNAL_LEVELS[signal], config)
    online = OnlinePredictor()
    for trajectory in train_trace:
        online.observe_trace(trajectory)
    model = ContextModel.load(folder / f"{family}-{signal}")
    serving = asyncio.run(measure_serving(model, timed_requests(test_trace, online), concurrency))
    train_s, num_examples = time_training(num_timing_examples, config, folder)
    return {
        "families": families,
        "serve": {
            "p50_ms": serving.p50_ms,
            "p99_ms": serving.p99_ms,
            "on_time_share": serving.on_time_share,
            "num_requests": serving.num_requests,
            "concurrency": serving.concurrency,
            "mean_batch_size": serving.mean_batch_size,
            "model": f"{family}@{signal}",
        },
        "train_s": round(train_s, 3),  # a tiny model trains in well under 0.1 s
        "train_examples": num_examples,
        "base": config.base,
    }


def _table(result: dict[str, Any]) -> Table:
    table = Table(title="pearson r / long-tail recall after steps 1, 2, 3")
    table.add_column("family@signal")
    names = next(iter(result["families"].values()))["predictors"].keys()
    for name in names:
        table.add_column(name)
    for key, cell in result["families"].items():
        row = [key]
        for name in names:
            figures = cell["predictors"][name]
            r = "/".join("-" if v is None else f"{v:.2f}" for v in figures["pearson_r"])
            recall = "/".join("-" if v is None else f"{v:.2f}" for v in figures["long_tail_recall"])
            row.append(f"{r}\n{recall}")
        table.add_row(*row)
    return table


@bench_app.command("predictor")
def bench_predictor(
    families: Annotated[
        str, typer.Option(help="Zoo families, comma-separated")
    ] = "swe,search,math",
    signals: Annotated[
        str, typer.Option(help=f"Text signal strengths: {', '.join(SIGNAL_LEVELS)}")
    ] = ",".join(BENCH_SIGNALS),
    num_trajectories: Annotated[int, typer.Option(help="Per training and test trace")] = 512,
    max_train_examples: Annotated[int, typer.Option(help="Per cell's training")] = 4000,
    num_timing_examples: Annotated[
        int, typer.Option(help="Examples of the timed training")
    ] = 20_000,
    concurrency: Annotated[int, typer.Option(help="Service requests in flight at once")] = 32,
    num_epochs: Annotated[int, typer.Option(help="Head training epochs")] = 40,
    num_threads: Annotated[
        int, typer.Option(help="torch CPU threads (0: torch's default, one per core)")
    ] = 0,
    base: Annotated[str, typer.Option(help="Encoder: a local HF folder or minilm")] = "minilm",
    seed: Annotated[int, typer.Option()] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object")] = False,
) -> None:
    """Context model vs numeric predictors (Fig. 13), serving latency, training time."""
    from heddle.bench.predictor import PredictorBenchConfig
    from heddle.workloads.zoo import ZOO

    if num_threads:
        import torch

        torch.set_num_threads(num_threads)
    config = PredictorBenchConfig(
        families=_split(families, ZOO, "families"),
        signals=_split(signals, SIGNAL_LEVELS, "signals"),
        num_trajectories=num_trajectories,
        max_train_examples=max_train_examples,
        num_epochs=num_epochs,
        base=base,
        seed=seed,
    )
    with tempfile.TemporaryDirectory(prefix="heddle-bench-predictor-") as folder:
        result = _run(config, num_timing_examples, concurrency, Path(folder))
    if as_json:
        typer.echo(json.dumps(result))
        return
    console = Console()
    console.print(_table(result))
    serve = result["serve"]
    console.print(
        f"serve: p50 {serve['p50_ms']} ms, p99 {serve['p99_ms']} ms, on time "
        f"{serve['on_time_share']:.1%}; training on {result['train_examples']} examples: "
        f"{result['train_s']} s"
    )
