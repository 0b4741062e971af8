"""slime's rollout loop (``generate_rollout_async`` in ``slime/rollout/sglang_rollout.py``) on
Heddle: over-sampling, the dynamic filter, sample hooks, the reward, aborted groups.

Until ``rollout_batch_size`` groups are kept: while the groups kept or running are fewer than
that, take ``over_sampling_batch_size`` more groups from the data source (``rollout_batch_size``
when unset) and submit them as one Heddle rollout. Each group, once all of its trajectories came
back, is filled (``slime_samples``), passed through the sample hooks, scored (``slime_hooks``)
and judged by the dynamic filter: kept, or dropped (one fewer in flight, its reason counted in
``rollout/dynamic_filter/drop_<reason>``). A group in which a trajectory was aborted is never
trained on: it counts as dropped. Once the batch is full the rollouts still running are
cancelled. As slime does, groups left over (unfinished, aborted, or finished past the batch) go
back to the data source (``add_samples``) only with ``--partial-rollout``; finished ones as they
are (slime trains them later as they stand), the others reset to their prompt (Heddle generates
them again from it: a partial response is not continued). Without it they are dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from heddle.client import HeddleClient
from heddle.events import Completed
from heddle.integrations import slime_hooks, slime_samples
from heddle.integrations.batch import BatchRequest, batch_metrics, no_event_row
from heddle.workers.tokenizers import load_tokenizer

_SUMMED = ("heddle/num_", "heddle/finish_reason/", "heddle/recomputed_tokens")
RequestOf = Callable[[Sequence[Sequence[Any]]], BatchRequest]


@dataclass
class Submission:
    groups: list[list[Any]]
    request: BatchRequest
    rollout_id: str = ""
    done: set[int] = field(default_factory=set)
    """Groups (by position) handed to the loop."""
    stream: asyncio.Task[None] | None = None


@dataclass
class LoopResult:
    data: list[list[Any]]
    """The kept groups, by their first sample's index."""
    every: list[list[Any]]
    """Every group that finished (kept or dropped), by index."""
    leftovers: list[list[Any]]
    metrics: dict[str, float]


class SlimeLoop:
    """One ``generate_rollout`` call (module docstring)."""

    def __init__(
        self, args: Any, rollout_id: int, data_source: Any, client: HeddleClient,
        request_of: RequestOf,
    ) -> None:  # fmt: skip
        self.args = args
        self.rollout_id = rollout_id
        self.source = data_source
        self.client = client
        self.request_of = request_of
        self.target = int(args.rollout_batch_size)
        self.fetch = int(getattr(args, "over_sampling_batch_size", None) or self.target)
        self.in_flight = 0
        self.kept: list[list[Any]] = []
        self.every: list[list[Any]] = []
        self.leftovers: list[list[Any]] = []
        self.drops: Counter[str] = Counter()
        self.finished: asyncio.Queue[tuple[Submission, int, list[Any]]] = asyncio.Queue()
        self.submissions: list[Submission] = []
        self.trajectories: list[Completed] = []
        self.tokenizer = load_tokenizer(str(getattr(args, "heddle_tokenizer", "byte")))

    async def run(self) -> LoopResult:
        try:
            while len(self.kept) < self.target:
                await self._refill()
                submission, _, group = await self._next()
                await self._judge(group, generated_now=bool(submission.rollout_id))
        finally:
            await self._stop()
        metrics = {f"rollout/dynamic_filter/drop_{r}": float(n) for r, n in self.drops.items()}
        metrics.update(await self._heddle_metrics())
        by_index = _by_first_index
        return LoopResult(by_index(self.kept), by_index(self.every), self.leftovers, metrics)

    async def _next(self) -> tuple[Submission, int, list[Any]]:
        """The next finished group; a stream's error is raised here, not left waiting."""
        while True:
            getter = asyncio.ensure_future(self.finished.get())
            streams = {s.stream for s in self.submissions if s.stream and not s.stream.done()}
            done, _ = await asyncio.wait({getter, *streams}, return_when=asyncio.FIRST_COMPLETED)
            if getter in done:
                return getter.result()
            getter.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await getter
            for stream in done:
                stream.result()

    async def _refill(self) -> None:
        while self.in_flight < self.target:
            groups = self.source.get_samples(self.fetch)
            if not groups:
                if self.in_flight == 0 and self.finished.empty():
                    raise RuntimeError("slime's data source ran dry before the batch was full")
                return
            self.in_flight += len(groups)
            ready = [g for g in groups if slime_samples.is_generated(g)]
            for group in ready:  # finished before, put back by slime: not generated again
                self.finished.put_nowait((Submission([group], self.request_of([group])), 0, group))
            fresh = [g for g in groups if not slime_samples.is_generated(g)]
            if fresh:
                await self._submit(fresh)

    async def _submit(self, groups: list[list[Any]]) -> None:
        submission = Submission(groups, self.request_of(groups))
        submission.rollout_id = await _submit(self.client, submission.request)
        submission.stream = asyncio.create_task(self._stream(submission))
        self.submissions.append(submission)

    async def _stream(self, submission: Submission) -> None:
        width = submission.request.task_options.group_size
        arrived: dict[int, dict[int, Completed]] = {}
        async for trajectory in self.client.completions(submission.rollout_id):
            self.trajectories.append(trajectory)
            group = arrived.setdefault(trajectory.index // width, {})
            group.setdefault(trajectory.index % width, trajectory)
            if len(group) == width:
                self._hand_over(submission, trajectory.index // width, group)
        for position in range(len(submission.groups)):  # ended with no event: aborted
            if position not in submission.done:
                group = arrived.setdefault(position, {})
                for k in range(width):
                    row = no_event_row(submission.rollout_id, position * width + k,
                                       submission.request)  # fmt: skip
                    group.setdefault(k, row)
                self._hand_over(submission, position, group)

    def _hand_over(
        self, submission: Submission, position: int, arrived: dict[int, Completed]
    ) -> None:
        submission.done.add(position)
        group = submission.groups[position]
        for k, sample in enumerate(group):
            trajectory = arrived[k]
            text = self.tokenizer.decode(trajectory.response_token_ids)
            slime_samples.fill_sample(sample, trajectory, {}, text)
        self.finished.put_nowait((submission, position, group))

    async def _judge(self, group: list[Any], generated_now: bool) -> None:
        if slime_samples.is_aborted(group):
            self.in_flight -= 1
            self.drops["aborted"] += 1
            self._leave(group)
            return
        if generated_now:  # a group put back finished was hooked and scored then
            group[:] = [await slime_hooks.apply_sample_hooks(self.args, s, self.rollout_id)
                        for s in group]  # fmt: skip
            if slime_hooks.reward_source(self.args) == "slime":
                await slime_hooks.score_group(self.args, group)
        self.every.append(group)
        verdict = slime_hooks.dynamic_verdict(self.args, group)
        if slime_hooks.drops(verdict, in_flight=self.in_flight, target=self.target):
            self.in_flight -= 1
            if verdict.reason:
                self.drops[verdict.reason] += 1
            return
        if len(self.kept) < self.target:
            self.kept.append(group)
        else:
            self._leave(group)

    def _leave(self, group: list[Any]) -> None:
        """A group not trained on this time: back to the data source with partial rollouts."""
        if getattr(self.args, "partial_rollout", False):
            if not slime_samples.is_generated(group):
                group[:] = [slime_samples.reset_sample(s) for s in group]
            self.leftovers.append(group)

    async def _stop(self) -> None:
        """Cancel the rollouts still running; their groups are left over."""
        for submission in self.submissions:
            if len(submission.done) < len(submission.groups):
                await self.client.cancel(submission.rollout_id, "slime's batch is full")
        for submission in self.submissions:
            if submission.stream is not None:
                with contextlib.suppress(asyncio.CancelledError):
                    await submission.stream
        while not self.finished.empty():
            _, _, group = self.finished.get_nowait()
            self._leave(group)

    async def _heddle_metrics(self) -> dict[str, float]:
        """``batch_metrics`` of each rollout, counts summed and the rest their largest."""
        merged: dict[str, float] = {"heddle/num_rollouts": float(len(self.submissions))}
        for submission in self.submissions:
            mine = [t for t in self.trajectories if t.rollout_id == submission.rollout_id]
            summary = await self.client.summary(submission.rollout_id)
            for key, value in batch_metrics(mine, summary).items():
                if key.startswith(_SUMMED):
                    merged[key] = merged.get(key, 0.0) + value
                else:
                    merged[key] = max(merged.get(key, value), value)
        return merged


def _by_first_index(groups: list[list[Any]]) -> list[list[Any]]:
    return sorted(groups, key=lambda group: group[0].index if group[0].index is not None else 0)


async def _submit(client: HeddleClient, request: BatchRequest) -> str:
    return await client.submit(
        request.tasks,
        environment=request.environment,
        policy=request.policy,
        task_options=request.task_options,
        tokenizer=request.tokenizer,
        prompt_token_ids=request.prompt_token_ids,
        messages=request.messages,
        labels=request.labels,
    )
