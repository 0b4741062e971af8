"""The simulated data plane: rollout workers (each a batching model), tool executors and KV
transfers, driven by the control plane's commands on a virtual clock.

It does what a live worker agent does (``heddle.workers.agent``), in model time: runs the step a
command asks for, publishes ``Generated`` then ``ToolCalled`` (or ``Completed``; a recorded run,
``SimConfig.record_events``, also announces each step with ``GenerationStarted`` as a worker does,
so that the recording replays into a ledger like a live stream), returns the tool
result after the trace's tool time, migrates a trajectory in its tool gap (release the KV at the
source, move it over the link, install it at the target) and forwards a command addressed to a
trajectory's old worker to the worker it went to. Future happenings (a worker's next finish, a
tool's return, a transfer's end) are handed to a ``Timer``; the simulator calls back. Weight
swaps and the staleness bound: ``heddle.sim.weight_loads``; re-shards (``Retire``, ``Reshard``):
``heddle.sim.reshards``."""

from __future__ import annotations

from collections.abc import Callable

from heddle.events import (
    Abort,
    ContinueTrajectory,
    Event,
    LoadWeights,
    MigrateOut,
    Preempt,
    Reprioritize,
    Reshard,
    Retire,
    StartTrajectory,
    TrajectoryPhase,
    WorkerCommand,
)
from heddle.policy.batching import BatchingModel, CapacityError, FinishedGeneration
from heddle.sim.accounting import Column
from heddle.sim.config import SimConfig
from heddle.sim.facts import RolloutFacts
from heddle.sim.kv_moves import send_kv, warm_up
from heddle.sim.reshards import Reshards
from heddle.sim.sim_worker import SimWorker, trajectory_generation_job
from heddle.sim.timers import Timer, TimerKind
from heddle.sim.tool_pool import ToolPool
from heddle.sim.trajectories import SimTrajectory
from heddle.sim.weight_loads import WeightLoads, WeightPlan


class SimDataPlane:
    def __init__(
        self,
        rollout_id: str,
        trajectories: dict[str, SimTrajectory],
        workers: dict[str, SimWorker],
        config: SimConfig,
        timer: Timer,
        weight_plan: WeightPlan | None = None,
        make_model: Callable[[int], BatchingModel] | None = None,
    ) -> None:
        """``make_model``: a fresh engine of a TP degree (a re-shard's relaunch; None: the
        workers never re-shard)."""
        self.rollout_id = rollout_id
        self._facts = RolloutFacts(rollout_id)
        self.trajectories = trajectories
        self.workers = workers
        self._config = config
        self._timer = timer
        self._tools = ToolPool(config.num_warm_executors, config.tool_cold_start_s)
        self._dirty: set[str] = set()
        self.weights = WeightLoads(workers, config.weight_load_s_for_tp, timer, weight_plan)
        self.reshards = Reshards(rollout_id, trajectories, workers, config, timer, make_model)

    # ---- commands ------------------------------------------------------------------------------

    def sent(self, command: WorkerCommand, now: float) -> None:
        """The control plane sent ``command`` at ``now``; it arrives later (``apply``). A
        trajectory waiting for it is in the ``control`` column meanwhile."""
        t = self._runs(command)
        if t is not None:
            t.num_commands_in_flight += 1
            t.file_wait(now)

    def apply(self, command: WorkerCommand, now: float, *, was_sent: bool = False) -> list[Event]:
        """Carry out one command at ``now``; the events it causes at once. ``was_sent``: it
        was announced to ``sent`` when the control plane sent it."""
        if isinstance(command, LoadWeights):
            return self.weights.command(command, now)
        if isinstance(command, Retire | Reshard):
            self._dirty.add(command.worker_id)
            return self.reshards.command(command, self._finished, now)
        if was_sent and (runs := self._runs(command)) is not None:
            runs.num_commands_in_flight -= 1
            runs.file_wait(now)
        t = self.trajectories.get(getattr(command, "traj_id", ""))
        if t is None or t.phase is TrajectoryPhase.DONE:
            return []
        match command:
            case StartTrajectory():
                return self._start(t, command, now)
            case ContinueTrajectory():
                if command.step != t.step:
                    return []  # a duplicate or a stale command
                t.priority = command.priority
                if t.phase is TrajectoryPhase.MIGRATING:
                    t.wants_next_step = True
                    return []
                return self._submit(t, now) if t.phase is TrajectoryPhase.READY else []
            case Reprioritize():
                t.priority = command.priority
                if t.phase is TrajectoryPhase.GENERATING:
                    self._worker_of(t).model.set_priority(t.request_id, t.priority, now)
                    self._dirty.add(t.worker_id)
                return []
            case MigrateOut():
                return self._migrate_out(t, command, now)
            case Preempt():
                if t.phase is TrajectoryPhase.GENERATING:
                    self._worker_of(t).model.preempt(t.request_id, now)
                    self._dirty.add(t.worker_id)
                return []
            case Abort():
                return self._fail(t, f"aborted: {command.reason}", now)
        return []

    def _start(self, t: SimTrajectory, command: StartTrajectory, now: float) -> list[Event]:
        t.priority = command.priority
        if command.worker_id not in self.workers:
            return []
        if t.phase is TrajectoryPhase.MIGRATING:
            t.wants_next_step = True  # the step runs where the transfer lands
            return []
        if t.phase is TrajectoryPhase.GENERATING:  # re-placed mid-step: the step starts over there
            self._worker_of(t).model.abort(t.request_id, now)
            self._dirty.add(t.worker_id)
            t.phase = TrajectoryPhase.READY
            t.account.abandon(now, Column.HELD)
        t.move_to(command.worker_id)
        t.epoch = command.epoch
        if t.phase in (TrajectoryPhase.PENDING, TrajectoryPhase.READY):
            return self._submit(t, now)
        return []  # in a tool call: the step runs here once the result is routed

    def _submit(self, t: SimTrajectory, now: float) -> list[Event]:
        if t.worker_id not in self.workers:
            return []  # its worker retired: it waits for its hand-over (``heddle.sim.reshards``)
        if self.reshards.hold(t, now) or self.weights.hold(t):
            t.file_wait(now)
            return []
        t.is_waiting_for_weights = False  # a hold elsewhere ended with its move here
        t.is_waiting_for_reshard = False
        if (stale := self.weights.take_version(t)) is not None:
            return self._fail(t, stale, now)
        worker = self._worker_of(t)
        t.num_requests += 1
        request_id = f"{t.traj_id}:{t.step}:{t.num_requests}"
        num_output_tokens = t.trace.steps[t.step].output_tokens - t.interrupted_tokens
        job = trajectory_generation_job(t, request_id, t.new_tokens, num_output_tokens)
        try:
            worker.model.submit(job, now)
        except CapacityError as exc:
            return self._fail(t, str(exc), now)
        t.request_id = request_id
        t.phase = TrajectoryPhase.GENERATING
        t.account.enter(Column.ENGINE, now)
        self._dirty.add(worker.worker_id)
        if not self._config.record_events or t.num_announced > t.step:
            return []
        t.num_announced = t.step + 1
        return [self._facts.generation_started(t, now)]

    def _fail(self, t: SimTrajectory, reason: str, now: float) -> list[Event]:
        if t.phase is TrajectoryPhase.GENERATING:
            self._worker_of(t).model.abort(t.request_id, now)
            self._dirty.add(t.worker_id)
            t.account.abandon(now, None)
        elif t.account.column is Column.TOOL:
            t.account.enter(None, now)
            t.file_cold_start()
        else:
            t.account.enter(None, now)
        t.phase = TrajectoryPhase.DONE
        t.finished_at = now
        self.weights.start_if_drained(t.worker_id, now)
        return [self._facts.failed(t, reason, now)]

    # ---- timers ----------------------------------------------------------------------------------

    def wake(self, worker_id: str, now: float) -> list[Event]:
        """A worker's generations finished: publish their steps."""
        worker = self.workers[worker_id]
        worker.wake_at = None
        self._dirty.add(worker_id)
        events = self._finished(worker, worker.model.advance(now), now)
        self.weights.start_if_drained(worker_id, now)
        return events

    def _finished(
        self, worker: SimWorker, finishes: list[FinishedGeneration], now: float
    ) -> list[Event]:
        events: list[Event] = []
        for done in finishes:
            t = self.trajectories[done.traj_id]
            if t.request_id == done.request_id and t.phase is TrajectoryPhase.GENERATING:
                events += self._finish_step(t, worker, done)
            elif t.warmup_request_id == done.request_id:
                t.warmup_request_id = ""
                t.num_recomputed_tokens += done.num_recomputed_tokens
                events += self.transfer_done(t.traj_id, now)
        return events

    def weights_loaded(self, worker_id: str, now: float) -> list[Event]:
        """A worker's swap ended: the held generations that still run there go in."""
        events, held = self.weights.swap(worker_id, now)
        return events + [event for t in held for event in self._submit(t, now)]

    def _finish_step(
        self, t: SimTrajectory, worker: SimWorker, done: FinishedGeneration
    ) -> list[Event]:
        t.account.settle(done, done.finished_at, None if t.is_last_step else Column.TOOL)
        t.num_output_tokens += done.num_output_tokens
        t.num_preemptions += done.num_preemptions
        t.num_recomputed_tokens += done.num_recomputed_tokens
        t.context_tokens = done.num_context_tokens
        t.new_tokens = 0
        now = done.finished_at
        events: list[Event] = [self._facts.generated(t, done, t.take_weights_wait_s())]
        t.interrupted_tokens = 0
        if t.is_last_step:
            t.phase = TrajectoryPhase.DONE
            t.finished_at = now
            worker.model.release(t.traj_id)
            events.append(self._facts.completed(t))
            return events
        t.phase = TrajectoryPhase.IN_TOOL
        t.tool_cold_start_s = self._tools.acquire()
        t.tool_duration_s = t.trace.steps[t.step].tool_s + t.tool_cold_start_s
        events.append(self._facts.tool_called(t, now))
        self._timer.at(now + t.tool_duration_s, TimerKind.TOOL, t.traj_id)
        if t.pending_migration is not None:
            command, t.pending_migration = t.pending_migration, None
            events += self._migrate_out(t, command, now)
        return events

    def tool_done(self, traj_id: str, now: float) -> list[Event]:
        t = self.trajectories[traj_id]
        self._tools.release()
        if t.phase is TrajectoryPhase.DONE:
            return []
        step = t.step
        observation = t.trace.steps[step].tool_output_tokens
        t.step += 1
        t.context_tokens += observation
        t.new_tokens = observation
        t.tool_returned_at = now
        if t.phase is TrajectoryPhase.MIGRATING:
            t.has_tool_returned = True
            t.account.enter(Column.MIGRATION, now)
        else:
            t.phase = TrajectoryPhase.READY
            t.file_wait(now)
        t.file_cold_start()
        # The tool's own time, as a live executor reports it (a cold start is queueing).
        tool_s = t.trace.steps[step].tool_s
        return [self._facts.tool_returned(t, step, tool_s, now)]

    # ---- migrations ------------------------------------------------------------------------------

    def _migrate_out(self, t: SimTrajectory, command: MigrateOut, now: float) -> list[Event]:
        if command.target_worker_id not in self.workers or t.phase is TrajectoryPhase.MIGRATING:
            return []
        if t.phase in (TrajectoryPhase.PENDING, TrajectoryPhase.GENERATING):
            t.pending_migration = command  # leaves at its next tool gap
            return []
        t.migration_target = command.target_worker_id
        t.migration_target_epoch = command.target_epoch
        t.migration_started_at = now
        t.has_tool_returned = t.phase is TrajectoryPhase.READY
        t.wants_next_step = False
        t.phase = TrajectoryPhase.MIGRATING
        if t.has_tool_returned:
            t.account.enter(Column.MIGRATION, now)
        if command.transfer_kv and self._config.engine.kv_transfer:
            t.migration_kv_version = self.weights.workers[t.worker_id].version
            send_kv(t, self._worker_of(t), self._config, self._timer, now)
            return []
        target = self.workers[t.migration_target]
        is_swapping = self.weights.workers[target.worker_id].is_holding
        if warm_up(t, target, is_swapping, self._timer, now):
            self._dirty.add(target.worker_id)
        return []

    def transfer_done(self, traj_id: str, now: float) -> list[Event]:
        t = self.trajectories[traj_id]
        if t.phase is not TrajectoryPhase.MIGRATING:
            return []
        target = self.workers[t.migration_target]
        if t.migration_tokens and self.weights.accepts_kv(target.worker_id, t.migration_kv_version):
            target.model.import_cache(t.traj_id, t.migration_tokens, now)
            self._dirty.add(target.worker_id)
        source_id = t.worker_id
        num_bytes = t.migration_tokens * self._config.kv_bytes_per_token
        events: list[Event] = [self._facts.migrated(t, source_id, num_bytes, now)]
        t.move_to(target.worker_id)
        t.epoch = t.migration_target_epoch
        t.num_migrations += 1
        if t.has_tool_returned:
            t.phase = TrajectoryPhase.READY
            t.file_wait(now)
            if t.wants_next_step:
                events += self._submit(t, now)
        else:
            t.phase = TrajectoryPhase.IN_TOOL
        t.has_tool_returned = t.wants_next_step = False
        return events

    # ---- re-shards ------------------------------------------------------------------------------

    def retired_at(self, worker_id: str, now: float) -> list[Event]:
        """A retiring member's engine has stopped: it leaves (``heddle.sim.reshards``)."""
        self._dirty.discard(worker_id)
        return self.reshards.retire(worker_id, now)

    def relaunched(self, worker_id: str, now: float) -> list[Event]:
        """A re-shard's leader is up at its new degree."""
        self._dirty.add(worker_id)
        return self.reshards.relaunched(worker_id, self._submit, now)

    # ---- wake-ups --------------------------------------------------------------------------------

    def schedule_wakeups(self) -> None:
        """Re-arm the timers of workers whose engines changed (call after each cascade, so that
        requests submitted at one instant share an admission)."""
        for worker_id in sorted(self._dirty):
            worker = self.workers.get(worker_id)
            if worker is None:
                continue  # retired
            at = worker.model.next_event_time()
            if at != worker.wake_at:
                worker.wake_at = at
                if at is not None:
                    self._timer.at(at, TimerKind.WAKE, worker_id)
        self._dirty.clear()

    def is_due(self, worker_id: str, time_s: float) -> bool:
        """Whether a worker wake-up at ``time_s`` is still the armed one (none for a worker
        that retired)."""
        worker = self.workers.get(worker_id)
        return worker is not None and worker.wake_at == time_s

    def _worker_of(self, t: SimTrajectory) -> SimWorker:
        return self.workers[t.worker_id]

    # ---- accounting ------------------------------------------------------------------------------

    def _runs(self, command: WorkerCommand) -> SimTrajectory | None:
        """The trajectory a start or continue command would run (None for other commands)."""
        if not isinstance(command, (StartTrajectory, ContinueTrajectory)):
            return None
        t = self.trajectories.get(command.traj_id)
        return None if t is None or t.phase is TrajectoryPhase.DONE else t
