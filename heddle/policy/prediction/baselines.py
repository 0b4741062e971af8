"""The paper's prediction baselines (s.7.2): prompt-only and history (see the package docstring)."""

from __future__ import annotations

from heddle.policy.prediction.base import Outcome, Progress, returned_tool_calls


class PromptOnlyPredictor:
    """Total length from the prompt alone (group mean, else a line in prompt tokens); total tool
    time likewise (group mean, else the mean seen), minus what it has spent."""

    name = "prompt_only"

    def __init__(self, prior_total_tokens: float) -> None:
        self._prior = prior_total_tokens
        self._group_sum: dict[str, float] = {}
        self._group_count: dict[str, int] = {}
        self._group_tool_s: dict[str, float] = {}
        self._group_tool_count: dict[str, int] = {}
        self._tool_s = 0.0
        self._tool_count = 0
        self._n = 0
        self._sx = self._sy = self._sxx = self._sxy = 0.0

    def predict(self, progress: Progress) -> float:
        return max(
            0.0,
            self.predict_total(progress.group_id, progress.prompt_tokens) - progress.output_tokens,
        )

    def predict_total(self, group_id: str, prompt_tokens: int) -> float:
        count = self._group_count.get(group_id, 0)
        if group_id and count:
            return self._group_sum[group_id] / count
        if self._n == 0:
            return self._prior
        variance = self._n * self._sxx - self._sx * self._sx
        if self._n < 2 or variance <= 1e-9 * max(1.0, self._sxx * self._n):
            return self._sy / self._n
        slope = (self._n * self._sxy - self._sx * self._sy) / variance
        intercept = (self._sy - slope * self._sx) / self._n
        return max(0.0, intercept + slope * prompt_tokens)

    def predict_tool_s(self, progress: Progress) -> float:
        count = self._group_tool_count.get(progress.group_id, 0)
        if progress.group_id and count:
            total = self._group_tool_s[progress.group_id] / count
        elif self._tool_count:
            total = self._tool_s / self._tool_count
        else:
            return 0.0
        return max(0.0, total - progress.tool_s)

    def observe(self, outcome: Outcome) -> None:
        if len(outcome.step_tool_s) == len(outcome.step_output_tokens):
            tool_s = sum(outcome.step_tool_s[:-1])
            self._tool_s += tool_s
            self._tool_count += 1
            if outcome.group_id:
                group = outcome.group_id
                self._group_tool_s[group] = self._group_tool_s.get(group, 0.0) + tool_s
                self._group_tool_count[group] = self._group_tool_count.get(group, 0) + 1
        total = float(outcome.total_output_tokens)
        if outcome.group_id:
            self._group_sum[outcome.group_id] = self._group_sum.get(outcome.group_id, 0.0) + total
            self._group_count[outcome.group_id] = self._group_count.get(outcome.group_id, 0) + 1
        x = float(outcome.prompt_tokens)
        self._n += 1
        self._sx += x
        self._sy += total
        self._sxx += x * x
        self._sxy += x * total


class HistoryPredictor:
    """Mean remaining output (and tool time) of completed trajectories that went on past the
    same step index."""

    name = "history"

    def __init__(self, prior_total_tokens: float) -> None:
        self._prior = prior_total_tokens
        self._remaining_sum: list[float] = []
        self._count: list[int] = []
        self._tool_sum: list[float] = []
        self._tool_count: list[int] = []
        self._last_step_sum = 0.0
        self._num_observed = 0

    def predict(self, progress: Progress) -> float:
        index = progress.num_steps
        if index < len(self._count):
            return self._remaining_sum[index] / self._count[index]
        if self._num_observed:
            # Longer than anything seen: guess one more step of the usual last-step size.
            return self._last_step_sum / self._num_observed
        return max(0.0, self._prior - progress.output_tokens)

    def predict_tool_s(self, progress: Progress) -> float:
        index = progress.num_steps
        if index < len(self._tool_count) and self._tool_count[index]:
            return self._tool_sum[index] / self._tool_count[index]
        return 0.0

    def observe(self, outcome: Outcome) -> None:
        steps = outcome.step_output_tokens
        if not steps:
            return
        if len(outcome.step_tool_s) == len(steps):
            while len(self._tool_count) < len(steps):
                self._tool_sum.append(0.0)
                self._tool_count.append(0)
            for index in range(len(steps)):
                self._tool_sum[index] += sum(outcome.step_tool_s[returned_tool_calls(index) : -1])
                self._tool_count[index] += 1
        while len(self._count) < len(steps):
            self._remaining_sum.append(0.0)
            self._count.append(0)
        remaining = float(sum(steps))
        for index, output_tokens in enumerate(steps):
            self._remaining_sum[index] += remaining
            self._count[index] += 1
            remaining -= output_tokens
        self._last_step_sum += steps[-1]
        self._num_observed += 1
