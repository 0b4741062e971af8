"""Which rollouts a retention policy lets go, against a brute-force reading of its definition:
ended, and outside the newest ``keep_rollouts`` (by submission) or ended more than
``keep_days`` ago; a running rollout never goes. The policy's configuration is checked."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from heddle.config import RetentionPolicy, load_retention
from heddle.errors import UserError
from heddle.ledger import RolloutStatus
from heddle.ledger.rows import RolloutRow
from heddle.lifecycle.retention import expired

NOW = 1_000_000.0
DAY = 86_400.0

rows = st.lists(
    st.builds(
        lambda i, status, submitted, age_days: RolloutRow(
            rollout_id=f"r{i:03d}",
            status=status,
            submitted_at=submitted,
            finished_at=None if status is RolloutStatus.RUNNING else NOW - age_days * DAY,
        ),
        st.integers(0, 999),
        st.sampled_from(list(RolloutStatus)),
        st.floats(0, NOW, allow_nan=False),
        st.floats(0, 30, allow_nan=False),
    ),
    max_size=30,
    unique_by=lambda row: row.rollout_id,
)


def brute_force(rollouts: list[RolloutRow], policy: RetentionPolicy) -> set[str]:
    order = sorted(rollouts, key=lambda r: (r.submitted_at or 0.0, r.rollout_id))
    newest = set()
    if policy.keep_rollouts:
        newest = {r.rollout_id for r in order[-policy.keep_rollouts :]}
    gone = set()
    for row in rollouts:
        if row.status is RolloutStatus.RUNNING:
            continue
        outside = policy.keep_rollouts is not None and row.rollout_id not in newest
        old = policy.keep_days is not None and row.finished_at < NOW - policy.keep_days * DAY  # type: ignore[operator]
        if outside or old:
            gone.add(row.rollout_id)
    return gone


@given(rows, st.none() | st.integers(0, 10), st.none() | st.floats(0, 30, allow_nan=False))
def test_expired_is_what_the_policy_says(
    rollouts: list[RolloutRow], keep: int | None, days: float | None
) -> None:
    policy = RetentionPolicy(keep_rollouts=keep, keep_days=days)
    chosen = expired(rollouts, policy, NOW)
    assert set(chosen) == brute_force(rollouts, policy) and len(chosen) == len(set(chosen))
    submitted = {r.rollout_id: (r.submitted_at or 0.0, r.rollout_id) for r in rollouts}
    assert chosen == sorted(chosen, key=submitted.__getitem__)  # oldest first


def test_the_policy_comes_from_configuration(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HEDDLE_RETENTION_KEEP_ROLLOUTS", "5")
    monkeypatch.setenv("HEDDLE_ARCHIVE_DIR", str(tmp_path))
    policy = load_retention()
    assert policy == RetentionPolicy(keep_rollouts=5, archive_dir=tmp_path) and policy.is_set
    assert load_retention(keep_rollouts=2).keep_rollouts == 2  # a flag wins
    monkeypatch.setenv("HEDDLE_RETENTION_KEEP_DAYS", "soon")
    with pytest.raises(UserError, match="HEDDLE_RETENTION"):
        load_retention()
    with pytest.raises(UserError, match=">= 0"):
        RetentionPolicy(keep_rollouts=-1)
