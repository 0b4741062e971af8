"""``KvAdmissionGate``: the ``Admission`` of Heddle's bundles (all but ``heddle-no-admission``),
KV admission (``heddle.control.placement.kv_admission``) fed from the placement decider's events.

For each trajectory of a rollout placed under admission it keeps what the admission needs:

- the *footprint*: context so far plus the predicted remaining output and the observations that
  come with it (``observation_ratio`` per output token, learned from history), the KV the
  trajectory will hold at its end;
- while it is held, its *priority* under the bundle's own policy
  (``heddle.policy.scheduling.priority``), evaluated on the facts of a trajectory that has not
  started: its predictions, its submission order, no service attained. That is what the priority
  decider computes for it too; evaluating it here keeps the held order independent of when
  ``Prioritized`` events arrive (the first ones come after the rollout is placed). PPS holds the
  longest predicted remaining time first (LPT), FCFS the earliest submitted;
- where the engines share a group's prompt (``share_prompts``: the engine model's
  ``prompt_sharing``, ``heddle.policy.engine_models``), its prompt as shared with the rest of its
  GRPO group (the same group and prompt length, as ``heddle.policy.bound_facts`` keys it), which
  a worker then counts once however many of the group it holds.

The rate that turns tokens into time is measured per rollout from ``Generated`` (``Pace``), as
the priority decider measures it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from heddle.control.pace import Pace
from heddle.control.placement.admission import AdmissionRequest, Admitted, Key
from heddle.control.placement.kv_admission import AdmissionConfig, Footprint, KvAdmission
from heddle.control.priority import SUBMISSION_ORDER_S
from heddle.events import Generated
from heddle.policy.scheduling.priority import (
    DEFAULT_SECONDS_PER_TOKEN,
    PriorityPolicy,
    TrajectoryFacts,
)

MIN_DUTY_CYCLE = 0.05
"""A trajectory counts at least this share of its KV, however long its tool calls."""


@dataclass(slots=True)
class _Trajectory:
    arrival_s: float
    submitted_at: float
    context_tokens: int
    prompt_tokens: int
    shared_key: str
    """Its prompt's key among the trajectories that share it ("": it shares none)."""
    remaining_tokens: float = 0.0
    remaining_tool_s: float = 0.0
    num_tool_calls: int = 0
    tool_call_s: float = 0.0


class KvAdmissionGate:
    """Starts a trajectory when its worker's projected KV has room for it (an ``Admission``)."""

    def __init__(
        self,
        config: AdmissionConfig,
        policy: PriorityPolicy,
        *,
        observation_ratio: float = 1.0,
        seconds_per_token: float = DEFAULT_SECONDS_PER_TOKEN,
        min_measured_tokens: int = 1000,
        prior_tool_call_s: float = 0.0,
        share_prompts: bool = False,
    ) -> None:
        """``prior_tool_call_s``: mean tool call of earlier rollouts, until a rollout's own
        calls are seen (0: count trajectories whole until then); ``share_prompts``: the engines
        hold a group's prompt once (SGLang's radix cache), so a worker counts it once."""
        if observation_ratio < 0:
            raise ValueError(f"observation_ratio must be >= 0, got {observation_ratio}")
        self.admission = KvAdmission(config)
        self._policy = policy
        self._growth = (1.0 + observation_ratio) * config.growth_share
        self._config = config
        self._prior_tool_call_s = prior_tool_call_s
        self._share_prompts = share_prompts
        self._tool_calls: dict[str, tuple[int, float]] = {}
        """Per rollout: tool calls seen and their seconds (the mean of a trajectory with none)."""
        self._prior_s = seconds_per_token
        self._min_tokens = min_measured_tokens
        self._trajectories: dict[Key, _Trajectory] = {}
        self._paces: dict[str, Pace] = {}

    def add_worker(self, worker_id: str, max_kv_tokens: int) -> None:
        self.admission.add_worker(worker_id, max_kv_tokens)

    def remove_worker(self, worker_id: str) -> None:
        self.admission.remove_worker(worker_id)

    def track(
        self,
        key: Key,
        submitted_at: float,
        index: int,
        prompt_tokens: int,
        remaining: float,
        group_id: str = "",
    ) -> None:
        """A trajectory of a rollout placed under admission, with its first prediction."""
        arrival = submitted_at + index * SUBMISSION_ORDER_S
        shared = f"{key[0]}/{group_id}/{prompt_tokens}" if self._share_prompts and group_id else ""
        self._trajectories[key] = _Trajectory(
            arrival, submitted_at, prompt_tokens, prompt_tokens, shared, remaining
        )

    def plan(self, request: AdmissionRequest) -> None:
        """Track the trajectory and hold it until its KV fits (``track``, then ``hold``)."""
        key = request.key
        if request.planned_worker_id is None:
            raise ValueError(f"KV admission needs a planned worker for {key}")
        self.track(
            key,
            request.submitted_at,
            request.index,
            request.context_tokens,
            request.predicted_remaining_tokens,
            request.group_id,
        )
        self.hold(key, request.planned_worker_id, request.predicted_remaining_tool_s)

    def tick(self, now_s: float) -> bool:
        return False  # it re-checks room on the events that free or need it

    def holds_step(self, key: Key) -> bool:
        return False  # a started trajectory keeps its place

    def hold(self, key: Key, planned_worker: str, remaining_tool_s: float = 0.0) -> None:
        """Hold a tracked trajectory for admission, planned on ``planned_worker``."""
        trajectory = self._trajectories[key]
        trajectory.remaining_tool_s = remaining_tool_s
        priority = self._held_priority(key[0], trajectory)
        self.admission.hold(key, priority, self._footprint(key, trajectory), planned_worker)

    def predicted(self, key: Key, remaining_tokens: float, remaining_tool_s: float) -> None:
        trajectory = self._trajectories.get(key)
        if trajectory is None:
            return
        trajectory.remaining_tokens = remaining_tokens
        trajectory.remaining_tool_s = remaining_tool_s
        self._refresh(key, trajectory)

    def grew(self, key: Key, context_tokens: int) -> None:
        """The trajectory's context is now ``context_tokens`` (a generation or an observation)."""
        trajectory = self._trajectories.get(key)
        if trajectory is not None:
            trajectory.context_tokens = context_tokens
            self._refresh(key, trajectory)

    def tool_returned(self, key: Key, duration_s: float) -> None:
        """One of its tool calls took ``duration_s`` (before the context it returned grows)."""
        trajectory = self._trajectories.get(key)
        if trajectory is not None:
            trajectory.num_tool_calls += 1
            trajectory.tool_call_s += duration_s
        calls, seconds = self._tool_calls.get(key[0], (0, 0.0))
        self._tool_calls[key[0]] = (calls + 1, seconds + duration_s)

    def generated(self, event: Generated) -> None:
        self._paces.setdefault(event.rollout_id, Pace()).add(event)

    def moved(self, key: Key, worker_id: str) -> None:
        self.admission.moved(key, worker_id)

    def has_room(self, worker_id: str, key: Key) -> bool:
        return self.admission.has_room(worker_id, key)

    def finished(self, key: Key) -> None:
        self._trajectories.pop(key, None)
        self.admission.release(key)
        if not any(k[0] == key[0] for k in self._trajectories):
            self._paces.pop(key[0], None)
            self._tool_calls.pop(key[0], None)

    def admit(self, live_workers: Iterable[str]) -> list[Admitted]:
        return self.admission.admit(live_workers)

    def snapshot(self) -> tuple[object, ...]:
        return self.admission.snapshot(), dict(self._trajectories)

    def _refresh(self, key: Key, trajectory: _Trajectory) -> None:
        self.admission.update(key, self._footprint(key, trajectory))
        if self.admission.is_held(key):
            self.admission.reprioritize(key, self._held_priority(key[0], trajectory))

    def _seconds_per_token(self, rollout_id: str) -> float:
        pace = self._paces.get(rollout_id, Pace())
        return pace.seconds_per_token(self._prior_s, self._min_tokens)

    def _footprint(self, key: Key, trajectory: _Trajectory) -> Footprint:
        decode_s = trajectory.remaining_tokens * self._seconds_per_token(key[0])
        remaining_s = decode_s + trajectory.remaining_tool_s
        share = 1.0
        if self._has_long_calls(key, trajectory) and remaining_s > 0:
            share = max(MIN_DUTY_CYCLE, decode_s / remaining_s)
        shared_tokens = share * trajectory.prompt_tokens if trajectory.shared_key else 0.0
        return Footprint(
            share * trajectory.context_tokens,
            share * self._growth * trajectory.remaining_tokens,
            remaining_s,
            shared_tokens,
            trajectory.shared_key,
        )

    def _has_long_calls(self, key: Key, trajectory: _Trajectory) -> bool:
        """Whether its tool calls average over ``retention_s`` (its own, else its rollout's)."""
        if not self._config.duty_cycle:
            return False
        calls, seconds = trajectory.num_tool_calls, trajectory.tool_call_s
        if calls == 0:
            calls, seconds = self._tool_calls.get(key[0], (0, 0.0))
        if calls == 0:
            return self._prior_tool_call_s > self._config.retention_s
        return seconds / calls > self._config.retention_s

    def _held_priority(self, rollout_id: str, trajectory: _Trajectory) -> float:
        facts = TrajectoryFacts(
            predicted_remaining_tokens=trajectory.remaining_tokens,
            predicted_remaining_tool_s=trajectory.remaining_tool_s,
            seconds_per_token=self._seconds_per_token(rollout_id),
            arrival_s=trajectory.arrival_s,
            step_arrival_s=trajectory.submitted_at,
        )
        return self._policy.priority(facts)
