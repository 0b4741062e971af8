"""The discrete-event simulator: the control plane's deciders and a simulated data plane on a
virtual clock.

One heap of timed happenings (a worker's next finish, a tool's return, a transfer's end) drives
the data plane; every event it publishes goes through the deciders of the system bundle
(``heddle.control.systems``) in a FIFO cascade at that instant: an event is delivered to each
decider that handles it, in bundle order, behind the bundle's output gate
(``heddle.control.output_gate``, as in a live control plane); the events they emit join the
cascade, and the commands they emit reach the data plane after the control plane's modelled
latency (``heddle.sim.command_delays``; at once when it is zero). So the deciders see events in
time order, exactly as the live consumers see the stream. After each cascade the workers whose
engines changed re-arm their timers, so requests submitted at one instant share an admission.
With a ``WeightPlan`` the trainer's ``WeightsPublished`` land at their times and the weights
decider (``heddle.control.weights``) runs beside the bundle; once every trajectory has finished,
the rollout is over and weight timers still pending are left (``Run.weights`` holds the loads in
progress).

Deterministic: the heap breaks time ties by insertion order, deciders and the data plane iterate
in insertion order, and all randomness comes from the seed.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from heddle.control.bundle import DeciderBundle
from heddle.control.decider import Decider, dispatch_table
from heddle.control.weights import WeightsDecider
from heddle.events import (
    Completed,
    Event,
    Failed,
    RolloutFinished,
    RolloutSubmitted,
    TrajectoryPhase,
    TrajectorySubmitted,
    WeightSource,
    WeightsPublished,
    WorkerCommand,
)
from heddle.ids import derive_id
from heddle.policy.batching import BatchingConfig, BatchingModel
from heddle.policy.resources.nodes import pack_nodes
from heddle.sim import facts
from heddle.sim.command_delays import CommandDelays
from heddle.sim.config import SimConfig
from heddle.sim.dataplane import SimDataPlane
from heddle.sim.sim_worker import SimWorker
from heddle.sim.timers import TimerKind
from heddle.sim.trajectories import SimTrajectory, build_trajectories
from heddle.sim.weight_loads import WeightLoads, WeightPlan
from heddle.traces import TraceTrajectory

ROLLOUT_ID = "sim"

ProgressCallback = Callable[[float], None]
"""Called with the fraction of trajectories finished (for progress bars)."""


class SimulationError(RuntimeError):
    """The simulation stopped with trajectories unfinished (a bug in a decider or the model)."""


@dataclass(frozen=True, slots=True)
class Run:
    """What one simulated rollout leaves behind (``heddle.sim.results`` summarises it)."""

    trajectories: list[SimTrajectory]
    workers: list[SimWorker]
    """Every worker of the rollout, those a re-shard retired last."""
    makespan_s: float
    active_over_time: list[tuple[float, int]]
    """(time, trajectories not yet finished) after every completion, starting at (0, n)."""
    events: list[Event]
    """Every event in dispatch order (only with ``SimConfig.record_events``)."""
    num_events: int
    weights: WeightLoads
    """The workers' weight versions, loads and their costs at the end of the rollout."""
    num_reshards: int = 0
    """Engines relaunched at a higher TP degree (``heddle.sim.reshards``)."""


class Simulator:
    """One rollout of ``trace`` under one control plane on the given workers."""

    def __init__(
        self,
        trace: Sequence[TraceTrajectory],
        control: DeciderBundle,
        tp_degrees: Sequence[int],
        config: SimConfig,
        weight_plan: WeightPlan | None = None,
    ) -> None:
        if not trace:
            raise ValueError("the trace holds no trajectories")
        if not tp_degrees:
            raise ValueError("no workers: the resource plan is empty")
        self._config = config
        self._control = control
        # The bundle's deciders behind its output gate; the weights decider is the trainer's
        # side, outside any bundle (as in a live control plane).
        bundle = control.gated()
        units: list[Decider] = [bundle] if weight_plan is None else [bundle, WeightsDecider()]
        self._table = dispatch_table(units)
        self._heap: list[tuple[float, int, TimerKind, str]] = []
        self._sequence = 0
        # A plan may leave GPUs unused, never take more; a recorded cluster's degrees may sum
        # past a default budget, so the budget is at least what they take.
        nodes = pack_nodes(tp_degrees, max(config.num_gpus, sum(tp_degrees)), config.gpus_per_node)
        workers = {
            f"w{index:02d}": SimWorker(
                f"w{index:02d}",
                tp,
                self._make_model(tp),
                node=node.node,
                gpu_ids=node.gpu_ids,
            )
            for index, (tp, node) in enumerate(zip(tp_degrees, nodes, strict=True))
        }
        self._trajectories = build_trajectories(trace)
        self._dataplane = SimDataPlane(
            ROLLOUT_ID, self._trajectories, workers, config, self, weight_plan, self._make_model
        )
        self._due_versions: list[int] = []
        """Publications due at the start: they land before any trajectory is submitted."""
        for time_s, version in weight_plan.publications if weight_plan else ():
            if time_s > 0:
                self.at(time_s, TimerKind.PUBLISH, str(version))
            else:
                self._due_versions.append(version)
        self._delays = CommandDelays(
            config.control_latency_p50_ms, config.control_latency_p99_ms, config.seed
        )
        self._in_flight: dict[str, WorkerCommand] = {}
        """Commands sent and not yet arrived, by their timer key."""
        self._events: list[Event] = []
        self._num_events = 0
        self._num_active = len(self._trajectories)
        self._active: list[tuple[float, int]] = [(0.0, self._num_active)]
        self._makespan_s = 0.0
        self._now = 0.0

    def _make_model(self, tp_degree: int) -> BatchingModel:
        """A fresh engine of ``tp_degree`` GPUs (at start, and a re-shard's relaunch)."""
        return BatchingModel(self._config.cost_for_tp(tp_degree), self._engine_config())

    def _engine_config(self) -> BatchingConfig:
        return replace(
            self._control.engine,
            max_running=self._config.max_running,
            record_timeline=self._config.record_worker_timelines,
        )

    @property
    def recorded_events(self) -> list[Event]:
        """The events dispatched so far (with ``SimConfig.record_events``), in order."""
        return self._events

    def at(self, time_s: float, kind: TimerKind, key: str) -> None:
        """Timer: call back at ``time_s`` (the data plane's future happenings)."""
        self._sequence += 1
        heapq.heappush(self._heap, (time_s, self._sequence, kind, key))

    def run(self, progress: ProgressCallback | None = None) -> Run:
        self._publish(self._opening_events())
        self._dataplane.schedule_wakeups()
        total = len(self._trajectories)
        reported = total
        while self._heap:
            time_s, _, kind, key = heapq.heappop(self._heap)
            if kind >= TimerKind.PUBLISH and not self._num_active:
                continue  # the rollout is over
            self._now = time_s
            if kind is TimerKind.WAKE:
                if not self._dataplane.is_due(key, time_s):
                    continue
                events = self._dataplane.wake(key, time_s)
            elif kind is TimerKind.TOOL:
                events = self._dataplane.tool_done(key, time_s)
            elif kind is TimerKind.TRANSFER:
                events = self._dataplane.transfer_done(key, time_s)
            elif kind is TimerKind.WEIGHTS:
                events = self._dataplane.weights_loaded(key, time_s)
            elif kind is TimerKind.COMMAND:
                command = self._in_flight.pop(key)
                events = self._dataplane.apply(command, time_s, was_sent=True)
            elif kind is TimerKind.RELAUNCH:
                events = self._dataplane.relaunched(key, time_s)
            elif kind is TimerKind.RETIRE:
                events = self._dataplane.retired_at(key, time_s)
            else:
                events = [published(int(key), time_s)]
            if events:
                self._publish(events)
            self._dataplane.schedule_wakeups()
            if progress is not None and self._num_active != reported:
                reported = self._num_active
                progress(1.0 - reported / total)
        self._check_finished()
        return Run(
            trajectories=list(self._trajectories.values()),
            workers=[*self._dataplane.workers.values(), *self._dataplane.reshards.retired.values()],
            makespan_s=self._makespan_s,
            active_over_time=self._active,
            events=self._events,
            num_events=self._num_events,
            weights=self._dataplane.weights,
            num_reshards=self._dataplane.reshards.num_relaunches,
        )

    def _opening_events(self) -> list[Event]:
        config = self._config
        events: list[Event] = [
            facts.worker_registered(worker, config.model, config.max_running, 0.0)
            for worker in self._dataplane.workers.values()
        ]
        events += [published(version, 0.0) for version in self._due_versions]
        events.append(
            RolloutSubmitted(
                event_id=derive_id(ROLLOUT_ID, "submitted"),
                rollout_id=ROLLOUT_ID,
                occurred_at=0.0,
                policy=self._control.spec.name,
                num_trajectories=len(self._trajectories),
                source="sim",
            )
        )
        events += [
            TrajectorySubmitted(
                event_id=derive_id(ROLLOUT_ID, t.traj_id, "submitted"),
                rollout_id=ROLLOUT_ID,
                occurred_at=0.0,
                traj_id=t.traj_id,
                spec=t.spec,
            )
            for t in self._trajectories.values()
        ]
        return events

    def _publish(self, events: list[Event]) -> None:
        """Deliver events (and what they cause) at the current instant, FIFO."""
        queue = deque(events)
        table = self._table
        record = self._config.record_events
        apply = self._dataplane.apply
        while queue:
            event = queue.popleft()
            self._num_events += 1
            if record:
                self._events.append(event)
            if isinstance(event, (Completed, Failed, RolloutFinished)):
                self._observe(event)
            for decider in table.get(type(event), ()):
                for output in decider.decide(event):
                    if not isinstance(output, WorkerCommand):
                        queue.append(output)
                    elif self._delays.is_instant:
                        queue.extend(apply(output, self._now))
                    else:
                        self._send(output)

    def _send(self, command: WorkerCommand) -> None:
        """The command leaves the control plane now and reaches the data plane after its
        delay (``heddle.sim.command_delays``)."""
        key = str(self._sequence + 1)
        self._in_flight[key] = command
        arrival_s = self._delays.arrival_s(command.command_id, command.worker_id, self._now)
        self.at(arrival_s, TimerKind.COMMAND, key)
        self._dataplane.sent(command, self._now)

    def _observe(self, event: Event) -> None:
        if isinstance(event, RolloutFinished):
            self._makespan_s = event.makespan_s
            return
        self._num_active -= 1
        self._active.append((event.occurred_at, self._num_active))

    def _check_finished(self) -> None:
        stuck = [t for t in self._trajectories.values() if t.phase is not TrajectoryPhase.DONE]
        if stuck:
            sample = ", ".join(f"{t.traj_id} ({t.phase.value}, step {t.step})" for t in stuck[:5])
            raise SimulationError(
                f"{len(stuck)} trajectories never finished under {self._control.spec.name}: "
                f"{sample}"
            )


def published(version: int, now: float) -> WeightsPublished:
    """The trainer's publication of ``version`` (the simulated workers load it from anywhere)."""
    return WeightsPublished(
        event_id=derive_id("weights", version, "published"),
        occurred_at=now,
        weight_version=version,
        source=WeightSource(kind="path", path=f"/sim/weights/v{version}"),
        publisher="sim",
    )
