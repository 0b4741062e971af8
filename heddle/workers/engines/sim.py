"""The ``sim`` engine: the calibrated batching model of one worker, run in scaled real time.

Model time = wall time x ``time_scale``. An asyncio driver sleeps until the batching model's
next finish (or until a submission, priority change, preemption or abort wakes it), advances the
model to the current model time and resolves the futures of finished generations. Scheduling
(priority admission, preemption, KV capacity, prefix cache, recompute) is entirely
``heddle.policy.batching.BatchingModel``: this module only drives its clock.

Outputs are deterministic pseudo-tokens: the ids and logprobs of a generation depend only on
(trajectory id, context length, seed), so a step re-run after a crash produces the same tokens.
The output length is ``target_output_tokens`` (trace replay) capped by ``max_new_tokens``.

The engine model (``heddle.policy.engine_models``, option ``engine_model``) sets the prefix
cache and what preemption does to KV, and whether KV moves on migration. ``torch``: KV "export"
ships a small record (trajectory, cached tokens, fingerprint); the transfer takes the time the real
KV bytes (tokens x the model's KV bytes per token) would need on the configured link, scaled, and
the importing engine marks the trajectory's prefix cache warm. ``sglang``: no export (as the real
sglang engine); ``warm_up`` prefills a migrated trajectory's context on the target with a
prefill-only request, as the sglang engine's ``max_new_tokens: 0`` warm-up does.

Live requests carry no GRPO group (``GenerationRequest`` has no group id), so jobs get no
``group_id``: a group's shared prompt is cached per trajectory here.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import msgspec
import numpy as np

from heddle.policy.batching import BatchingModel, FinishedGeneration, GenerationJob
from heddle.policy.cost.model import MODELS, CostModel, ModelShape
from heddle.policy.engine_models import engine_model
from heddle.policy.scheduling.preemption import PreemptionConfig
from heddle.workers.engines.base import (
    CacheMismatchError,
    CacheSnapshot,
    EngineCapabilities,
    EngineError,
    EngineLoad,
    GenerationRequest,
    GenerationResult,
    WarmUpResult,
)
from heddle.workers.engines.sim_options import SimEngineOptions, load_cost_model

__all__ = ["SimEngine", "SimEngineOptions", "create_sim_engine", "pseudo_tokens"]

_MEAN_NEG_LOGPROB = 0.8
"""Mean of -logprob of a sampled token (assumption: typical of temperature-1 sampling)."""


class _CacheRecord(msgspec.Struct, frozen=True):
    trajectory_id: str
    num_tokens: int


def pseudo_tokens(
    trajectory_id: str, num_context_tokens: int, seed: int, count: int, vocab_size: int
) -> tuple[list[int], list[float]]:
    """Deterministic token ids and logprobs for a generation at this point of a trajectory.

    Vectorised (numpy): in scaled real time every millisecond spent here is ``time_scale``
    milliseconds of model time by which the result arrives late."""
    digest = hashlib.blake2b(
        f"{trajectory_id}:{num_context_tokens}:{seed}".encode(), digest_size=8
    ).digest()
    rng = np.random.default_rng(int.from_bytes(digest, "big"))
    ids = rng.integers(0, vocab_size, size=count)
    logprobs = -np.minimum(rng.exponential(_MEAN_NEG_LOGPROB, size=count), 30.0)
    # float32, as real engines return them: the wire carries logprobs as float32.
    return ids.tolist(), logprobs.astype(np.float32).tolist()


@dataclass(slots=True)
class _Pending:
    request: GenerationRequest
    num_output_tokens: int
    finish_reason: Literal["stop", "length"]
    """"length" when max_new_tokens cut the wanted output short (or no target was given)."""
    future: asyncio.Future[GenerationResult]


class SimEngine:
    """Implements ``heddle.workers.engines.base.Engine`` on ``BatchingModel``."""

    def __init__(
        self, options: SimEngineOptions, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.options = options
        self.shape: ModelShape = MODELS[options.model]
        self.cost: CostModel = load_cost_model(options)
        preemption = PreemptionConfig(
            min_priority_gap=options.preemption_gap,
            min_relative_gap=options.preemption_relative_gap,
        )
        self.engine_model = engine_model(options.engine_model)
        self._model = BatchingModel(
            self.cost,
            self.engine_model.batching_config(
                preemptive=options.preemptive,
                max_running=options.max_running,
                preemption=preemption,
            ),
        )
        self._clock = clock
        self._origin = clock()
        self._pending: dict[str, _Pending] = {}
        self._known_tokens: dict[str, int] = {}
        """Context tokens each trajectory has sent to this engine (to tell new from reused)."""
        self._wake = asyncio.Event()
        self._driver: asyncio.Task[None] | None = None
        self._num_warm_ups = 0
        self.weight_version = 0
        """The weight version last loaded (0: the initial weights)."""

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

    def _submit(self, request: GenerationRequest) -> _Pending:
        wanted = request.target_output_tokens
        count = request.max_new_tokens if wanted is None else min(wanted, request.max_new_tokens)
        num_context = len(request.input_token_ids)
        known = self._known_tokens.get(request.trajectory_id, 0)
        num_new = num_context - known if known <= num_context else num_context
        job = GenerationJob(
            request_id=request.request_id,
            traj_id=request.trajectory_id,
            num_context_tokens=num_context,
            num_new_tokens=num_new,
            num_output_tokens=max(0, count),
            priority=request.priority,
            group_id=request.group_id,
            num_prompt_tokens=min(request.num_prompt_tokens, num_context),
        )
        now = self.now_s()
        self._resolve(self._model.advance(now))
        self._model.submit(job, now)
        future = asyncio.get_running_loop().create_future()
        is_capped = wanted is None or wanted > request.max_new_tokens
        pending = _Pending(
            request, job.num_output_tokens, "length" if is_capped else "stop", future
        )
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
        payload = msgspec.json.encode(_CacheRecord(trajectory_id, num_tokens))
        return CacheSnapshot(
            trajectory_id=trajectory_id,
            num_tokens=num_tokens,
            fingerprint=self.fingerprint,
            payload=payload,
            num_kv_bytes=num_bytes,
        )

    async def import_cache(self, snapshot: CacheSnapshot) -> None:
        if not self.engine_model.kv_transfer:
            raise EngineError(
                f"the {self.engine_model.name} engine model cannot import a KV cache "
                "(can_export_kv is False); warm the migration target with warm_up() instead"
            )
        if snapshot.fingerprint != self.fingerprint:
            raise CacheMismatchError(
                f"cache of {snapshot.trajectory_id} was made by {snapshot.fingerprint!r}; "
                f"this engine is {self.fingerprint!r}"
            )
        record = msgspec.json.decode(snapshot.payload, type=_CacheRecord)
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
        pending: _Pending,
        num_output_tokens: int,
        finish_reason: Literal["stop", "length", "abort"],
        done: FinishedGeneration | None = None,
    ) -> GenerationResult:
        request = pending.request
        seed = request.sampling.seed if request.sampling.seed is not None else self.options.seed
        ids, logprobs = pseudo_tokens(
            request.trajectory_id,
            len(request.input_token_ids),
            seed,
            num_output_tokens,
            self.options.vocab_size,
        )
        return GenerationResult(
            request_id=request.request_id,
            output_token_ids=ids,
            output_logprobs=logprobs,
            finish_reason=finish_reason,
            num_prompt_tokens=len(request.input_token_ids),
            num_cached_tokens=done.num_cached_tokens if done else 0,
            num_recomputed_tokens=done.num_recomputed_tokens if done else 0,
            queue_s=done.queue_s if done else 0.0,
            prefill_s=done.prefill_s if done else 0.0,
            decode_s=done.decode_s if done else 0.0,
            num_preemptions=done.num_preemptions if done else 0,
        )

    def _fail(self, request_id: str, error: Exception) -> None:
        pending = self._pending.pop(request_id, None)
        if pending is not None and not pending.future.done():
            pending.future.set_exception(error)


def create_sim_engine(options: SimEngineOptions) -> SimEngine:
    """Registry factory (``heddle.workers.engines.ENGINES["sim"]``)."""
    return SimEngine(options)
