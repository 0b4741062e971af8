"""The permission matrix of docs/deploy.md against a real nats-server with ``heddle deploy auth``'s
config: for every identity, what the server lets it publish and subscribe to.

Each row names subjects one identity must be refused (the findings of issue 35 among them: a
worker deleting or pulling from the control plane's durable, a trainer taking another's
records, anyone but the weights publisher announcing weights; a worker writing step events in
another worker's name or in none), the control plane's own subjects (its failure of a trajectory
no worker holds, its dead letters, which end a submission: each role dead-letters on its own
subject) and subjects it must be allowed.
``test_permission_matrix_semantics.py`` runs the allowed actions for real."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from heddle.deploy.roles import CONTROL_DURABLE, ROLE_KINDS

from .auth_server import AuthServer, auth_server, may_publish, may_subscribe

EVENTS = "HEDDLE_EVENTS"
API = "$JS.API.CONSUMER"
CONTROL = CONTROL_DURABLE
LEDGER = "ledger"


def owned_durable_uses(durable: str) -> list[str]:
    """Everything one may do to a durable of HEDDLE_EVENTS: create it (with or without a
    filter), inspect, delete, pull, acknowledge."""
    return [
        f"{API}.CREATE.{EVENTS}.{durable}",
        f"{API}.CREATE.{EVENTS}.{durable}.heddle.evt.>",
        f"{API}.DURABLE.CREATE.{EVENTS}.{durable}",
        f"{API}.INFO.{EVENTS}.{durable}",
        f"{API}.DELETE.{EVENTS}.{durable}",
        f"{API}.MSG.NEXT.{EVENTS}.{durable}",
        f"$JS.ACK.{EVENTS}.{durable}.1.5.5.0.0",
    ]


STREAM_ADMIN = [
    f"$JS.API.STREAM.DELETE.{EVENTS}",
    f"$JS.API.STREAM.PURGE.{EVENTS}",
    f"$JS.API.STREAM.UPDATE.{EVENTS}",
    "$JS.API.STREAM.CREATE.HEDDLE_OUT_x",
    "$JS.API.STREAM.PURGE.OBJ_heddle-payloads",
    "$JS.API.STREAM.DELETE.OBJ_heddle-payloads",
    f"{API}.LIST.{EVENTS}",
    f"{API}.NAMES.{EVENTS}",
]
"""No role but the control plane and operators."""
STEERING = [
    "heddle.cmd.worker.w01.abort",
    "heddle.cmd.worker.w01.drain",
    "heddle.cmd.worker.w01.run",
    "heddle.evt.traj.r1.t1.abort_requested",
    "heddle.evt.traj.r1.t1.reprioritize_requested",
    "heddle.evt.rollout.r1.cancel_requested",
    "heddle.evt.rollout.r1.cancelled",
    "heddle.evt.worker.w01.drain_requested",
    "heddle.ops.worker.drain",
    "heddle.ops.rollout.cancel",
    "heddle.ops.trajectory.abort",
    "heddle.ops.status",
]
"""Commands and steering: the control plane and operators only."""
DECISIONS = [
    "heddle.evt.traj.r1.t1.placed",
    "heddle.evt.traj.r1.t1.predicted",
    "heddle.evt.rollout.r1.finished",
    "heddle.evt.traj.r1.t1.submitted",
    "heddle.evt.rollout.r1.submitted",
    "heddle.out.grpo.r1.t1.completed",
]
"""The control plane's own records (and, through the operations service, submissions)."""
WEIGHTS_ANNOUNCEMENT = "heddle.evt.weights.3.published"
CONTROL_PLANE_OWN = [
    "heddle.evt.traj.r1.t1.failed.control_plane",
    "heddle.evt.deadletter.control_plane",
    "heddle.evt.deadletter",
]
"""A failure naming no worker, and a dead letter that ends a submission: the control plane's."""


@dataclass(frozen=True)
class Row:
    label: str
    allowed: list[str]
    denied: list[str]
    subscribe_allowed: list[str]
    subscribe_denied: list[str]


def matrix(server: AuthServer) -> list[Row]:
    def inbox(label: str) -> str:
        return f"_INBOX.{server.credentials[label].public_key}.probe"

    other_inbox = f"{inbox('operator')[:-6]}.>"
    everyone_but = [*STREAM_ADMIN, *STEERING, *DECISIONS, *CONTROL_PLANE_OWN]
    return [
        Row(
            "worker-w00",
            allowed=[
                "heddle.evt.traj.r1.t1.generated.worker-w00",  # its step events, in its name
                "heddle.evt.traj.r1.t1.completed.worker-w00",
                "heddle.evt.traj.r1.t1.failed.worker-w00",
                "heddle.evt.traj.r1.t1.migrated.worker-w00",
                "heddle.evt.deadletter.worker-w00",
                "heddle.evt.worker.w00.registered",
                "heddle.evt.worker.w00.failed",
                "heddle.evt.worker.w00.retired",  # it leaves for a re-shard
                "heddle.evt.traj.r1.t1.generation_interrupted.worker-w00",
                "heddle.evt.weights.3.loaded.worker-w00",
                "heddle.evt.weights.3.load_failed.worker-w00",
                "heddle.cmd.tool.default",
                "heddle.telemetry.worker.w00",
                "heddle.telemetry.heartbeat.w00",
                "heddle.cmd.worker.w01.migrate_in.w00",  # its hand-over, as its code sends it
                "heddle.cmd.worker.w01.run.w00",  # a command forwarded after a hand-over
                f"{API}.CREATE.HEDDLE_CMDS.worker-w00.heddle.cmd.worker.w00.>",
                f"{API}.MSG.NEXT.HEDDLE_CMDS.worker-w00",
                "$JS.ACK.HEDDLE_CMDS.worker-w00.1.5.5.0.0",
                f"{API}.CREATE.{EVENTS}.replay-1.heddle.evt.traj.r1.t1.>",
                f"{API}.MSG.NEXT.{EVENTS}.replay-1",
                "$O.heddle-payloads.M.bmFtZQ==",
                "$O.heddle-kv.C.chunk",
                "$JS.API.STREAM.PURGE.OBJ_heddle-kv",
                "$JS.API.DIRECT.GET.OBJ_heddle-weights.$O.heddle-weights.M.djE=",
            ],
            denied=[
                *owned_durable_uses(CONTROL),
                *owned_durable_uses(LEDGER),
                *everyone_but,
                WEIGHTS_ANNOUNCEMENT,
                "heddle.evt.deadletter.worker-w01",  # another's dead letters
                "heddle.evt.traj.r1.t1.generated.worker-w01",  # step events in another's name
                "heddle.evt.traj.r1.t1.completed.worker-w01",
                "heddle.evt.traj.r1.t1.failed.worker-w01",
                "heddle.evt.weights.3.loaded.worker-w01",  # another's weight report
                "heddle.evt.weights.3.loaded",
                "heddle.evt.traj.r1.t1.generated",  # in no one's name (stored before names)
                "heddle.evt.traj.r1.t1.completed",
                "heddle.evt.traj.r1.t1.failed",
                "heddle.evt.deadletter.ledger_projector",
                "heddle.evt.worker.w01.registered",  # another worker's events
                "heddle.evt.worker.w01.failed",
                "heddle.evt.worker.w01.retired",
                "heddle.evt.worker.w00.reshard_requested",  # the control plane decides it
                "heddle.telemetry.heartbeat.w01",
                "heddle.cmd.worker.w01.migrate_in.w01",  # a hand-over in another's name
                "heddle.cmd.worker.w01.migrate_in",
                "heddle.cmd.worker.w01.drain.w00",
                "heddle.evt.traj.r1.t1.tool_returned",
                f"{API}.CREATE.HEDDLE_CMDS.worker-w01.heddle.cmd.worker.w01.>",
                f"{API}.CREATE.HEDDLE_CMDS.worker-w00.heddle.cmd.worker.w01.>",
                f"{API}.CREATE.HEDDLE_CMDS.worker-w00",  # a filter the subject does not show
                f"{API}.MSG.NEXT.HEDDLE_CMDS.worker-w01",
                f"{API}.CREATE.{EVENTS}.replay-1.heddle.evt.>",
                f"{API}.CREATE.{EVENTS}.replay-1",
                f"{API}.CREATE.{EVENTS}",
                "$O.heddle-weights.M.djE=",  # published weights: read only
                "$JS.API.STREAM.PURGE.OBJ_heddle-weights",
                "$JS.API.STREAM.PURGE.OBJ_heddle-payloads",
                f"{API}.MSG.NEXT.HEDDLE_OUT_grpo.trainer",
            ],
            subscribe_allowed=[inbox("worker-w00")],
            subscribe_denied=["_INBOX.>", other_inbox, "heddle.>", "heddle.cmd.worker.w00.>"],
        ),
        Row(
            "trainer-grpo",
            allowed=[
                "heddle.ops.submit.grpo",
                "heddle.ops.cancel.grpo",
                "heddle.ops.summary.grpo",
                "heddle.evt.deadletter.trainer-grpo",  # a record it cannot read
                "$JS.API.STREAM.INFO.HEDDLE_OUT_grpo",
                f"{API}.CREATE.HEDDLE_OUT_grpo.batches",
                f"{API}.DURABLE.CREATE.HEDDLE_OUT_grpo.batches",
                f"{API}.MSG.NEXT.HEDDLE_OUT_grpo.batches",
                f"{API}.DELETE.HEDDLE_OUT_grpo.batches",
                "$JS.ACK.HEDDLE_OUT_grpo.batches.1.5.5.0.0",
                "$JS.API.DIRECT.GET.OBJ_heddle-payloads.$O.heddle-payloads.M.bmFtZQ==",
                "$JS.API.CONSUMER.CREATE.OBJ_heddle-payloads",
                "$JS.API.STREAM.CREATE.OBJ_heddle-submit-grpo",  # its upload bucket
                "$O.heddle-submit-grpo.M.cjE=",
                "$JS.API.STREAM.PURGE.OBJ_heddle-submit-grpo",
            ],
            denied=[
                *owned_durable_uses(CONTROL),
                *owned_durable_uses(LEDGER),
                *everyone_but,
                WEIGHTS_ANNOUNCEMENT,
                "heddle.ops.submit.ppo",  # another trainer's submissions
                "heddle.ops.cancel.ppo",
                "heddle.ops.summary.ppo",
                "heddle.evt.deadletter.trainer-ppo",
                "heddle.ops.rollout.info",  # the operators' queries
                "$JS.API.STREAM.INFO.HEDDLE_OUT_ppo",
                f"{API}.CREATE.HEDDLE_OUT_ppo.batches",
                f"{API}.MSG.NEXT.HEDDLE_OUT_ppo.batches",  # take another's records
                f"{API}.DELETE.HEDDLE_OUT_ppo.batches",  # delete another's durable
                "$JS.ACK.HEDDLE_OUT_ppo.batches.1.5.5.0.0",
                "$JS.API.STREAM.PURGE.HEDDLE_OUT_grpo",
                "$JS.API.STREAM.DELETE.HEDDLE_OUT_grpo",
                f"$JS.API.STREAM.INFO.{EVENTS}",
                f"{API}.CREATE.{EVENTS}",
                f"{API}.MSG.NEXT.{EVENTS}.replay-1",
                "heddle.evt.traj.r1.t1.completed",
                "heddle.evt.traj.r1.t1.failed",
                "heddle.cmd.tool.default",
                "$O.heddle-payloads.M.bmFtZQ==",  # read only: no overwriting a payload
                "$O.heddle-weights.M.djE=",
                "$O.heddle-submit-ppo.M.cjE=",  # another trainer's uploads
                "$JS.API.STREAM.PURGE.OBJ_heddle-submit-ppo",
                "$JS.API.DIRECT.GET.OBJ_heddle-submit-ppo",
            ],
            subscribe_allowed=[inbox("trainer-grpo")],
            subscribe_denied=["_INBOX.>", inbox("trainer-ppo"), "heddle.>", "heddle.out.grpo.>"],
        ),
        Row(
            "weights_publisher",
            allowed=[
                WEIGHTS_ANNOUNCEMENT,
                "$O.heddle-weights.M.djE=",
                "$JS.API.STREAM.PURGE.OBJ_heddle-weights",
                f"{API}.CREATE.{EVENTS}.replay-1.heddle.evt.weights.3.>",
                f"{API}.MSG.NEXT.{EVENTS}.replay-1",
            ],
            denied=[
                *owned_durable_uses(CONTROL),
                *owned_durable_uses(LEDGER),
                *everyone_but,
                "heddle.evt.weights.3.loaded.worker-w00",
                "heddle.evt.traj.r1.t1.completed",
                f"{API}.CREATE.{EVENTS}.replay-1.heddle.evt.traj.>",
                f"{API}.CREATE.{EVENTS}.replay-1",
                "$O.heddle-payloads.M.bmFtZQ==",
            ],
            subscribe_allowed=[inbox("weights_publisher")],
            subscribe_denied=["_INBOX.>", "heddle.>"],
        ),
        Row(
            "ledger_projector",
            allowed=[
                *owned_durable_uses(LEDGER),
                "heddle.evt.deadletter.ledger_projector",
                f"$JS.API.STREAM.MSG.GET.{EVENTS}",
                f"$JS.API.STREAM.INFO.{EVENTS}",
            ],
            denied=[
                *owned_durable_uses(CONTROL),
                *everyone_but,
                WEIGHTS_ANNOUNCEMENT,
                "heddle.evt.traj.r1.t1.generated",
                f"{API}.MSG.NEXT.{EVENTS}.replay-1",
                "$O.heddle-payloads.M.bmFtZQ==",
            ],
            subscribe_allowed=[inbox("ledger_projector")],
            subscribe_denied=["_INBOX.>", "heddle.>"],
        ),
        Row(
            "tool_executor",
            allowed=[
                "heddle.evt.traj.r1.t1.tool_returned",
                "heddle.evt.tools.tools00.registered",
                "heddle.evt.deadletter.tool_executor",
                f"{API}.CREATE.HEDDLE_TOOLS.tools-default",
                f"{API}.MSG.NEXT.HEDDLE_TOOLS.tools-default",
                "$JS.ACK.HEDDLE_TOOLS.tools-default.1.5.5.0.0",
            ],
            denied=[
                *owned_durable_uses(CONTROL),
                *owned_durable_uses(LEDGER),
                *everyone_but,
                WEIGHTS_ANNOUNCEMENT,
                "heddle.evt.traj.r1.t1.generated",
                "heddle.evt.traj.r1.t1.completed",
                "heddle.cmd.tool.default",
                f"{API}.MSG.NEXT.{EVENTS}.replay-1",
                f"{API}.CREATE.HEDDLE_CMDS.worker-w00",
            ],
            subscribe_allowed=[inbox("tool_executor")],
            subscribe_denied=["_INBOX.>", "heddle.>"],
        ),
        Row(
            "control_plane",
            allowed=[
                *owned_durable_uses(CONTROL),
                *owned_durable_uses(LEDGER),  # `heddle up` projects the ledger itself
                *STEERING[:3],
                *DECISIONS,
                *CONTROL_PLANE_OWN,
                "heddle.evt.deadletter.ledger_projector",  # `heddle up` projects the ledger
                "heddle.evt.worker.w01.drain_requested",
            ],
            denied=[WEIGHTS_ANNOUNCEMENT.replace("heddle.", "other.")],
            subscribe_allowed=["heddle.>", "_INBOX.>"],
            subscribe_denied=["other.>"],
        ),
        Row(
            "operator",
            allowed=[
                *STEERING,
                *STREAM_ADMIN,
                f"{API}.DELETE.{EVENTS}.{CONTROL}",
                "heddle.evt.deadletter.operator",
            ],
            denied=[
                *CONTROL_PLANE_OWN,
                "heddle.evt.traj.r1.t1.completed",
                "heddle.evt.traj.r1.t1.placed",
                WEIGHTS_ANNOUNCEMENT,
            ],
            subscribe_allowed=["heddle.>", "_INBOX.>"],
            subscribe_denied=["other.>"],
        ),
    ]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AuthServer]:
    with auth_server(tmp_path_factory.mktemp("matrix")) as started:
        yield started


@pytest.fixture(scope="module")
def rows(server: AuthServer) -> dict[str, Row]:
    return {row.label: row for row in matrix(server)}


LABELS = [
    "worker-w00",
    "trainer-grpo",
    "weights_publisher",
    "ledger_projector",
    "tool_executor",
    "control_plane",
    "operator",
]


@pytest.mark.parametrize("label", LABELS)
async def test_each_identity_may_publish_its_own_subjects_only(
    label: str, server: AuthServer, rows: dict[str, Row]
) -> None:
    row = rows[label]
    async with server.bus(label, provision=False) as bus:
        refused = [subject for subject in row.allowed if not await may_publish(bus, subject)]
        let_through = [subject for subject in row.denied if await may_publish(bus, subject)]
    assert refused == [], f"{label} was refused what its role needs"
    assert let_through == [], f"{label} was let through what its role must not do"


@pytest.mark.parametrize("label", LABELS)
async def test_each_identity_may_subscribe_to_its_own_inbox_only(
    label: str, server: AuthServer, rows: dict[str, Row]
) -> None:
    row = rows[label]
    async with server.bus(label, provision=False) as bus:
        for subject in row.subscribe_allowed:
            assert await may_subscribe(bus, subject), f"{label} refused {subject}"
        for subject in row.subscribe_denied:
            assert not await may_subscribe(bus, subject), f"{label} let subscribe {subject}"


def test_every_role_has_a_row() -> None:
    assert {label.split("-")[0] for label in LABELS} == set(ROLE_KINDS)
