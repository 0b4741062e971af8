"""Replay: rebuild ledgers from the event stream, verify the live ledger, export traces.

``open_replay(settings, rollout_id, live=...)`` yields a ``ReplaySession`` whose ``ledger`` is a
fresh SQLite ledger rebuilt from the stream; ``await verify()`` compares it with the live ledger
as of the live position (never writing the live ledger) and ``export_trace(path)`` writes the
JSONL trace format. Further analyses (timelines,
what-if re-simulation) read ``session.ledger`` or ``trace_of(session.ledger)``.

Modules: ``session`` (``open_replay``, ``ReplaySession``, ``verify``), ``rebuild`` (rebuilding a
ledger from the stream, everything or one rollout), ``trace_export`` (``trace_of`` and
``export_trace``: recorded rollouts as JSONL traces).
"""

from heddle.replay.rebuild import RebuildStats, rebuild_ledger, replay_query
from heddle.replay.session import ReplaySession, VerifyReport, open_replay
from heddle.replay.trace_export import export_trace, trace_of

__all__ = [
    "RebuildStats",
    "ReplaySession",
    "VerifyReport",
    "export_trace",
    "open_replay",
    "rebuild_ledger",
    "replay_query",
    "trace_of",
]
