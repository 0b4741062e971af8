"""`heddle predictor train|serve`: the context predictor (paper s.4.1) trained from recorded
rollouts and served on NATS beside the control plane."""

from __future__ import annotations

import contextlib
import json
import logging
from pathlib import Path
from typing import Annotated

import msgspec
import typer
from rich.console import Console

from heddle.cli.apps import app, settings_of
from heddle.errors import UserError
from heddle.traces import TraceError, TraceTrajectory, read_trace

predictor_app = typer.Typer(help="The context predictor: train it, serve it.")
app.add_typer(predictor_app, name="predictor", no_args_is_help=True)


def _recorded(
    ctx: typer.Context, traces: list[Path], from_ledger: bool, from_stream: bool
) -> list[TraceTrajectory]:
    trajectories: list[TraceTrajectory] = []
    for path in traces:
        try:
            trajectories.extend(read_trace(path))
        except TraceError as exc:
            raise UserError(str(exc)) from None
    if from_ledger:
        from heddle.ledger import open_ledger
        from heddle.replay.trace_export import trace_of

        ledger = open_ledger(settings_of(ctx).ledger_url)
        try:
            trajectories.extend(trace_of(ledger))
        finally:
            ledger.close()
    if from_stream:
        import asyncio

        from heddle.bus import Bus
        from heddle.context_model.stream import traces_from_stream

        async def read() -> list[TraceTrajectory]:
            async with Bus(settings_of(ctx)) as bus:
                return await traces_from_stream(bus)

        trajectories.extend(asyncio.run(read()))
    if not trajectories:
        raise UserError(
            "no recorded trajectories: name trace files, or pass --from-ledger or --from-stream"
        )
    return trajectories


@predictor_app.command("train")
def train_command(
    ctx: typer.Context,
    traces: Annotated[list[Path] | None, typer.Argument(help="JSONL trace files")] = None,
    out: Annotated[Path, typer.Option(help="Model folder to write")] = Path("predictor-model"),
    from_ledger: Annotated[
        bool, typer.Option(help="Also learn from every rollout the ledger recorded")
    ] = False,
    from_stream: Annotated[
        bool,
        typer.Option(help="Also learn from the event stream's completed trajectories (with text)"),
    ] = False,
    base: Annotated[
        str, typer.Option(help="Encoder: a local Hugging Face folder, or minilm (packaged)")
    ] = "minilm",
    num_epochs: Annotated[int, typer.Option(help="Head training epochs")] = 60,
    max_examples: Annotated[int, typer.Option(help="Examples sampled at most")] = 20_000,
    device: Annotated[str, typer.Option(help="torch device")] = "cpu",
    seed: Annotated[int, typer.Option()] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON")] = False,
) -> None:
    """Build (context, remaining tokens, steps, tool time) examples at every step of the
    recorded trajectories and train the regression head on the frozen encoder."""
    from heddle.context_model.train import TrainConfig, train

    trajectories = _recorded(ctx, traces or [], from_ledger, from_stream)
    config = TrainConfig(
        base=base, num_epochs=num_epochs, max_examples=max_examples, device=device, seed=seed
    )
    report = train(trajectories, out, config)
    if as_json:
        typer.echo(msgspec.json.encode(report).decode())
        return
    console = Console()
    console.print(
        f"trained on {report.num_train_examples} examples "
        f"({report.num_trajectories} trajectories) in {report.train_s:.1f} s "
        f"(encoding {report.encode_s:.1f} s); model in {out}"
    )
    if report.best_epoch:
        kept = f"epoch {report.best_epoch}'s correction"
    else:
        kept = "the numeric model's answers (no epoch surely beat them)"
    if report.win_share is not None:
        kept += f"; the best epoch won {report.win_share:.0%} of held-out resamples"
    console.print(f"  kept {kept}")
    for figures in report.steps:
        console.print(
            f"  after step {figures.num_steps}: pearson_r {figures.pearson_r}, "
            f"long_tail_recall {figures.long_tail_recall} ({figures.num_examples} held out)"
        )


@predictor_app.command("serve")
def serve_predictor_command(
    ctx: typer.Context,
    model: Annotated[Path, typer.Option(help="Model folder from `heddle predictor train`")],
    device: Annotated[str, typer.Option(help="torch device")] = "cpu",
    max_batch: Annotated[int, typer.Option(help="Requests answered in one batch at most")] = 64,
    report_every_s: Annotated[float, typer.Option(help="Seconds between latency logs")] = 30.0,
) -> None:
    """Answer prediction requests on NATS (the configured server, else the data dir's embedded
    one that `heddle up` runs) until interrupted; logs its latency every report_every_s."""
    import asyncio

    from heddle.context_model.service import ServiceConfig, serve_predictor

    if not (model / "config.json").is_file():
        raise UserError(f"{model}: not a context model folder (train one with `predictor train`)")
    settings = settings_of(ctx)
    config = ServiceConfig(max_batch=max_batch, report_every_s=report_every_s)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve_predictor(settings, model, config, device))
    typer.echo(json.dumps({"stopped": True}))
