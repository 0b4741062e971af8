"""`heddle sim hunt`: search the hunter's space for the cells where Heddle loses most
(``heddle.experiments.hunt``), and add the worst to the regression corpus
(``heddle.experiments.corpus``).

    heddle sim hunt --budget 48 --jobs 2 --json > hunt.json
    heddle sim hunt --from-json hunt.json --add-to-corpus 3   # the corpus from a run elsewhere

The default budget (48 cells, the 4 worst confirmed on 3 epochs) costs about 1,900 CPU s: about
16 minutes on 2 idle cores, about 6 with ``--jobs 16`` (docs/robustness.md). Progress goes to
stderr, one line a cell. Bad flags print one line and exit 2.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from heddle.cli.apps import sim_app
from heddle.cli.sim_choices import system_names
from heddle.errors import UserError
from heddle.experiments.corpus import CORPUS_DIR
from heddle.experiments.hunt import HuntConfig, HuntFinding, run_hunt
from heddle.experiments.hunt_corpus import add_to_corpus
from heddle.experiments.hunt_report import hunt_document, hunt_markdown
from heddle.policy.engine_models import ENGINE_MODELS
from heddle.sim.config import SIM_PREDICTORS

_DEFAULTS = HuntConfig()
_SEARCH_FLAGS = (
    ("--max-steps", "max_steps"),
    ("--confirm", "num_confirm"),
    ("--confirm-replications", "confirm_replications"),
)
"""What else decides a hunt's cells (named in a corpus entry's ``by`` when not the default)."""


def _hunt_config(
    budget: int,
    seed: int,
    max_steps: int,
    confirm: int,
    confirm_replications: int,
    systems: str,
    engine_model: str,
    predictor: str,
) -> HuntConfig:
    if engine_model not in ENGINE_MODELS:
        raise UserError(
            f"unknown --engine-model {engine_model!r}; choose one of {', '.join(ENGINE_MODELS)}"
        )
    if predictor not in SIM_PREDICTORS or predictor == "context":
        raise UserError(f"--predictor: choose one of {sorted(set(SIM_PREDICTORS) - {'context'})}")
    try:
        return HuntConfig(
            budget=budget,
            seed=seed,
            max_steps=max_steps,
            num_confirm=confirm,
            confirm_replications=confirm_replications,
            systems=tuple(system_names(systems)) if systems else (),
            engine_model=engine_model,
            predictor=predictor,
        )
    except ValueError as exc:
        raise UserError(str(exc)) from None


def _progress(finding: HuntFinding, stage: str) -> None:
    point, result = finding.point, finding.judged
    ratios = f"heddle / best baseline {finding.over_best_baseline:.3f}"
    ratios += f", / best ablation {finding.over_best_ablation:.3f}"
    errors = f", {len(result.errors)} system errors" if result.errors else ""
    print(
        f"{stage} cell {finding.index}: {point.model} x {result.cell.num_gpus}, "
        f"{result.num_trajectories} traj, {result.num_steps} steps, KV {result.kv.ratio:.2f}, "
        f"history {point.history}: {ratios}{errors} ({result.wall_s:.0f} s)",
        file=sys.stderr,
        flush=True,
    )


def _commit() -> str:
    """The checkout's commit, or "" outside a git checkout."""
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).parent,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def _provenance(document: dict[str, Any]) -> dict[str, Any]:
    config = document["config"]
    command = f"heddle sim hunt --budget {config['budget']} --seed {config['seed']}"
    for flag, key in _SEARCH_FLAGS:
        if config.get(key, getattr(_DEFAULTS, key)) != getattr(_DEFAULTS, key):
            command += f" {flag} {config[key]}"
    commit = document.get("commit") or _commit()
    return {"by": command, "commit": commit, "engine_model": config["engine_model"]}


@sim_app.command("hunt")
def hunt(
    budget: Annotated[
        int,
        typer.Option(
            help="Cells searched: half random draws, half local search "
            "(48: ~16 min on 2 idle cores, ~6 with --jobs 16)"
        ),
    ] = _DEFAULTS.budget,
    seed: Annotated[int, typer.Option(help="The hunt's seed (its cells' seeds follow)")] = 0,
    jobs: Annotated[int, typer.Option(help="Worker processes")] = 2,
    max_steps: Annotated[
        int, typer.Option(help="Trajectory steps a cell runs at most (its cost)")
    ] = _DEFAULTS.max_steps,
    confirm: Annotated[
        int, typer.Option(help="Worst cells run again on more epochs")
    ] = _DEFAULTS.num_confirm,
    confirm_replications: Annotated[
        int, typer.Option(help="Epochs of a confirmation")
    ] = _DEFAULTS.confirm_replications,
    systems: Annotated[
        str, typer.Option(help="Comma-separated systems (default: heddle, baselines, heddle-*)")
    ] = "",
    engine_model: Annotated[
        str, typer.Option(help="Engine model of every system")
    ] = _DEFAULTS.engine_model,
    predictor: Annotated[
        str, typer.Option(help="Predictor of the systems that predict")
    ] = _DEFAULTS.predictor,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object")] = False,
    markdown: Annotated[Path | None, typer.Option(help="Write the worst cells here")] = None,
    from_json: Annotated[
        Path | None, typer.Option(help="Take the cells of this hunt's --json instead of hunting")
    ] = None,
    add_to_corpus_count: Annotated[
        int,
        typer.Option("--add-to-corpus", help="Add this many worst confirmed losses to the corpus"),
    ] = 0,
    corpus_dir: Annotated[Path, typer.Option(help="The corpus folder")] = CORPUS_DIR,
) -> None:
    """Search workloads where heddle loses most to the best baseline or a heddle-* ablation."""
    if jobs < 1 or add_to_corpus_count < 0:
        raise UserError("--jobs must be >= 1 and --add-to-corpus >= 0")
    if from_json is not None:
        document = _read_document(from_json)
    else:
        config = _hunt_config(
            budget,
            seed,
            max_steps,
            confirm,
            confirm_replications,
            systems,
            engine_model,
            predictor,
        )
        result = run_hunt(config, jobs, _progress)
        document = {**hunt_document(result, jobs), "commit": _commit()}
        if markdown is not None:
            markdown.write_text(hunt_markdown(result))
        if not as_json:
            typer.echo(hunt_markdown(result))
    if add_to_corpus_count:
        _add(document, corpus_dir, add_to_corpus_count)
    if as_json:
        typer.echo(json.dumps(document))


def _read_document(path: Path) -> dict[str, Any]:
    try:
        document = json.loads(path.read_text().strip().splitlines()[-1])
    except (OSError, ValueError, IndexError) as exc:
        raise UserError(f"--from-json {path}: not a hunt's JSON ({exc})") from None
    if not isinstance(document, dict) or "worst_confirmed" not in document:
        raise UserError(f"--from-json {path}: not a hunt's JSON (no worst_confirmed)")
    return document


def _add(document: dict[str, Any], directory: Path, count: int) -> None:
    written, existing = add_to_corpus(document, directory, count, _provenance(document))
    for entry in written:
        print(f"corpus: added {entry.name} ({entry.directory})", file=sys.stderr)
    for name in existing:
        print(f"corpus: {name} is there already", file=sys.stderr)
    if not written and not existing:
        print("corpus: no confirmed loss above 2% to add", file=sys.stderr)
