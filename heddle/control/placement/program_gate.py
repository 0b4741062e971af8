"""``ProgramGate``: ThunderAgent's program-aware scheduler (Kang et al., "ThunderAgent: A Simple,
Fast and Program-Aware Agentic Inference System", ICML 2026, arXiv 2602.13692), as an
``Admission``: whole agent programs (trajectories) are paused at tool boundaries under KV
pressure and resumed when capacity frees, and a program stays on its backend for its prefix cache.
Each rule follows the public code, ``ThunderAgent-org/ThunderAgent``
``ThunderAgent/scheduler/router.py``, ``MultiBackendRouter`` in its default ``tr`` mode (the
records and capacity arithmetic: ``heddle.control.placement.programs``):

- **A new program** (``update_program_before_request``, ``_select_backend_for_new_program``)
  starts at once only if the global waiting pool is empty and some backend's remaining capacity
  holds its tokens plus ``BUFFER_PER_PROGRAM``: on the one of those with the fewest active
  tokens. Otherwise it waits in the pool.
- **Sticky**: every later request of a program goes to its backend (the placer keeps each step
  where the trajectory is).
- **After a request** the program is ACTING (``update_program_after_request``); one marked for
  pause is paused then: unregistered from its backend and put in the pool. **Before a request**
  it is REASONING; a paused one waits for the scheduler to resume it (``holds_step``).
- **The periodic check** (``_scheduler_loop``, every ``--scheduler-interval`` = 5 s; here at the
  first event at or after each tick, since a decider wakes only on events) first resumes waiting
  programs (``_greedy_resume``), then, on each backend over capacity, pauses programs until it is
  not (``_pause_until_safe``): ACTING ones first, fewest tokens first ("shortest-first eviction",
  paper s.4), then REASONING ones, which are only marked and pause at their next tool call.
  Marked tokens count as freed (``future_paused_tokens``), as the project's wiki describes the
  rule (``wiki/Scheduler.md``); the released loop tests ``remaining_capacity()`` alone and would
  mark every REASONING program of a backend that pausing its ACTING ones leaves over capacity:
  the wiki's reading is the stronger baseline, and the one taken.
- **Resume** (``_greedy_resume``): over the backends with more than ``BUFFER_PER_PROGRAM``
  remaining, take pooled programs in priority order (a request waiting, then new programs, then
  those paused in a tool call; fewest tokens at their pause first within each) while their
  tokens now plus buffers fit the summed remaining capacity; then place them largest first,
  each on the backend with the most remaining capacity (best-fit decreasing), skipping one that
  fits none. A program resumed elsewhere than its origin re-prefills there.
- **Timeout** (``_wait_for_resume``): a program that waited ``1800`` s is resumed regardless of
  capacity, on its origin, or, never started, on the backend with the fewest programs
  (``select_backend_for_new_program_default``).

Assumption: when no program is active at all (every unfinished one waits), the pool is resumed at
once rather than at the next tick: nothing else happens until then, and a decider has no timer.
If then nothing fits even the empty backends (a program plus its buffer over a backend's whole
KV), the longest-waiting program resumes at once by the timeout's rule rather than after
``wait_timeout_s`` of an idle cluster, which no decider could wait out without events.
Not modelled: ``--use-acting-token-decay`` (off by default) and the engine-metrics correction
(``shared_tokens``, never updated in the released code).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from heddle.control.placement.admission import AdmissionRequest, Admitted, Key
from heddle.control.placement.programs import BUFFER_PER_PROGRAM, Backend, Program, Status
from heddle.events import Generated


@dataclass(frozen=True, slots=True)
class ProgramGateConfig:
    scheduler_interval_s: float = 5.0
    """``--scheduler-interval``: seconds between periodic checks."""
    acting_token_weight: float = 1.0
    """``--acting-token-weight``: how much of an ACTING program's tokens its backend counts."""
    wait_timeout_s: float = 1800.0
    """A program waiting this long resumes regardless of capacity (``_wait_for_resume``)."""

    def __post_init__(self) -> None:
        if not self.scheduler_interval_s > 0 or not self.wait_timeout_s > 0:
            raise ValueError("the scheduler interval and the wait timeout must be > 0")
        if not 0 <= self.acting_token_weight <= 1:
            raise ValueError("acting_token_weight must be in [0, 1]")


class ProgramGate:
    """ThunderAgent's pause/resume scheduler as admission (see the module docstring)."""

    def __init__(self, config: ProgramGateConfig = ProgramGateConfig()) -> None:
        self._config = config
        self._weight = config.acting_token_weight
        self._backends: dict[str, Backend] = {}
        self._programs: dict[Key, Program] = {}
        self._pool: dict[Key, Program] = {}
        """Paused and waiting programs (the global waiting queue)."""
        self._arrivals: list[Key] = []
        self._ready: list[Admitted] = []
        self._now_s = 0.0
        self._next_check_s: float | None = None

    def add_worker(self, worker_id: str, max_kv_tokens: int) -> None:
        self._backends.setdefault(worker_id, Backend(max_kv_tokens))

    def remove_worker(self, worker_id: str) -> None:
        self._backends.pop(worker_id, None)

    def plan(self, request: AdmissionRequest) -> None:
        self._programs[request.key] = Program(len(self._programs), request.context_tokens)
        self._arrivals.append(request.key)

    def admit(self, live_workers: Iterable[str]) -> list[Admitted]:
        live = [worker_id for worker_id in live_workers if worker_id in self._backends]
        for key in self._arrivals:
            self._arrive(key, live)
        self._arrivals.clear()
        if self._pool and live and not any(b.programs for b in self._backends.values()):
            self._resume(live)  # nothing runs: the next tick would find every backend free
            if not self._ready:  # nothing fits an empty backend: the timeout's rule, at once
                key, program = min(
                    self._pool.items(), key=lambda i: (i[1].paused_at_s, i[1].arrival)
                )
                self._resume_on(key, program, self._timeout_target(program, live))
        ready, self._ready = self._ready, []
        return ready

    def tick(self, now_s: float) -> bool:
        self._now_s = now_s
        interval = self._config.scheduler_interval_s
        if self._next_check_s is None:
            self._next_check_s = now_s + interval
        if now_s < self._next_check_s:
            return False
        while self._next_check_s <= now_s:
            self._next_check_s += interval
        self._check()
        return bool(self._ready)

    def holds_step(self, key: Key) -> bool:
        program = self._programs.get(key)
        if program is None:
            return False
        program.status = Status.REASONING
        return program.is_paused

    def generated(self, event: Generated) -> None:
        program = self._programs.get((event.rollout_id, event.traj_id))
        if program is None or program.backend is None:
            return
        program.status = Status.ACTING
        if program.is_marked:
            backend = self._backends[program.backend]
            backend.future_paused_tokens -= program.marked_tokens
            program.marked_tokens = 0
            self._pause((event.rollout_id, event.traj_id), program)

    def grew(self, key: Key, context_tokens: int) -> None:
        program = self._programs.get(key)
        if program is not None:
            program.total_tokens = context_tokens

    def finished(self, key: Key) -> None:
        program = self._programs.pop(key, None)
        if program is None:
            return
        self._pool.pop(key, None)
        backend = self._backends.get(program.backend or "")
        if backend is not None:
            backend.programs.pop(key, None)
            backend.future_paused_tokens -= program.marked_tokens

    def moved(self, key: Key, worker_id: str) -> None:
        program = self._programs.get(key)
        if program is None or program.is_paused:
            return
        self._unregister(key, program)
        self._register(key, program, worker_id)

    def has_room(self, worker_id: str, key: Key) -> bool:
        return True

    def tool_returned(self, key: Key, duration_s: float) -> None:
        return None

    def predicted(self, key: Key, remaining_tokens: float, remaining_tool_s: float) -> None:
        return None

    def snapshot(self) -> object:
        programs = {
            key: (p.backend, p.status.value, p.is_paused, p.marked_tokens)
            for key, p in self._programs.items()
        }
        return programs, list(self._pool), self._next_check_s

    # ---- the scheduler ---------------------------------------------------------------------

    def _arrive(self, key: Key, live: list[str]) -> None:
        program = self._programs[key]
        required = program.total_tokens + BUFFER_PER_PROGRAM
        fits = [w for w in live if self._backends[w].remaining(self._weight) >= required]
        if self._pool or not fits:
            self._enter_pool(key, program)
            return
        worker_id = min(fits, key=lambda w: self._backends[w].active_tokens(self._weight))
        self._start(key, program, worker_id)

    def _check(self) -> None:
        live = list(self._backends)
        self._resume(live)
        self._resume_timed_out()
        for backend in self._backends.values():
            while backend.remaining(self._weight) + backend.future_paused_tokens < 0:
                if not self._pause_one(backend):
                    break

    def _pause_one(self, backend: Backend) -> bool:
        """Pause its smallest ACTING program, else mark its smallest REASONING one."""
        acting = backend.smallest(Status.ACTING)
        if acting is not None:
            self._pause(*acting)
            return True
        reasoning = backend.smallest(Status.REASONING)
        if reasoning is None:
            return False
        program = reasoning[1]
        program.marked_tokens = max(1, program.total_tokens)
        backend.future_paused_tokens += program.marked_tokens
        return True

    def _resume(self, live: list[str]) -> None:
        """``_greedy_resume``: select by priority within the summed room, then best-fit
        decreasing onto the backends with the most room."""
        room = {
            w: r
            for w in live
            if (r := self._backends[w].remaining(self._weight)) > BUFFER_PER_PROGRAM
        }
        total = sum(room.values())
        order = sorted(
            self._pool.items(),
            key=lambda item: (item[1].resume_group, item[1].paused_tokens, item[1].arrival),
        )
        selected: list[tuple[Key, Program]] = []
        cumulative = 0.0
        for key, program in order:
            required = program.total_tokens + BUFFER_PER_PROGRAM
            if cumulative + required <= total:
                selected.append((key, program))
                cumulative += required
        selected.sort(key=lambda item: (-item[1].total_tokens, item[1].arrival))
        for key, program in selected:
            if not room:
                break
            target = max(room, key=lambda w: (room[w], -live.index(w)))
            required = program.total_tokens + BUFFER_PER_PROGRAM
            if required > room[target]:
                continue
            self._resume_on(key, program, target)
            room[target] -= required
            if room[target] <= BUFFER_PER_PROGRAM:
                del room[target]

    def _resume_timed_out(self) -> None:
        deadline = self._now_s - self._config.wait_timeout_s
        for key, program in list(self._pool.items()):
            if program.paused_at_s > deadline or not self._backends:
                continue
            self._resume_on(key, program, self._timeout_target(program, list(self._backends)))

    def _timeout_target(self, program: Program, workers: list[str]) -> str:
        """Where a timed-out program resumes: its origin, else the backend of ``workers``
        with the fewest programs (``select_backend_for_new_program_default``)."""
        if program.origin is not None and program.origin in workers:
            return program.origin
        return min(workers, key=lambda w: len(self._backends[w].programs))

    # ---- transitions -----------------------------------------------------------------------

    def _start(self, key: Key, program: Program, worker_id: str) -> None:
        program.has_started = True
        program.status = Status.REASONING
        self._register(key, program, worker_id)
        self._ready.append(Admitted(key, worker_id))

    def _enter_pool(self, key: Key, program: Program) -> None:
        program.is_paused = True
        program.paused_tokens = program.total_tokens
        program.paused_at_s = self._now_s
        self._pool[key] = program

    def _pause(self, key: Key, program: Program) -> None:
        program.origin = program.backend
        self._unregister(key, program)
        self._enter_pool(key, program)

    def _resume_on(self, key: Key, program: Program, worker_id: str) -> None:
        del self._pool[key]
        program.is_paused = False
        if not program.has_started:
            self._start(key, program, worker_id)
            return
        self._register(key, program, worker_id)
        self._ready.append(Admitted(key, worker_id))

    def _register(self, key: Key, program: Program, worker_id: str) -> None:
        program.backend = worker_id
        self._backends[worker_id].programs[key] = program

    def _unregister(self, key: Key, program: Program) -> None:
        backend = self._backends.get(program.backend or "")
        if backend is not None:
            backend.programs.pop(key, None)
        program.backend = None
