"""``TrajectoryCap``: the ``Admission`` of a baseline whose own rollout code bounds how many
trajectories run at once (``heddle.control.systems.ConcurrencyControl``).

Its source: slime wraps a whole multi-turn sample in one semaphore (``THUDM/slime``
``slime/rollout/sglang_rollout.py``: ``generate_and_rm`` generates under ``async with
state.semaphore``, which ``GenerateState`` sizes ``sglang_server_concurrency`` times the number of
engines, ``get_rollout_num_engines``), so a sample holds its slot through every turn and tool call
and releases it when its last turn ends; the samples of a step wait for slots in the order their
tasks were created (submission order). verl's fully asynchronous rollouter bounds the prompts in
flight instead (``verl/experimental/fully_async_policy/fully_async_rollouter.py``: a new sample
waits while ``len(active_tasks) >= max_concurrent_samples``, ``concurrent_samples_per_replica``
times the replicas, and a sample is a prompt repeated ``rollout.n`` times that holds its slot
until its whole group is done): the unit is then a GRPO group (``per_group``).

So: planned trajectories wait in plan order (the submission order); while fewer than the cap's
units run, the head starts (with the rest of its group, ``per_group``); a unit's slot frees when
its last trajectory ends. The cap is a total (``max_running``) or, as the two codes state it, a
number per worker (``per_worker`` times the workers registered). Where a trajectory starts is its
placer's choice at that moment: a router sees the loads when the sample's first request goes out.
Trajectories are never paused once started and no step is held.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from heddle.control.placement.admission import AdmissionRequest, Admitted, IgnoresProgress, Key

Unit = tuple[str, str]
"""What holds one slot: ``(rollout id, trajectory id)``, or ``(rollout id, "group:" + group id)``
per group."""


@dataclass(frozen=True, slots=True)
class CapConfig:
    """A concurrency cap: ``max_running`` units in all, or ``per_worker`` per registered worker
    (exactly one is positive)."""

    max_running: int = 0
    per_worker: int = 0
    per_group: bool = False
    """The unit is a GRPO group (verl's fully-async samples), else a trajectory (slime's)."""

    def __post_init__(self) -> None:
        if self.max_running < 0 or self.per_worker < 0:
            raise ValueError("a concurrency cap must be >= 0")
        if (self.max_running > 0) == (self.per_worker > 0):
            raise ValueError("give exactly one of max_running and per_worker")

    def limit(self, num_workers: int) -> int:
        """The cap with ``num_workers`` registered (at least one unit runs)."""
        return max(1, self.max_running or self.per_worker * num_workers)


class TrajectoryCap(IgnoresProgress):
    """Starts planned trajectories in plan order while fewer than the cap's units run."""

    def __init__(self, config: CapConfig) -> None:
        self._config = config
        self._workers: set[str] = set()
        self._waiting: deque[tuple[Key, str | None, Unit]] = deque()
        self._members: dict[Unit, set[Key]] = {}
        """Per running unit, its trajectories not yet ended."""
        self._unit_of: dict[Key, Unit] = {}

    @property
    def num_running(self) -> int:
        """Units holding a slot."""
        return len(self._members)

    def add_worker(self, worker_id: str, max_kv_tokens: int) -> None:
        self._workers.add(worker_id)

    def remove_worker(self, worker_id: str) -> None:
        self._workers.discard(worker_id)

    def plan(self, request: AdmissionRequest) -> None:
        rollout_id, traj_id = request.key
        unit = (
            (rollout_id, f"group:{request.group_id}")
            if self._per_group(request)
            else (
                rollout_id,
                traj_id,
            )
        )
        self._waiting.append((request.key, request.planned_worker_id, unit))

    def admit(self, live_workers: Iterable[str]) -> list[Admitted]:
        limit = self._config.limit(len(self._workers))
        started: list[Admitted] = []
        while self._waiting:
            key, worker_id, unit = self._waiting[0]
            if unit not in self._members and len(self._members) >= limit:
                break
            self._waiting.popleft()
            self._members.setdefault(unit, set()).add(key)
            self._unit_of[key] = unit
            started.append(Admitted(key, worker_id))
        return started

    def finished(self, key: Key) -> None:
        unit = self._unit_of.pop(key, None)
        if unit is None:
            self._waiting = deque(entry for entry in self._waiting if entry[0] != key)
            return
        members = self._members[unit]
        members.discard(key)
        if not members:
            del self._members[unit]

    def snapshot(self) -> object:
        waiting = [(key, worker_id) for key, worker_id, _ in self._waiting]
        running = {unit: frozenset(keys) for unit, keys in self._members.items()}
        return waiting, running

    def _per_group(self, request: AdmissionRequest) -> bool:
        return self._config.per_group and bool(request.group_id)
