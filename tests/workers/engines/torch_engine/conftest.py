"""Fixtures of the torch engine tests: one intra-op thread, and the built-in tiny model."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from heddle.workers.engines.torch_engine.loading import LoadedModel, load_model
from heddle.workers.engines.torch_engine.options import TorchEngineOptions


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread() -> Iterator[None]:
    """One intra-op thread: on a shared 2-core machine more threads oversubscribe and crawl."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="module")
def tiny() -> LoadedModel:
    return load_model(TorchEngineOptions())
