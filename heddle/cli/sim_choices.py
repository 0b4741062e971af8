"""Checks of the flags that `heddle sim compare` and `heddle sim sweep` share: model and system
names."""

from __future__ import annotations

from heddle.control.systems import SYSTEMS
from heddle.errors import UserError
from heddle.policy.cost.model import MODELS


def model_name(model: str) -> str:
    """``qwen3-32b`` or the short ``32b``."""
    name = model if model in MODELS else f"qwen3-{model.lower()}"
    if name not in MODELS:
        raise UserError(f"unknown --model {model!r}; choose one of {sorted(MODELS)}")
    return name


def system_names(systems: str) -> list[str]:
    """Comma-separated registry names; ``all`` is every registered system."""
    if systems.strip() == "all":
        return list(SYSTEMS)
    names = [name.strip() for name in systems.split(",") if name.strip()]
    if not names:
        raise UserError("--systems is empty; name at least one system")
    unknown = [name for name in names if name not in SYSTEMS]
    if unknown:
        raise UserError(f"unknown system {unknown[0]!r}; choose from {', '.join(SYSTEMS)}")
    return list(dict.fromkeys(names))
