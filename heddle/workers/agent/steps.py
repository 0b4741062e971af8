"""Running a trajectory's steps: generate, let the environment decide, publish, repeat.

A *segment* runs steps until the trajectory waits for a tool result, ends, or fails. Each step
publishes, in order: ``GenerationStarted`` (with the tokens appended since the last generation),
``Generated``, then the environment's verdict: ``ToolCalled`` followed by the ``ToolCall`` command,
or ``Completed``, or (feedback without a tool) the next step's ``GenerationStarted``. Every event
is folded into the trajectory's log right after it is stored, so the log always equals what the
stream holds, and a segment can start from any point a crash may have left (see ``resume``).

Errors: ``EngineError`` propagates (the whole worker is failing); any other exception fails just
this trajectory with a ``Failed`` event.

Re-shards (``heddle.workers.agent.reshards``): while ``interruption`` names one, a generation the
engine returns aborted is not a failure. What it produced is published
(``GenerationInterrupted``) and the step goes on: on a relaunching worker it waits at the gate
for the new engine, then generates the rest over its context and that output; on a retiring one
(``is_leaving``) the segment ends (``StepInterrupted``) and the trajectory waits to be handed
over. The step's ``Generated`` carries its whole output, the interrupted parts first.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from heddle.events import (
    Generated,
    GenerationInterrupted,
    TerminalReason,
    ToolReturned,
    TrajectoryPhase,
    TrajectorySpec,
)
from heddle.workers.agent import caps, records
from heddle.workers.agent.errors import StepError, StepInterrupted
from heddle.workers.agent.generation import WeightGate, generation_request, whole_result
from heddle.workers.agent.publisher import DurablePublisher
from heddle.workers.agent.table import CommandArrival, HostedTrajectory
from heddle.workers.agent.trajectory_events import TrajectoryEvents
from heddle.workers.engines.base import (
    Engine,
    EngineError,
    GenerationResult,
)
from heddle.workers.environments import StepOutcome
from heddle.workers.tokenizers import Tokenizer, chat_prompt_ids

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class GenerationPart:
    """One generation (a whole step's, or a part a re-shard interrupted): the engine's result,
    the weight version it ran on and the model seconds it waited for a weight swap, reported
    with the step (``Generated``)."""

    result: GenerationResult
    weight_version: int
    weights_wait_s: float


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
        weights: WeightGate | None = None,
    ) -> None:
        self.worker_id = worker_id
        self.weights = weights or WeightGate()
        """Generations run between weight swaps; each reports the version it ran on."""
        self.engine = engine
        self.tokenizer = tokenizer
        self.eos_token_id = tokenizer.eos_token_id
        """Read once: a tokenizer's EOS id never changes, and every generation request names it."""
        self.time_scale = engine.capabilities.time_scale
        self.clock = clock
        self.events = TrajectoryEvents(
            worker_id=worker_id,
            engine=engine,
            publisher=publisher,
            tool_timeout_s=tool_timeout_s,
            clock=clock,
        )
        """Publishes the trajectory's events (the commands' handler uses it too)."""
        self.num_output_tokens = 0
        """Tokens generated since start (telemetry derives a rate from it)."""
        self.interruption: str | None = None
        """A re-shard in progress (``retire: <id>`` or ``reshard: <id>``): an aborted generation
        keeps its output and the step goes on (see the module docstring)."""
        self.is_leaving = False
        """The worker retires: an interrupted step waits for its hand-over instead."""

    # ---- segments ---------------------------------------------------------------------------

    async def run_segment(
        self,
        hosted: HostedTrajectory,
        outcome: StepOutcome | None = None,
        *,
        tool_result: ToolReturned | None = None,
        is_new: bool = False,
        arrival: CommandArrival | None = None,
    ) -> None:
        """Run steps until a tool call or the end, starting from ``outcome`` (None: generate
        first), from the environment's answer to ``tool_result``, or (``is_new``) from the
        environment's reset. ``arrival``: of the command that started the segment (stamped on
        its first step)."""
        reading_tool = tool_result is not None
        try:
            if is_new:
                hosted.next_observation = hosted.env.reset(hosted.spec.task)
                self._check_prompt(hosted.spec)
            if tool_result is not None:
                outcome = hosted.env.observe(tool_result)
            reading_tool = False
            generated: Generated | None = None
            while True:
                if outcome is not None and await self.conclude(hosted, outcome, generated):
                    return
                if self._is_capped(hosted):
                    await self.events.complete(hosted, reward=0.0, finish_reason="length")
                    return
                generated, outcome = await self._step(hosted, arrival)
                arrival = None
        except (EngineError, asyncio.CancelledError):
            raise
        except StepInterrupted:
            return  # the trajectory rests here until the control plane hands it over
        except StepError as exc:
            await self.events.fail(
                hosted, str(exc), retryable=exc.retryable, finish_reason=exc.finish_reason
            )
        except Exception as exc:
            logger.exception("trajectory %s failed", hosted.traj_id)
            reason: TerminalReason = "tool_error" if reading_tool else "error"
            await self.events.fail(hosted, f"{type(exc).__name__}: {exc}", finish_reason=reason)

    async def conclude(
        self, hosted: HostedTrajectory, outcome: StepOutcome, generated: Generated | None = None
    ) -> bool:
        """Act on the environment's verdict; True when the segment ends. ``generated``: the
        step's result, not yet published (it goes out with the ``ToolCalled`` it led to)."""
        log, spec = hosted.log, hosted.spec
        is_last = outcome.done or log.num_steps >= spec.max_steps
        if outcome.tool_request is not None and not is_last:
            await self.events.call_tool(hosted, outcome.tool_request, generated)
            return True
        if generated is not None:
            await self.events.emit(hosted, generated)
        if outcome.done:
            judged = generated or caps.judged_generation(log)
            reason = caps.ending_reason(judged, is_capped=self._is_response_full(hosted))
            await self.events.complete(hosted, reward=outcome.reward, finish_reason=reason)
            return True
        if log.num_steps >= spec.max_steps:
            await self.events.complete(hosted, reward=0.0, finish_reason="max_steps")
            return True
        hosted.next_observation = outcome.observation
        return False

    # ---- one step ---------------------------------------------------------------------------

    async def _step(
        self, hosted: HostedTrajectory, arrival: CommandArrival | None = None
    ) -> tuple[Generated, StepOutcome]:
        """Generate (announcing the step first unless a crash left it announced), then ask the
        environment; the result is published by ``conclude``, with what it leads to."""
        log = hosted.log
        if log.phase is TrajectoryPhase.READY:
            part, context = await self._announce_and_generate(hosted, arrival)
        elif log.phase is TrajectoryPhase.GENERATING:
            context = log.context_token_ids()
            num_partial = len(log.steps[-1].partial_token_ids)
            context = context[: len(context) - num_partial]
            part = await self._generate(hosted, context)
        else:
            raise StepError(f"cannot run a step while the trajectory is {log.phase.value}")
        part = await self._after_interruptions(hosted, context, part)
        generated = self._generated(hosted, context, part)
        return generated, hosted.env.step(self.tokenizer.decode(generated.output_token_ids))

    def _next_input(self, hosted: HostedTrajectory) -> list[int]:
        """Tokens the next generation appends: the observation (step 0: the environment's
        prompt, unless the spec carries prompt token ids)."""
        observation, spec = hosted.next_observation, hosted.spec
        if hosted.log.num_steps == 0 and not spec.prompt_token_ids and spec.messages:
            return chat_prompt_ids(self.tokenizer, spec.messages)
        if observation is None or (hosted.log.num_steps == 0 and spec.prompt_token_ids):
            return []
        return observation.tokens(self.tokenizer)

    def _check_prompt(self, spec: TrajectorySpec) -> None:
        """A submitted prompt must be ids of the worker's vocabulary (a non-Python trainer may
        send any integers): ``StepError`` naming the first id outside it."""
        error = caps.prompt_error(spec, self.tokenizer)
        if error is not None:
            raise StepError(error)

    def _is_capped(self, hosted: HostedTrajectory) -> bool:
        """Whether the next step's input would reach the context or the response cap."""
        if hosted.log.phase is not TrajectoryPhase.READY:
            return False
        num_input = len(self._next_input(hosted))
        if hosted.log.num_context_tokens + num_input >= hosted.spec.max_total_tokens:
            return True
        return hosted.log.num_steps > 0 and self._is_response_full(hosted, num_input)

    def _is_response_full(self, hosted: HostedTrajectory, num_more: int = 0) -> bool:
        cap = hosted.spec.max_response_tokens
        return cap is not None and caps.num_response_tokens(hosted.log) + num_more >= cap

    async def _announce_and_generate(
        self, hosted: HostedTrajectory, arrival: CommandArrival | None = None
    ) -> tuple[GenerationPart, list[int]]:
        """Publish ``GenerationStarted`` while the engine already generates: the announcement's
        round trip to the stream is off the step's critical path. It is folded into the log
        once stored, before the result is used (a failed publish aborts the generation)."""
        log = hosted.log
        input_ids = self._next_input(hosted)
        context = log.context_token_ids() + input_ids
        started = records.generation_started(
            log,
            step=log.current_step,
            worker_id=self.worker_id,
            input_token_ids=input_ids,
            num_context_tokens=len(context),
            priority=hosted.priority,
            now=self.clock(),
            arrival=arrival,
        )
        generation = asyncio.ensure_future(self._generate(hosted, context))
        try:
            await self.events.emit(hosted, started)
        except BaseException:
            generation.cancel()
            await asyncio.wait([generation])
            raise
        return await generation, context

    async def _generate(self, hosted: HostedTrajectory, context: list[int]) -> GenerationPart:
        """One generation of the step over ``context`` (the step's input included) and what
        interrupted parts of it produced (once its announcement is stored)."""
        partial = hosted.log.steps[-1].partial_token_ids if hosted.log.steps else []
        return await self._generate_part(hosted, [*context, *partial], len(partial))

    async def _after_interruptions(
        self, hosted: HostedTrajectory, context: list[int], part: GenerationPart
    ) -> GenerationPart:
        """The step's whole result (under the last part's weights): while a re-shard interrupts
        it, keep each part and go on (see the module docstring)."""
        while part.result.finish_reason == "abort":
            if self.interruption is None:
                raise StepError("the engine aborted the generation", retryable=True)
            if part.result.output_token_ids:
                await self.events.emit(hosted, self._interrupted(hosted, part.result))
            if self.is_leaving:
                raise StepInterrupted(self.interruption)
            hosted.is_kv_lost = True  # the engine that computed the context is gone
            part = await self._generate(hosted, context)
        return dataclasses.replace(part, result=whole_result(hosted, part.result))

    async def _generate_part(
        self, hosted: HostedTrajectory, context: list[int], num_generated: int
    ) -> GenerationPart:
        log, spec = hosted.log, hosted.spec
        request = generation_request(hosted, context, self.eos_token_id, num_generated)
        asked_at = self.clock()
        async with self.weights.generating() as weight_version:
            weights_wait_s = max(0.0, self.clock() - asked_at) * self.time_scale
            stale = caps.staleness_error(log, spec, weight_version)
            if stale is not None:
                raise StepError(stale, finish_reason="stale")
            hosted.request_id = request.request_id
            try:
                result = await self.engine.generate(request)
            finally:
                hosted.request_id = None
        return GenerationPart(result, weight_version, weights_wait_s)

    def _interrupted(
        self, hosted: HostedTrajectory, result: GenerationResult
    ) -> GenerationInterrupted:
        log = hosted.log
        return records.generation_interrupted(
            log,
            step=log.current_step,
            worker_id=self.worker_id,
            result=result,
            reason=self.interruption or "",
            now=self.clock(),
        )

    def _generated(
        self, hosted: HostedTrajectory, context: list[int], part: GenerationPart
    ) -> Generated:
        log, result = hosted.log, part.result
        recomputed = result.num_recomputed_tokens
        if hosted.is_kv_lost:
            # Resumed without the KV cache: the engine could not know the context was computed
            # before, so the prefix it prefilled again is counted here (with the step's input
            # and interrupted output when a re-shard stopped the engine that computed them).
            step = log.steps[-1]
            prior = len(context) + sum(len(part.output_token_ids) for part in step.interrupted)
            if not step.interrupted:
                prior -= len(step.started.input_token_ids)
            recomputed += max(0, prior - result.num_cached_tokens - result.num_recomputed_tokens)
            hosted.is_kv_lost = False
        num_warmed, hosted.num_warmed_tokens = hosted.num_warmed_tokens, 0
        self.num_output_tokens += len(result.output_token_ids)
        return records.generated(
            log,
            step=log.current_step,
            worker_id=self.worker_id,
            result=result,
            num_context_tokens=len(context) + len(result.output_token_ids),
            num_recomputed_tokens=recomputed,
            num_warmed_tokens=num_warmed,
            now=self.clock(),
            weight_version=part.weight_version,
            weights_wait_s=part.weights_wait_s,
        )
