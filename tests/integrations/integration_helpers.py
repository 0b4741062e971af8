"""Trace tasks whose trajectories are known in advance (how many tokens each generation
produces, how many tool tokens come back between them), and aborting trajectories through the
operations service."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec

from heddle.bus import Bus, BusOptions, ReplayQuery
from heddle.bus.micro import request
from heddle.config import Settings
from heddle.controlplane.operations import ops_subject
from heddle.events.subjects import trajectory_subjects


def trace_task(
    name: str, outputs: list[int], tool_tokens: int = 5, tool_s: float = 0.5
) -> dict[str, Any]:
    """A ``trace`` task: generations of ``outputs`` tokens with ``tool_tokens`` tool tokens
    (``tool_s`` model seconds of tool) after each but the last."""
    steps = [
        {"output_tokens": n, "tool_s": tool_s if i < len(outputs) - 1 else 0.0,
         "tool_output_tokens": tool_tokens if i < len(outputs) - 1 else 0}
        for i, n in enumerate(outputs)
    ]  # fmt: skip
    return {"id": name, "group": name, "prompt_tokens": 12, "steps": steps}


def expected_loss_mask(outputs: list[int], tool_tokens: int = 5) -> list[int]:
    mask: list[int] = []
    for i, n in enumerate(outputs):
        mask += [1] * n
        if i < len(outputs) - 1:
            mask += [0] * tool_tokens
    return mask


async def abort_when_started(settings: Settings, traj_ids: list[str]) -> str:
    """Abort ``traj_ids`` (of whichever rollout runs them) through the operations service once
    each has started generating; the rollout's id."""
    async with Bus(settings, BusOptions(name="test-aborter")) as bus:
        rollout_id = ""
        for traj_id in traj_ids:
            query = ReplayQuery(
                filter_subjects=trajectory_subjects("*", traj_id, "generation_started"),
                start_sequence=1,
            )
            for _ in range(2400):
                records = [r async for r in bus.replay_events(query)]
                if records:
                    rollout_id = records[0].message.rollout_id
                    break
                await asyncio.sleep(0.025)
            body = msgspec.json.encode({"rollout_id": rollout_id, "traj_id": traj_id})
            await request(bus, ops_subject("trajectory.abort"), body)
        return rollout_id
