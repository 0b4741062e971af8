"""One name per idea: a public module-level name (a class, a function, or an assigned constant
not starting with ``_``) is defined in one module of ``heddle`` only, so a reader who meets the
name knows which thing it is. Two definitions are either one idea (define it once, import it) or
two ideas (give each a name that says it). The exceptions are listed below, each with its reason.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import heddle

ALLOWED: dict[str, str] = {
    # Names private to their module in all but spelling.
    "T": "a TypeVar, local to each generic module",
    "R": "a TypeVar, local to each generic module",
    "M": "a TypeVar, local to each generic module",
    "log": "each module's logger",
    "logger": "each module's logger",
    "__all__": "each package's export list",
    "main": "each runnable module's entry point (python -m ...)",
    # A protocol several modules implement: the name is the contract.
    "KEY": "a figure module's protocol (heddle.bench.figures)",
    "TITLE": "a figure module's protocol (heddle.bench.figures)",
    "PAPER": "a figure module's protocol (heddle.bench.figures)",
    "VARIANTS": "a figure module's protocol (heddle.bench.figures)",
    "num_runs": "a figure module's protocol (heddle.bench.figures)",
    "run": "a figure module's protocol (heddle.bench.figures); heddle.examples.grpo's loop",
    "PROMPT": "an environment module's prompt template (heddle.workers.environments)",
}

PENDING: dict[str, str] = {
    # pending: sim/bench, resolved by the lead after merges (helpers `lab` and `worker` move
    # these modules; each name below has one definition there and one elsewhere).
    "BenchConfig": "bench/engine_figures.py, bench/predictor.py",
    "Cell": "sim/sweep.py, bench/predictor.py, bench/figures/tables.py",
    "CorpusError": "sim/corpus.py, workers/tools/search.py",
    "DEFAULT_LINK_BANDWIDTH_BYTES_S": "sim/config.py, workers/engines/sim_options.py",
    "Phase": "sim/hunt.py, bench/phases.py",
    "Plan": "policy/placement/bisection.py, sim/planning.py",
    "Progress": "policy/prediction/base.py, sim/simulator.py",
    "cell_traces": "sim/sweep.py, bench/predictor.py",
    "choose_plan": "policy/resources/plan_choice.py, sim/planning.py",
    "plan_makespan_s": "policy/resources/plan_estimate.py, sim/profile.py",
    "generation_job": "sim/sim_worker.py, workers/engines/sim_jobs.py",
    "run_cell": "sim/sweep.py, bench/predictor.py",
    "train": "predictor/train.py, bench/chaos_trainer.py",
    # heddle bench hops (on main since this test was written)
    "CONTROL_PLANE": "bench/hops_path.py, deploy/roles.py",
    "WORKER": "bench/hops_path.py, deploy/roles.py",
    "TOOLS": "bench/hops_path.py, bus/streams.py",
    "Call": "bench/hops_trace.py, bench/tools.py",
    # the simulator's event builders (sim/facts.py) and the worker's (workers/agent/records.py)
    "completed": "sim/facts.py, workers/agent/records.py",
    "failed": "sim/facts.py, workers/agent/records.py",
    "generated": "sim/facts.py, workers/agent/records.py",
    "generation_interrupted": "sim/facts.py, workers/agent/records.py",
    "generation_started": "sim/facts.py, workers/agent/records.py",
    "migrated": "sim/facts.py, workers/agent/records.py",
    "tool_called": "sim/facts.py, workers/agent/records.py",
    # workers/agent and bus/transient.py (helper `worker`)
    "is_transient": "bus/transient.py, workers/agent/publisher.py",
}

TO_FIX: dict[str, str] = {
    # being resolved on this branch
    "AgentShape": "policy/resources/plan_estimate.py, workloads/agent_shape.py",
    "CostModelOpt": "cli/rollout_flags.py, cli/up.py",
    "DEFAULT_SYSTEMS": "cli/sim.py, sim/study.py",
    "EVENTS": "bus/streams.py, lifecycle/archive_schema.py",
    "EngineOpt": "cli/rollout_flags.py, cli/worker.py",
    "HEDDLE_STREAMS": "bus/streams.py, deploy/roles.py",
    "Handler": "bus/micro.py, control/decider.py",
    "HardwareOpt": "cli/rollout_flags.py, cli/up.py",
    "HeartbeatOpt": "cli/rollout_flags.py, cli/worker.py",
    "KINDS": "bench/chaos.py, bench/fidelity/gaps.py, deploy/roles.py",
    "Key": "control/placement/admission.py, control/reshard/view.py",
    "MAX_PAYLOAD_BYTES": "bus/server.py, events/codec.py",
    "OPERATOR_EVENTS": "deploy/roles.py, events/operator.py",
    "Placement": "ledger/tables.py, policy/resources/nodes.py",
    "Preempt": "events/commands.py, workers/engines/sglang/local_queue.py",
    "Publisher": "bus/publisher.py, consumers/context_predictions.py",
    "Refusal": "control/leases.py, control/ops_requests.py",
    "RolloutSummary": "ledger/queries.py, rollout/summary.py",
    "SCHEMA_VERSION": "events/base.py, lifecycle/archive_schema.py",
    "SERVICE_NAME": "consumers/operations.py, predictor/wire.py",
    "SUBMISSION_ORDER_S": "control/placement/kv_gate.py, control/priority.py",
    "SYSTEMS": "bench/figures/overall.py, control/systems.py",
    "SeedOpt": "cli/rollout_flags.py, cli/up.py",
    "Source": "ledger/compare.py, rollout/sources.py",
    "StepReport": "examples/grpo.py, sim/async_steps.py",
    "TRACE_ENVIRONMENT": "consumers/predictors.py, control/prediction.py, rollout/submission.py",
    "TimeScaleOpt": "cli/rollout_flags.py, cli/worker.py",
    "TimeoutOpt": "cli/ops.py, cli/up.py",
    "TokenizerOpt": "cli/rollout_flags.py, cli/worker.py",
    "TrajectoryFacts": "policy/bound_facts.py, policy/scheduling/priority.py",
    "cancel": "cli/ops.py, rollout/submit.py",
    "consumer_names": "bus/purge.py, consumers/snapshot.py",
    "decode_snapshot": "workers/agent/migration.py, workers/engines/torch_engine/snapshot.py",
    "encode": "events/codec.py, workers/engines/sglang/protocol.py",
    "encode_snapshot": "workers/agent/migration.py, workers/engines/torch_engine/snapshot.py",
    "live_workers": "observability/probe.py, policy/placement/route_types.py",
    "num_items": "events/arrays.py, ledger/lean_decoder.py",
    "publish_weights": "integrations/slime.py, weights.py",
    "replay": "cli/replay.py, control/decider.py, workers/environments/base.py",
    "rollout_summary": "consumers/operations.py, ledger/queries.py, rollout/summary.py",
    "run_bench": "bench/cluster.py, cli/bench_integrations.py",
    "run_once": "bench/cluster.py, workers/tools/sandbox_calls.py",
    "serve": "consumers/projector.py, predictor/service.py, workers/agent/transport.py",
    "serve_command": "cli/predictor.py, cli/tools.py",
    "step_figures": "predictor/train.py, rollout/time_scale.py",
    "summarize": "bench/tools.py, rollout/summary.py, workloads/stats.py",
    "summary": "bench/reshard.py, rollout/submit.py",
    "supervise": "consumers/supervision.py, workers/engines/sglang/launcher.py",
    "table": "bench/figures/tables.py, lifecycle/archive_schema.py",
    "trajectories": "cli/bench_integrations.py, ledger/queries.py",
}


def defined_names(tree: ast.Module) -> list[str]:
    """The public names a module's body defines (classes, functions, assigned constants)."""
    names: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.append(node.name)
        elif isinstance(node, ast.Assign):
            names += [target.id for target in node.targets if isinstance(target, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names += [node.target.id] if node.value is not None else []
    return [name for name in names if not name.startswith("_") or name == "__all__"]


def definitions() -> dict[str, list[str]]:
    """Each public name and the modules (paths under ``heddle``) that define it."""
    root = Path(heddle.__file__).parent
    modules: dict[str, list[str]] = defaultdict(list)
    for path in sorted(root.rglob("*.py")):
        for name in set(defined_names(ast.parse(path.read_text()))):
            modules[name].append(path.relative_to(root).as_posix())
    return modules


def duplicates() -> dict[str, list[str]]:
    return {name: paths for name, paths in definitions().items() if len(paths) > 1}


def test_each_public_name_is_defined_once() -> None:
    exceptions = ALLOWED.keys() | PENDING.keys() | TO_FIX.keys()
    unlisted = {name: paths for name, paths in duplicates().items() if name not in exceptions}
    assert not unlisted, f"public names defined in several modules of heddle: {unlisted}"


def test_the_exceptions_are_still_needed() -> None:
    """An exception whose name is now defined once goes from the list (pending ones stay until
    the lead resolves them: the helpers' merges remove them)."""
    found = duplicates()
    stale = sorted(name for name in ALLOWED.keys() | TO_FIX.keys() if name not in found)
    assert not stale, f"listed exceptions no longer defined twice: {stale}"


def test_the_lists_do_not_overlap() -> None:
    assert not ALLOWED.keys() & PENDING.keys()
    assert not (ALLOWED.keys() | PENDING.keys()) & TO_FIX.keys()


def test_the_rule_sees_each_kind_of_definition() -> None:
    source = (
        "class A: ...\n"
        "def b(): ...\n"
        "async def c(): ...\n"
        "D = 1\n"
        "E: int = 2\n"
        "F: int\n"
        "_g = 3\n"
        "if True:\n    H = 4\n"
    )
    assert defined_names(ast.parse(source)) == ["A", "b", "c", "D", "E"]
