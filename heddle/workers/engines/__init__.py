"""The engine registry: engine name -> (typed options, factory), imported lazily.

An entry names two import targets as ``"module:attribute"`` strings, so nothing heavy is imported
until that engine is used (the CLI must not import torch for a sim worker):

- ``options``: a frozen dataclass whose fields are the engine's options. Each field has a default
  and may carry ``metadata={"help": "..."}``. Its module must import only cheap things.
- ``factory``: a callable ``(options) -> Engine`` returning a not-yet-started engine.

``create_engine("sim", {"time_scale": "100"})`` parses raw strings (from the CLI's
``--time-scale 100`` or ``--opt time_scale=100``) into the options dataclass, then calls the
factory. Unknown or malformed options raise ``EngineOptionError`` (a ``ValueError``) naming the
option and the accepted ones. Engine engineers add one ``EngineEntry`` line to ``ENGINES``.

Modules: ``base`` (the ``Engine`` protocol), ``simulated`` (engine ``sim``: the calibrated
batching model in scaled real time; its module is not named ``sim``, which is the simulator,
``heddle.sim``) with ``simulated_options`` (its options, a cheap import) and ``simulated_jobs``
(between the ``Engine`` API and its ``BatchingModel``); subpackages ``torch_engine/`` (engine
``torch``: continuous batching on PyTorch + transformers) and ``sglang/`` (a SGLang server over
its native HTTP API).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from heddle.workers.engines.base import Engine
from heddle.workers.engines.options import (
    EngineOptionError,
    OptionInfo,
    describe_options,
    parse_options,
)

__all__ = [
    "ENGINES",
    "EngineEntry",
    "EngineOptionError",
    "OptionInfo",
    "create_engine",
    "engine_entry",
    "engine_names",
]


@dataclass(frozen=True, slots=True)
class EngineEntry:
    name: str
    options: str
    """``module:Dataclass`` of the engine's options (a cheap import)."""
    factory: str
    """``module:callable`` taking the options dataclass and returning an ``Engine``."""
    summary: str

    def options_type(self) -> type[Any]:
        return _load(self.options, self.name)

    def make_factory(self) -> Callable[[Any], Engine]:
        return _load(self.factory, self.name)

    def describe(self) -> list[OptionInfo]:
        return describe_options(self.options_type())


ENGINES: dict[str, EngineEntry] = {
    entry.name: entry
    for entry in (
        EngineEntry(
            name="sim",
            options="heddle.workers.engines.simulated_options:SimulatedEngineOptions",
            factory="heddle.workers.engines.simulated:create_simulated_engine",
            summary="calibrated cost model in scaled real time (no GPU)",
        ),
        EngineEntry(
            name="sglang",
            options="heddle.workers.engines.sglang.options:SglangEngineOptions",
            factory="heddle.workers.engines.sglang.launcher:create_sglang_engine",
            summary="a SGLang server over HTTP (--url URL, or --launch --model PATH --tp N)",
        ),
        EngineEntry(
            name="torch",
            options="heddle.workers.engines.torch_engine.options:TorchEngineOptions",
            factory="heddle.workers.engines.torch_engine.engine:create_torch_engine",
            summary="continuous batching on PyTorch (--model tiny|PATH, --device cpu|cuda)",
        ),
    )
}


def engine_names() -> list[str]:
    """Registered engine names, for CLI choices."""
    return sorted(ENGINES)


def engine_entry(name: str) -> EngineEntry:
    try:
        return ENGINES[name]
    except KeyError:
        raise EngineOptionError(
            f"unknown engine {name!r}; choose one of {', '.join(engine_names())}"
        ) from None


def create_engine(name: str, raw_options: Mapping[str, str] | None = None) -> Engine:
    """Build (not start) the engine ``name`` from string options; see the module docstring."""
    entry = engine_entry(name)
    options = parse_options(entry.options_type(), raw_options or {}, what=f"engine {name!r}")
    return entry.make_factory()(options)


def _load(target: str, engine: str) -> Any:
    module_name, _, attribute = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise EngineOptionError(
            f"engine {engine!r} is not available here: cannot import {module_name} ({exc})"
        ) from None
    try:
        return getattr(module, attribute)
    except AttributeError:
        raise EngineOptionError(f"engine {engine!r}: {module_name} has no {attribute}") from None
