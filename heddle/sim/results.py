"""What a simulated rollout reports: makespan, throughput, the lower bound, the slowest
trajectory's breakdown, counts, active trajectories over time and per-worker timelines."""

from __future__ import annotations

from dataclasses import dataclass, field

from heddle.sim.accounting import COLUMN_KEYS
from heddle.sim.simulator import Run
from heddle.sim.trajectories import SimTrajectory


@dataclass(frozen=True, slots=True)
class Breakdown:
    """Where one trajectory's time went (seconds): a column for every state it can be in
    (``heddle.sim.accounting``, whose ``COLUMN_KEYS`` name them), which sum to ``total_s``."""

    trace_id: str
    traj_id: str
    total_s: float
    admission_s: float
    held_s: float
    control_s: float
    weights_s: float
    queue_s: float
    prefill_s: float
    decode_s: float
    rerun_s: float
    tool_s: float
    tool_queue_s: float
    migration_s: float
    reshard_s: float
    num_steps: int
    num_output_tokens: int
    num_preemptions: int
    num_migrations: int
    worker_history: list[str]

    @classmethod
    def of(cls, t: SimTrajectory) -> Breakdown:
        return cls(
            trace_id=t.trace.id,
            traj_id=t.traj_id,
            total_s=t.finished_at,
            **t.account.columns(),
            num_steps=len(t.trace.steps),
            num_output_tokens=t.num_output_tokens,
            num_preemptions=t.num_preemptions,
            num_migrations=t.num_migrations,
            worker_history=list(t.worker_history),
        )

    @property
    def columns(self) -> dict[str, float]:
        """Every column by its key, in report order."""
        return {key: getattr(self, key) for key in COLUMN_KEYS}

    @property
    def generation_s(self) -> float:
        """Prefill plus decode."""
        return self.prefill_s + self.decode_s

    def summary(self) -> dict[str, object]:
        """The JSON form: every column, their names (``columns``: they sum to ``total_s``),
        ``generation_s`` (prefill + decode) and the counts."""
        return {
            "trace_id": self.trace_id,
            "total_s": self.total_s,
            **self.columns,
            "generation_s": self.generation_s,
            "columns": list(COLUMN_KEYS),
            "num_preemptions": self.num_preemptions,
            "num_migrations": self.num_migrations,
        }


@dataclass(frozen=True, slots=True)
class SimResult:
    system: str
    makespan_s: float
    throughput_tok_s: float
    """Output tokens of the rollout over its makespan."""
    lower_bound_s: float
    makespan_over_lb: float
    tp_degrees: list[int]
    num_trajectories: int
    num_failed: int
    num_output_tokens: int
    slowest: Breakdown
    num_preemptions: int
    num_migrations: int
    num_recomputed_tokens: int
    num_evicted_tokens: int
    num_events: int
    active_over_time: list[tuple[float, int]]
    num_reshards: int = 0
    """Workers relaunched at a higher TP degree (tail re-sharding)."""
    worker_timelines: dict[str, list[tuple[float, int, int]]] = field(default_factory=dict)
    """Per worker (time, running, waiting) after each membership change (when recorded)."""
    concurrency_cap: int | None = None
    """A baseline's concurrency cap, in its units (trajectories or groups), when it binds
    (None: no cap, or one that admits the whole rollout at once)."""
    admission: str | None = None
    """What a bundle with KV admission ran (``kv x<overcommit>``, ``cap <n>``, ``off``: the plan
    check's choice; None for the others)."""

    def summary(self) -> dict[str, object]:
        """The headline figures as a JSON-ready dict (``heddle sim compare --json``)."""
        return {
            "makespan_s": self.makespan_s,
            "throughput_tok_s": self.throughput_tok_s,
            "lower_bound_s": self.lower_bound_s,
            "makespan_over_lb": self.makespan_over_lb,
            "tp_degrees": self.tp_degrees,
            "num_failed": self.num_failed,
            "num_output_tokens": self.num_output_tokens,
            "slowest": self.slowest.summary(),
            "num_preemptions": self.num_preemptions,
            "num_migrations": self.num_migrations,
            "num_recomputed_tokens": self.num_recomputed_tokens,
            "num_reshards": self.num_reshards,
            "concurrency_cap": self.concurrency_cap,
            "admission": self.admission,
        }


def summarise(system: str, run: Run, tp_degrees: list[int], lower_bound_s: float) -> SimResult:
    trajectories = run.trajectories
    finished = [t for t in trajectories if t.finished_at > 0 or t.num_output_tokens > 0]
    slowest = max(finished or trajectories, key=lambda t: (t.finished_at, t.traj_id))
    num_output_tokens = sum(t.num_output_tokens for t in trajectories)
    makespan_s = run.makespan_s or max(t.finished_at for t in trajectories)
    return SimResult(
        system=system,
        makespan_s=makespan_s,
        throughput_tok_s=num_output_tokens / makespan_s if makespan_s > 0 else 0.0,
        lower_bound_s=lower_bound_s,
        makespan_over_lb=makespan_s / lower_bound_s if lower_bound_s > 0 else float("nan"),
        tp_degrees=tp_degrees,
        num_trajectories=len(trajectories),
        num_failed=sum(1 for t in trajectories if t.num_output_tokens < t.trace.num_output_tokens),
        num_output_tokens=num_output_tokens,
        slowest=Breakdown.of(slowest),
        num_preemptions=sum(t.num_preemptions for t in trajectories),
        num_migrations=sum(t.num_migrations for t in trajectories),
        num_recomputed_tokens=sum(t.num_recomputed_tokens for t in trajectories),
        num_evicted_tokens=sum(m.num_evicted_tokens for w in run.workers for m in w.models),
        num_events=run.num_events,
        active_over_time=run.active_over_time,
        num_reshards=run.num_reshards,
        worker_timelines={w.worker_id: w.model.timeline for w in run.workers if w.model.timeline},
    )
