"""Task files: JSONL, one task object per line (at most ``heddle.traces.MAX_LINE_BYTES``),
validated against the environment.

Sample files ship in ``heddle/data/tasks`` (``SAMPLE_TASKS``) for demos and tests. A trace file
is also a task file of the ``trace`` environment (one trace line per task).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from heddle.traces import iter_lines
from heddle.workers.environments.base import TaskError
from heddle.workers.environments.registry import validate_task

SAMPLE_TASKS_DIR = Path(__file__).resolve().parents[2] / "data" / "tasks"
SAMPLE_TASKS = {name: SAMPLE_TASKS_DIR / f"{name}.jsonl" for name in ("math", "coding", "search")}


def read_tasks(path: Path, environment: str) -> list[dict[str, Any]]:
    """The tasks of a JSONL file, each checked by ``environment``; ``TaskError`` names the line
    and the field of the first bad task."""
    tasks = []
    try:
        lines = list(iter_lines(path, "the task file"))
    except ValueError as exc:
        raise TaskError(str(exc)) from None
    for line_number, line in lines:
        try:
            task = msgspec.json.decode(line)
        except msgspec.DecodeError as exc:
            raise TaskError(f"{path}:{line_number}: not valid JSON ({exc})") from None
        if not isinstance(task, dict):
            raise TaskError(f"{path}:{line_number}: a task must be a JSON object")
        try:
            validate_task(environment, task)
        except TaskError as exc:
            raise TaskError(f"{path}:{line_number}: {exc}") from None
        tasks.append(task)
    if not tasks:
        raise TaskError(f"{path}: the task file holds no tasks")
    return tasks
