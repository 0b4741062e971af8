"""The Python API for trainers: submit rollouts, stream their completed trajectories, wait.

    async with HeddleClient(trainer="grpo") as client:            # settings as the CLI's
        rollout_id = await client.submit(tasks, environment="math", policy="heddle")
        async for trajectory in client.completions(rollout_id):  # heddle.events.Completed
            batch.append(trajectory.response_token_ids, trajectory.loss_mask, trajectory.reward)
        summary = await client.wait(rollout_id)                   # heddle.rollout.summary

``completions`` reads a DURABLE JetStream consumer named ``trainer-<trainer>-<rollout_id>`` on
``heddle.evt.traj.<rollout_id>.*.completed``: a trajectory is acknowledged when the caller asks
for the next one, so a trainer that stops (or crashes) and iterates again resumes where it
stopped; the trajectory in hand when the loop was left comes again (its ``traj_id`` identifies
it). Within one iteration each trajectory comes once, even if the stream held it twice. The
iteration ends once the rollout has finished (or was cancelled) and every completion was handed
out. A control plane must have run on the NATS (``heddle up``): before its first start, the
stream's past is not its business and a submission would wait forever.

Each ``Completed`` carries ``prompt_token_ids``, ``response_token_ids`` (generations and tool
observations in order), ``response_logprobs`` (0.0 on observation tokens), ``loss_mask`` (1 for
model tokens, 0 for tool tokens), ``reward``, ``finish_reason``, ``timings`` (model seconds) and
``worker_history``. docs/trainer.md shows the plain-NATS way for trainers in other languages.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from heddle.bus import Bus, BusOptions, ConsumerSpec, Delivery, ReplayQuery, TransientError
from heddle.config import Settings, load_settings
from heddle.events import Completed, EventT, RolloutCancelled, RolloutFinished, decode_event
from heddle.events.subjects import EVENTS_STREAM, completions_subject, rollout_subject
from heddle.ids import check_token
from heddle.rollout.driver import cancel_rollout, require_control_plane
from heddle.rollout.submission import RolloutPlan, TaskOptions, submit, task_specs, trace_specs
from heddle.rollout.summary import RolloutSummary, rollout_summary
from heddle.traces import TraceTrajectory, read_trace
from heddle.workers.tokenizers import load_tokenizer

_IDLE_CHECK_S = 0.5


class HeddleClient:
    """A trainer's connection to Heddle (NATS, or the data dir's embedded server)."""

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        trainer: str = "trainer",
        nats_url: str | None = None,
        data_dir: Path | None = None,
    ) -> None:
        self.settings = settings or load_settings(nats_url=nats_url, data_dir=data_dir)
        self.trainer = check_token(trainer, "trainer name")
        self._bus: Bus | None = None

    async def __aenter__(self) -> HeddleClient:
        bus = Bus(self.settings, BusOptions(name=f"heddle-{self.trainer}"))
        await bus.start()
        self._bus = bus
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        bus, self._bus = self._bus, None
        if bus is not None:
            await bus.close()

    @property
    def bus(self) -> Bus:
        if self._bus is None:
            raise RuntimeError("use the client inside `async with HeddleClient(...)`")
        return self._bus

    # ---- submitting ------------------------------------------------------------------------

    async def submit(
        self,
        tasks: Sequence[Mapping[str, Any]] | None = None,
        *,
        environment: str | None = None,
        trace: Sequence[TraceTrajectory] | Path | None = None,
        policy: str = "heddle",
        task_options: TaskOptions | None = None,
        tokenizer: str = "byte",
        time_scale: float = 1.0,
        labels: Mapping[str, str] | None = None,
        rollout_id: str | None = None,
    ) -> str:
        """Submit ``tasks`` of ``environment`` (each sampled ``task_options.group_size``
        times) or a ``trace`` (trajectories or a JSONL file); returns the rollout id.
        ``ValueError`` names what is wrong with a task, the trace or the policy."""
        if (tasks is None) == (trace is None):
            raise ValueError("give tasks (with environment) or a trace, not both")
        if tasks is not None:
            if environment is None:
                raise ValueError("tasks need the environment that runs them")
            specs = task_specs(tasks, environment, load_tokenizer(tokenizer), task_options)
            source = f"tasks:{environment}"
        else:
            assert trace is not None
            trajectories = read_trace(trace) if isinstance(trace, Path) else list(trace)
            specs = trace_specs(trajectories)
            source = f"trace:{trace}" if isinstance(trace, Path) else "trace"
        plan = RolloutPlan(policy, specs, source, time_scale, dict(labels or {}))
        await require_control_plane(self.bus)
        return await submit(self.bus, plan, rollout_id)

    async def cancel(self, rollout_id: str, reason: str = "cancelled by the trainer") -> None:
        await cancel_rollout(self.bus, rollout_id, reason)

    # ---- results ---------------------------------------------------------------------------

    def consumer_name(self, rollout_id: str) -> str:
        """The durable consumer ``completions`` reads (a restart resumes on it)."""
        return f"trainer-{self.trainer}-{check_token(rollout_id, 'rollout id')}"

    async def completions(self, rollout_id: str) -> AsyncIterator[Completed]:
        """Completed trajectories of ``rollout_id`` as they finish (see the module docstring)."""
        stream = _CompletionStream(self.bus, rollout_id, self.consumer_name(rollout_id))
        async for completed in stream:
            yield completed

    async def wait(
        self, rollout_id: str, timeout_s: float | None = None, poll_s: float = 0.5
    ) -> RolloutSummary:
        """Wait until the rollout finished (or was cancelled); its summary. ``TimeoutError``
        after ``timeout_s``."""
        async with asyncio.timeout(timeout_s):
            while True:
                if await _is_over(self.bus, rollout_id):
                    return await rollout_summary(self.bus, rollout_id)
                await asyncio.sleep(poll_s)

    async def summary(self, rollout_id: str) -> RolloutSummary:
        """The rollout's figures so far."""
        return await rollout_summary(self.bus, rollout_id)


async def _is_over(bus: Bus, rollout_id: str) -> bool:
    subjects = (rollout_subject(rollout_id, "finished"), rollout_subject(rollout_id, "cancelled"))
    query = ReplayQuery(filter_subjects=subjects, start_sequence=1)
    async for record in bus.replay_events(query):
        if isinstance(record.message, (RolloutFinished, RolloutCancelled)):
            return True
    return False


class _CompletionStream:
    """Bridges the bus's message runner (one handler call at a time, acked when it returns)
    to an async iterator: the handler hands the delivery over and returns only when the caller
    asks for the next one (ack) or leaves (nak: it comes again)."""

    def __init__(self, bus: Bus, rollout_id: str, durable: str) -> None:
        self.bus = bus
        self.rollout_id = rollout_id
        self.spec = ConsumerSpec(
            durable=durable,
            stream=EVENTS_STREAM,
            filter_subjects=(completions_subject(rollout_id),),
            batch_size=1,
            max_ack_pending=1,
            ack_wait_s=300.0,
            nak_delay_s=0.0,
        )
        self._handed: asyncio.Queue[tuple[Delivery[EventT], asyncio.Future[bool]]] = asyncio.Queue()

    async def _handle(self, delivery: Delivery[EventT]) -> None:
        taken: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        await self._handed.put((delivery, taken))
        if not await taken:
            raise TransientError("the trainer left before taking it")

    async def __aiter__(self) -> AsyncIterator[Completed]:
        runner = self.bus.message_runner(self.spec, decode_event, self._handle, max_concurrent=1)
        running = asyncio.create_task(runner.run())
        seen: set[str] = set()
        pending: asyncio.Future[bool] | None = None
        try:
            while True:
                item = await self._next(running)
                if item is None:
                    if await self._is_drained():
                        return
                    continue
                delivery, pending = item
                message = delivery.message
                if isinstance(message, Completed) and message.traj_id not in seen:
                    seen.add(message.traj_id)
                    # Arrays kept in the object store (a long trajectory) are read back here,
                    # digests checked: the trainer always gets the whole trajectory.
                    yield await self.bus.resolve(message)
                pending.set_result(True)
                pending = None
        finally:
            if pending is not None and not pending.done():
                pending.set_result(False)
            runner.stop()
            while not self._handed.empty():
                _, leftover = self._handed.get_nowait()
                if not leftover.done():
                    leftover.set_result(False)
            with contextlib.suppress(Exception):
                await running

    async def _next(
        self, running: asyncio.Task[Any]
    ) -> tuple[Delivery[EventT], asyncio.Future[bool]] | None:
        getter = asyncio.ensure_future(self._handed.get())
        done, _ = await asyncio.wait(
            {getter, running}, timeout=_IDLE_CHECK_S, return_when=asyncio.FIRST_COMPLETED
        )
        if not getter.done():
            getter.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await getter
        if getter.done() and not getter.cancelled():
            return getter.result()
        if running in done:
            running.result()  # the runner failed: raise why
            raise RuntimeError("the completions consumer stopped")
        return None

    async def _is_drained(self) -> bool:
        if not await _is_over(self.bus, self.rollout_id):
            return False
        state = await self.bus.consumer_state(EVENTS_STREAM, self.spec.durable)
        return state is not None and state.num_pending == 0 and state.num_ack_pending == 0
