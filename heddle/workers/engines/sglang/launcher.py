"""Launch SGLang servers: the ``sglang.launch_server`` command line, a supervised server, and the
engine factory behind ``heddle worker --engine sglang [--url URL | --launch --model PATH --tp N]``.

Flags (sglang 0.5.x, ``python/sglang/srt/server_args.py``): ``--model-path``, ``--tp-size``,
``--host``, ``--port``, ``--base-gpu-id`` (co-locate servers of different TP on one node), and
exactly the scheduling flags the simulator's ``sglang`` engine model assumes
(``heddle.policy.engine_models.SGLANG``; docs/sglang.md says what each changes):
``--enable-priority-scheduling`` with ``--schedule-policy fcfs`` (SGLang accepts priority
scheduling only with ``fcfs`` or ``lof``), ``--priority-scheduling-preemption-threshold`` (the
engine's preemption gap in SGLang's integer priority units; the largest int32 when the engine
must not preempt, which is how Heddle's bundles run on this engine model),
``--radix-eviction-policy lru`` and ``--page-size 1``.

A re-shard (``LaunchedSglangEngine.reshard``) stops the server and launches it again with the new
``--tp-size`` over the union of its GPUs and those its retired peers freed, named by
``CUDA_VISIBLE_DEVICES`` (``--base-gpu-id 0`` then counts within them); the weights loaded since
the launch are loaded again, as after a crash. What that costs on a GPU (process start, NCCL
set-up, weight load, CUDA graph capture) is the simulator's ``SimConfig.engine_restart_s``
plus its weight load; it is not measured here (no GPU).
"""

from __future__ import annotations

import asyncio
import shlex
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from heddle.bus.server import free_port
from heddle.policy.scheduling.preemption import PreemptionConfig
from heddle.workers.engines.base import EngineError, EngineLoad, parse_gpu_ids
from heddle.workers.engines.sglang.client import ClientTimeouts, RetryPolicy, SglangClient
from heddle.workers.engines.sglang.engine import SglangEngine
from heddle.workers.engines.sglang.options import EngineSettings, SglangEngineOptions
from heddle.workers.engines.sglang.routed import RouterTarget
from heddle.workers.engines.sglang.supervisor import (
    ServerSupervisor,
    SupervisorConfig,
    SupervisorError,
)


@dataclass(frozen=True, slots=True)
class LaunchSpec:
    """One ``python -m sglang.launch_server`` invocation."""

    model_path: str
    tp_size: int = 1
    port: int = 30000
    host: str = "127.0.0.1"
    base_gpu_id: int = 0
    preemption_threshold: int = 0
    """``--priority-scheduling-preemption-threshold``: SGLang preempts a running request for a
    waiting one whose priority exceeds it by more than this."""
    extra_args: tuple[str, ...] = ()
    """Further launch_server flags, passed through verbatim."""
    python: str = sys.executable
    gpu_ids: tuple[int, ...] = ()
    """The node's GPUs it runs on (``CUDA_VISIBLE_DEVICES``, ``--base-gpu-id 0``); empty: the
    ``tp_size`` GPUs from ``base_gpu_id`` of those visible."""

    @property
    def gpus(self) -> tuple[int, ...]:
        """The GPUs it runs on."""
        return self.gpu_ids or tuple(range(self.base_gpu_id, self.base_gpu_id + self.tp_size))

    def env(self) -> dict[str, str]:
        """Variables the server's process gets."""
        if not self.gpu_ids:
            return {}
        return {"CUDA_VISIBLE_DEVICES": ",".join(str(gpu) for gpu in self.gpu_ids)}

    @property
    def base_url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        return f"http://{host}:{self.port}"

    def command(self) -> tuple[str, ...]:
        return (
            self.python,
            "-m",
            "sglang.launch_server",
            "--model-path",
            self.model_path,
            "--tp-size",
            str(self.tp_size),
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--base-gpu-id",
            str(0 if self.gpu_ids else self.base_gpu_id),
            *self.scheduling_args(),
            *self.extra_args,
        )

    def scheduling_args(self) -> tuple[str, ...]:
        """The flags of the ``sglang`` engine model."""
        return (
            "--enable-priority-scheduling",
            "--schedule-policy",
            "fcfs",
            "--priority-scheduling-preemption-threshold",
            str(self.preemption_threshold),
            "--radix-eviction-policy",
            "lru",
            "--page-size",
            "1",
        )


def server_supervisor(
    spec: LaunchSpec, client: SglangClient, *, options: SglangEngineOptions
) -> ServerSupervisor:
    """A supervisor for ``spec``'s server whose readiness is ``client``'s probe."""
    config = SupervisorConfig(
        command=spec.command(),
        ready_timeout_s=options.ready_timeout_s,
        max_restarts=options.max_restarts,
        log_path=Path(options.log_path) if options.log_path else None,
        env=spec.env(),
    )
    return ServerSupervisor(config, client.is_ready)


Supervise = Callable[[LaunchSpec], ServerSupervisor]
"""A supervisor of a launch spec's server (a re-shard launches another)."""
_ABORT_WAIT_S = 30.0
"""How long a re-shard waits for aborted generations to return before stopping the server."""


class LaunchedSglangEngine(SglangEngine):
    """An ``SglangEngine`` that starts (and finally stops) its own supervised server, and
    relaunches it for a re-shard (see the module docstring)."""

    def __init__(
        self,
        client: SglangClient,
        settings: EngineSettings,
        supervisor: ServerSupervisor,
        *,
        router: RouterTarget | None = None,
        spec: LaunchSpec | None = None,
        supervise: Supervise | None = None,
    ) -> None:
        """``spec`` and ``supervise``: what a re-shard relaunches (None: it cannot)."""
        super().__init__(client, settings, router=router)
        self.supervisor = supervisor
        supervisor.after_restart = self._reapply_weights
        self.spec = spec
        self._supervise = supervise
        self.is_relaunching = False

    @property
    def gpu_ids(self) -> tuple[int, ...]:
        return self.spec.gpus if self.spec is not None and self._supervise else ()

    async def reshard(self, tp_degree: int, gpu_ids: Sequence[int]) -> None:
        """Stop the server and launch it at ``tp_degree`` over ``gpu_ids`` (the module
        docstring); what was in flight returns aborted with its output so far."""
        if self.spec is None or self._supervise is None:
            raise EngineError("this engine did not launch its server: it cannot relaunch it")
        if len(gpu_ids) != tp_degree:
            raise EngineError(f"a TP {tp_degree} server needs {tp_degree} GPUs, got {gpu_ids}")
        await self._abort_all()
        self.is_relaunching = True
        try:
            await self.supervisor.stop()
            self.spec = replace(self.spec, tp_size=tp_degree, gpu_ids=tuple(gpu_ids))
            self.supervisor = self._supervise(self.spec)
            self.supervisor.after_restart = self._reapply_weights
            await self.start()
            await self._reapply_weights()
        finally:
            self.is_relaunching = False

    async def load(self) -> EngineLoad:
        """No server while it relaunches: nothing runs."""
        if self.is_relaunching:
            return EngineLoad(num_running=0, num_waiting=0)
        return await super().load()

    async def _abort_all(self) -> None:
        for request_id in list(self._jobs):
            await self.abort(request_id)
        async with asyncio.timeout(_ABORT_WAIT_S):
            await self._idle.wait()

    async def _reapply_weights(self) -> None:
        """A restarted server runs the launch command's checkpoint: load the weights this
        engine had loaded since, before it serves again (a failure counts as a failed restart)."""
        if self.loaded_weights is not None:
            await self.client.update_weights_from_disk(self.loaded_weights)

    async def start(self) -> None:
        try:
            await self.supervisor.start()
        except SupervisorError as exc:
            raise EngineError(f"could not launch SGLang: {exc}") from exc
        await super().start()

    async def close(self) -> None:
        try:
            await super().close()
        finally:
            await self.supervisor.stop()


NEVER_PREEMPT_THRESHOLD = 2**31 - 1
"""A priority gap no request reaches: the server never preempts."""


def server_preemption_threshold(options: SglangEngineOptions) -> int:
    """The server's threshold in its integer priority units (``round(priority * scale)``)."""
    if not options.preemptive:
        return NEVER_PREEMPT_THRESHOLD
    return round(options.preemption_threshold * options.priority_scale)


def launch_spec(options: SglangEngineOptions) -> LaunchSpec:
    return LaunchSpec(
        model_path=options.model,
        tp_size=options.tp,
        port=options.port or free_port(),
        host=options.host,
        base_gpu_id=options.base_gpu_id,
        preemption_threshold=server_preemption_threshold(options),
        extra_args=tuple(shlex.split(options.launch_args)),
        python=options.python or sys.executable,
        gpu_ids=parse_gpu_ids(options.gpu_ids),
    )


def create_sglang_engine(options: SglangEngineOptions) -> SglangEngine:
    """The registry factory: a not-yet-started engine for ``--url``, or one that launches its
    own server for ``--launch``."""
    spec = launch_spec(options) if options.launch else None
    client = _client(spec.base_url if spec else options.url, options)
    router = RouterTarget(_client(options.router_url, options)) if options.router_url else None
    settings = EngineSettings(
        max_running=options.max_running,
        preemption=PreemptionConfig(
            min_priority_gap=options.preemption_threshold,
            min_relative_gap=options.preemption_relative_gap,
        ),
        preemptive=options.preemptive,
        priority_scale=options.priority_scale,
        stream=options.stream,
        return_logprob=options.return_logprob,
        extra_key=options.extra_key or None,
        ready_timeout_s=options.ready_timeout_s,
    )
    if spec is None:
        return SglangEngine(client, settings, router=router)

    def supervise_spec(launched: LaunchSpec) -> ServerSupervisor:
        return server_supervisor(launched, client, options=options)

    return LaunchedSglangEngine(
        client,
        settings,
        supervise_spec(spec),
        router=router,
        spec=spec,
        supervise=supervise_spec,
    )


def _client(url: str, options: SglangEngineOptions) -> SglangClient:
    return SglangClient(
        url,
        timeouts=ClientTimeouts(
            connect_s=options.connect_timeout_s, request_s=options.request_timeout_s
        ),
        retry=RetryPolicy(
            max_retries=options.max_retries,
            backoff_initial_s=options.backoff_initial_s,
            backoff_max_s=options.backoff_max_s,
        ),
        incremental_streaming=options.incremental_streaming,
    )
