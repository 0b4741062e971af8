"""``SglangEngine``: the Engine protocol over one SGLang server's HTTP API.

Scheduling happens here, not in SGLang: a local ``AdmissionQueue`` submits at most
``max_running`` requests at once, so reprioritising a waiting request is a local re-order (SGLang
has no API for it), and preempting a running one is an ``/abort_request`` whose partial output is
kept and resubmitted later as the prefix of the remainder (see ``job.py``). SGLang's radix cache
usually still holds the aborted request's KV, so the resubmission re-prefills little.

Each ``generate`` call drives its own job in the caller's task: cancelling that task aborts the
request on the server. There is no background loop; every state change (submission, finish,
priority change, preemption) re-runs the queue's ``schedule`` and acts on its decisions.

KV migration: SGLang 0.5 cannot export or import a request's KV (``can_export_kv`` is False). A
migration instead warms the target during the tool gap with ``warm_up`` (a prefill-only request,
``max_new_tokens: 0``) so the next step hits the target's radix cache; or both servers share a
HiCache store (docs/sglang.md).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Sequence

from heddle.policy.scheduling.preemption import PreemptionConfig
from heddle.workers.engines.base import (
    CacheSnapshot,
    EngineCapabilities,
    EngineError,
    EngineLoad,
    GenerationRequest,
    GenerationResult,
    WarmUpResult,
)
from heddle.workers.engines.sglang.client import SglangClient, SglangError
from heddle.workers.engines.sglang.job import Job, JobPhase, finish_reason_of
from heddle.workers.engines.sglang.local_queue import AdmissionQueue, AdmitJob, PreemptJob
from heddle.workers.engines.sglang.options import EngineSettings
from heddle.workers.engines.sglang.protocol import (
    GenerateBody,
    LoadsReport,
    SamplingParamsWire,
    ServerInfo,
    UpdateWeightsBody,
)
from heddle.workers.engines.sglang.routed import RouterTarget
from heddle.workers.engines.sglang.segments import SegmentRunner

log = logging.getLogger(__name__)


class SglangEngine:
    """The Engine protocol for one SGLang server (see the module docstring)."""

    def __init__(
        self,
        client: SglangClient,
        settings: EngineSettings = EngineSettings(),
        *,
        clock: Callable[[], float] = time.monotonic,
        router: RouterTarget | None = None,
    ) -> None:
        self.client = client
        self.settings = settings
        self.router = router
        """Generation goes through this ``sglang-router`` when set (``routed.py``)."""
        self._clock = clock
        self._segments = SegmentRunner(client, settings, clock, router)
        self._jobs: dict[str, Job] = {}
        self._idle = asyncio.Event()
        """Set while no generation is in flight."""
        self._idle.set()
        self._queue: AdmissionQueue | None = None
        self._info = ServerInfo()
        self._max_kv_tokens = 0
        self.loaded_weights: UpdateWeightsBody | None = None
        """The last weights loaded through ``load_weights`` (None: the launch weights)."""

    @property
    def capabilities(self) -> EngineCapabilities:
        return EngineCapabilities(
            name="sglang",
            model=self._info.model_name,
            tp_degree=self._info.tp_size,
            max_running=self._queue.max_running if self._queue else self.settings.max_running,
            max_kv_tokens=self._max_kv_tokens,
            max_context_tokens=self._info.max_context_tokens,
            can_export_kv=False,
            can_preempt=self.settings.preemptive,
            native_priority_update=False,
            extras={
                "url": self.client.base_url,
                "version": self._info.version or "",
                "migration": "warm_up",
                "priority_scheduling": str(self._info.enable_priority_scheduling).lower(),
                "router": self.router.url if self.router else "",
            },
        )

    async def start(self) -> None:
        """Wait for the server, read its model, TP degree and capacity; size the admission queue."""
        await self.client.wait_ready(self.settings.ready_timeout_s)
        self._info = self._segments.info = await self.client.server_info()
        loads = await self.client.loads()
        self._max_kv_tokens = loads.max_total_num_tokens or self._info.max_total_num_tokens or 0
        max_running = (
            self.settings.max_running
            or loads.max_running_requests
            or self._info.max_running_requests
        )
        if not max_running:
            raise EngineError(
                f"SGLang at {self.client.base_url} reports no max_running_requests; "
                "set the engine's max_running option"
            )
        self._queue = AdmissionQueue(max_running=max_running, preemption=self._preemption())

    def _preemption(self) -> PreemptionConfig:
        """The queue's margins; an infinite gap when the engine must not preempt."""
        if self.settings.preemptive:
            return self.settings.preemption
        return PreemptionConfig(min_priority_gap=math.inf)

    async def load_weights(self, path: str, *, weight_version: int, load_format: str = "") -> None:
        """``POST /update_weights_from_disk`` with the checkpoint folder ``path`` (the server
        must see it: a shared or local path on its host); the server flushes its radix cache,
        so the next generations prefill again. ``EngineError`` when it refuses (it then keeps
        its weights)."""
        if self._jobs:
            raise EngineError("weights can only be swapped while no request is in flight")
        body = UpdateWeightsBody(
            model_path=path, load_format=load_format or None, weight_version=str(weight_version)
        )
        try:
            await self.client.update_weights_from_disk(body)
        except SglangError as exc:
            raise EngineError(f"weights of version {weight_version}: {exc}") from None
        self.loaded_weights = body

    async def close(self) -> None:
        """Abort our in-flight requests on the server, then close the connection pool."""
        for job in list(self._jobs.values()):
            job.abort_requested = True
            job.wake.set()
            if job.rid is not None:
                await self._segments.abort_quietly(job.rid)
        await self._segments.close()
        await self.client.close()
        if self.router is not None:
            await self.router.close()

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        queue = self._require_queue()
        if request.request_id in self._jobs:
            raise ValueError(f"request id {request.request_id!r} is already in flight")
        job = Job(request=request, enqueued_at_s=self._clock())
        self._jobs[request.request_id] = job
        self._idle.clear()
        queue.add(request.request_id, request.priority)
        self._dispatch()
        try:
            return await self._drive(job)
        finally:
            job.phase = JobPhase.DONE
            self._jobs.pop(request.request_id, None)
            if not self._jobs:
                self._idle.set()
            queue.remove(request.request_id)
            self._dispatch()

    async def abort(self, request_id: str) -> None:
        """End the request; its ``generate`` returns the output so far with reason ``abort``."""
        job = self._jobs.get(request_id)
        if job is None:
            return
        job.abort_requested = True
        job.wake.set()
        if job.rid is not None:
            await self._segments.abort_quietly(job.rid)

    async def set_priority(self, request_id: str, priority: float) -> None:
        """Re-rank a waiting request locally; a running one is preempted only if a waiting
        request now beats it by more than the threshold."""
        if request_id in self._jobs:
            self._require_queue().set_priority(request_id, priority)
            self._dispatch()

    async def preempt(self, request_id: str) -> None:
        """Abort the running segment, keep its output, and queue the remainder again (nothing
        when the engine runs without preemption)."""
        job = self._jobs.get(request_id)
        if not self.settings.preemptive:
            return
        if job is not None and self._require_queue().preempt(request_id):
            self._start_draining(job)
            self._dispatch()

    async def load(self) -> EngineLoad:
        report: LoadsReport = await self.client.loads()
        num_local_waiting = len(self._queue.waiting) if self._queue else 0
        return EngineLoad(
            num_running=report.num_running,
            num_waiting=report.num_waiting + num_local_waiting,
            kv_usage=report.token_usage,
        )

    async def warm_up(self, trajectory_id: str, input_token_ids: Sequence[int]) -> WarmUpResult:
        """Prefill ``input_token_ids`` into this server's radix cache without generating
        (``max_new_tokens: 0``), so the trajectory's next step, migrated here, hits the cache
        (nothing behind a router)."""
        if not input_token_ids:
            raise ValueError(f"warm_up of {trajectory_id!r} needs a non-empty context")
        if self.router is not None:
            # The router, not this engine, picks the server of the next step (and slime
            # warms nothing up): a prefill here would only fill a cache it may never use.
            # Nothing is prefilled, which the result says (prefilled = prompt - cached = 0).
            num_tokens = len(input_token_ids)
            return WarmUpResult(num_prompt_tokens=num_tokens, num_cached_tokens=num_tokens)
        body = GenerateBody(
            input_ids=list(input_token_ids),
            sampling_params=SamplingParamsWire(max_new_tokens=0),
            rid=self._segments.next_rid(),
            extra_key=self.settings.extra_key,
        )
        output = await self.client.generate(body)
        return WarmUpResult(
            num_prompt_tokens=output.meta_info.prompt_tokens or len(input_token_ids),
            num_cached_tokens=output.meta_info.cached_tokens,
        )

    async def export_cache(self, trajectory_id: str) -> CacheSnapshot | None:
        return None  # SGLang 0.5 has no per-request KV export: migrations use warm_up.

    async def import_cache(self, snapshot: CacheSnapshot) -> None:
        raise EngineError(
            "the sglang engine cannot import a KV cache (can_export_kv is False); "
            "warm the migration target with warm_up() instead"
        )

    async def release(self, trajectory_id: str) -> None:
        """Nothing to do: SGLang has no per-prefix eviction API; its radix cache evicts LRU."""

    async def _drive(self, job: Job) -> GenerationResult:
        while True:
            await job.wake.wait()
            job.wake.clear()
            if job.abort_requested:
                return job.result("abort")
            if job.phase is JobPhase.DRAINING:
                self._requeue(job)  # preempted before its segment was submitted
                continue
            if job.phase is not JobPhase.RUNNING:
                continue
            output = await self._segments.run(job)
            reason = finish_reason_of(output)
            if reason != "abort" or job.abort_requested:
                return job.result(reason)
            if job.phase is not JobPhase.DRAINING:
                return job.result("abort")  # aborted by the server or another client
            if job.remaining_tokens == 0:
                return job.result("length")
            self._requeue(job)

    def _dispatch(self) -> None:
        """Apply the admission queue's decisions."""
        if self._queue is None:
            return
        for decision in self._queue.schedule():
            job = self._jobs[decision.job_id]
            match decision:
                case AdmitJob():
                    job.phase = JobPhase.RUNNING
                    job.wake.set()
                case PreemptJob():
                    self._start_draining(job)

    def _start_draining(self, job: Job) -> None:
        job.phase = JobPhase.DRAINING
        if job.rid is not None:
            self._segments.abort_in_background(job.rid)
        else:
            job.wake.set()

    def _requeue(self, job: Job) -> None:
        self._require_queue().drained(job.request_id)
        job.phase = JobPhase.WAITING
        job.num_preemptions += 1
        job.enqueued_at_s = self._clock()
        self._dispatch()

    def _require_queue(self) -> AdmissionQueue:
        if self._queue is None:
            raise EngineError("the sglang engine is not started: call start() first")
        return self._queue
