"""How a migrating trajectory's context reaches its target in the simulated data plane, by the
engine model: its KV exported and sent over the link (the torch engine), or, with no KV export
(SGLang), prefilled at the target by a warm-up request during the tool gap. Either way the
move's end is a ``TRANSFER`` timer; ``SimDataPlane.transfer_done`` lands it."""

from __future__ import annotations

from heddle.policy.batching import CapacityError
from heddle.sim.config import SimConfig
from heddle.sim.sim_worker import SimWorker, trajectory_generation_job
from heddle.sim.timers import Timer, TimerKind
from heddle.sim.trajectories import SimTrajectory


def send_kv(
    t: SimTrajectory, source: SimWorker, config: SimConfig, timer: Timer, now: float
) -> None:
    """Export the KV at the source and move it over the link (the torch engine)."""
    num_tokens = source.model.release(t.traj_id)
    num_bytes = num_tokens * config.kv_bytes_per_token
    duration_s = 0.0
    if num_bytes:
        duration_s = config.transfer_latency_s + num_bytes / config.link_bandwidth_bytes_s
    t.migration_tokens = num_tokens
    timer.at(now + duration_s, TimerKind.TRANSFER, t.traj_id)


def warm_up(
    t: SimTrajectory, target: SimWorker, is_swapping: bool, timer: Timer, now: float
) -> bool:
    """No KV export (SGLang): the target prefills the context so far with a prefill-only
    request (``max_new_tokens: 0``) during the tool gap, so the next step hits its cache; the
    source keeps its copy until its cache evicts it. The trajectory moves when the warm-up
    finishes (the target's wake-up); that prefill is recompute, and counted so. A target
    swapping weights (``is_swapping``) takes no warm-up (its cache is about to go): the move
    happens now and the step re-prefills. True when the target's engine took a request."""
    t.num_requests += 1
    t.warmup_request_id = f"{t.traj_id}:{t.step}:{t.num_requests}:warmup"
    t.migration_tokens = 0
    job = trajectory_generation_job(t, t.warmup_request_id, num_new_tokens=0, num_output_tokens=0)
    try:
        if is_swapping:
            raise CapacityError("swapping weights")
        target.model.submit(job, now)
    except CapacityError:  # it cannot be cached there: move now, the step re-prefills
        t.warmup_request_id = ""
        timer.at(now, TimerKind.TRANSFER, t.traj_id)
        return False
    return True
