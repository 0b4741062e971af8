"""Running a trajectory's steps: generate, let the environment decide, publish, repeat.

A *segment* runs steps until the trajectory waits for a tool result, ends, or fails. Each step
publishes, in order: ``GenerationStarted`` (with the tokens appended since the last generation),
``Generated``, then the environment's verdict: ``ToolCalled`` followed by the ``ToolCall`` command,
or ``Completed``, or (feedback without a tool) the next step's ``GenerationStarted``. Every event
is folded into the trajectory's log right after it is stored, so the log always equals what the
stream holds, and a segment can start from any point a crash may have left (see ``resume``).

Errors: ``EngineError`` propagates (the whole worker is failing); any other exception fails just
this trajectory with a ``Failed`` event.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Callable

from heddle.events import (
    EventT,
    FinishReason,
    SamplingParams,
    ToolCall,
    ToolRequest,
    ToolReturned,
    TraceTool,
    TrajectoryEvent,
    TrajectorySpec,
)
from heddle.ids import derive_id
from heddle.workers.agent import records
from heddle.workers.agent.history import StepPhase
from heddle.workers.agent.publisher import DurablePublisher
from heddle.workers.agent.table import HostedTrajectory
from heddle.workers.engines.base import Engine, EngineError, GenerationRequest
from heddle.workers.environments import StepOutcome
from heddle.workers.tokenizers import Tokenizer

logger = logging.getLogger(__name__)


class StepError(RuntimeError):
    """A step that cannot go on; ``retryable`` failures may succeed on another worker."""

    def __init__(self, reason: str, *, retryable: bool = False) -> None:
        super().__init__(reason)
        self.retryable = retryable


def engine_key(rollout_id: str, traj_id: str) -> str:
    """The engine's trajectory id (prefix-cache key): unique across rollouts."""
    return derive_id(rollout_id, traj_id)


def trajectory_seed(rollout_id: str, traj_id: str) -> int:
    """A stable per-trajectory seed when the spec gives none (same in every process)."""
    digest = hashlib.blake2b(f"{rollout_id}:{traj_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


class StepRunner:
    def __init__(
        self,
        *,
        worker_id: str,
        engine: Engine,
        tokenizer: Tokenizer,
        publisher: DurablePublisher,
        tool_timeout_s: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.worker_id = worker_id
        self.engine = engine
        self.tokenizer = tokenizer
        self.publisher = publisher
        self.tool_timeout_s = tool_timeout_s
        self.time_scale = engine.capabilities.time_scale
        self.clock = clock
        self.num_output_tokens = 0
        """Tokens generated since start (telemetry derives a rate from it)."""

    # ---- segments ---------------------------------------------------------------------------

    async def run_segment(
        self,
        hosted: HostedTrajectory,
        outcome: StepOutcome | None = None,
        *,
        tool_result: ToolReturned | None = None,
        is_new: bool = False,
    ) -> None:
        """Run steps until a tool call or the end, starting from ``outcome`` (None: generate
        first), from the environment's answer to ``tool_result``, or (``is_new``) from the
        environment's reset."""
        try:
            if is_new:
                hosted.next_observation = hosted.env.reset(hosted.spec.task)
            if tool_result is not None:
                outcome = hosted.env.observe(tool_result)
            while True:
                if outcome is not None and await self.conclude(hosted, outcome):
                    return
                if self._is_context_full(hosted):
                    await self.complete(hosted, reward=0.0, finish_reason="length")
                    return
                outcome = await self._step(hosted)
        except (EngineError, asyncio.CancelledError):
            raise
        except StepError as exc:
            await self.fail(hosted, str(exc), retryable=exc.retryable)
        except Exception as exc:
            logger.exception("trajectory %s failed", hosted.traj_id)
            await self.fail(hosted, f"{type(exc).__name__}: {exc}")

    async def conclude(self, hosted: HostedTrajectory, outcome: StepOutcome) -> bool:
        """Act on the environment's verdict; True when the segment ends."""
        log, spec = hosted.log, hosted.spec
        if outcome.done:
            await self.complete(hosted, reward=outcome.reward, finish_reason="stop")
            return True
        if log.num_steps >= spec.max_steps:
            await self.complete(hosted, reward=0.0, finish_reason="length")
            return True
        if outcome.tool_request is not None:
            await self._call_tool(hosted, outcome)
            return True
        hosted.next_observation = outcome.observation
        return False

    # ---- one step ---------------------------------------------------------------------------

    async def _step(self, hosted: HostedTrajectory) -> StepOutcome:
        log = hosted.log
        if log.phase is StepPhase.READY:
            await self._start_generation(hosted)
        if log.phase is StepPhase.GENERATING:
            await self._generate(hosted)
        if log.phase is not StepPhase.GENERATED:
            raise StepError(f"cannot run a step while the trajectory is {log.phase.value}")
        last = log.steps[-1].generated
        assert last is not None
        return hosted.env.step(self.tokenizer.decode(last.output_token_ids))

    def _next_input(self, hosted: HostedTrajectory) -> list[int]:
        """Tokens the next generation appends: the observation (step 0: the environment's
        prompt, unless the spec carries prompt token ids)."""
        observation = hosted.next_observation
        if observation is None or (hosted.log.num_steps == 0 and hosted.spec.prompt_token_ids):
            return []
        return observation.tokens(self.tokenizer)

    def _is_context_full(self, hosted: HostedTrajectory) -> bool:
        if hosted.log.phase is not StepPhase.READY:
            return False
        num_context = len(hosted.log.context_token_ids()) + len(self._next_input(hosted))
        return num_context >= hosted.spec.max_total_tokens

    async def _start_generation(self, hosted: HostedTrajectory) -> None:
        log = hosted.log
        step = log.current_step
        input_ids = self._next_input(hosted)
        num_context = len(log.context_token_ids()) + len(input_ids)
        await self.emit(
            hosted,
            records.generation_started(
                log,
                step=step,
                worker_id=self.worker_id,
                input_token_ids=input_ids,
                num_context_tokens=num_context,
                priority=hosted.priority,
                now=self.clock(),
            ),
        )

    async def _generate(self, hosted: HostedTrajectory) -> None:
        log, spec = hosted.log, hosted.spec
        step = log.current_step
        context = log.context_token_ids()
        observation = hosted.next_observation
        target = observation.target_output_tokens if observation is not None else None
        seed = spec.sampling.seed
        if seed is None:
            seed = trajectory_seed(log.rollout_id, log.traj_id)
        request = GenerationRequest(
            request_id=f"{engine_key(log.rollout_id, log.traj_id)}:{step:06d}",
            trajectory_id=engine_key(log.rollout_id, log.traj_id),
            input_token_ids=context,
            max_new_tokens=_max_new_tokens(spec, len(context), target),
            priority=hosted.priority,
            sampling=SamplingParams(
                temperature=spec.sampling.temperature, top_p=spec.sampling.top_p, seed=seed
            ),
            stop_token_ids=() if target is not None else (self.tokenizer.eos_token_id,),
            target_output_tokens=target,
        )
        hosted.request_id = request.request_id
        try:
            result = await self.engine.generate(request)
        finally:
            hosted.request_id = None
        if result.finish_reason == "abort":
            raise StepError("the engine aborted the generation", retryable=True)
        recomputed = result.num_recomputed_tokens
        if hosted.is_kv_lost:
            # Resumed without the KV cache: the engine could not know the context was computed
            # before, so the prefix it prefilled again is counted here.
            prior = len(context) - len(log.steps[-1].started.input_token_ids)
            recomputed += max(0, prior - result.num_cached_tokens - result.num_recomputed_tokens)
            hosted.is_kv_lost = False
        self.num_output_tokens += len(result.output_token_ids)
        await self.emit(
            hosted,
            records.generated(
                log,
                step=step,
                worker_id=self.worker_id,
                result=result,
                num_context_tokens=len(context) + len(result.output_token_ids),
                num_recomputed_tokens=recomputed,
                now=self.clock(),
            ),
        )

    async def _call_tool(self, hosted: HostedTrajectory, outcome: StepOutcome) -> None:
        log = hosted.log
        assert outcome.tool_request is not None
        if log.phase is not StepPhase.GENERATED:
            raise StepError("the environment asked for a second tool call without a generation")
        call = self._tool_call(hosted, outcome.tool_request)
        # ToolCalled first, so that it precedes the executor's ToolReturned in the stream. A
        # crash between the two leaves the trajectory IN_TOOL without its call: resuming sends
        # the call (same id) again, see resume.py.
        await self.emit(
            hosted, records.tool_called(log, call, worker_id=self.worker_id, now=self.clock())
        )
        await self.publisher.publish(call)

    async def resend_tool_call(self, hosted: HostedTrajectory, request: ToolRequest) -> None:
        """Publish the pending tool call again (same id: dropped if the stream still has it)."""
        await self.publisher.publish(self._tool_call(hosted, request))

    def _tool_call(self, hosted: HostedTrajectory, request: ToolRequest) -> ToolCall:
        timeout_s = self.tool_timeout_s
        if isinstance(request, TraceTool):
            # A replayed call lasts its recorded time (scaled): never time it out before.
            timeout_s = max(timeout_s, 2.0 * request.duration_s / self.time_scale + 1.0)
        return records.tool_call(
            hosted.log,
            step=hosted.log.current_step,
            request=request,
            pool=hosted.spec.tool_pool,
            timeout_s=timeout_s,
            time_scale=self.time_scale,
            now=self.clock(),
        )

    # ---- endings ----------------------------------------------------------------------------

    async def complete(
        self, hosted: HostedTrajectory, *, reward: float, finish_reason: FinishReason
    ) -> None:
        event = records.completed(
            hosted.log,
            reward=reward,
            finish_reason=finish_reason,
            time_scale=self.time_scale,
            now=self.clock(),
        )
        await self.emit(hosted, event)
        await self.engine.release(engine_key(hosted.rollout_id, hosted.traj_id))

    async def fail(self, hosted: HostedTrajectory, reason: str, *, retryable: bool = False) -> None:
        event = records.failed(
            hosted.log,
            reason=reason,
            worker_id=self.worker_id,
            now=self.clock(),
            retryable=retryable,
            discriminator=self.worker_id if retryable else "",
        )
        await self.emit(hosted, event)
        # A retryable failure hands the trajectory back to the control plane, which re-places
        # it (possibly here again: the released row then counts as absent).
        hosted.is_released = retryable
        await self.engine.release(engine_key(hosted.rollout_id, hosted.traj_id))

    async def emit(self, hosted: HostedTrajectory, event: EventT) -> None:
        """Publish one of the trajectory's events and fold it into its log once stored."""
        assert isinstance(event, TrajectoryEvent)
        await self.publisher.publish(event)
        hosted.log.apply(event)


def _max_new_tokens(spec: TrajectorySpec, num_context_tokens: int, target: int | None) -> int:
    """The spec's per-step cap, the room left in the context, and the environment's target
    length (trace replay: engines that cannot force a length still stop there)."""
    cap = min(spec.max_new_tokens, spec.max_total_tokens - num_context_tokens)
    if target is not None:
        cap = min(cap, target)
    return max(1, cap)
