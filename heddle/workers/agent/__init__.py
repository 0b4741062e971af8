"""The rollout worker agent: runs the trajectories placed on one inference engine.

Layout (one concern per module):

- ``trajectory_log``: a trajectory's log, an idempotent fold over its events (live state and
  resume);
- ``decisions``: the one pure decision on every command, ``decide(state, command)`` (the
  worker's mode and the actions to carry out; its state diagram in the docstring);
- ``table``: the local trajectory table (hosted trajectories, each in one ``HostingState``, and
  what only this worker knows);
- ``steps``: running steps (generate, environment, publish); ``generation``: a step's engine
  request and the weight gate it passes; ``trajectory_events``: publishing a trajectory's events,
  tool calls and endings; ``records`` builds what is published;
- ``resume``: rebuilding a trajectory from the stream; ``migration``: handing one over;
- ``commands``: the one dispatcher, carrying out every action of a decision; ``segments``: a
  trajectory's steps as a task, what happens when they rest, and what stops them (preempt,
  abort, drop); ``telemetry``: heartbeats and load reports;
- ``agent``: the lifecycle; ``transport``: commands and events over ``heddle.bus``.
- ``config``: one agent's configuration; ``ports``: what it needs from the outside world, as small
  protocols; ``errors``: why a command is not acknowledged, why a step cannot go on;
- ``caps``: a trajectory's caps and endings (pure); ``weights``: ``LoadWeights`` carried out at a
  safe point; ``reshards``: a worker's part in a re-shard (``Retire``, ``Reshard``);
  ``publisher``: publishing that retries with the same id until stored.
"""

from heddle.workers.agent.agent import WorkerAgent
from heddle.workers.agent.config import WorkerConfig
from heddle.workers.agent.errors import WorkerFailing, WorkerStopping

__all__ = ["WorkerAgent", "WorkerConfig", "WorkerFailing", "WorkerStopping"]
