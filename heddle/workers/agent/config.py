"""Configuration of one rollout worker agent."""

from __future__ import annotations

from dataclasses import dataclass

from heddle.ids import check_token


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    worker_id: str
    """Subject token naming this worker (``heddle.cmd.worker.<worker_id>.>``)."""
    engine_name: str = "sim"
    """Registry name of the engine, reported in ``WorkerRegistered``."""
    tokenizer: str = "byte"
    """``heddle.workers.tokenizers.load_tokenizer`` spec: ``byte`` or a local path."""
    heartbeat_s: float = 3.0
    """Wall seconds between ``WorkerHeartbeat`` events."""
    telemetry_s: float = 1.0
    """Wall seconds between ``WorkerTelemetry`` messages on core NATS."""
    command_ack_wait_s: float = 30.0
    """How long an unacknowledged command waits before JetStream redelivers it (after a crash);
    the agent signals progress on long steps so a live worker's commands are not redelivered."""
    max_commands_in_flight: int = 4096
    """Commands delivered but not yet acknowledged (each hosted trajectory holds one or two)."""
    tool_timeout_s: float = 30.0
    """``ToolCall.timeout_s`` (wall seconds, the executor's clock) of hosted trajectories'
    tool calls; a trace-replay call gets at least twice its scaled recorded time."""
    publish_retry_max_s: float = 2.0
    """Longest pause between retries of a publish that failed (lost connection)."""
    node: str = ""
    """The machine its engine's GPUs are in, as registered (a re-shard merges workers of one
    node); "" registers the host name."""

    def __post_init__(self) -> None:
        check_token(self.worker_id, "worker id")
        for name in ("heartbeat_s", "telemetry_s", "command_ack_wait_s", "tool_timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.max_commands_in_flight < 1:
            raise ValueError("max_commands_in_flight must be >= 1")

    @property
    def consumer_name(self) -> str:
        """Durable consumer of this worker's command subject (survives restarts)."""
        return f"worker-{self.worker_id}"
