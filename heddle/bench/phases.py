"""One measured pass of ``heddle bench bus`` (``Phase``): events, wall time and the CPU time of
this process and of an embedded nats-server, since on a shared machine wall-clock rates also
measure the neighbours; ``measure_chunks`` times a pass chunk by chunk, each prepared first."""

from __future__ import annotations

import functools
import itertools
import os
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from heddle.bus.embedded import RECORD_NAME, read_record
from heddle.config import Settings

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Phase:
    """One measured pass over the benchmark's events."""

    num_events: int
    elapsed_s: float
    client_cpu_s: float
    server_cpu_s: float | None

    @property
    def events_per_s(self) -> float:
        return self.num_events / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        per_event = 1e6 / max(self.num_events, 1)
        return {
            "events": self.num_events,
            "seconds": round(self.elapsed_s, 3),
            "events_per_s": round(self.events_per_s, 1),
            "client_cpu_us_per_event": round(self.client_cpu_s * per_event, 2),
            "server_cpu_us_per_event": (
                None if self.server_cpu_s is None else round(self.server_cpu_s * per_event, 2)
            ),
        }


async def measure_phase(run: Callable[[], Awaitable[int]], server_pid: int | None) -> Phase:
    """Run ``run`` (it returns the events it handled), timing it on the wall clock and in CPU
    time: this process's and, given its pid, the server's."""
    server_before = process_cpu_s(server_pid)
    cpu_before = time.process_time()
    started = time.perf_counter()
    num_events = await run()
    elapsed_s = time.perf_counter() - started
    client_cpu_s = time.process_time() - cpu_before
    server_after = process_cpu_s(server_pid)
    server_cpu_s = (
        None if server_before is None or server_after is None else server_after - server_before
    )
    return Phase(num_events, elapsed_s, client_cpu_s, server_cpu_s)


async def measure_chunks(
    items: Iterator[T],
    chunk_size: int,
    run: Callable[[list[T]], Awaitable[int]],
    server_pid: int | None,
) -> Phase:
    """``run`` on each chunk of ``items`` under a timing of its own, the chunks' phases summed:
    a chunk is taken (built, encoded) from ``items`` before its timing starts, so preparing a
    benchmark's messages does not count as handling them."""
    phases: list[Phase] = []
    while chunk := list(itertools.islice(items, chunk_size)):
        phases.append(await measure_phase(functools.partial(run, chunk), server_pid))
    return Phase(
        sum(phase.num_events for phase in phases),
        sum(phase.elapsed_s for phase in phases),
        sum(phase.client_cpu_s for phase in phases),
        _sum_known([phase.server_cpu_s for phase in phases]),
    )


def _sum_known(values: list[float | None]) -> float | None:
    """The sum, or None when any is unknown (or there are none)."""
    if not values or any(value is None for value in values):
        return None
    return sum(value for value in values if value is not None)


def server_pid_of(settings: Settings) -> int | None:
    """The embedded nats-server's pid (None for a remote server or none running)."""
    if settings.nats_url is not None:
        return None
    record = read_record(settings.data_dir / RECORD_NAME)
    return record.pid if record is not None else None


def process_cpu_s(pid: int | None) -> float | None:
    """User + system CPU seconds of process ``pid`` so far (Linux ``/proc``; None if unknown)."""
    if pid is None:
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
