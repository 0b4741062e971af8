"""The torch engine swaps its weights in place: after ``load_weights`` it generates what an
engine started on those weights generates (greedy), its fingerprint follows, cached prefixes are
recomputed, and a file that does not fit is refused with the old weights still served."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from heddle.events.base import SamplingParams
from heddle.workers.engines.base import EngineError, GenerationRequest, WeightLoader
from heddle.workers.engines.torch_engine.engine import TorchEngine
from heddle.workers.engines.torch_engine.options import TorchEngineOptions

PROMPT = [(index * 37 + 11) % 256 for index in range(10)]


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread() -> Iterator[None]:
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def request(request_id: str, trajectory_id: str = "t") -> GenerationRequest:
    return GenerationRequest(request_id=request_id, trajectory_id=trajectory_id,
                             input_token_ids=PROMPT, max_new_tokens=8,
                             sampling=SamplingParams(temperature=0.0))  # fmt: skip


@pytest.fixture
async def engines() -> AsyncIterator[tuple[TorchEngine, TorchEngine]]:
    old, new = TorchEngine(TorchEngineOptions(seed=0)), TorchEngine(TorchEngineOptions(seed=5))
    await old.start()
    await new.start()
    yield old, new
    await old.close()
    await new.close()


def state_of(engine: TorchEngine) -> dict[str, torch.Tensor]:
    module = engine._require_core().model.module
    return {name: tensor.detach().clone() for name, tensor in module.state_dict().items()}


@pytest.mark.parametrize("form", ["pt", "safetensors", "pretrained"])
async def test_loaded_weights_generate_like_an_engine_started_on_them(
    engines: tuple[TorchEngine, TorchEngine], tmp_path: Path, form: str
) -> None:
    old, new = engines
    assert isinstance(old, WeightLoader)
    before = await old.generate(request("a0"))
    expected = await new.generate(request("b0"))
    assert before.output_token_ids != expected.output_token_ids  # different weights
    path = tmp_path / f"v1.{form}"
    if form == "pt":
        torch.save(state_of(new), path)
    elif form == "pretrained":  # a Hugging Face folder: the tied LM head is not written
        new._require_core().model.module.save_pretrained(path)
        assert "lm_head.weight" not in load_file(str(path / "model.safetensors"))
    else:
        save_file({k: v.contiguous() for k, v in state_of(new).items()}, str(path))
    await old.load_weights(str(path), weight_version=1)
    after = await old.generate(request("a1"))
    assert after.output_token_ids == expected.output_token_ids
    assert after.num_cached_tokens == 0  # the prefix cached before the swap was dropped
    assert old.fingerprint == new.fingerprint and old.weight_version == 1


async def test_weights_that_do_not_fit_are_refused_and_the_old_ones_stay(
    engines: tuple[TorchEngine, TorchEngine], tmp_path: Path
) -> None:
    old, _ = engines
    before = await old.generate(request("a0", "u"))
    state = state_of(old)
    name = next(name for name in state if ".layers." in name)  # not a tied weight
    for label, broken in {
        "missing": {k: v for k, v in state.items() if k != name},
        "shape": {**state, name: torch.zeros(3)},
    }.items():
        torch.save({k: v * 2 for k, v in broken.items()}, tmp_path / f"{label}.pt")
        with pytest.raises(EngineError, match="do not fit the model"):
            await old.load_weights(str(tmp_path / f"{label}.pt"), weight_version=2)
    (tmp_path / "junk.pt").write_bytes(b"not a state dict")
    with pytest.raises(EngineError, match="cannot read weights"):
        await old.load_weights(str(tmp_path / "junk.pt"), weight_version=2)
    again = await old.generate(request("a1", "v"))
    assert again.output_token_ids == before.output_token_ids and old.weight_version == 0
