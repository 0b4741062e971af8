"""``run_rollout``: start what is needed, submit, follow to the end, summarise.

Steps (each waited for, so that the rollout never starts on a half-started system):

1. the control plane (``heddle up`` child, ready when its status file says so) unless attaching
   to a running one (``control_plane=None``);
2. the worker agents (one process each; registered) and the tool executors;
3. the submission; then following it (``heddle.rollout.progress``) until every trajectory has
   ended, the timeout passes, or the caller is interrupted (then the rollout is cancelled: its
   trajectories are aborted and it gets no more commands);
4. the summary from the stream (``heddle.rollout.summary``); the children are stopped.

``RunHooks`` let a caller act while the rollout runs (the crash tests kill and restart the
control plane or a worker from ``on_progress``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from heddle.bus import Bus, BusOptions
from heddle.config import Settings
from heddle.controlplane import ControlPlaneConfig
from heddle.errors import UserError
from heddle.rollout.control_plane import refuse_second_control_plane, require_control_plane
from heddle.rollout.deployment import DeploymentError, LocalDeployment, WorkerPool
from heddle.rollout.processes import signal_name
from heddle.rollout.progress import ProgressState, ProgressView, RolloutFollower
from heddle.rollout.router import RouterSpec, require_router_package, routed_policy
from heddle.rollout.submission import RolloutPlan, new_rollout_id
from heddle.rollout.submit import CLI_TRAINER, cancel, submit
from heddle.rollout.summary import RolloutSummary, rollout_summary

log = logging.getLogger(__name__)


TimelineWriter = Callable[[Bus, str, Path], Awaitable[Path | None]]
"""Draws a rollout's timeline to a PNG (``heddle.timeline.write_rollout_timeline``); passed in
``RunHooks`` so that this module does not import matplotlib."""


@dataclass(frozen=True, slots=True)
class RunOptions:
    plan: RolloutPlan
    pool: WorkerPool | None = None
    """Workers to start (None: use the workers already registered)."""
    num_tool_executors: int = 1
    control_plane: ControlPlaneConfig | None = field(default_factory=ControlPlaneConfig)
    """The control plane to start (None: attach to a running ``heddle up``)."""
    timeout_s: float | None = None
    """Wall seconds to wait for the end (None: no limit)."""
    show_progress: bool = True
    poll_s: float = 0.5
    log_dir: Path | None = None
    """Child process logs (default ``<data_dir>/logs/<rollout id>``)."""
    rollout_id: str | None = None
    trainer: str = CLI_TRAINER
    """The trainer name the rollout is submitted under (``heddle.ops.submit.<trainer>``)."""
    timeline: Path | None = None
    """Draw the rollout's timeline to this PNG at the end (with ``RunHooks.timeline_writer``)."""


class RouterReport(msgspec.Struct, frozen=True, kw_only=True):
    policy: str
    url: str
    num_routed_requests: int
    """Generations the router counted (``smg_router_requests_total``)."""


@dataclass(frozen=True, slots=True)
class RolloutResult:
    rollout_id: str
    summary: RolloutSummary
    ledger_url: str
    log_dir: Path
    timeline_path: Path | None = None
    router: RouterReport | None = None
    """The ``sglang-router`` the generations went through, when one was launched."""
    stream_bytes: int = 0
    """Bytes ``HEDDLE_EVENTS`` grew by from the submission to the end (JetStream's own count:
    payloads, subjects and headers; on an attached system also anything else appended then)."""
    payload_bytes: int = 0
    """Bytes the object-store bucket of offloaded arrays grew by meanwhile."""

    @property
    def stream_bytes_per_output_token(self) -> float:
        return self.stream_bytes / max(self.summary.output_tokens, 1)

    def to_json(self) -> dict[str, Any]:
        """The one JSON object of ``heddle rollout run --json``."""
        document: dict[str, Any] = msgspec.to_builtins(self.summary)
        document["router"] = None if self.router is None else msgspec.to_builtins(self.router)
        document["stream_bytes"] = self.stream_bytes
        document["stream_bytes_per_output_token"] = round(self.stream_bytes_per_output_token, 2)
        document["payload_object_bytes"] = self.payload_bytes
        document["ledger"] = self.ledger_url
        document["logs"] = str(self.log_dir)
        document["timeline"] = str(self.timeline_path) if self.timeline_path else None
        document["makespan_unit"] = "model seconds (wall x time_scale)"
        return document


@dataclass(frozen=True, slots=True)
class RunHooks:
    on_submitted: Callable[[str, LocalDeployment], Awaitable[None]] | None = None
    on_progress: Callable[[ProgressState, LocalDeployment], Awaitable[None]] | None = None
    timeline_writer: TimelineWriter | None = None
    """Draws ``RunOptions.timeline`` at the end (None: no timeline is drawn)."""


async def run_rollout(
    settings: Settings, options: RunOptions, hooks: RunHooks | None = None
) -> RolloutResult:
    """Run one rollout end to end; raises ``UserError`` (``DeploymentError``) when a part of
    the deployment fails or the timeout passes."""
    hooks = hooks or RunHooks()
    rollout_id = options.rollout_id or new_rollout_id()
    log_dir = options.log_dir or settings.data_dir / "logs" / rollout_id
    async with Bus(settings, BusOptions(name="heddle-rollout")) as bus:
        deployment = LocalDeployment(bus, log_dir)
        is_submitted = False
        try:
            await prepare(bus, deployment, options)
            before = await bus.stream_state()
            payloads_before = await bus.payload_bytes()
            since = before.last_sequence + 1
            reply = await submit(bus, options.plan, rollout_id, trainer=options.trainer)
            is_submitted = True
            if hooks.on_submitted is not None:
                await hooks.on_submitted(rollout_id, deployment)
            await _follow(bus, deployment, rollout_id, since, options, hooks, reply.time_scale)
            summary = await rollout_summary(bus, rollout_id)
            stream_bytes = (await bus.stream_state()).num_bytes - before.num_bytes
            payload_bytes = await bus.payload_bytes() - payloads_before
            timeline = await _timeline(bus, rollout_id, options.timeline, hooks.timeline_writer)
        except BaseException as exc:
            if is_submitted:
                await _cancel(bus, rollout_id, _reason(exc), options.trainer)
            raise
        finally:
            await deployment.stop()
    return RolloutResult(
        rollout_id,
        summary,
        settings.ledger_url,
        log_dir,
        timeline,
        _router_report(deployment),
        stream_bytes,
        payload_bytes,
    )


def _router_report(deployment: LocalDeployment) -> RouterReport | None:
    router = deployment.router
    if router is None:
        return None
    spec = router.spec
    return RouterReport(policy=spec.policy, url=spec.url, num_routed_requests=router.num_routed)


async def prepare(bus: Bus, deployment: LocalDeployment, options: RunOptions) -> None:
    """Control plane (or check the running one), workers, tool executors."""
    if options.control_plane is not None:
        refuse_second_control_plane(bus.settings.data_dir, options.control_plane)
        await deployment.start_control_plane(options.control_plane)
    else:
        await require_control_plane(bus)
    if options.pool is not None and options.pool.num_workers:
        await _start_workers(deployment, options.pool, options.plan.policy)
    executors = max(1, options.num_tool_executors)
    in_flight = max(64, -(-options.plan.num_trajectories // executors))
    await deployment.start_tools(options.num_tool_executors, max_in_flight=in_flight)


async def _start_workers(deployment: LocalDeployment, pool: WorkerPool, policy: str) -> None:
    """The workers; where the policy routes through the real ``sglang-router`` (slime over
    SGLang: ``heddle.rollout.router``), their engines post generations to it, started once
    their servers are up."""
    router_policy = routed_policy(policy, pool.engine)
    if router_policy is None:
        await deployment.start_workers(pool.for_policy(policy))
        return
    require_router_package()
    pool = pool.with_server_ports().for_policy(policy)
    try:
        urls = pool.server_urls()
    except ValueError as exc:
        raise UserError(str(exc)) from None
    spec = RouterSpec.on_free_ports(router_policy, urls)
    await deployment.start_workers(pool.with_router(spec.url))
    await deployment.start_router(spec)


async def _follow(
    bus: Bus,
    deployment: LocalDeployment,
    rollout_id: str,
    since: int,
    options: RunOptions,
    hooks: RunHooks,
    time_scale: float,
) -> ProgressState:
    """Follow the rollout to its end; ``time_scale``: the one it runs at (the service's reply)."""
    plan = options.plan
    state = ProgressState(rollout_id, plan.num_trajectories, time_scale)
    follower = await RolloutFollower(bus, state).open(since)
    deadline = None if options.timeout_s is None else time.monotonic() + options.timeout_s
    title = f"{rollout_id} ({plan.policy})"
    try:
        with ProgressView(options.show_progress, title) as view:
            while True:
                await follower.poll()
                view.update(state)
                if state.is_over:
                    return state
                if hooks.on_progress is not None:
                    await hooks.on_progress(state, deployment)
                _check_deployment(deployment)
                if deadline is not None and time.monotonic() > deadline:
                    raise UserError(
                        f"rollout {rollout_id} did not finish within {options.timeout_s:g} s "
                        f"({state.num_done}/{state.num_trajectories} done); logs in "
                        f"{deployment.launcher.log_dir}"
                    )
                await asyncio.sleep(options.poll_s)
    finally:
        await follower.close()


def _check_deployment(deployment: LocalDeployment) -> None:
    """The control plane must stay up; a dead worker or executor is only reported (the control
    plane re-places a dead worker's trajectories)."""
    control = deployment.control_plane
    if control is not None and not control.is_running:
        raise DeploymentError(
            f"the control plane exited ({signal_name(control.process.returncode)}); "
            f"log {control.log_path}:\n{control.log_tail()}"
        )
    for child in deployment.failed_children():
        if child is not control and not child.is_reported:
            log.warning("%s exited (%s)", child.name, signal_name(child.process.returncode))
            child.is_reported = True


async def _cancel(bus: Bus, rollout_id: str, reason: str, trainer: str) -> None:
    """Cancel the rollout through the operations service (best effort: the bus, or the control
    plane, may be what failed)."""
    try:
        await cancel(bus, rollout_id, reason, trainer=trainer, timeout_s=10.0)
    except Exception as exc:  # the original error matters more
        log.warning("could not cancel rollout %s: %r", rollout_id, exc)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, (KeyboardInterrupt, asyncio.CancelledError)):
        return "interrupted"
    return f"{type(exc).__name__}: {exc}"[:500]


async def _timeline(
    bus: Bus, rollout_id: str, path: Path | None, writer: TimelineWriter | None
) -> Path | None:
    if path is None or writer is None:
        return None
    try:
        return await writer(bus, rollout_id, path)
    except Exception as exc:
        log.warning("timeline of %s not drawn: %r", rollout_id, exc)
        return None
