"""Options of the ``sglang`` engine (``heddle worker --engine sglang ...``) and the engine's typed
settings derived from them. A cheap import.

Two ways to get a server: ``url`` points at one already running, or ``launch`` starts
``python -m sglang.launch_server`` as a supervised child (``model``, ``tp``, ``port``,
``base_gpu_id``, ``launch_args``) and talks to it on ``host:port``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from heddle.policy.scheduling.preemption import PreemptionConfig


@dataclass(frozen=True, slots=True)
class EngineSettings:
    """How the engine uses its server (the HTTP details live in the client)."""

    max_running: int = 0
    """Most requests submitted at once; 0 takes the server's ``max_running_requests``."""
    preemption: PreemptionConfig = PreemptionConfig()
    """When a waiting request beats the lowest running one (shared PPS policy)."""
    preemptive: bool = True
    """Preempt at all. SGLang's preemption drops the victim's KV (the ``sglang`` engine model),
    so bundles that do not preempt there (``SystemSpec.preempts_losing_kv``) run with False:
    requests are still admitted by priority."""
    priority_scale: float = 1.0
    """SGLang's integer priority is ``round(priority * priority_scale)``."""
    stream: bool = False
    """Stream outputs: partial output survives even servers that answer an abort with an error."""
    return_logprob: bool = True
    extra_key: str | None = None
    """Cache namespace sent with every request (e.g. the weight version)."""
    ready_timeout_s: float = 60.0
    """``start`` waits this long for the server's readiness probe."""


def _help(text: str) -> dict[str, str]:
    return {"help": text}


@dataclass(frozen=True, slots=True)
class SglangEngineOptions:
    url: str = field(default="", metadata=_help("URL of a running SGLang server (not with launch)"))
    router_url: str = field(
        default="",
        metadata=_help("post /generate through this sglang-router (slime's routing)"),
    )
    launch: bool = field(default=False, metadata=_help("start and supervise our own server"))
    model: str = field(default="", metadata=_help("model path or name for --launch"))
    tp: int = field(default=1, metadata=_help("tensor-parallel degree for --launch"))
    port: int = field(default=0, metadata=_help("port for --launch (0: a free port)"))
    host: str = field(default="127.0.0.1", metadata=_help("interface for --launch"))
    base_gpu_id: int = field(default=0, metadata=_help("first GPU of the launched server"))
    gpu_ids: str = field(
        default="",
        metadata=_help(
            "the launched server's GPUs, comma-separated (CUDA_VISIBLE_DEVICES; default: tp "
            "GPUs from base-gpu-id); a re-shard relaunches it over others"
        ),
    )
    launch_args: str = field(
        default="", metadata=_help("extra sglang.launch_server flags, shell-quoted")
    )
    python: str = field(default="", metadata=_help("interpreter for --launch (default: this one)"))
    log_path: str = field(default="", metadata=_help("file for the launched server's output"))
    max_running: int = field(
        default=0, metadata=_help("most requests submitted at once (0: the server's max)")
    )
    preemptive: bool = field(
        default=True,
        metadata=_help("preempt for a higher priority (false: admit by priority only)"),
    )
    preemption_threshold: float = field(
        default=0.0, metadata=_help("priority gap by which a waiting request preempts")
    )
    preemption_relative_gap: float = field(
        default=0.05, metadata=_help("... and fraction of the running priority it must exceed")
    )
    priority_scale: float = field(
        default=1.0, metadata=_help("SGLang priority = round(priority * scale)")
    )
    stream: bool = field(
        default=False, metadata=_help("stream outputs (keeps partial output on any abort)")
    )
    incremental_streaming: bool = field(
        default=False, metadata=_help("server runs with --incremental-streaming-output")
    )
    return_logprob: bool = field(default=True, metadata=_help("ask for output logprobs"))
    extra_key: str = field(
        default="", metadata=_help("cache namespace sent with every request (weight version)")
    )
    connect_timeout_s: float = field(default=10.0, metadata=_help("connection timeout"))
    request_timeout_s: float = field(
        default=3600.0, metadata=_help("longest wait for a generation response")
    )
    max_retries: int = field(default=5, metadata=_help("retries on 503 and connection errors"))
    backoff_initial_s: float = field(default=0.2, metadata=_help("first retry wait (doubles)"))
    backoff_max_s: float = field(default=5.0, metadata=_help("longest retry wait"))
    ready_timeout_s: float = field(
        default=1800.0, metadata=_help("longest wait for the server to become ready")
    )
    max_restarts: int = field(default=5, metadata=_help("restarts of a crashed launched server"))

    def __post_init__(self) -> None:
        if self.launch == bool(self.url):
            raise ValueError("give exactly one of --url (a running server) or --launch")
        if self.launch and not self.model:
            raise ValueError("--launch needs --model (a model path or name)")
        for name, url in (("url", self.url), ("router-url", self.router_url)):
            if url and not url.startswith(("http://", "https://")):
                raise ValueError(f"--{name} {url!r} must start with http:// or https://")
        if self.tp < 1 or self.max_running < 0 or self.max_retries < 0 or self.max_restarts < 0:
            raise ValueError("tp must be >= 1; max-running, max-retries, max-restarts >= 0")
        if not 0 <= self.port < 65536:
            raise ValueError(f"--port {self.port} is not a port number")
        if min(self.preemption_threshold, self.preemption_relative_gap) < 0:
            raise ValueError("preemption-threshold and preemption-relative-gap must be >= 0")
        if self.priority_scale <= 0:
            raise ValueError("priority-scale must be > 0")
        if min(self.connect_timeout_s, self.request_timeout_s, self.ready_timeout_s) <= 0:
            raise ValueError("timeouts must be > 0")
