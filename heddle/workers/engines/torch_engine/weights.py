"""Weight swaps for the torch engine: read a state dict, check it fits the model, copy it in.

A version's weights are one file: a ``torch.save`` state dict (``.pt``/``.bin``, read with
``weights_only=True``: tensors only, no pickled code) or a ``.safetensors`` file, or a folder
holding ``model.safetensors`` or ``pytorch_model.bin`` (a ``save_pretrained`` checkpoint). The
state dict must name exactly the model's parameters and buffers with their shapes: it is checked
whole before any tensor is copied, so a refused file leaves the model as it was. A tied weight
(one tensor under two names, e.g. an embedding shared with the LM head) may come under either
name alone, as ``save_pretrained`` writes it (slime's and verl's Hugging Face checkpoints too).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

_FOLDER_FILES = ("model.safetensors", "pytorch_model.bin")


def read_state_dict(path: str) -> dict[str, torch.Tensor]:
    """The tensors at ``path`` (see the module docstring), on the CPU; ``ValueError`` naming
    what is wrong with the file."""
    file = Path(path)
    if file.is_dir():
        found = [file / name for name in _FOLDER_FILES if (file / name).is_file()]
        if not found:
            raise ValueError(f"weights folder {path} holds none of {', '.join(_FOLDER_FILES)}")
        file = found[0]
    if not file.is_file():
        raise ValueError(f"no weights file at {path}")
    try:
        if file.suffix == ".safetensors":
            from safetensors.torch import load_file

            state: Any = load_file(str(file), device="cpu")
        else:
            state = torch.load(file, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch and safetensors raise many kinds for a bad file
        raise ValueError(f"cannot read weights {file}: {type(exc).__name__}: {exc}") from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ValueError(f"weights {file} are not a state dict of tensors")
    return state


def tied_names(module: Any) -> dict[str, str]:
    """Each name of the module's state that shares its tensor with an earlier name: that name."""
    first: dict[int, str] = {}
    tied: dict[str, str] = {}
    for name, tensor in module.state_dict().items():
        pointer = tensor.untyped_storage().data_ptr()
        if pointer in first:
            tied[name] = first[pointer]
        else:
            first[pointer] = name
    return tied


def with_tied(module: Any, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``state`` with a tied weight given under one of its names filled in under the other."""
    filled = dict(state)
    for name, source in tied_names(module).items():
        if name not in filled and source in filled:
            filled[name] = filled[source]
        elif source not in filled and name in filled:
            filled[source] = filled[name]
    return filled


def check_state_dict(module: Any, state: dict[str, torch.Tensor]) -> None:
    """``ValueError`` unless ``state`` has exactly the module's keys and shapes (a tied weight
    under one of its names counts for both)."""
    state = with_tied(module, state)
    expected = module.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        raise ValueError(
            f"weights do not fit the model: missing {missing[:3]}, unexpected {unexpected[:3]}"
        )
    for name, tensor in expected.items():
        if tuple(state[name].shape) != tuple(tensor.shape):
            raise ValueError(
                f"weights do not fit the model: {name} has shape {tuple(state[name].shape)}, "
                f"the model's is {tuple(tensor.shape)}"
            )


def copy_state_dict(module: Any, state: dict[str, torch.Tensor]) -> None:
    """Copy ``state`` into the module's tensors in place (dtype and device converted)."""
    state = with_tied(module, state)
    check_state_dict(module, state)
    with torch.no_grad():
        for name, tensor in module.state_dict().items():
            tensor.copy_(state[name])
