"""The ledger contract, run against every backend (SQLite; PostgreSQL with
HEDDLE_TEST_DATABASE_URL): schema, projection of every event kind, idempotence, position."""

from __future__ import annotations

import concurrent.futures
import contextlib
import itertools
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import create_engine, inspect, text

from heddle.errors import UserError
from heddle.events import (
    EventT,
    Generated,
    GenerationStarted,
    RolloutFinished,
    WeightsLoaded,
    WeightsLoadFailed,
    WeightSource,
    WeightsPublished,
    WorkerRegistered,
    WorkerUndrainRequested,
)
from heddle.ledger import (
    Ledger,
    LedgerWriter,
    PositionConflict,
    PositionGap,
    current_revision,
    head_revision,
    open_ledger,
    queries,
)
from heddle.ledger.compare import compare_ledgers
from heddle.ledger.rows import (
    DeadLetterRow,
    MigrationRow,
    OperatorActionRow,
    PlacementRow,
    PredictionRow,
    RolloutRow,
    StepRow,
    TrajectoryRow,
    WorkerRow,
)
from heddle.ledger.tables import PROJECTED_TABLES

from .lifecycle import (
    T0,
    cancelled,
    everything,
    rollout_events,
    submitted_only,
    worker_events,
)

ROW_TYPES = {
    "rollouts": RolloutRow,
    "trajectories": TrajectoryRow,
    "steps": StepRow,
    "workers": WorkerRow,
    "placements": PlacementRow,
    "migrations": MigrationRow,
    "predictions": PredictionRow,
    "dead_letters": DeadLetterRow,
    "operator_actions": OperatorActionRow,
}


def numbered(events: list[EventT], first: int = 1) -> list[tuple[int, EventT]]:
    return list(enumerate(events, start=first))


def test_row_structs_mirror_the_tables() -> None:
    for table in PROJECTED_TABLES:
        fields = msgspec.structs.fields(ROW_TYPES[table.name])
        assert [f.name for f in fields] == [c.name for c in table.columns], table.name


class TestLedgerContract:
    def test_schema_is_at_head_and_reopening_is_a_no_op(
        self, ledger: Ledger, ledger_url: str
    ) -> None:
        assert current_revision(ledger.engine) == head_revision()
        again = open_ledger(ledger_url, auto_upgrade=False)
        again.close()
        names = set(inspect(ledger.engine).get_table_names())
        assert {table.name for table in PROJECTED_TABLES} | {"consumer_positions"} <= names

    def test_projects_a_rollout(self, ledger: Ledger) -> None:
        writer = LedgerWriter(ledger, "ledger")
        events = worker_events() + rollout_events("r1")
        assert writer.project(numbered(events)) == len(events)
        summary = queries.rollout_totals(ledger, "r1")
        assert summary is not None and summary.rollout is not None
        assert summary.rollout.status == "finished"
        assert summary.rollout.labels == {"step": "7"}
        assert summary.num_by_status == {"completed": 2, "failed": 1}
        assert summary.num_steps == 6 and summary.num_output_tokens == 32 * 6

        first, migrated, failed = queries.trajectories(ledger, "r1")
        assert (first.traj_id, first.group_id, first.num_prompt_tokens) == ("t000000", "g0", 10)
        assert (first.num_tool_calls, first.tool_s, first.reward) == (1, 2.0, 1.0)
        assert first.num_context_tokens == 50 and first.total_s == 9.5
        assert first.predicted_remaining_tokens == 500.0 and first.priority == 2.5
        assert (migrated.num_migrations, migrated.num_preemptions) == (1, 1)
        assert migrated.migration_s == 0.0  # Completed timings override the sums
        assert migrated.worker_id == "w01"
        assert (failed.status, failed.failure_reason) == ("failed", "engine died")
        assert failed.decode_s == 3.0 and failed.queue_s == 1.0

        steps = queries.steps(ledger, "r1", "t000000")
        assert [s.step for s in steps] == [0, 1]
        assert (steps[0].num_output_tokens, steps[0].finish_reason, steps[0].tool) == (
            32,
            "tool_call",
            "python",
        )
        assert (steps[0].tool_s, steps[0].num_tool_output_tokens, steps[0].tool_exit_code) == (
            1.5,
            5,
            0,
        )
        assert (steps[1].num_input_tokens, steps[1].num_cached_tokens) == (5, 10)

        workers = {w.worker_id: w for w in queries.workers(ledger)}
        assert (workers["w00"].status, workers["w00"].tp_degree) == ("drained", 2)
        assert workers["w00"].heartbeat_sequence == 2 and workers["w00"].num_running == 1
        assert (workers["w01"].status, workers["w01"].failure_reason) == ("failed", "oom")
        assert workers["w02"].engine == "" and workers["w02"].heartbeat_sequence == 9
        [position] = queries.positions(ledger)
        assert (position.consumer, position.stream_sequence) == ("ledger", len(events))

    def test_migrations_placements_predictions_dead_letters(self, ledger: Ledger) -> None:
        LedgerWriter(ledger, "ledger").project(numbered(everything()))
        with ledger.engine.connect() as connection:
            migrations = connection.exec_driver_sql(
                "SELECT status, num_bytes, kv_transferred, transfer_s FROM migrations"
            ).all()
            num_placements = connection.exec_driver_sql("SELECT count(*) FROM placements").scalar()
            num_predictions = connection.exec_driver_sql(
                "SELECT count(*) FROM predictions"
            ).scalar()
        assert [tuple(m) for m in migrations] == [("done", 4096, True, 0.75)] * 2
        assert num_placements == 5 and num_predictions == 5
        # The stream's dead letter, and the gate's: "ghost" was cancelled, never submitted.
        letter, refused = sorted(queries.dead_letters(ledger), key=lambda row: row.payload)[::-1]
        assert (letter.stream_sequence, letter.payload) == (3, "{oops")
        assert refused.consumer == "ledger-gate" and "unknown rollout ghost" in refused.reason
        cancelled = queries.rollout_totals(ledger, "r3")
        assert cancelled is not None and cancelled.rollout is not None
        assert (cancelled.rollout.status, cancelled.rollout.cancel_reason) == (
            "cancelled",
            "operator",
        )
        assert set(queries.rollout_ids(ledger)) == {"r1", "r2", "r3"}  # no "ghost", "nosuch"

    def test_a_cancelled_rollout_stays_cancelled_when_a_finish_follows(
        self, ledger: Ledger
    ) -> None:
        finish = RolloutFinished(event_id="r3:finished", rollout_id="r3", occurred_at=T0 + 9,
                                 num_completed=0, num_failed=1)  # fmt: skip
        events = [submitted_only("r3"), cancelled("r3"), finish]
        LedgerWriter(ledger, "ledger").project(numbered(events))
        summary = queries.rollout_totals(ledger, "r3")
        assert summary is not None and summary.rollout is not None
        assert summary.rollout.status == "cancelled"

    def test_operator_events_are_actions_and_create_no_rows(self, ledger: Ledger) -> None:
        LedgerWriter(ledger, "ledger").project(numbered(everything()))
        actions = queries.operator_actions(ledger)
        assert [(a.kind, a.operator, a.rollout_id, a.worker_id) for a in actions] == [
            ("traj.abort_requested", "ana", "r1", ""),  # same time: by event id
            ("worker.drain_requested", "ana", "", "w00"),
            ("traj.reprioritize_requested", "", "nosuch", ""),
        ]
        assert (actions[2].priority, actions[2].pin) == (1e9, True)
        assert queries.rollout_totals(ledger, "nosuch") is None
        undrain = WorkerUndrainRequested(event_id="w00:op:d:undrain", occurred_at=T0 + 60,
                                         worker_id="w00")  # fmt: skip
        ghost = WorkerUndrainRequested(event_id="w99:op:e:undrain", occurred_at=T0 + 60,
                                       worker_id="w99")  # fmt: skip
        before = {w.worker_id: w.status for w in queries.workers(ledger)}
        LedgerWriter(ledger, "ledger").project(numbered([undrain, ghost], len(everything()) + 1))
        after = {w.worker_id: w.status for w in queries.workers(ledger)}
        assert before["w00"] == "drained" and after == {**before, "w00": "active"}
        assert [a.event_id for a in queries.operator_actions(ledger, rollout_id="r1")] == [
            "r1:t000000:op:b:abort"
        ]

    def test_each_worker_records_the_weights_it_loaded(self, ledger: Ledger) -> None:
        def registered(incarnation: str, at: float) -> WorkerRegistered:
            return WorkerRegistered(event_id=f"wx:{incarnation}", occurred_at=at, worker_id="wx",
                                    engine="sim", incarnation=incarnation)  # fmt: skip

        def loaded(version: int, incarnation: str, at: float) -> WeightsLoaded:
            return WeightsLoaded(
                event_id=f"weights:{version}:wx:{incarnation}",
                occurred_at=at,
                weight_version=version,
                worker_id="wx",
                incarnation=incarnation,
            )

        source = WeightSource(path="/w/v1")
        published = WeightsPublished(event_id="weights:1:published", occurred_at=T0 + 1,
                                     weight_version=1, source=source)  # fmt: skip
        failed = WeightsLoadFailed(event_id="weights:2:wx:a:failed", occurred_at=T0 + 3,
                                   weight_version=2, worker_id="wx", reason="no file")  # fmt: skip
        events = [registered("a", T0), published, loaded(1, "old", T0 + 2),
                  loaded(1, "a", T0 + 2.5), failed]  # fmt: skip
        writer = LedgerWriter(ledger, "ledger")
        writer.project(numbered(events))
        [worker] = [w for w in queries.workers(ledger) if w.worker_id == "wx"]
        assert (worker.weight_version, worker.weights_loaded_at) == (1, T0 + 2.5)
        writer.project(numbered([registered("b", T0 + 4)], len(events) + 1))
        [worker] = [w for w in queries.workers(ledger) if w.worker_id == "wx"]
        assert (worker.weight_version, worker.weights_loaded_at) == (0, None)  # a fresh start

    def test_redelivered_events_are_skipped(self, ledger: Ledger) -> None:
        events = numbered(everything())
        writer = LedgerWriter(ledger, "ledger")
        assert writer.project(events[:40]) == 40
        assert writer.project(events[:40]) == 0
        assert writer.project(events[30:]) == len(events) - 40
        with reference_ledger(events) as reference:
            assert compare_ledgers(ledger, reference).mismatches == []

    def test_a_stale_writer_writes_nothing(self, ledger: Ledger) -> None:
        events = numbered(everything())
        first = LedgerWriter(ledger, "ledger")
        second = LedgerWriter(ledger, "ledger")
        first.project(events[:10])
        with pytest.raises(PositionConflict):
            second.project(events[:20])
        assert second.position == 10
        assert second.project(events[:20]) == 10
        [position] = queries.positions(ledger)
        assert (position.stream_sequence, position.num_events) == (20, 20)

    def test_a_batch_that_skips_ahead_is_refused(self, ledger: Ledger) -> None:
        events = numbered(everything())
        writer = LedgerWriter(ledger, "ledger")
        writer.project(events[:10])
        with pytest.raises(PositionGap):
            writer.project(events[20:30])
        assert writer.position == 10
        # A caller that knows 11..20 hold nothing to project (dead-lettered) vouches for them.
        assert writer.project(events[20:30], first_sequence=11) == 10
        [position] = queries.positions(ledger)
        assert (position.stream_sequence, position.num_events) == (30, 20)

    def test_a_later_batch_of_a_second_writer_waits_for_the_one_in_between(
        self, ledger: Ledger
    ) -> None:
        """Two projectors on one durable: the second got 11..20 while the first still holds
        1..10. The second's batch is refused until the first committed; nothing is skipped."""
        events = numbered(everything())
        first = LedgerWriter(ledger, "ledger")
        second = LedgerWriter(ledger, "ledger")
        with pytest.raises(PositionGap):
            second.project(events[10:20])
        assert first.project(events[:10]) == 10
        assert second.project(events[10:20]) == 10
        with reference_ledger(events[:20]) as reference:
            assert compare_ledgers(ledger, reference).mismatches == []

    def test_records_must_be_ordered(self, ledger: Ledger) -> None:
        events = numbered(everything()[:3])
        with pytest.raises(ValueError, match="increasing"):
            LedgerWriter(ledger, "ledger").project([events[1], events[0]])

    @settings(
        max_examples=12,
        suppress_health_check=[HealthCheck.function_scoped_fixture],
    )
    @given(
        cuts=st.lists(st.integers(min_value=1, max_value=140), max_size=8), restart=st.booleans()
    )
    def test_any_batching_gives_the_one_batch_result(
        self, ledger: Ledger, cuts: list[int], restart: bool
    ) -> None:
        """Reference: the whole history in one batch; any split (with a cold cache after a
        writer restart) must produce the same tables."""
        events = numbered(everything())
        consumer = f"split-{len(queries.positions(ledger))}"
        writer = LedgerWriter(ledger, consumer)
        bounds = sorted({0, len(events), *(min(c, len(events)) for c in cuts)})
        for index, (start, end) in enumerate(itertools.pairwise(bounds)):
            if restart and index == 1:
                writer = LedgerWriter(ledger, consumer)
            writer.project(events[start:end])
        with reference_ledger(events) as reference:
            assert compare_ledgers(ledger, reference).mismatches == []
        _clear(ledger)

    def test_a_late_report_of_an_earlier_step_is_refused(self, ledger: Ledger) -> None:
        """A step's row is cached while its trajectory moves on; a report of an earlier step
        arriving later (a publish retried outside the duplicate window, or a forgery) is
        refused by the gate, batch by batch as in one batch: the step keeps its first report."""
        events = rollout_events("late", num_trajectories=1, num_steps=3)
        first = next(e for e in events if isinstance(e, Generated) and e.step == 0)
        later = next(e for e in events if isinstance(e, GenerationStarted) and e.step == 2)
        again = msgspec.structs.replace(first, event_id=f"{first.event_id}:again", decode_s=9.0)
        events.insert(events.index(later) + 1, again)
        writer = LedgerWriter(ledger, "late")
        for record in numbered(events):
            writer.project([record])
        with reference_ledger(numbered(events)) as reference:
            assert compare_ledgers(ledger, reference).mismatches == []
        step = next(s for s in queries.steps(ledger, "late", first.traj_id) if s.step == 0)
        assert step.decode_s == first.decode_s == 1.5
        [letter] = queries.dead_letters(ledger)
        assert "step 0: the trajectory is at step 2" in letter.reason


@contextlib.contextmanager
def reference_ledger(events: list[tuple[int, EventT]]) -> Iterator[Ledger]:
    """A fresh SQLite ledger with everything projected in one batch."""
    with tempfile.TemporaryDirectory() as folder:
        reference = open_ledger(f"sqlite:///{Path(folder) / 'reference.db'}")
        try:
            LedgerWriter(reference, "reference").project(events)
            yield reference
        finally:
            reference.close()


def _clear(ledger: Ledger) -> None:
    with ledger.engine.begin() as connection:
        for table in PROJECTED_TABLES:
            connection.execute(table.delete())


def test_tables_without_a_schema_version_are_refused(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'foreign.db'}"
    engine = create_engine(url)
    with engine.begin() as connection:
        connection.execute(text("CREATE TABLE something (x INTEGER)"))
    engine.dispose()
    with pytest.raises(UserError, match="empty database"):
        open_ledger(url, auto_upgrade=False)


def test_opening_a_fresh_sqlite_ledger_at_once_succeeds_everywhere(tmp_path: Path) -> None:
    """Several processes (and threads) migrate the same empty database at the same moment."""
    url = f"sqlite:///{tmp_path / 'race.db'}"
    script = f"from heddle.ledger import open_ledger; open_ledger({url!r}).close()"
    processes = [subprocess.Popen([sys.executable, "-c", script]) for _ in range(2)]
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        ledgers = list(pool.map(lambda _: open_ledger(url), range(2)))
    assert [process.wait(timeout=60) for process in processes] == [0, 0]
    assert all(current_revision(ledger.engine) == head_revision() for ledger in ledgers)
    for ledger in ledgers:
        ledger.close()
