"""``TorchEngine``: the ``Engine`` protocol over ``EngineCore``, whose loop runs in a thread.

Why a thread and not an asyncio task: a forward pass holds the CPU for milliseconds to seconds,
which in a task would stall the event loop (NATS heartbeats, tool calls, other trajectories).
torch releases the GIL inside its kernels, so the loop stays responsive while the engine thread
computes. The engine thread alone touches the core (an actor): every API call is a closure
posted to its inbox and answered through an asyncio future; results come back the same way. No
engine state is shared between threads except that inbox.

Serialising a KV export and deserialising an import run in ``asyncio.to_thread`` so that neither
the event loop nor the batching loop waits on large byte copies.

The engine runs its model on one device, unsharded: a re-shard (``reshard``) restarts it (the
requests in flight return aborted with their output, the thread stops, the model is loaded
again, the KV cache is gone) and it reports the new degree and GPUs. That is the restart a real
TP engine pays, without the sharding.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import queue
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import torch

from heddle.workers.engines.base import (
    CacheSnapshot,
    EngineCapabilities,
    EngineError,
    EngineLoad,
    GenerationRequest,
    GenerationResult,
    parse_gpu_ids,
)
from heddle.workers.engines.torch_engine.core import EngineCore
from heddle.workers.engines.torch_engine.loading import load_model
from heddle.workers.engines.torch_engine.options import TorchEngineOptions
from heddle.workers.engines.torch_engine.snapshot import restore_block, snapshot_block
from heddle.workers.engines.torch_engine.stats import EngineStats
from heddle.workers.engines.torch_engine.weights import read_state_dict

T = TypeVar("T")
_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class _Call:
    action: Callable[[EngineCore], Any]
    reply: asyncio.Future[Any]


class _Stop:
    """Inbox sentinel: leave the loop."""


class TorchEngine:
    def __init__(self, options: TorchEngineOptions) -> None:
        self.options = options
        self._core: EngineCore | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._inbox: queue.SimpleQueue[_Call | _Stop] = queue.SimpleQueue()
        self._pending: dict[str, asyncio.Future[GenerationResult]] = {}
        self.weight_version = 0
        """The weight version last loaded (0: the weights it started with)."""
        self._weights_path = ""
        """Where those weights came from (a restart loads them again)."""

    @property
    def capabilities(self) -> EngineCapabilities:
        extras = {"device": self.options.device, "dtype": self.options.dtype}
        if self._core is not None:
            extras["dtype"] = self._core.model.layout.dtype_name
            extras["fingerprint"] = self._core.model.fingerprint
        return EngineCapabilities(
            name="torch",
            model=self.options.model,
            tp_degree=self.options.tp,
            max_running=self.options.max_running,
            max_kv_tokens=self.options.max_kv_tokens,
            max_context_tokens=self._core.model.max_positions if self._core is not None else 0,
            can_export_kv=True,
            can_preempt=True,
            native_priority_update=True,
            extras=extras,
        )

    @property
    def fingerprint(self) -> str:
        return self._require_core().model.fingerprint

    async def start(self) -> None:
        if self._thread is not None:
            return
        if self.options.num_threads:
            torch.set_num_threads(self.options.num_threads)
        model = await asyncio.to_thread(load_model, self.options)
        self._core = EngineCore(model, self.options)
        self._loop = asyncio.get_running_loop()
        self._thread = threading.Thread(target=self._run, name="torch-engine", daemon=True)
        self._thread.start()

    async def close(self) -> None:
        thread, self._thread = self._thread, None
        if thread is None:
            return
        self._inbox.put(_Stop())
        await asyncio.to_thread(thread.join)
        for future in self._pending.values():
            if not future.done():
                future.set_exception(EngineError("torch engine closed"))
        self._pending.clear()

    @property
    def gpu_ids(self) -> tuple[int, ...]:
        return parse_gpu_ids(self.options.gpu_ids)

    async def reshard(self, tp_degree: int, gpu_ids: Sequence[int]) -> None:
        """Restart at ``tp_degree`` over ``gpu_ids`` (the module docstring)."""
        if len(gpu_ids) != tp_degree:
            raise EngineError(f"a TP {tp_degree} engine needs {tp_degree} GPUs, got {gpu_ids}")
        for request_id in list(self._pending):
            await self.abort(request_id)
        await self.close()
        ids = ",".join(str(gpu) for gpu in gpu_ids)
        self.options = dataclasses.replace(self.options, tp=tp_degree, gpu_ids=ids)
        self._core = None
        await self.start()
        if self._weights_path:
            await self.load_weights(self._weights_path, weight_version=self.weight_version)

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        core = self._require_core()
        core.validate(request)
        if request.request_id in self._pending:
            raise ValueError(f"request id {request.request_id!r} is already in flight")
        result: asyncio.Future[GenerationResult] = asyncio.get_running_loop().create_future()
        self._pending[request.request_id] = result
        try:
            await self._call(lambda engine_core: engine_core.submit(request))
            return await result
        except asyncio.CancelledError:
            self._post(lambda engine_core: engine_core.abort(request.request_id))
            raise
        finally:
            self._pending.pop(request.request_id, None)

    async def abort(self, request_id: str) -> None:
        result = await self._call(lambda core: core.abort(request_id))
        if result is not None:
            self._deliver(result)

    async def set_priority(self, request_id: str, priority: float) -> None:
        await self._call(lambda core: core.set_priority(request_id, priority))

    async def preempt(self, request_id: str) -> None:
        await self._call(lambda core: core.preempt(request_id))

    async def load(self) -> EngineLoad:
        return await self._call(lambda core: core.load())

    async def stats(self) -> EngineStats:
        return await self._call(lambda core: core.stats())

    async def export_cache(self, trajectory_id: str) -> CacheSnapshot | None:
        block = await self._call(lambda core: core.export_block(trajectory_id))
        if block is None:
            return None
        return await asyncio.to_thread(snapshot_block, trajectory_id, block, self.fingerprint)

    async def import_cache(self, snapshot: CacheSnapshot) -> None:
        block = await asyncio.to_thread(restore_block, snapshot, self.fingerprint)
        await self._call(lambda core: core.import_block(snapshot.trajectory_id, block))

    async def release(self, trajectory_id: str) -> None:
        await self._call(lambda core: core.release(trajectory_id))

    async def load_weights(self, path: str, *, weight_version: int, load_format: str = "") -> None:
        """Swap in the weights at ``path`` (``heddle.workers.engines.torch_engine.weights``)
        without restarting: read in a thread, copied on the engine thread between steps.
        ``EngineError`` when the file cannot be read or does not fit the model, or while
        requests are in flight; the engine then serves the weights it had."""
        try:
            state = await asyncio.to_thread(read_state_dict, path)
            await self._call(lambda core: core.swap_weights(state))
        except ValueError as exc:
            raise EngineError(f"weights of version {weight_version}: {exc}") from None
        self.weight_version = weight_version
        self._weights_path = path

    # Event-loop side -------------------------------------------------------------------------

    def _require_core(self) -> EngineCore:
        if self._core is None or self._thread is None:
            raise EngineError("torch engine is not started (call start() first)")
        return self._core

    async def _call(self, action: Callable[[EngineCore], T]) -> T:
        self._require_core()
        reply: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._inbox.put(_Call(action, reply))
        return await reply

    def _post(self, action: Callable[[EngineCore], Any]) -> None:
        """Fire and forget (used while cancelling, when nobody awaits the answer)."""
        if self._loop is not None and self._thread is not None:
            self._inbox.put(_Call(action, self._loop.create_future()))

    def _deliver(self, result: GenerationResult) -> None:
        future = self._pending.get(result.request_id)
        if future is not None and not future.done():
            future.set_result(result)

    def _fail(self, request_ids: list[str], error: EngineError) -> None:
        for request_id in request_ids:
            future = self._pending.get(request_id)
            if future is not None and not future.done():
                future.set_exception(error)

    # Engine-thread side ----------------------------------------------------------------------

    def _run(self) -> None:
        core = self._require_core()
        while True:
            for item in self._drain(block=not core.has_work()):
                if isinstance(item, _Stop):
                    return
                self._answer(core, item)
            if core.has_work():
                self._step(core)

    def _drain(self, *, block: bool) -> list[_Call | _Stop]:
        items: list[_Call | _Stop] = [self._inbox.get()] if block else []
        while True:
            try:
                items.append(self._inbox.get_nowait())
            except queue.Empty:
                return items

    def _answer(self, core: EngineCore, call: _Call) -> None:
        try:
            value = call.action(core)
        except Exception as exc:
            self._to_loop(_set_exception, call.reply, exc)
        else:
            self._to_loop(_set_result, call.reply, value)

    def _step(self, core: EngineCore) -> None:
        try:
            results = core.step()
        except Exception as exc:
            _log.exception("torch engine step failed; failing the requests in flight")
            error = EngineError(f"torch engine step failed: {exc!r}")
            self._to_loop(self._fail, core.reset(), error)
            return
        for result in results:
            self._to_loop(self._deliver, result)

    def _to_loop(self, callback: Callable[..., None], *args: Any) -> None:
        assert self._loop is not None
        # A closed event loop raises RuntimeError: nobody is left to answer.
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(callback, *args)


def _set_result(future: asyncio.Future[Any], value: Any) -> None:
    if not future.done():
        future.set_result(value)


def _set_exception(future: asyncio.Future[Any], exc: BaseException) -> None:
    if not future.done():
        future.set_exception(exc)


def create_torch_engine(options: TorchEngineOptions) -> TorchEngine:
    """Registry factory: a not-yet-started engine."""
    return TorchEngine(options)
