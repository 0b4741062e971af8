"""Where a plan's workers run: its GPU budget split into nodes of ``gpus_per_node`` GPUs (the
last one smaller when the budget is not a multiple), and each worker, in plan order, on the
first node with enough free GPUs, on the lowest ones free there. A TP group lives inside one node
(NVLink), so a re-shard can only merge workers of one node (``heddle.control.reshard``). The
simulator places its workers so, and a local deployment tells its workers their GPUs so."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class GpuAssignment:
    node: str
    gpu_ids: tuple[int, ...]
    """The node's GPUs the worker uses."""


def node_name(index: int) -> str:
    return f"n{index:02d}"


def pack_nodes(tp_degrees: Sequence[int], num_gpus: int, gpus_per_node: int) -> list[GpuAssignment]:
    """Each worker's node and GPUs, in plan order; ``ValueError`` when a worker does not fit
    (more GPUs than the budget, or a degree above a node's size)."""
    if num_gpus < 1 or gpus_per_node < 1:
        raise ValueError("num_gpus and gpus_per_node must be >= 1")
    sizes = [min(gpus_per_node, num_gpus - start) for start in range(0, num_gpus, gpus_per_node)]
    free = [list(range(size)) for size in sizes]
    placements: list[GpuAssignment] = []
    for index, tp in enumerate(tp_degrees):
        node = next((n for n, gpus in enumerate(free) if len(gpus) >= tp), None)
        if tp < 1 or node is None:
            raise ValueError(
                f"worker {index} of TP {tp} fits no node of {gpus_per_node} GPUs "
                f"(plan {list(tp_degrees)} on {num_gpus} GPUs)"
            )
        taken, free[node] = free[node][:tp], free[node][tp:]
        placements.append(GpuAssignment(node_name(node), tuple(taken)))
    return placements
