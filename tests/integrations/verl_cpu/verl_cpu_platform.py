"""verl on CPU, for the test that runs ``python -m verl.trainer.main_ppo`` without a GPU.

verl 0.9.1 knows CUDA, ROCm and NPU platforms only (``verl.plugin.platform``) and falls back to
CUDA. This registers a ``cpu`` platform (picked with ``VERL_PLATFORM=cpu``): the device is
``cpu``, collectives are gloo, and each verl worker still takes one Ray ``GPU`` resource (verl
counts GPUs to place its workers; the test's Ray cluster declares ``num_gpus``). verl imports
this module in each of its processes through ``VERL_USE_EXTERNAL_MODULES``.
"""

from __future__ import annotations

import contextlib
import types
from typing import Any

import torch
from verl.plugin.platform.platform_base import PlatformBase
from verl.plugin.platform.platform_manager import PlatformRegistry


def _device_module() -> types.ModuleType:
    """``torch.cpu`` with the few calls verl makes on a device module that it lacks."""
    module = types.ModuleType("heddle_test_cpu_device")
    for name in dir(torch.cpu):
        if not name.startswith("__"):
            setattr(module, name, getattr(torch.cpu, name))
    module.current_device = lambda: "cpu"
    module.set_device = lambda index: None
    module.empty_cache = lambda: None
    module.is_available = lambda: True
    module.device_count = lambda: 1
    module.manual_seed = torch.manual_seed
    module.manual_seed_all = torch.manual_seed
    module.memory_allocated = lambda *a, **k: 0
    module.memory_reserved = lambda *a, **k: 0
    module.max_memory_allocated = lambda *a, **k: 0
    module.max_memory_reserved = lambda *a, **k: 0
    module.reset_peak_memory_stats = lambda *a, **k: None
    module.mem_get_info = lambda *a, **k: (0, 0)
    module.get_device_name = lambda *a, **k: "cpu"
    return module


_DEVICE = _device_module()


@PlatformRegistry.register(platform="cpu")
class PlatformCPU(PlatformBase):
    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> types.ModuleType:
        return _DEVICE

    def is_available(self) -> bool:
        return True

    def current_device(self) -> Any:
        # verl passes this to torch as a device (``.to(get_device_id())``): an int means CUDA.
        return "cpu"

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        return None

    def synchronize(self, device_index: int | None = None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CUDA_VISIBLE_DEVICES"

    @contextlib.contextmanager
    def nvtx_range(self, msg: str) -> Any:
        yield

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def ray_resource_name(self) -> str:
        return "GPU"

    def ray_resource_options(self, num_gpus: float) -> dict[str, Any]:
        return {"num_gpus": num_gpus}

    def ray_noset_envvars(self) -> list[str]:
        return ["RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"]

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> Any:
        return None


def _one_backend_per_device(init_process_group: Any) -> Any:
    """verl asks for ``cpu:gloo,<device>:<backend>``, which torch refuses when the device is
    the CPU itself (``cpu:gloo,cpu:gloo``): keep each device's first backend."""

    def init(*args: Any, backend: str | None = None, **kwargs: Any) -> Any:
        if backend and "," in backend:
            pairs = dict(reversed([part.split(":", 1) for part in backend.split(",")]))
            backend = ",".join(f"{device}:{name}" for device, name in pairs.items())
        return init_process_group(*args, backend=backend, **kwargs)

    return init


if not getattr(torch.distributed.init_process_group, "_heddle_cpu", False):
    torch.distributed.init_process_group = _one_backend_per_device(
        torch.distributed.init_process_group
    )
    torch.distributed.init_process_group._heddle_cpu = True  # type: ignore[attr-defined]


def _register_fsdp_on_cpu() -> None:
    """verl registers its FSDP engines for ``cuda`` and ``npu``; the same classes on ``cpu``."""
    from verl.workers.engine.base import EngineRegistry
    from verl.workers.engine.fsdp.transformer_impl import (
        FSDPEngineWithLMHead,
        FSDPEngineWithValueHead,
    )

    engines = EngineRegistry._engines
    for model_type, engine in (("language_model", FSDPEngineWithLMHead),
                               ("value_model", FSDPEngineWithValueHead)):  # fmt: skip
        for backend in ("fsdp", "fsdp2"):
            if "cpu" not in engines.get(model_type, {}).get(backend, {}):
                register = EngineRegistry.register
                register(model_type=model_type, backend=backend, device="cpu")(engine)


_register_fsdp_on_cpu()
