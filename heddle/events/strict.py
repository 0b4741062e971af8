"""Unknown fields in a message that comes from outside (a submission): found by path.

The event structs accept fields they do not know (a reader of an older schema must read a
newer stream), so a submission decoded with them would drop a misspelt field silently
(``max_stepz``: the default ``max_steps`` runs instead). ``unknown_fields`` walks the decoded
JSON beside the struct type it is meant for and names every object key the type does not
declare, at any depth (``trajectories[2].sampling.temprature``). A ``dict`` field (a spec's
``task``, a rollout's ``labels``) is free-form at this level: the schema names it as the
extension point, and its owner checks it (an environment checks its task).
"""

from __future__ import annotations

from typing import Any

from msgspec import inspect

MAX_UNKNOWN_NAMED = 5
"""Paths ``unknown_fields`` returns at most (the first ones, in document order)."""


def unknown_fields(value: Any, kind: Any) -> list[str]:
    """Paths of the keys of ``value`` (decoded JSON) that ``kind`` (a struct type, or a type
    holding structs) does not declare, in document order; at most ``MAX_UNKNOWN_NAMED``."""
    found: list[str] = []
    _walk(value, inspect.type_info(kind), "", found)
    return found[:MAX_UNKNOWN_NAMED]


def _walk(value: Any, info: inspect.Type, path: str, found: list[str]) -> None:
    if len(found) >= MAX_UNKNOWN_NAMED:
        return
    match info:
        case inspect.StructType() if isinstance(value, dict):
            fields = {field.encode_name: field for field in info.fields}
            tag_field = info.tag_field
            for key, item in value.items():
                field = fields.get(key)
                if field is None:
                    if key != tag_field:
                        found.append(f"{path}.{key}" if path else str(key))
                    continue
                _walk(item, field.type, f"{path}.{key}" if path else str(key), found)
        case inspect.ListType() | inspect.TupleType() | inspect.VarTupleType() if isinstance(
            value, list
        ):
            for index, item in enumerate(value):
                item_type = _item_type(info, index)
                if item_type is not None:
                    _walk(item, item_type, f"{path}[{index}]", found)
        case inspect.UnionType():
            structs = [t for t in info.types if isinstance(t, inspect.StructType)]
            if isinstance(value, dict) and len(structs) == 1:
                _walk(value, structs[0], path, found)
        case _:
            return  # scalars, free-form dicts, custom types (token arrays)


def _item_type(info: inspect.Type, index: int) -> inspect.Type | None:
    if isinstance(info, inspect.TupleType):
        return info.item_types[index] if index < len(info.item_types) else None
    if isinstance(info, (inspect.ListType, inspect.VarTupleType)):
        return info.item_type
    return None
