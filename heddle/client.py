"""The Python API for trainers: submit rollouts, stream their completed trajectories, wait.

    async with HeddleClient(trainer="grpo") as client:            # settings as the CLI's
        rollout_id = await client.submit(tasks, environment="math", policy="heddle")
        async for trajectory in client.completions(rollout_id):  # heddle.events.Completed
            batch.append(trajectory.response_token_ids, trajectory.loss_mask, trajectory.reward)
        summary = await client.wait(rollout_id)                   # heddle.rollout.summary

A rollout belongs to the trainer that submits it (``trainer``, "trainer" unless named): the
control plane delivers each of its trajectories' terminal records, once and after checking them,
to that trainer's stream ``HEDDLE_OUT_<trainer>`` (``heddle.completions``). ``completions`` reads
a DURABLE JetStream consumer named ``trainer-<trainer>-<rollout_id>`` on it, subjects
``heddle.out.<trainer>.<rollout_id>.>``: a trajectory is acknowledged when the caller asks
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
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import msgspec

from heddle.bus import Bus, BusOptions
from heddle.completions import ACK_WAIT_S, CompletionStream, rollout_ended
from heddle.config import Settings, load_settings
from heddle.events import ChatMessage, Completed, WeightsLoaded, WeightSource, WeightsPublished
from heddle.events.rollout import DEFAULT_TRAINER
from heddle.ids import check_token
from heddle.rollout.submission import (
    RolloutPlan,
    TaskOptions,
    TaskPrompts,
    task_specs,
    trace_specs,
)
from heddle.rollout.submit import SubmissionRefused, cancel, fetch_summary, submit
from heddle.rollout.summary import RolloutSummary
from heddle.traces import TraceTrajectory, read_trace
from heddle.weights import publish_weights, wait_weights_loaded
from heddle.workers.tokenizers import load_tokenizer


class HeddleClient:
    """A trainer's connection to Heddle (NATS, or the data dir's embedded server)."""

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        trainer: str = DEFAULT_TRAINER,
        nats_url: str | None = None,
        data_dir: Path | None = None,
    ) -> None:
        self.settings = settings or load_settings(nats_url=nats_url, data_dir=data_dir)
        self.trainer = check_token(trainer, "trainer name")
        self._bus: Bus | None = None

    async def __aenter__(self) -> HeddleClient:
        # A trainer's role reads none of HEDDLE_EVENTS: no stream is checked or made.
        bus = Bus(self.settings, BusOptions(name=f"heddle-{self.trainer}", provision=False))
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
        trace: Sequence[TraceTrajectory] | Path | str | None = None,
        policy: str = "heddle",
        task_options: TaskOptions | None = None,
        tokenizer: str = "byte",
        prompt_token_ids: Sequence[Sequence[int]] | None = None,
        messages: Sequence[Sequence[ChatMessage | Mapping[str, str]]] | None = None,
        time_scale: float | None = None,
        labels: Mapping[str, str] | None = None,
        rollout_id: str | None = None,
    ) -> str:
        """Submit ``tasks`` of ``environment`` (each sampled ``task_options.group_size``
        times) or a ``trace`` (trajectories, or the path of a JSONL file); returns the rollout
        id.

        A task's prompt is the environment's, tokenized with ``tokenizer`` (the workers'),
        unless the trainer gives its own, one per task: ``prompt_token_ids`` (checked against
        the tokenizer's vocabulary) or chat ``messages`` (``{"role", "content"}``; the workers
        apply their model's chat template). The control plane's operations service checks the
        submission against the deployment before the rollout exists (``heddle.ops.submit.
        <trainer>``; a large one is uploaded to the trainer's bucket first). ``time_scale`` is
        the deployment's (its workers' registrations); a value that differs from it is refused.
        ``ValueError`` (``SubmissionRefused`` from the service) names what is wrong with a task,
        a prompt, the trace, the time scale or the policy."""
        if (tasks is None) == (trace is None):
            raise ValueError("give tasks (with environment) or a trace, not both")
        if tasks is not None:
            if environment is None:
                raise ValueError("tasks need the environment that runs them")
            chats = None if messages is None else [_chat(m) for m in messages]
            prompts = TaskPrompts(token_ids=prompt_token_ids, messages=chats)
            specs = task_specs(tasks, environment, load_tokenizer(tokenizer), task_options, prompts)
            source = f"tasks:{environment}"
        else:
            assert trace is not None
            if isinstance(trace, (str, Path)):
                trajectories, source = read_trace(Path(trace)), f"trace:{trace}"
            else:
                trajectories, source = list(trace), "trace"
            specs = trace_specs(trajectories)
        plan = RolloutPlan(policy, specs, source, time_scale, dict(labels or {}))
        reply = await submit(self.bus, plan, rollout_id, trainer=self.trainer)
        return reply.rollout_id

    # ---- weights ---------------------------------------------------------------------------

    async def publish_weights(
        self, weight_version: int, source: WeightSource | str | Path | bytes
    ) -> WeightsPublished:
        """Announce weight version ``weight_version`` (an integer above the latest one): every
        worker loads it between generations and records ``weights.loaded``. ``source``: a path
        every worker can read (local or shared), the bytes of a small model's state dict (kept
        in the object store, bucket ``heddle-weights``), or a ``WeightSource``."""
        return await publish_weights(self.bus, weight_version, source, publisher=self.trainer)

    async def wait_weights_loaded(
        self, weight_version: int, num_workers: int, timeout_s: float | None = None
    ) -> dict[str, WeightsLoaded]:
        """Wait until ``num_workers`` workers reported ``weight_version`` loaded; their reports
        by worker. ``RuntimeError`` when a worker reports that it cannot load it."""
        return await wait_weights_loaded(self.bus, weight_version, num_workers, timeout_s)

    async def cancel(self, rollout_id: str, reason: str = "cancelled by the trainer") -> None:
        """Cancel one of this trainer's running rollouts (through the operations service,
        ``heddle.ops.cancel.<trainer>``); a rollout that already ended (finished or cancelled)
        is left as it is, so it never has both terminal events. ``SubmissionRefused`` for an
        unknown rollout or another trainer's."""
        try:
            await cancel(self.bus, rollout_id, reason, trainer=self.trainer)
        except SubmissionRefused as refusal:
            if refusal.code != 409:  # 409: it has ended already
                raise

    # ---- results ---------------------------------------------------------------------------

    def consumer_name(self, rollout_id: str) -> str:
        """The durable consumer ``completions`` reads (a restart resumes on it)."""
        return f"trainer-{self.trainer}-{check_token(rollout_id, 'rollout id')}"

    async def completions(
        self, rollout_id: str, *, ack_wait_s: float = ACK_WAIT_S
    ) -> AsyncIterator[Completed]:
        """Completed trajectories of ``rollout_id`` as they finish (see the module docstring).
        The one in hand when the trainer dies (or its connection drops with it in transit)
        comes again after ``ack_wait_s``; while the trainer lives it may hold one as long as it
        likes. ``SubmissionRefused`` (a ``ValueError``) for another trainer's rollout."""
        await self._check_owner(rollout_id)
        stream = CompletionStream(
            self.bus,
            self.trainer,
            rollout_id,
            self.consumer_name(rollout_id),
            ack_wait_s=ack_wait_s,
        )
        async for completed in stream:
            yield completed

    async def wait(
        self, rollout_id: str, timeout_s: float | None = None, poll_s: float = 0.5
    ) -> RolloutSummary:
        """Wait until the rollout finished (or was cancelled); its summary. ``TimeoutError``
        after ``timeout_s``."""
        async with asyncio.timeout(timeout_s):
            while True:
                if await rollout_ended(self.bus, self.trainer, rollout_id):
                    return await self.summary(rollout_id)
                await asyncio.sleep(poll_s)

    async def summary(self, rollout_id: str) -> RolloutSummary:
        """The rollout's figures so far (from the operations service,
        ``heddle.ops.summary.<trainer>``)."""
        return await fetch_summary(self.bus, rollout_id, trainer=self.trainer)

    async def _check_owner(self, rollout_id: str) -> None:
        """Refuse another trainer's rollout (its records never come to this trainer's stream);
        one the control plane does not know yet is this trainer's to wait for."""
        try:
            await self.summary(rollout_id)
        except SubmissionRefused as refusal:
            if refusal.code != 404:
                raise


def _chat(messages: Sequence[ChatMessage | Mapping[str, str]]) -> list[ChatMessage]:
    try:
        return [
            m if isinstance(m, ChatMessage) else msgspec.convert(m, ChatMessage) for m in messages
        ]
    except msgspec.ValidationError as exc:
        raise ValueError(f"a chat message needs role and content: {exc}") from None
