"""TEST-ONLY DOUBLE of slime's ``Sample`` and data source (slime is not on PyPI).

Copied field for field from THUDM/slime ``slime/utils/types.py`` (``Sample`` and its ``Status``
enum, commit 624b824a, 2026-08-21; fields unrelated to text rollouts, multimodal and top-p
replay, left out) and ``slime/rollout/data_source.py`` (``RolloutDataSource.get_samples``:
``n_samples_per_prompt`` deep copies of each prompt sample, ``group_index`` / ``index`` counted
up; ``RolloutDataSourceWithBuffer``: ``add_samples`` keeps groups in a buffer that
``get_samples`` serves first, oldest first). docs/integrations.md states the contract."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from enum import Enum
from typing import Any


@dataclass
class Sample:
    group_index: int | None = None
    index: int | None = None
    rollout_id: int | None = None
    prompt: str | list[dict[str, str]] = ""
    tokens: list[int] = field(default_factory=list)
    response: str = ""
    response_length: int = 0
    label: str | None = None
    reward: float | dict[str, Any] | None = None
    loss_mask: list[int] | None = None
    weight_versions: list[str] = field(default_factory=list)
    rollout_log_probs: list[float] | None = None
    remove_sample: bool = False

    class Status(Enum):
        PENDING = "pending"
        COMPLETED = "completed"
        TRUNCATED = "truncated"
        ABORTED = "aborted"
        FAILED = "failed"

    status: Status = Status.PENDING
    metadata: dict[str, Any] = field(default_factory=dict)


class DataSource:
    """slime's ``RolloutDataSource`` over a list of prompt samples."""

    def __init__(self, prompts: list[Sample], n_samples_per_prompt: int) -> None:
        self.prompts = prompts
        self.n_samples_per_prompt = n_samples_per_prompt
        self.offset = self.sample_group_index = self.sample_index = 0
        self.buffer: list[list[Sample]] = []

    def add_samples(self, samples: list[list[Sample]]) -> None:
        for group in samples:
            assert len(group) == self.n_samples_per_prompt
            self.buffer.append(group)

    def get_samples(self, num_samples: int) -> list[list[Sample]]:
        from_buffer, self.buffer = self.buffer[:num_samples], self.buffer[num_samples:]
        return from_buffer + self._fresh(num_samples - len(from_buffer))

    def _fresh(self, num_samples: int) -> list[list[Sample]]:
        taken = self.prompts[self.offset : self.offset + num_samples]
        self.offset += num_samples
        groups = []
        for prompt_sample in taken:
            group = []
            for _ in range(self.n_samples_per_prompt):
                sample = copy.deepcopy(prompt_sample)
                sample.group_index = self.sample_group_index
                sample.index = self.sample_index
                self.sample_index += 1
                group.append(sample)
            self.sample_group_index += 1
            groups.append(group)
        return groups
