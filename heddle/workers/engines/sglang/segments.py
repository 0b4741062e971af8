"""Submitting one segment of a job to SGLang (``SglangEngine``'s I/O side).

``SegmentRunner.run(job)`` submits the job's current segment (``Job.segment_body``) under a fresh
request id (fixed width and unique, so no rid is a prefix of another: SGLang aborts by prefix),
directly or through the ``sglang-router`` (the trajectory then is the routing key), streaming or
not, and folds the output into the job. A request cancelled or failed mid-way is aborted on the
server in the background. The job's priority is sent only when the server schedules by priority
(``info``, read by the engine on start), in the server's order.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Callable, Coroutine
from typing import Any

from heddle.workers.engines.base import EngineError
from heddle.workers.engines.sglang.client import SglangClient
from heddle.workers.engines.sglang.job import Job, JobPhase
from heddle.workers.engines.sglang.options import EngineSettings
from heddle.workers.engines.sglang.protocol import (
    GenerateBody,
    GenerateOutput,
    ServerInfo,
    to_priority,
)
from heddle.workers.engines.sglang.routed import RouterTarget

log = logging.getLogger(__name__)


class SegmentRunner:
    def __init__(
        self,
        client: SglangClient,
        settings: EngineSettings,
        clock: Callable[[], float],
        router: RouterTarget | None = None,
    ) -> None:
        self.client = client
        self.settings = settings
        self.router = router
        self.info = ServerInfo()
        """The server's settings (priority scheduling); set by the engine on start."""
        self._clock = clock
        self._rid_prefix = f"hd{secrets.token_hex(4)}"
        self._num_rids = 0
        self._background: set[asyncio.Task[None]] = set()

    async def run(self, job: Job) -> GenerateOutput:
        job.queue_s += self._clock() - job.enqueued_at_s
        job.rid = self.next_rid()
        body = job.segment_body(
            job.rid,
            priority=self._server_priority(job.request.priority),
            return_logprob=self.settings.return_logprob,
            extra_key=self.settings.extra_key,
        )
        started_s = self._clock()
        try:
            output = await self._submit(job, body, started_s)
        except BaseException:
            # Cancelled or failed mid-request: make sure the server stops generating it.
            self.abort_in_background(body.rid)
            raise
        finally:
            job.rid = None
            job.decode_s += self._clock() - started_s
        job.absorb(output, with_logprobs=self.settings.return_logprob)
        return output

    async def _submit(self, job: Job, body: GenerateBody, started_s: float) -> GenerateOutput:
        latest = GenerateOutput()
        generator = self.router.router if self.router else self.client
        # Behind a router the trajectory is the session a consistent-hash policy keys on.
        key = job.request.trajectory_id if self.router else ""
        try:
            if not self.settings.stream:
                return await generator.generate(body, routing_key=key)
            async for frame in generator.generate_stream(body, routing_key=key):
                if not latest.output_ids and frame.output_ids:
                    job.prefill_s += self._clock() - started_s  # time to the first token
                latest = frame
        except EngineError:
            # Some SGLang versions answer an aborted request with an error (400, 500, or an
            # error frame) instead of 200: then the partial output is what was streamed (none
            # without streaming; the resubmission regenerates it).
            if not (job.abort_requested or job.phase is JobPhase.DRAINING):
                raise
        return latest

    def _server_priority(self, priority: float) -> int | None:
        """SGLang's priority, or None when the server runs without priority scheduling (it may
        reject a priority then)."""
        if not self.info.enable_priority_scheduling:
            return None
        value = to_priority(priority, self.settings.priority_scale)
        return -value if self.info.schedule_low_priority_values_first else value

    async def abort_quietly(self, rid: str) -> None:
        try:
            await (self.router or self.client).abort(rid)
        except EngineError as exc:
            log.warning("abort of %s failed: %s", rid, exc)

    def abort_in_background(self, rid: str) -> None:
        """Abort ``rid`` on the server without waiting (a failure is logged)."""
        self._spawn(self.abort_quietly(rid))

    async def close(self) -> None:
        """Wait for the aborts still on their way."""
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def next_rid(self) -> str:
        """Fixed width and unique, so no rid is a prefix of another (SGLang aborts by prefix)."""
        self._num_rids += 1
        return f"{self._rid_prefix}-{self._num_rids:012d}"
