"""Human-readable output of ``heddle rollout run`` and ``compare`` (rich tables); ``--json``
prints the documents of ``RolloutResult.to_json`` and ``CompareResult.to_json`` instead."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from heddle.rollout.compare import CompareResult
from heddle.rollout.driver import RolloutResult


def print_summary(result: RolloutResult, console: Console) -> None:
    """The summary of ``heddle rollout run`` as a table."""
    summary = result.summary
    table = Table(title=f"rollout {summary.rollout_id} ({summary.policy}, {summary.source})")
    table.add_column("figure")
    table.add_column("value", justify="right")
    rows: list[tuple[str, Any]] = [
        ("trajectories", f"{summary.num_completed}/{summary.num_trajectories} completed"),
        ("failed", summary.num_failed),
        ("makespan (model s)", f"{summary.makespan_s:,.1f}"),
        ("wall s", f"{summary.wall_s:,.1f} (time scale {summary.time_scale:g})"),
        ("throughput (tok / model s)", f"{summary.throughput_tok_s:,.0f}"),
        ("output tokens", f"{summary.output_tokens:,}"),
        ("events", f"{summary.events:,}"),
        ("preemptions / migrations", f"{summary.num_preemptions} / {summary.num_migrations}"),
        (
            "re-placements (re-prefilled tokens)",
            f"{summary.num_replacements} ({summary.replacement_recomputed_tokens:,})",
        ),
        (
            "migration re-prefill: warmed up / not hidden",
            f"{summary.warmed_up_tokens:,} / {summary.migration_recomputed_tokens:,} tokens",
        ),
    ]
    for name, value in rows:
        table.add_row(name, str(value))
    slow = summary.slowest
    if slow is not None:
        table.add_row(
            f"slowest {slow.traj_id} ({slow.num_steps} steps)",
            f"queue {slow.queue_s:.0f} / prefill {slow.prefill_s:.0f} / decode "
            f"{slow.decode_s:.0f} / tool {slow.tool_s:.0f} / migration {slow.migration_s:.0f} s",
        )
        table.add_row(
            "... held",
            f"admission {slow.admission_s:.0f} / between steps {slow.held_s:.0f} / weights "
            f"{slow.weights_s:.0f} / re-shards {slow.reshard_s:.0f} s",
        )
        table.add_row(
            "... beyond the model",
            f"control {slow.control_s:.0f} / messaging {slow.messaging_s:.0f} / tool queue "
            f"{slow.tool_queue_s:.0f} / engine lag {slow.engine_lag_s:.0f} / worker lag "
            f"{slow.worker_lag_s:.0f} / other {slow.other_s:.0f} s (of {slow.total_s:.0f})",
        )
    lag = summary.lag
    table.add_row(
        "behind the time scale",
        f"workers {lag.worker_lag_fraction:.1%} / control {lag.control_lag_fraction:.1%} / "
        f"messaging {lag.messaging_fraction:.1%} / tool queue {lag.tool_queue_fraction:.1%} "
        f"(slowest {lag.slowest_behind_fraction:.1%})",
    )
    table.add_row("ledger", result.ledger_url)
    if result.timeline_path is not None:
        table.add_row("timeline", str(result.timeline_path))
    console.print(table)
    if lag.warning:
        console.print(f"[yellow]warning:[/yellow] {lag.warning}", highlight=False)


def print_comparison(result: CompareResult, console: Console) -> None:
    """The table of ``heddle rollout compare`` and the throughput ratios, live and simulated."""
    table = Table(title=f"{result.source}: {result.num_trajectories} trajectories (model seconds)")
    for column in ("policy", "TP", "makespan s", "tok/s", "sim makespan s", "sim tok/s"):
        table.add_column(column, justify="left" if column == "policy" else "right")
    for run in result.runs:
        live = run.live.summary
        sim = run.simulated or {}
        table.add_row(
            run.policy,
            ",".join(map(str, run.tp_degrees)),
            f"{live.makespan_s:,.0f}",
            f"{live.throughput_tok_s:,.0f}",
            f"{sim['makespan_s']:,.0f}" if sim else "-",
            f"{sim['throughput_tok_s']:,.0f}" if sim else "-",
        )
    console.print(table)
    document = result.to_json()
    simulated = document["simulated_throughput_ratios"]
    for label, ratio in document["throughput_ratios"].items():
        sim_ratio = simulated.get(label)
        tail = f" (simulated {sim_ratio:.2f}x)" if sim_ratio else ""
        console.print(f"{label}: {ratio:.2f}x throughput{tail}")
