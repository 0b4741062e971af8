"""The ledger: the only Heddle code that imports ``sqlalchemy``.

A SQL projection of the event stream (SQLite file by default, PostgreSQL in production; schema
only through the Alembic migrations in ``migrations/``)::

    ledger = open_ledger(settings.ledger_url)           # migrates an empty database
    writer = LedgerWriter(ledger, consumer="ledger")     # rows + position in one transaction
    writer.project([(stream_sequence, event), ...])      # skips what is at/below the position,
                                                         # refuses a batch that skips ahead
    queries.rollout_totals(ledger, rollout_id)           # reads for CLI, status, client

Tables: rollouts, trajectories, steps (counts, not token ids: the stream keeps those), workers,
placements, migrations, predictions, dead_letters, consumer_positions (``heddle.ledger.tables``);
each ``status`` column is a typed ``StrEnum`` (``heddle.ledger.statuses``).
The fold from events to rows is pure (``heddle.ledger.fold``), so a replay into a fresh ledger
rebuilds the same rows. The live consumer that feeds it from the stream is
``heddle.controlplane.projector`` (``Projector``, ``catch_up``): the ledger itself knows no bus.

Modules: ``database`` (connections, engines tuned per backend, schema checked on open), ``migrate``
(Alembic migrations), ``tables`` (the schema), ``statuses`` (each table's ``status`` enum), ``rows``
(in-memory rows of the projection), ``fold`` (the pure fold of events into rows) with ``fold_steps``
(step events), ``fold_workers`` (worker events), ``fold_records`` (rows an event makes whole:
placements, predictions, migration requests, dead letters) and ``fold_operator`` (operator events),
``gated_fold`` (the event gate in front of the fold, its state kept in the rows it guards),
``lean_decoder`` (an event decoder that counts token lists), ``batch_rows`` (the rows one batch
touches), ``row_cache`` (those rows, loaded for the writer) with ``keyed_reads`` (rows by
composite key, through the primary-key index), ``upserts`` (bulk ``INSERT ... ON CONFLICT``),
``writer`` (``LedgerWriter``: a batch and the stream position in one transaction),
``queries`` (reads for the CLI, status, client and deciders), ``snapshot`` (a consistent read-only
snapshot as of one stream position), ``snapshot_store`` (ledger snapshots: a rebuild's SQLite
file, seeding a replay, restoring an empty ledger), ``compare`` (table-by-table comparison of
two ledgers), ``integrity`` (a damaged database recognised, checked for, and set aside).
"""

from heddle.ledger import queries
from heddle.ledger.database import Ledger, create_ledger_engine, open_ledger
from heddle.ledger.migrate import current_revision, head_revision, upgrade
from heddle.ledger.statuses import MigrationStatus, RolloutStatus, TrajectoryStatus, WorkerStatus
from heddle.ledger.tables import PROJECTED_TABLES
from heddle.ledger.writer import LEDGER_CONSUMER, LedgerWriter, PositionConflict, PositionGap

__all__ = [
    "LEDGER_CONSUMER",
    "PROJECTED_TABLES",
    "Ledger",
    "LedgerWriter",
    "MigrationStatus",
    "PositionConflict",
    "PositionGap",
    "RolloutStatus",
    "TrajectoryStatus",
    "WorkerStatus",
    "create_ledger_engine",
    "current_revision",
    "head_revision",
    "open_ledger",
    "queries",
    "upgrade",
]
