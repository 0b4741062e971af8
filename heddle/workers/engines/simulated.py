"""The ``sim`` engine: the calibrated batching model of one worker, run in scaled real time.

Model time = wall time x ``time_scale``. An asyncio driver sleeps until the batching model's
next finish (or until a submission, priority change, preemption or abort wakes it), advances the
model to the current model time and resolves the futures of finished generations. Scheduling
(priority admission, preemption, KV capacity, prefix cache, recompute) is entirely
``heddle.policy.batching.BatchingModel``: this module only drives its clock.

Outputs are deterministic pseudo-tokens (``simulated_jobs``: requests to jobs, finished jobs to
results): a step re-run after a crash produces the same tokens. The output length is
``target_output_tokens`` (trace replay) capped by ``max_new_tokens``.

The engine model (``heddle.policy.engine_models``, option ``engine_model``) sets the prefix
cache and what preemption does to KV, and whether KV moves on migration. ``torch``: KV "export"
ships a small record (trajectory, cached tokens, fingerprint); the transfer takes the time the real
KV bytes (tokens x the model's KV bytes per token) would need on the configured link, scaled, and
the importing engine marks the trajectory's prefix cache warm. ``sglang``: no export (as the real
sglang engine); ``warm_up`` prefills a migrated trajectory's context on the target with a
prefill-only request, as the sglang engine's ``max_new_tokens: 0`` warm-up does.

Live requests carry no GRPO group (``GenerationRequest`` has no group id), so jobs get no
``group_id``: a group's shared prompt is cached per trajectory here.

A re-shard (``reshard``) models a relaunch: what is in flight returns aborted with its output
so far, the engine pauses ``restart_s`` plus the new degree's weight load
(``heddle.policy.cost.model.weight_load_s``), then runs a fresh batching model of the new
degree's cost model, with no cached prefix.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import time
from collections.abc import Callable, Sequence
from typing import Literal

from heddle.policy.batching import BatchingModel, FinishedGeneration
from heddle.policy.cost.model import MODELS, CostModel, ModelShape, weight_load_s
from heddle.policy.engine_models import engine_model
from heddle.policy.scheduling.preemption import PreemptionConfig
from heddle.workers.engines.base import (
    CacheSnapshot,
    EngineCapabilities,
    EngineError,
    EngineLoad,
    GenerationRequest,
    GenerationResult,
    WarmUpResult,
    parse_gpu_ids,
)
from heddle.workers.engines.simulated_jobs import (
    Pending,
    cache_record,
    cache_snapshot,
    generation_result,
    pseudo_tokens,
    request_generation_job,
)
from heddle.workers.engines.simulated_options import SimulatedEngineOptions, load_cost_model

__all__ = ["SimulatedEngine", "SimulatedEngineOptions", "create_simulated_engine", "pseudo_tokens"]


class SimulatedEngine:
    """Implements ``heddle.workers.engines.base.Engine`` on ``BatchingModel``."""

    def __init__(
        self, options: SimulatedEngineOptions, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.options = options
        self.shape: ModelShape = MODELS[options.model]
        self.cost: CostModel = load_cost_model(options)
        self.engine_model = engine_model(options.engine_model)
        self._model = self._new_model()
        self._clock = clock
        self._origin = clock()
        self._pending: dict[str, Pending] = {}
        self._known_tokens: dict[str, int] = {}
        """Context tokens each trajectory has sent to this engine (to tell new from reused)."""
        self._wake = asyncio.Event()
        self._driver: asyncio.Task[None] | None = None
        self._num_warm_ups = 0
        self.weight_version = 0
        """The weight version last loaded (0: the initial weights)."""

    def _new_model(self) -> BatchingModel:
        options = self.options
        preemption = PreemptionConfig(
            min_priority_gap=options.preemption_gap,
            min_relative_gap=options.preemption_relative_gap,
        )
        config = self.engine_model.batching_config(
            preemptive=options.preemptive, max_running=options.max_running, preemption=preemption
        )
        return BatchingModel(self.cost, config)

    # ---- lifecycle -------------------------------------------------------------------------

    @property
    def capabilities(self) -> EngineCapabilities:
        return EngineCapabilities(
            name="sim",
            model=self.shape.name,
            tp_degree=self.options.tp,
            max_running=self.options.max_running,
            max_kv_tokens=self.cost.max_kv_tokens,
            can_export_kv=self.engine_model.kv_transfer,
            can_preempt=True,
            native_priority_update=True,
            time_scale=self.options.time_scale,
        )

    async def start(self) -> None:
        if self._driver is None:
            self._driver = asyncio.create_task(self._drive(), name="sim-engine-driver")

    async def close(self) -> None:
        driver, self._driver = self._driver, None
        if driver is not None:
            driver.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await driver
        for request_id in list(self._pending):
            self._fail(request_id, EngineError("engine closed"))

    @property
    def gpu_ids(self) -> tuple[int, ...]:
        return parse_gpu_ids(self.options.gpu_ids)

    async def reshard(self, tp_degree: int, gpu_ids: Sequence[int]) -> None:
        """Relaunch at ``tp_degree`` (see the module docstring)."""
        if len(gpu_ids) != tp_degree:
            raise EngineError(f"a TP {tp_degree} engine needs {tp_degree} GPUs, got {gpu_ids}")
        for request_id in list(self._pending):
            await self.abort(request_id)
        pause_s = self.options.restart_s + weight_load_s(self.shape.name, tp_degree)
        await asyncio.sleep(pause_s / self.options.time_scale)
        ids = ",".join(str(gpu) for gpu in gpu_ids)
        self.options = dataclasses.replace(self.options, tp=tp_degree, gpu_ids=ids)
        self.cost = load_cost_model(self.options)
        self._model = self._new_model()
        self._known_tokens.clear()
        self._wake.set()

    def now_s(self) -> float:
        """Current model time in seconds."""
        return (self._clock() - self._origin) * self.options.time_scale

    # ---- generation ------------------------------------------------------------------------

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        if self._driver is None:
            raise EngineError("sim engine not started")
        pending = self._submit(request)
        try:
            return await asyncio.shield(pending.future)
        except asyncio.CancelledError:
            await self.abort(request.request_id)
            raise

    def _submit(self, request: GenerationRequest) -> Pending:
        job = request_generation_job(request, self._known_tokens.get(request.trajectory_id, 0))
        now = self.now_s()
        self._resolve(self._model.advance(now))
        self._model.submit(job, now)
        pending = Pending.of(request, job, asyncio.get_running_loop().create_future())
        self._pending[request.request_id] = pending
        self._wake.set()
        return pending

    async def abort(self, request_id: str) -> None:
        pending = self._pending.get(request_id)
        if pending is None:
            return
        num_generated = self._model.abort(request_id, self.now_s())
        self._pending.pop(request_id)
        if not pending.future.done():
            pending.future.set_result(self._result(pending, max(0, num_generated), "abort"))
        self._wake.set()

    async def set_priority(self, request_id: str, priority: float) -> None:
        if self._model.set_priority(request_id, priority, self.now_s()):
            self._wake.set()

    async def preempt(self, request_id: str) -> None:
        if self._model.preempt(request_id, self.now_s()):
            self._wake.set()

    async def load(self) -> EngineLoad:
        load = self._model.load()
        return EngineLoad(
            num_running=load.num_running,
            num_waiting=load.num_waiting,
            kv_usage=load.kv_usage,
            num_cached_trajectories=load.num_cached_trajectories,
        )

    # ---- KV cache --------------------------------------------------------------------------

    @property
    def fingerprint(self) -> str:
        return f"sim:{self.shape.name}"

    def kv_bytes(self, num_tokens: int) -> int:
        return num_tokens * self.shape.kv_bytes_per_token

    async def export_cache(self, trajectory_id: str) -> CacheSnapshot | None:
        """The trajectory's cache record, after the modelled transfer time has passed (None:
        nothing cached, or an engine model without KV transfer)."""
        num_tokens = self._model.cached_tokens(trajectory_id)
        if num_tokens <= 0 or not self.engine_model.kv_transfer:
            return None
        num_bytes = self.kv_bytes(num_tokens)
        transfer_s = num_bytes / self.options.link_bandwidth_bytes_s
        await asyncio.sleep(transfer_s / self.options.time_scale)
        return cache_snapshot(trajectory_id, num_tokens, self.fingerprint, num_bytes)

    async def import_cache(self, snapshot: CacheSnapshot) -> None:
        if not self.engine_model.kv_transfer:
            raise EngineError(
                f"the {self.engine_model.name} engine model cannot import a KV cache "
                "(can_export_kv is False); warm the migration target with warm_up() instead"
            )
        record = cache_record(snapshot, self.fingerprint)
        self._model.import_cache(record.trajectory_id, record.num_tokens, self.now_s())
        self._known_tokens[record.trajectory_id] = record.num_tokens

    async def release(self, trajectory_id: str) -> None:
        self._model.release(trajectory_id)
        self._known_tokens.pop(trajectory_id, None)

    async def load_weights(self, path: str, *, weight_version: int, load_format: str = "") -> None:
        """Model a weight swap: ``weight_load_s`` model seconds of pause, and every cached
        prefix dropped (computed with the old weights), so the next steps prefill again. The
        file at ``path`` must exist (a real engine would read it)."""
        if not await asyncio.to_thread(os.path.exists, path):
            raise EngineError(f"weights of version {weight_version}: no file at {path!r}")
        await asyncio.sleep(self.options.weight_load_s / self.options.time_scale)
        for trajectory_id in list(self._known_tokens):
            await self.release(trajectory_id)
        self.weight_version = weight_version

    async def warm_up(self, trajectory_id: str, input_token_ids: Sequence[int]) -> WarmUpResult:
        """Prefill ``input_token_ids`` into the prefix cache without generating (a prefill-only
        job). An engine model with KV transfer (torch) has no warm-up: nothing is prefilled."""
        if not input_token_ids:
            raise ValueError(f"warm_up of {trajectory_id!r} needs a non-empty context")
        if self.engine_model.kv_transfer:
            cached = min(self._model.cached_tokens(trajectory_id), len(input_token_ids))
            return WarmUpResult(num_prompt_tokens=len(input_token_ids), num_cached_tokens=cached)
        self._num_warm_ups += 1
        request = GenerationRequest(
            request_id=f"warm-up:{self._num_warm_ups}:{trajectory_id}",
            trajectory_id=trajectory_id,
            input_token_ids=list(input_token_ids),
            max_new_tokens=0,
        )
        result = await self.generate(request)
        return WarmUpResult(
            num_prompt_tokens=result.num_prompt_tokens, num_cached_tokens=result.num_cached_tokens
        )

    # ---- driver ----------------------------------------------------------------------------

    async def _drive(self) -> None:
        """Run the model's clock; a failure of the model fails every pending generation."""
        try:
            await self._run_clock()
        except Exception as exc:
            for request_id in list(self._pending):
                self._fail(request_id, EngineError(f"sim engine failed: {exc!r}"))
            raise

    async def _run_clock(self) -> None:
        """Sleep until the model's next finish or a wake-up; advance; resolve futures."""
        while True:
            self._wake.clear()
            now = self.now_s()
            self._resolve(self._model.advance(now))
            next_s = self._model.next_event_time()
            timeout_s = None if next_s is None else max(0.0, next_s - now) / self.options.time_scale
            # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation that
            # races with the wake-up, and close() would then wait forever.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout_s):
                    await self._wake.wait()

    def _resolve(self, finished: list[FinishedGeneration]) -> None:
        for done in finished:
            pending = self._pending.pop(done.request_id, None)
            if pending is None or pending.future.done():
                continue
            request = pending.request
            self._known_tokens[request.trajectory_id] = done.num_context_tokens
            pending.future.set_result(
                self._result(pending, done.num_output_tokens, pending.finish_reason, done)
            )

    def _result(
        self,
        pending: Pending,
        num_output_tokens: int,
        finish_reason: Literal["stop", "length", "abort"],
        done: FinishedGeneration | None = None,
    ) -> GenerationResult:
        return generation_result(
            pending.request,
            num_output_tokens,
            finish_reason,
            done,
            default_seed=self.options.seed,
            vocab_size=self.options.vocab_size,
        )

    def _fail(self, request_id: str, error: Exception) -> None:
        pending = self._pending.pop(request_id, None)
        if pending is not None and not pending.future.done():
            pending.future.set_exception(error)


def create_simulated_engine(options: SimulatedEngineOptions) -> SimulatedEngine:
    """Registry factory (``heddle.workers.engines.ENGINES["sim"]``)."""
    return SimulatedEngine(options)
