"""What a simulated rollout reports: makespan, throughput, the lower bound, the slowest
trajectory's breakdown, counts, active trajectories over time and per-worker timelines."""

from __future__ import annotations

from dataclasses import dataclass, field

from heddle.sim.simulator import Run
from heddle.sim.trajectories import SimTrajectory


@dataclass(frozen=True, slots=True)
class Breakdown:
    """Where one trajectory's time went (seconds). ``queue_s + generation_s + tool_s +
    migration_s == total_s``: a step is always queued, generating, in a tool or moving."""

    trace_id: str
    traj_id: str
    total_s: float
    queue_s: float
    generation_s: float
    """Prefill plus decode."""
    prefill_s: float
    decode_s: float
    tool_s: float
    migration_s: float
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
            queue_s=t.queue_s,
            generation_s=t.prefill_s + t.decode_s,
            prefill_s=t.prefill_s,
            decode_s=t.decode_s,
            tool_s=t.tool_s,
            migration_s=t.migration_s,
            num_steps=len(t.trace.steps),
            num_output_tokens=t.num_output_tokens,
            num_preemptions=t.num_preemptions,
            num_migrations=t.num_migrations,
            worker_history=list(t.worker_history),
        )


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
    worker_timelines: dict[str, list[tuple[float, int, int]]] = field(default_factory=dict)
    """Per worker (time, running, waiting) after each membership change (when recorded)."""

    def summary(self) -> dict[str, object]:
        """The headline figures as a JSON-ready dict (``heddle sim compare --json``)."""
        slowest = self.slowest
        return {
            "makespan_s": self.makespan_s,
            "throughput_tok_s": self.throughput_tok_s,
            "lower_bound_s": self.lower_bound_s,
            "makespan_over_lb": self.makespan_over_lb,
            "tp_degrees": self.tp_degrees,
            "num_failed": self.num_failed,
            "num_output_tokens": self.num_output_tokens,
            "slowest": {
                "trace_id": slowest.trace_id,
                "total_s": slowest.total_s,
                "queue_s": slowest.queue_s,
                "generation_s": slowest.generation_s,
                "tool_s": slowest.tool_s,
                "migration_s": slowest.migration_s,
                "num_preemptions": slowest.num_preemptions,
                "num_migrations": slowest.num_migrations,
            },
            "num_preemptions": self.num_preemptions,
            "num_migrations": self.num_migrations,
            "num_recomputed_tokens": self.num_recomputed_tokens,
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
        num_evicted_tokens=sum(w.model.num_evicted_tokens for w in run.workers),
        num_events=run.num_events,
        active_over_time=run.active_over_time,
        worker_timelines={w.worker_id: w.model.timeline for w in run.workers if w.model.timeline},
    )
