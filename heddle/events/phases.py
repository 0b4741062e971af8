"""Where a trajectory stands in its lifecycle: the one phase enum of every component.

A trajectory's lifecycle::

    PENDING --placed--> READY --engine--> GENERATING --output--> GENERATED --tool call--> IN_TOOL
                          ^                                          |                      |
                          +------------------ tool result -----------|----------------------+
                                                                     +--end--> DONE         |
                                                  HANDED_OVER <--migrated-- MIGRATING <-----+

Each component sees it from where it stands and so uses a subset, named in its docstring:

* the worker's event fold (``heddle.workers.agent.trajectory_log``): READY, GENERATING, GENERATED,
  IN_TOOL, DONE;
* the worker's command table (``heddle.workers.agent.decisions``/``table``): ABSENT, READY,
  GENERATING, IN_TOOL, HANDED_OVER, DONE;
* the simulated data plane (``heddle.sim``): PENDING, READY, GENERATING, IN_TOOL, MIGRATING, DONE.

The values are stable strings; no wire format or table stores them today. The ledger's
``status`` column is a different, stored vocabulary (``heddle.ledger.statuses``).
"""

from __future__ import annotations

import enum


class TrajectoryPhase(enum.Enum):
    """One trajectory's lifecycle phase, as one observer (worker, simulator) sees it."""

    ABSENT = "absent"
    """The observer holds no record of it (a worker that never hosted it, or restarted since)."""
    PENDING = "pending"
    """Submitted, not started yet."""
    READY = "ready"
    """The next step can start: nothing ran yet, or the last tool result is known (it waits for
    the control plane's command or is about to be submitted to an engine)."""
    GENERATING = "generating"
    """A generation is in an engine (queued, running or preempted there) and has no result yet;
    after a crash it runs again."""
    GENERATED = "generated"
    """A generation finished; the environment has not yet turned it into a tool call or an end."""
    IN_TOOL = "in_tool"
    """A tool call is out: the trajectory holds no engine slot, its KV stays cached, and the
    step after it waits for the result."""
    MIGRATING = "migrating"
    """Its KV is on the wire to another worker (in a tool gap); the next step waits for it."""
    HANDED_OVER = "handed_over"
    """Migrated away from this observer: commands for it go to the worker it went to."""
    DONE = "done"
    """Completed, or failed for good."""

    @property
    def is_hosted(self) -> bool:
        """A worker holding it in this phase is responsible for its progress (READY,
        GENERATING, IN_TOOL: the worker's own phases of a trajectory it runs)."""
        return self in (TrajectoryPhase.READY, TrajectoryPhase.GENERATING, TrajectoryPhase.IN_TOOL)
