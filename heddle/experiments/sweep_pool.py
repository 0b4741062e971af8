"""Running a function over sweep cells, in this process or in worker processes."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import TypeVar

_C = TypeVar("_C")
_S = TypeVar("_S")
_R = TypeVar("_R")


def run_in_pool(
    run: Callable[[_C, _S], _R], cells: Sequence[_C], config: _S, jobs: int
) -> Iterator[_R]:
    """``run(cell, config)`` of every cell, in the order they finish: ``jobs`` worker
    processes (``run`` then a module-level function), or this process for 1."""
    if jobs == 1:
        yield from (run(cell, config) for cell in cells)
        return
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(run, cell, config) for cell in cells]
        for future in as_completed(futures):
            yield future.result()
