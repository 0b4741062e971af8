"""Everything Heddle takes from verl, in one place, written against verl 0.9.1
(``VERL_VERSION``): ``DataProto`` (``verl.protocol``), ``auto_await``
(``verl.utils.ray_utils``: sync or awaited calls, as verl's own managers are called) and
``compute_position_id_with_mask`` (``verl.utils.model``, the position ids of verl's agent
loop). A newer verl that moves one of these breaks here, not across the integration.

``require_verl`` raises ``ImportError`` naming the extra to install when verl is missing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

VERL_VERSION = "0.9.1"
"""The verl release this integration was written and tested against."""


def require_verl() -> None:
    try:
        import verl  # noqa: F401
    except ImportError as exc:
        raise ImportError(
            f"heddle.integrations.verl needs verl (written against {VERL_VERSION}): "
            "pip install 'heddle[verl]' (docs/integrations.md)"
        ) from exc


def data_proto() -> Any:
    """verl's ``DataProto`` class."""
    require_verl()
    from verl.protocol import DataProto

    return DataProto


def tensor_dict() -> Any:
    """``tensordict.TensorDict`` (what ``DataProto.batch`` is)."""
    from tensordict import TensorDict

    return TensorDict


def auto_await(func: Callable[..., Any]) -> Callable[..., Any]:
    """verl's ``auto_await``: the decorated coroutine function runs to its end when called
    without ``await`` (in a fresh thread when a loop runs) and is awaitable otherwise."""
    require_verl()
    from verl.utils.ray_utils import auto_await as verl_auto_await

    wrapped: Callable[..., Any] = verl_auto_await(func)
    return wrapped


def position_ids(attention_mask: Any) -> Any:
    """Position ids of ``attention_mask`` rows, as verl's agent loop computes them."""
    from verl.utils.model import compute_position_id_with_mask

    return compute_position_id_with_mask(attention_mask)


def tensordict_rows(batch: Any) -> list[dict[str, Any]]:
    """The rows of a ``TensorDict`` of prompts as verl's TQ agent-loop worker reads them
    (``AgentLoopWorkerTQ.generate_sequences``): a tensor's row, a ``NonTensorStack``'s item,
    a ``NonTensorData``'s one value for every row."""
    import torch
    from tensordict import NonTensorData, NonTensorStack

    columns = dict(batch.items())
    rows: list[dict[str, Any]] = []
    for i in range(len(batch)):
        row: dict[str, Any] = {}
        for key, value in columns.items():
            if isinstance(value, torch.Tensor):
                row[key] = value[i]
            elif isinstance(value, NonTensorStack):
                row[key] = value[i].data
            elif isinstance(value, NonTensorData):
                row[key] = value.data
        rows.append(row)
    return rows


def list_of_dict_to_tensordict(rows: list[dict[str, Any]]) -> Any:
    """verl's ``list_of_dict_to_tensordict`` (``verl.utils.tensordict_utils``): what its TQ
    worker stores per trajectory."""
    require_verl()
    from verl.utils.tensordict_utils import list_of_dict_to_tensordict as to_tensordict

    return to_tensordict(rows)


def is_data_proto(batch: Any) -> bool:
    """Whether ``batch`` is a legacy ``DataProto`` (the V1 trainer passes a ``TensorDict``)."""
    return hasattr(batch, "non_tensor_batch")
