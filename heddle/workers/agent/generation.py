"""What a step asks its engine: one generation's request, and the keys and seed it carries; the
gate it passes (``WeightGate``); and a step's whole result once a re-shard interrupted it
(``whole_result``).

``WeightGate`` is a readers-writer gate between generations (readers) and weight swaps or engine
relaunches (the writer, ``weights``, ``reshards``): a swap waits until no generation runs, and
generations that would start meanwhile wait for it (the writer goes first), so every generation
runs on exactly one version, the one the gate yields to it (``Generated.weight_version``).

``engine_key`` names a trajectory (or a group) in the engine, unique across rollouts: it is the
prefix-cache key and the prefix of each request id (``<key>:<step, 6 digits>``). A spec without
a seed samples with ``trajectory_seed``, the same in every process, so a step re-run elsewhere
after a crash samples alike. A replayed observation with a target output length turns the stop
token off (the engine generates exactly the target, ``caps.max_new_tokens``).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace

from heddle.events import SamplingParams
from heddle.ids import derive_id
from heddle.workers.agent import caps
from heddle.workers.agent.table import HostedTrajectory
from heddle.workers.engines.base import GenerationRequest, GenerationResult


def engine_key(rollout_id: str, traj_id: str) -> str:
    """The engine's trajectory id (prefix-cache key): unique across rollouts."""
    return derive_id(rollout_id, traj_id)


def trajectory_seed(rollout_id: str, traj_id: str) -> int:
    """A stable per-trajectory seed when the spec gives none (same in every process)."""
    digest = hashlib.blake2b(f"{rollout_id}:{traj_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


def generation_request(
    hosted: HostedTrajectory, context: list[int], eos_token_id: int, num_generated: int = 0
) -> GenerationRequest:
    """The request of the trajectory's current step over ``context`` (prompt, every step so far
    and the new input); ``num_generated``: tokens of the step an interrupted generation
    produced already (at the end of ``context``): the request generates the rest. Its id
    names the part, so a resubmission never reuses an id the engine may still hold."""
    log, spec = hosted.log, hosted.spec
    step = log.current_step  # READY while its announcement is on its way: the next step
    observation = hosted.next_observation
    target = observation.target_output_tokens if observation is not None else None
    if target is not None:
        target = max(1, target - num_generated)
    # Step 0's announcement may still be on its way: its whole context is the prompt.
    num_prompt = len(context) if step == 0 else log.num_prompt_tokens
    seed = spec.sampling.seed
    if seed is None:
        seed = trajectory_seed(log.rollout_id, log.traj_id)
    key = engine_key(log.rollout_id, log.traj_id)
    part = f":p{num_generated}" if num_generated else ""  # never a prefix of another id
    cap = caps.max_new_tokens(spec, context, num_prompt, target)
    return GenerationRequest(
        request_id=f"{key}{part}:{step:06d}",
        trajectory_id=key,
        input_token_ids=context,
        max_new_tokens=max(1, min(cap, spec.max_new_tokens - num_generated)),
        priority=hosted.priority,
        sampling=SamplingParams(
            temperature=spec.sampling.temperature, top_p=spec.sampling.top_p, seed=seed
        ),
        stop_token_ids=() if target is not None else (eos_token_id,),
        target_output_tokens=target,
        group_id=engine_key(log.rollout_id, spec.group_id) if spec.group_id else "",
        num_prompt_tokens=len(spec.prompt_token_ids) if spec.group_id else 0,
    )


def whole_result(hosted: HostedTrajectory, result: GenerationResult) -> GenerationResult:
    """``result`` after the step's interrupted parts: the step's whole output."""
    step = hosted.log.steps[-1] if hosted.log.steps else None
    if step is None or not step.partial_token_ids:
        return result
    return replace(
        result,
        output_token_ids=[*step.partial_token_ids, *result.output_token_ids],
        output_logprobs=[*step.partial_logprobs, *_logprobs(result)],
    )


def _logprobs(result: GenerationResult) -> list[float]:
    """The result's logprobs, one per output token (zeros where the engine gave none)."""
    logprobs = list(result.output_logprobs)
    return (logprobs + [0.0] * len(result.output_token_ids))[: len(result.output_token_ids)]


STOP_RETRY_S = 1.0
"""How long ``WeightGate.exclusive`` waits for the running generations to return before asking
them to stop again."""


class WeightGate:
    """Generations run between swaps, never across one (see the module docstring)."""

    def __init__(self) -> None:
        self.version = 0
        self._num_running = 0
        self._num_swaps_waiting = 0
        self._changed = asyncio.Condition()
        self._swap_lock = asyncio.Lock()

    @contextlib.asynccontextmanager
    async def generating(self) -> AsyncIterator[int]:
        """Hold the current version for one generation; yields it."""
        async with self._changed:
            await self._changed.wait_for(lambda: self._num_swaps_waiting == 0)
            self._num_running += 1
        try:
            yield self.version
        finally:
            async with self._changed:
                self._num_running -= 1
                self._changed.notify_all()

    @property
    def is_held(self) -> bool:
        """A swap (or a relaunch) waits or runs: new generations wait for it."""
        return self._num_swaps_waiting > 0

    async def exclusive(
        self, stop_running: Callable[[], Awaitable[None]], load: Callable[[], Awaitable[None]]
    ) -> None:
        """Hold new generations, call ``stop_running`` (which makes the running ones return:
        a re-shard aborts them), run ``load`` once none runs, then let generations go on, on
        the same version."""
        async with self._swap_lock:
            async with self._changed:
                self._num_swaps_waiting += 1
            try:
                while not await self._stopped(stop_running):
                    pass
                await load()
            finally:
                async with self._changed:
                    self._num_swaps_waiting -= 1
                    self._changed.notify_all()

    async def _stopped(self, stop_running: Callable[[], Awaitable[None]]) -> bool:
        """Call ``stop_running``; True once no generation runs (False after a short wait: a
        generation that was on its way to the engine missed the call and needs another)."""
        await stop_running()
        async with self._changed:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(STOP_RETRY_S):
                    await self._changed.wait_for(lambda: self._num_running == 0)
            return self._num_running == 0

    async def swap(self, version: int, load: Callable[[], Awaitable[None]]) -> None:
        """Run ``load`` when no generation runs, then serve ``version`` (unchanged when
        ``load`` raises)."""
        async with self._swap_lock:
            async with self._changed:
                self._num_swaps_waiting += 1
                await self._changed.wait_for(lambda: self._num_running == 0)
            try:
                await load()
                self.version = version
            finally:
                async with self._changed:
                    self._num_swaps_waiting -= 1
                    self._changed.notify_all()
