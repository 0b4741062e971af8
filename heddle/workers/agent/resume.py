"""Resuming a trajectory from its events in the stream (re-placement, migration, restart).

The stream is the source of truth: fold the trajectory's events into a log (``trajectory_log``),
replay a fresh environment over the generated texts and tool results, and work out where the
trajectory stands::

    log phase     next
    READY         run a segment (first step, or the step after a known tool result)
    GENERATING    generate the started step again (its input tokens are already stored)
    GENERATED     act on the environment's verdict on the stored generation
    IN_TOOL       wait for the tool result; the call is sent again with the same id (the
                  worker may have died between ToolCalled and the call; otherwise the tool
                  stream drops the duplicate, or the executor's result id de-duplicates it)
    FINISHED      nothing

Nothing already stored is published again, so every step appears in the stream exactly once.
"""

from __future__ import annotations

import contextlib
import enum
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from heddle.control.leases import TrajectoryLease
from heddle.events import TrajectoryPhase, TrajectorySpec
from heddle.workers.agent.generation import engine_key
from heddle.workers.agent.migration import decode_snapshot
from heddle.workers.agent.ports import BlobStore, HistorySource
from heddle.workers.agent.table import HostedTrajectory
from heddle.workers.agent.trajectory_log import TrajectoryLog, rebuild
from heddle.workers.engines.base import CacheMismatchError, Engine, WarmUpResult
from heddle.workers.environments import (
    HistoryItem,
    Observation,
    StepOutcome,
    create_environment,
    replay,
)

logger = logging.getLogger(__name__)


class ResumeKind(enum.Enum):
    RUN = "run"
    """Run a segment starting from ``ResumePlan.outcome`` (None: generate first)."""
    WAIT_FOR_TOOL = "wait_for_tool"
    FINISHED = "finished"
    FOREIGN = "foreign"
    """The stream places the trajectory on another worker (``ResumePlan.owner``), or a newer
    hosting than the command's: the command is stale."""
    UNKNOWN = "unknown"
    """The stream holds no spec for the trajectory and the command carried none."""


@dataclass(frozen=True, slots=True)
class ResumePlan:
    kind: ResumeKind
    hosted: HostedTrajectory | None = None
    outcome: StepOutcome | None = None
    owner: str = ""


@runtime_checkable
class WarmableEngine(Protocol):
    """Engines that cannot import a cache but can prefill a context ahead (sglang)."""

    async def warm_up(self, trajectory_id: str, input_token_ids: Sequence[int]) -> object: ...


def environment_history(log: TrajectoryLog, decode: _Decoder) -> list[HistoryItem]:
    """Generated texts and tool results in order: what ``replay`` feeds the environment."""
    items: list[HistoryItem] = []
    for step in log.steps:
        if step.generated is None:
            break
        items.append(decode(step.generated.output_token_ids))
        if step.tool_returned is not None:
            items.append(step.tool_returned)
    return items


class _Decoder(Protocol):
    def __call__(self, token_ids: Sequence[int], /) -> str: ...


def plan_from_log(
    log: TrajectoryLog, spec: TrajectorySpec, decode: _Decoder, priority: float
) -> ResumePlan:
    """Rebuild the environment over the log and say what comes next (no I/O)."""
    if log.phase is TrajectoryPhase.DONE:
        return ResumePlan(ResumeKind.FINISHED)
    env = create_environment(spec.environment)
    replayed = replay(env, spec.task, environment_history(log, decode))
    hosted = HostedTrajectory(log=log, spec=spec, env=env, priority=priority)
    last = replayed.last_outcome
    match log.phase:
        case TrajectoryPhase.READY if not log.steps:
            hosted.next_observation = replayed.prompt
            return ResumePlan(ResumeKind.RUN, hosted)
        case TrajectoryPhase.GENERATING:
            hosted.next_observation = _observation_before(replayed.prompt, last)
            return ResumePlan(ResumeKind.RUN, hosted)
        case TrajectoryPhase.IN_TOOL:
            return ResumePlan(ResumeKind.WAIT_FOR_TOOL, hosted, outcome=last)
    # READY after a tool result, or GENERATED: act on the environment's last verdict.
    return ResumePlan(ResumeKind.RUN, hosted, outcome=last)


def is_superseded(lease: TrajectoryLease, epoch: int, worker_id: str) -> bool:
    """Whether hosting ``epoch`` on ``worker_id`` is over by what the stream says: a newer
    hosting was granted, or this one is held by another worker (or handed back)."""
    if lease.max_epoch != epoch:
        return lease.max_epoch > epoch
    return lease.worker_id != worker_id and not (epoch == 0 and not lease.worker_id)


def _observation_before(prompt: Observation, last: StepOutcome | None) -> Observation:
    if last is not None and last.observation is not None:
        return last.observation
    return prompt


class Resumer:
    def __init__(
        self,
        *,
        worker_id: str,
        engine: Engine,
        history: HistorySource,
        blobs: BlobStore,
        decode: _Decoder,
        is_engine_held: Callable[[], bool] = lambda: False,
    ) -> None:
        """``is_engine_held``: the engine swaps weights or relaunches: no warm-up then (its
        cache is about to go, or the server is down)."""
        self.worker_id = worker_id
        self.engine = engine
        self.history = history
        self.blobs = blobs
        self.decode = decode
        self.is_engine_held = is_engine_held

    async def resume(
        self,
        rollout_id: str,
        traj_id: str,
        *,
        spec: TrajectorySpec | None = None,
        priority: float = 0.0,
        cache_key: str = "",
        epoch: int | None = None,
    ) -> ResumePlan:
        """Rebuild from the stream. ``epoch``: the hosting a placing command gives this worker.
        The trajectory is FOREIGN when the stream holds a newer hosting than that (the command
        is stale), or, for a command without one, when its holder (``TrajectoryPlaced``,
        ``Migrated``) is another worker (the command is misrouted: forward it)."""
        events = await self.history.trajectory_events(rollout_id, traj_id)
        log = rebuild(rollout_id, traj_id, events, spec)
        owner = self._owner_instead(log, epoch)
        if owner is not None:
            return ResumePlan(ResumeKind.FOREIGN, owner=owner)
        spec = log.spec or spec
        if spec is None:
            return ResumePlan(ResumeKind.UNKNOWN)
        log.spec = log.spec or spec
        plan = plan_from_log(log, spec, self.decode, priority)
        if plan.hosted is not None and log.steps:
            await self._restore_cache(plan.hosted, cache_key)
        return plan

    def _owner_instead(self, log: TrajectoryLog, epoch: int | None) -> str | None:
        """None when this worker runs the trajectory (hosting it under ``epoch`` if given),
        else who holds it ("" when a newer hosting holds no worker yet)."""
        owner = log.owner_worker_id
        if epoch is None:
            return owner if owner not in ("", self.worker_id) else None
        lease = log.lease
        if lease is not None and is_superseded(lease, epoch, self.worker_id):
            return owner
        log.host(self.worker_id, epoch)
        return None

    async def _restore_cache(self, hosted: HostedTrajectory, cache_key: str) -> None:
        """Import the migrated KV if there is one; otherwise warm up or mark it lost."""
        if cache_key and await self._import(cache_key):
            return
        hosted.is_kv_lost = True
        if isinstance(self.engine, WarmableEngine) and not self.is_engine_held():
            context = hosted.log.context_token_ids()
            if context:
                key = engine_key(hosted.rollout_id, hosted.traj_id)
                warmed = await self.engine.warm_up(key, context)
                if isinstance(warmed, WarmUpResult):
                    hosted.num_warmed_tokens = warmed.num_prompt_tokens - warmed.num_cached_tokens

    async def discard_blob(self, cache_key: str) -> None:
        with contextlib.suppress(KeyError):
            await self.blobs.delete_blob(cache_key)

    async def _import(self, cache_key: str) -> bool:
        try:
            snapshot = decode_snapshot(await self.blobs.get_blob(cache_key))
            await self.engine.import_cache(snapshot)
        except (KeyError, ValueError, CacheMismatchError) as exc:
            logger.warning(
                "KV cache %s not imported (%s): the context is re-prefilled", cache_key, exc
            )
            return False
        await self.blobs.delete_blob(cache_key)
        return True
