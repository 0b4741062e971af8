"""The trainer's half of ``heddle.examples.grpo``: group-relative advantages and one policy-
gradient step on the completions, with the loss mask ``Completed`` carries.

GRPO (Shao et al. 2024, arXiv 2402.03300, s.4.1): each trajectory's advantage is its reward
minus its group's mean reward, divided by the group's standard deviation (a group with one
reward for all gives zero advantages), and the loss is ``-mean(advantage * log p(token))`` over
the model's own tokens (``loss_mask`` 1), which is the policy gradient of the on-policy case.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import torch

from heddle.events import Completed
from heddle.workers.tokenizers import ByteTokenizer


def group_advantages(batch: Sequence[Completed], eps: float = 1e-6) -> list[float]:
    """Per trajectory, ``(reward - group mean) / (group std + eps)``, in batch order."""
    groups: dict[str, list[float]] = defaultdict(list)
    for trajectory in batch:
        groups[trajectory.group_id].append(trajectory.reward)
    stats = {}
    for group, rewards in groups.items():
        mean = sum(rewards) / len(rewards)
        std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / len(rewards))
        stats[group] = (mean, std)
    return [(t.reward - stats[t.group_id][0]) / (stats[t.group_id][1] + eps) for t in batch]


def sequence_logprobs(module: Any, batch: Sequence[Completed]) -> torch.Tensor:
    """``[batch, max_response]``: log p of each response token under ``module`` (0 where the
    loss mask is 0 or past the response)."""
    rows = [list(t.prompt_token_ids) + list(t.response_token_ids) for t in batch]
    width = max(len(row) for row in rows)
    ids = torch.full((len(rows), width), ByteTokenizer.PAD_TOKEN_ID, dtype=torch.long)
    attention = torch.zeros((len(rows), width), dtype=torch.long)
    for index, row in enumerate(rows):
        ids[index, : len(row)] = torch.tensor(row)
        attention[index, : len(row)] = 1
    logits = module(input_ids=ids, attention_mask=attention).logits.float()
    logprobs = torch.log_softmax(logits, dim=-1)
    max_response = max(len(t.response_token_ids) for t in batch)
    out = torch.zeros((len(rows), max_response))
    for index, trajectory in enumerate(batch):
        start = len(trajectory.prompt_token_ids)
        for offset, (token, mask) in enumerate(
            zip(trajectory.response_token_ids, trajectory.loss_mask, strict=True)
        ):
            if mask:
                out[index, offset] = logprobs[index, start + offset - 1, token]
    return out


def policy_gradient_step(
    module: Any, optimizer: torch.optim.Optimizer, batch: Sequence[Completed]
) -> float:
    """One optimizer step on ``batch``; the loss. Trajectories without model tokens (failed
    before generating) contribute nothing."""
    usable = [t for t in batch if sum(t.loss_mask)]
    if not usable:
        return 0.0
    advantages = torch.tensor(group_advantages(usable))
    module.train()
    logprobs = sequence_logprobs(module, usable).sum(dim=1)
    loss = -(advantages * logprobs).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    module.eval()
    return float(loss.detach())
