"""`heddle bench integrations`: what the trainer integrations add over the rollout itself:
converting a batch of finished trajectories into verl's ``DataProto`` (when verl is installed)
and into slime's samples. The trajectories are built in memory (prompt, generations and tool
observations of the given sizes), so the figure is the conversion alone."""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from types import SimpleNamespace
from typing import Annotated, Any

import typer

from heddle.cli.apps import bench_app
from heddle.events import Completed
from heddle.events.base import TerminalReason
from heddle.integrations.batch import BatchResult
from heddle.integrations.slime import fill_groups


@dataclass
class _SlimeSample:
    """The fields of slime's ``Sample`` that ``fill_sample`` sets (docs/integrations.md)."""

    class Status(Enum):
        PENDING = "pending"
        COMPLETED = "completed"
        TRUNCATED = "truncated"
        ABORTED = "aborted"
        FAILED = "failed"

    tokens: list[int] = field(default_factory=list)
    response_length: int = 0
    reward: float | None = None
    loss_mask: list[int] | None = None
    rollout_log_probs: list[float] | None = None
    weight_versions: list[str] = field(default_factory=list)
    status: Status = Status.PENDING
    metadata: dict[str, Any] = field(default_factory=dict)


def synthetic_completions(
    num: int, prompt: int, steps: int, step_tokens: int, tool_tokens: int
) -> list[Completed]:
    """``num`` finished trajectories: ``steps`` generations of ``step_tokens`` with
    ``tool_tokens`` observed between them; every 16th truncated, every 64th aborted."""
    mask: list[int] = []
    for step in range(steps):
        mask += [1] * step_tokens + ([0] * tool_tokens if step < steps - 1 else [])
    response = [(7 * i) % 250 for i in range(len(mask))]
    logprobs = [-0.5 if m else 0.0 for m in mask]
    reasons: list[TerminalReason] = [
        "aborted" if i % 64 == 63 else "length" if i % 16 == 15 else "stop" for i in range(num)
    ]
    return [
        Completed(
            event_id=f"bench:t{i:06d}", rollout_id="bench", traj_id=f"t{i:06d}", occurred_at=0.0,
            num_steps=steps, prompt_token_ids=list(range(prompt)), response_token_ids=response,
            response_logprobs=logprobs, loss_mask=mask, logprob_mask=mask, reward=float(i % 2),
            finish_reason=reasons[i], group_id=f"g{i // 8:05d}", index=i, weight_versions=[0],
        )
        for i in range(num)
    ]  # fmt: skip


def _timed(run: Callable[[], object], repeats: int) -> dict[str, float]:
    seconds = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        seconds.append(time.perf_counter() - started)
    return {"median_s": round(statistics.median(seconds), 4), "min_s": round(min(seconds), 4)}


def integration_figures(num: int, prompt: int, response: int, repeats: int) -> dict[str, Any]:
    steps, tool_tokens = 3, 50
    step_tokens = (response - (steps - 1) * tool_tokens) // steps
    batch = synthetic_completions(num, prompt, steps, step_tokens, tool_tokens)
    result = BatchResult("bench", batch, {"heddle/makespan_s": 1.0})
    report: dict[str, Any] = {
        "rows": num, "prompt_tokens": prompt, "response_tokens": len(batch[0].response_token_ids),
        "repeats": repeats, "target_s": 2.0,
    }  # fmt: skip

    def to_slime() -> object:
        groups = [[_SlimeSample() for _ in range(8)] for _ in range(num // 8)]
        return fill_groups(groups, result)

    report["slime_samples"] = _timed(to_slime, repeats)
    try:
        from heddle.integrations.verl_batch import to_data_proto

        rollout = SimpleNamespace(prompt_length=prompt, response_length=response)
        report["verl_data_proto"] = _timed(lambda: to_data_proto(batch, rollout), repeats)
    except ImportError as exc:
        report["verl_data_proto"] = {"skipped": f"verl is not installed ({exc})"}
    return report


@bench_app.command("integrations")
def bench_integrations(
    rows: Annotated[int, typer.Option(help="trajectories in the batch")] = 1024,
    prompt_tokens: Annotated[int, typer.Option(help="verl's prompt_length")] = 256,
    response_tokens: Annotated[int, typer.Option(help="verl's response_length")] = 1024,
    repeats: Annotated[int, typer.Option(help="timed conversions of each kind")] = 5,
    as_json: Annotated[bool, typer.Option("--json", help="one JSON object")] = False,
) -> None:
    """Time converting a batch of trajectories to verl's DataProto and slime's samples."""
    if rows < 8 or rows % 8 or prompt_tokens < 1 or response_tokens < 200 or repeats < 1:
        from heddle.errors import UserError

        raise UserError("rows must be a multiple of 8; prompt >= 1, response >= 200, repeats >= 1")
    report = integration_figures(rows, prompt_tokens, response_tokens, repeats)
    print(json.dumps(report, indent=None if as_json else 2))
