"""Re-shards in the simulated data plane (``heddle.control.reshard`` decides them).

``Retire``: the member's engine stops (``BatchingModel.stop``: a prefill in flight is cut short);
the generations that finished by then are reported as usual, every other one is interrupted with
the output it produced so far (``interrupt``: ``GenerationInterrupted``, its tokens kept in the
trajectory's context), and the worker leaves with ``WorkerRetired`` (a step that becomes ready
meanwhile waits for the hand-over); the placement decider then sends its trajectories to the
leader. Stopping takes no time of its own here: the member's stop is
counted in the leader's relaunch (``SimConfig.engine_restart_s``).

``Reshard``: the leader's engine stops the same way and relaunches at the new degree, a fresh
batching model with no cache, ready ``engine_restart_s`` plus the new degree's weight load later.
A step submitted meanwhile waits for it (the ``reshard`` column of ``heddle.sim.accounting``,
like the wait of an interrupted step for its hand-over); then the worker registers again and
every waiting step goes in, re-prefilling its context (the batching model counts that prefill
as recomputed: the KV died with the old engines). An interrupted step generates only the rest
of its output after the relaunch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from heddle.events import Event, Reshard, Retire, TrajectoryPhase
from heddle.policy.batching import BatchingModel, FinishedGeneration
from heddle.sim import facts
from heddle.sim.accounting import Column
from heddle.sim.config import SimConfig
from heddle.sim.facts import RolloutFacts
from heddle.sim.sim_worker import SimWorker
from heddle.sim.timers import Timer, TimerKind
from heddle.sim.trajectories import SimTrajectory

Finish = Callable[[SimWorker, list[FinishedGeneration], float], list[Event]]
"""The data plane's handling of generations that finished (steps published, warm-ups landed)."""
Submit = Callable[[SimTrajectory, float], list[Event]]
"""The data plane's submission of a trajectory's next step."""


def interrupt(t: SimTrajectory, part: FinishedGeneration) -> None:
    """Keep what the interrupted generation of ``t``'s step produced; the step is ready to run
    the rest wherever ``t`` goes next, and waits for the re-shard until then."""
    t.account.settle(part, part.finished_at, Column.RESHARD)
    t.is_waiting_for_reshard = True
    t.num_output_tokens += part.num_output_tokens
    t.num_preemptions += part.num_preemptions
    t.num_recomputed_tokens += part.num_recomputed_tokens
    t.interrupted_tokens += part.num_output_tokens
    t.context_tokens = part.num_context_tokens
    t.new_tokens = 0  # the step's input was sent; the next engine re-prefills the rest
    t.request_id = ""
    t.phase = TrajectoryPhase.READY


@dataclass(slots=True)
class _Relaunch:
    ready_at: float
    held: dict[str, SimTrajectory] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class _Retiring:
    command: Retire
    at: float
    """Its engine's stop: when it leaves."""


class Reshards:
    """Workers retiring and relaunching (owned by the simulated data plane)."""

    def __init__(
        self,
        rollout_id: str,
        trajectories: dict[str, SimTrajectory],
        workers: dict[str, SimWorker],
        config: SimConfig,
        timer: Timer,
        make_model: Callable[[int], BatchingModel] | None,
    ) -> None:
        self._facts = RolloutFacts(rollout_id)
        self._trajectories = trajectories
        self._workers = workers
        self._config = config
        self._timer = timer
        self._make_model = make_model
        self._relaunching: dict[str, _Relaunch] = {}
        self._retiring: dict[str, _Retiring] = {}
        self.retired: dict[str, SimWorker] = {}
        """Workers that left for a re-shard."""
        self.num_relaunches = 0

    def command(self, command: Retire | Reshard, finish: Finish, now: float) -> list[Event]:
        """Stop the worker's engine, then retire it (at its stop) or relaunch it."""
        worker = self._workers.get(command.worker_id)
        if worker is None or worker.worker_id in self._retiring:
            return []
        reason = f"{type(command).action}: {command.reshard_id}"
        finished, interrupted = self._stop_engine(worker, reason, now)
        events = finish(worker, finished, now) + interrupted
        if isinstance(command, Retire):
            self._retiring[worker.worker_id] = _Retiring(command, now)
            self._timer.at(now, TimerKind.RETIRE, worker.worker_id)
            return events
        self._relaunch(worker, command, now)
        return events

    def hold(self, t: SimTrajectory, now: float) -> bool:
        """Whether ``t``'s next step must wait: its worker leaves (the hand-over submits it
        where it goes) or relaunches (then it is held until the engine is up)."""
        relaunch = self._relaunching.get(t.worker_id)
        if relaunch is None and t.worker_id not in self._retiring:
            return False
        t.is_waiting_for_reshard = True
        if relaunch is not None:
            relaunch.held[t.traj_id] = t
        return True

    def retire(self, worker_id: str, now: float) -> list[Event]:
        """The member's engine has stopped: it leaves, handing its trajectories over."""
        retiring = self._retiring.pop(worker_id)
        worker = self._workers.pop(worker_id)
        self.retired[worker_id] = worker
        command = retiring.command
        hosted = [t.traj_id for t in self._hosted(worker_id)]
        successor = command.successor_worker_id
        return [facts.worker_retired(worker, command.reshard_id, successor, hosted, now)]

    def relaunched(self, worker_id: str, submit: Submit, now: float) -> list[Event]:
        """A re-shard's leader is up at its new degree: register it, run the held steps."""
        worker = self._workers[worker_id]
        config = self._config
        events: list[Event] = [
            facts.worker_registered(worker, config.model, config.max_running, now)
        ]
        relaunch = self._relaunching.pop(worker_id)
        for t in relaunch.held.values():
            if t.worker_id == worker_id and t.phase in (
                TrajectoryPhase.PENDING,
                TrajectoryPhase.READY,
            ):
                events += submit(t, now)
        return events

    # ---- internals ---------------------------------------------------------------------------

    def _stop_engine(
        self, worker: SimWorker, reason: str, now: float
    ) -> tuple[list[FinishedGeneration], list[Event]]:
        finished, interrupted = worker.model.stop(now)
        worker.wake_at = None
        events: list[Event] = []
        for part in interrupted:
            t = self._trajectories[part.traj_id]
            if t.request_id != part.request_id or t.phase is not TrajectoryPhase.GENERATING:
                raise RuntimeError(
                    f"{worker.worker_id} stopped while {part.request_id} moved a trajectory: "
                    "the re-shard decider must wait for migrations touching its members"
                )
            interrupt(t, part)
            if part.num_output_tokens:  # one still queued or prefilling lost nothing
                events.append(self._facts.generation_interrupted(t, part, reason))
        return finished, events

    def _relaunch(self, worker: SimWorker, command: Reshard, now: float) -> None:
        """Swap in a fresh engine of the new degree (its stopped one kept for the counters)."""
        if self._make_model is None:
            raise RuntimeError("this simulated data plane has no engines to relaunch")
        tp_degree = command.tp_degree
        ready_at = now + self._config.engine_restart_s
        ready_at += self._config.weight_load_s_for_tp(tp_degree)
        worker.previous_models.append(worker.model)
        worker.model = self._make_model(tp_degree)
        worker.tp_degree = tp_degree
        worker.gpu_ids = tuple(sorted(command.gpu_ids))
        worker.incarnation += 1
        self._relaunching[worker.worker_id] = _Relaunch(ready_at)
        self.num_relaunches += 1
        self._timer.at(ready_at, TimerKind.RELAUNCH, worker.worker_id)
        for t in self._hosted(worker.worker_id):
            if t.phase is TrajectoryPhase.READY:
                self.hold(t, now)
                t.file_wait(now)

    def _hosted(self, worker_id: str) -> list[SimTrajectory]:
        return [
            t
            for t in self._trajectories.values()
            if t.worker_id == worker_id and t.phase is not TrajectoryPhase.DONE
        ]
