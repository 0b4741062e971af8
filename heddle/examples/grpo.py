"""A GRPO run that learns, on a CPU, end to end through Heddle:

    python -m heddle.examples.grpo --steps 8 --json [--overlap] [--plot reward.png]

Workers run the built-in ``tiny`` torch model (random init) on ``token_class`` tasks (answer with
a character of the class the prompt names; reward 1 if right). Each step the trainer submits one
group per class, consumes the completions as they stream, computes group-relative advantages,
takes a policy-gradient step with the loss mask of ``Completed`` (``grpo_train``), saves the
weights and publishes them as the next version; every worker loads them between generations and
the next rollout runs on them.

With ``--overlap`` the next step's rollout is submitted as soon as this step's completions are
in, and runs while the trainer trains (partial rollout, bounded by ``--max-staleness``); the
trainer publishes each version without waiting for the workers to load it (they swap between
generations). Its trajectories may come from the previous version; each one's staleness is
the trainer's version when it trains on it minus the oldest version its tokens came from
(``Completed.weight_versions``), and a trajectory staler than ``--max-staleness`` is left out
of the step (counted). One JSON object per step with
``--json``: ``step, weight_version, reward_mean, num_trajectories, max_staleness_seen,
rollout_s, train_s, overlap_s``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from heddle.client import HeddleClient
from heddle.config import Settings
from heddle.events import Completed
from heddle.examples.grpo_train import policy_gradient_step
from heddle.rollout.inprocess import InProcessDeployment, InProcessOptions
from heddle.rollout.submission import TaskOptions
from heddle.workers.engines.torch_engine.loading import build_random_model
from heddle.workers.engines.torch_engine.tiny import TINY_VOCAB_SIZE, tiny_config


@dataclass(frozen=True, slots=True)
class GrpoConfig:
    steps: int = 8
    num_classes: int = 4
    """One prompt per class (``token_class`` tasks)."""
    group_size: int = 32
    learning_rate: float = 0.01
    num_epochs: int = 2
    """Policy-gradient passes over each step's batch."""
    num_workers: int = 2
    overlap: bool = False
    max_staleness: int = 1
    seed: int = 0
    """Seed of the tiny model's initial weights (workers and trainer start equal)."""


@dataclass(frozen=True, slots=True)
class GrpoStepReport:
    step: int
    weight_version: int
    """The version the step's rollout was submitted under (the trainer's at that moment)."""
    reward_mean: float
    num_trajectories: int
    max_staleness_seen: int
    rollout_s: float
    train_s: float
    """Wall seconds of the step's training and publishing, and without ``overlap`` of the
    wait until every worker loaded the new version."""
    overlap_s: float
    """Wall seconds this step's rollout ran while the previous step trained (0 without
    ``overlap``)."""
    num_too_stale: int = 0
    elapsed_s: float = 0.0
    """Wall seconds from the first submission to the end of this step's training."""


class Trainer:
    """The policy's weights, its optimizer and where versions are saved."""

    def __init__(self, config: GrpoConfig, folder: Path) -> None:
        loaded = build_random_model(tiny_config(), name="tiny", dtype=torch.float32,
                                    device="cpu", seed=config.seed)  # fmt: skip
        assert loaded.vocab_size == TINY_VOCAB_SIZE
        self.module = loaded.module
        self.optimizer = torch.optim.Adam(self.module.parameters(), lr=config.learning_rate)
        self.folder = folder
        self.num_epochs = config.num_epochs
        self.version = 0

    def train(self, batch: Sequence[Completed]) -> Path:
        """One step; the new version's weights file."""
        for _ in range(self.num_epochs):
            policy_gradient_step(self.module, self.optimizer, batch)
        self.version += 1
        path = self.folder / f"v{self.version}.pt"
        torch.save(self.module.state_dict(), path)
        return path


def tasks(config: GrpoConfig) -> list[dict[str, int]]:
    return [{"target": target} for target in range(config.num_classes)]


async def submit_step(client: HeddleClient, config: GrpoConfig, step: int) -> str:
    bound = config.max_staleness if config.overlap else None
    options = TaskOptions(group_size=config.group_size, max_steps=1, max_new_tokens=1,
                          max_total_tokens=64, temperature=1.0, seed=step * 100_003,
                          max_staleness=bound)  # fmt: skip
    return await client.submit(tasks(config), environment="token_class", task_options=options)


async def run(config: GrpoConfig, settings: Settings, folder: Path) -> list[GrpoStepReport]:
    """The whole run (a Heddle in this process); one report per step."""
    torch.set_num_threads(1)
    trainer = Trainer(config, folder)
    engine_options = {"model": "tiny", "seed": str(config.seed), "max-running": "64"}
    deployment = InProcessOptions(num_workers=config.num_workers, engine="torch",
                                  engine_options=engine_options)  # fmt: skip
    reports: list[GrpoStepReport] = []
    async with InProcessDeployment(settings, deployment), HeddleClient(settings) as client:
        begin = time.time()
        pending = (await submit_step(client, config, 0), begin, 0)
        last_train = (begin, begin)
        for step in range(config.steps):
            rollout_id, submitted_at, submitted_version = pending
            batch = [t async for t in client.completions(rollout_id)]
            rollout_end = max((t.occurred_at for t in batch), default=time.time())
            overlap_s = _overlap((submitted_at, rollout_end), last_train)
            is_last = step + 1 == config.steps
            if config.overlap and not is_last:
                pending = (await submit_step(client, config, step + 1), time.time(),
                           trainer.version)  # fmt: skip
            fresh = [t for t in batch if staleness(t, trainer.version) <= config.max_staleness]
            started = time.time()
            path = await asyncio.to_thread(trainer.train, fresh)
            await client.publish_weights(trainer.version, path)
            if not config.overlap:  # the next rollout must run on the new weights only
                await client.wait_weights_loaded(trainer.version, config.num_workers, 120)
            last_train = (started, time.time())
            if not config.overlap and not is_last:
                pending = (await submit_step(client, config, step + 1), time.time(),
                           trainer.version)  # fmt: skip
            reports.append(GrpoStepReport(
                step=step, weight_version=submitted_version,
                reward_mean=sum(t.reward for t in batch) / max(1, len(batch)),
                num_trajectories=len(batch),
                max_staleness_seen=max_staleness(batch, trainer.version - 1),
                rollout_s=rollout_end - submitted_at, train_s=last_train[1] - started,
                overlap_s=overlap_s, num_too_stale=len(batch) - len(fresh),
                elapsed_s=time.time() - begin,
            ))  # fmt: skip
    return reports


def _overlap(first: tuple[float, float], second: tuple[float, float]) -> float:
    return max(0.0, min(first[1], second[1]) - max(first[0], second[0]))


def max_staleness(batch: Sequence[Completed], trainer_version: int) -> int:
    return max((staleness(t, trainer_version) for t in batch), default=0)


def staleness(trajectory: Completed, trainer_version: int) -> int:
    """How many versions the oldest weights of ``trajectory`` are behind ``trainer_version``."""
    return max(0, trainer_version - min(trajectory.weight_versions, default=trainer_version))


def plot(reports: Sequence[GrpoStepReport], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(5, 3))
    axes.plot([r.step for r in reports], [r.reward_mean for r in reports], marker="o")
    axes.set(xlabel="step", ylabel="reward mean", ylim=(0, 1.05), title="GRPO on token_class")
    figure.tight_layout()
    figure.savefig(path)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m heddle.examples.grpo",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    defaults = GrpoConfig()
    parser.add_argument("--steps", type=int, default=defaults.steps)
    parser.add_argument("--group-size", type=int, default=defaults.group_size)
    parser.add_argument("--learning-rate", type=float, default=defaults.learning_rate)
    parser.add_argument("--workers", type=int, default=defaults.num_workers)
    parser.add_argument("--overlap", action="store_true", help="partial rollout (see above)")
    parser.add_argument("--max-staleness", type=int, default=defaults.max_staleness)
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--json", action="store_true", help="one JSON object per step")
    parser.add_argument("--plot", type=Path, help="draw the reward curve to this file")
    parser.add_argument("--data-dir", type=Path, help="Heddle's data dir (default: a temp dir)")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.group_size < 2 or args.workers < 1 or args.max_staleness < 0:
        parser.error("--steps, --workers >= 1, --group-size >= 2, --max-staleness >= 0")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    config = GrpoConfig(steps=args.steps, group_size=args.group_size,
                        learning_rate=args.learning_rate, num_workers=args.workers,
                        overlap=args.overlap, max_staleness=args.max_staleness,
                        seed=args.seed)  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="heddle-grpo-") as scratch:
        data_dir = args.data_dir or Path(scratch) / "data"
        reports = asyncio.run(run(config, Settings(data_dir=data_dir), Path(scratch)))
    if not args.json:
        print(f"{config.steps} steps in {reports[-1].elapsed_s:.1f} s "
              f"({reports[-1].elapsed_s / config.steps:.2f} s per step)")  # fmt: skip
    for report in reports:
        if args.json:
            print(json.dumps(asdict(report)))
        else:
            print(f"step {report.step}: reward {report.reward_mean:.2f} over "
                  f"{report.num_trajectories} (v{report.weight_version}, staleness <= "
                  f"{report.max_staleness_seen}), rollout {report.rollout_s:.1f} s, "
                  f"train {report.train_s:.1f} s")  # fmt: skip
    if args.plot:
        plot(reports, args.plot)


if __name__ == "__main__":
    main()
