"""How many of the agent's modules one command's handling passes through: a ``ContinueTrajectory``
(a tool result) until the trajectory rests again (its next tool call stored), traced with
``sys.settrace`` over an in-memory bus (a fake of the transport, allowed in this unit test) and
the sim engine. docs/design.md's worker section lists the files in order."""

from __future__ import annotations

import asyncio
import sys
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from events_factory import continue_after

import heddle.workers.agent
from heddle.events import (
    Event,
    EventT,
    StartTrajectory,
    ToolCall,
    ToolReturned,
    TrajectoryEvent,
    TrajectorySpec,
    WorkerCommand,
    WorkerHeartbeat,
    WorkerTelemetry,
)
from heddle.workers.agent import WorkerAgent, WorkerConfig
from heddle.workers.engines.simulated import SimulatedEngine, SimulatedEngineOptions

AGENT_DIR = Path(heddle.workers.agent.__file__).parent
STEPS: list[dict[str, Any]] = [
    {"output_tokens": 8, "tool_s": 0.5, "tool_output_tokens": 4},
    {"output_tokens": 8, "tool_s": 0.5, "tool_output_tokens": 4},
    {"output_tokens": 8},
]


class Bus:
    """Stores what the agent publishes, in order."""

    def __init__(self) -> None:
        self.messages: list[Event | WorkerCommand | ToolCall] = []

    async def publish(self, message: Event | WorkerCommand | ToolCall) -> None:
        self.messages.append(message)

    async def publish_telemetry(self, telemetry: WorkerTelemetry | WorkerHeartbeat) -> None:
        pass

    async def trajectory_events(self, rollout_id: str, traj_id: str) -> list[EventT]:
        return [m for m in self.messages if isinstance(m, TrajectoryEvent)]  # type: ignore[misc]

    async def put_blob(self, key: str, data: bytes) -> None: ...

    async def get_blob(self, key: str) -> bytes:
        raise KeyError(key)

    async def delete_blob(self, key: str) -> None: ...


@dataclass(frozen=True)
class CommandPath:
    files: list[str]
    """The agent's modules in the order control passes into them (repeats collapsed)."""

    @property
    def num_files(self) -> int:
        return len(set(self.files))

    @property
    def num_returns(self) -> int:
        """Times control came back to a module it had left."""
        return sum(1 for index, name in enumerate(self.files) if name in self.files[:index])


def main() -> None:
    """Print the figures (``python tests/workers/test_agent_command_path.py``)."""
    path = asyncio.run(trace_a_continue())
    print(f"{path.num_files} files, {path.num_returns} returns: {' '.join(path.files)}")


def tool_result(call: ToolCall) -> ToolReturned:
    return ToolReturned(
        event_id=f"{call.call_id}:returned",
        rollout_id=call.rollout_id,
        traj_id=call.traj_id,
        occurred_at=0.0,
        step=call.step,
        call_id=call.call_id,
        tool="trace",
        status="ok",
        output_token_ids=[7, 8, 9, 10],
    )


async def trace_a_continue() -> CommandPath:
    bus = Bus()
    config = WorkerConfig(worker_id="w0", heartbeat_s=3600.0, telemetry_s=3600.0)
    agent = WorkerAgent(
        config,
        SimulatedEngine(SimulatedEngineOptions(time_scale=5000.0)),
        sink=bus,
        history=bus,
        blobs=bus,
    )
    await agent.start()
    spec = TrajectorySpec(
        group_id="g",
        index=0,
        environment="trace",
        task={"id": "t", "prompt_tokens": 8, "steps": STEPS},
    )
    start = StartTrajectory(
        command_id="c0", rollout_id="r", issued_at=0.0, worker_id="w0", traj_id="t", spec=spec
    )
    await agent.handle(start)
    call = next(m for m in bus.messages if isinstance(m, ToolCall))
    result = tool_result(call)
    bus.messages.append(result)
    files: list[str] = []

    def tracer(frame: FrameType, event: str, arg: object) -> None:
        path = Path(frame.f_code.co_filename)
        is_new = not files or files[-1] != path.name
        if event == "call" and path.parent == AGENT_DIR and is_new:
            files.append(path.name)

    sys.settrace(tracer)  # type: ignore[arg-type]
    try:
        await agent.handle(continue_after(result, "w0"))
    finally:
        sys.settrace(None)
    assert sum(isinstance(m, ToolCall) for m in bus.messages) == 2  # rests in its next tool call
    await agent.close()
    return CommandPath(files)


async def test_a_tool_result_to_the_next_generation_passes_few_modules() -> None:
    """12 modules in the order docs/design.md lists (13 before the weight gate joined the
    generation's module), and one decision."""
    path = await asyncio.wait_for(trace_a_continue(), timeout=60)
    first_visits = list(dict.fromkeys(path.files))
    assert first_visits == [
        "agent.py", "commands.py", "table.py", "trajectory_log.py", "decisions.py", "segments.py",
        "steps.py", "records.py", "trajectory_events.py", "publisher.py", "generation.py",
        "caps.py",
    ]  # fmt: skip
    assert path.files.count("decisions.py") == 1


if __name__ == "__main__":
    main()
