"""The control plane a rollout runs on, seen from a client: make sure one has run on this NATS
before attaching (``require_control_plane``), and refuse to start a second one on a data dir
whose control plane is alive (``refuse_second_control_plane``). Submitting and cancelling go
through its operations service (``heddle.rollout.submit``).
"""

from __future__ import annotations

import time
from pathlib import Path

from heddle.bus import Bus
from heddle.bus.embedded import is_alive
from heddle.controlplane import PLANE, ControlPlaneConfig, read_status
from heddle.errors import UserError
from heddle.events.subjects import EVENTS_STREAM

_STALE_STATUS_S = 10.0
"""A status file older than this belongs to a control plane that stopped (it rewrites it every
second)."""


def refuse_second_control_plane(data_dir: Path, config: ControlPlaneConfig) -> None:
    """``UserError`` when a live control plane already runs on ``data_dir`` (its status file is
    fresh and its process alive); isolated runs with durables of their own pass."""
    status = read_status(data_dir)
    if status is None or config.host.durable_prefix != "control":
        return  # isolated runs (compare) use durables of their own
    if time.time() - status.updated_at < _STALE_STATUS_S and is_alive(status.pid):
        raise UserError(
            f"a control plane is already running on {data_dir} (pid {status.pid}): "
            "attach to it with --attach, or stop it first"
        )


async def require_control_plane(bus: Bus) -> None:
    """``UserError`` unless a control plane has run on this NATS (its durable exists)."""
    durable = f"control-{PLANE}"
    if await bus.consumer_state(EVENTS_STREAM, durable) is None:
        raise UserError(
            f"no control plane has run on this NATS (durable {durable} missing): "
            "start `heddle up` first, or drop --attach"
        )
