"""A CPU platform for verl 0.9.1 (test-only): lets verl's real Ray trainer (FSDP2 actor, vLLM rollout server) run on
a machine without an accelerator, for the scale tests (``tests/integration/run/test_verl_backend_cpu.py``).

Loaded in every process that imports verl through verl's own plugin mechanism::

    VERL_USE_EXTERNAL_MODULES=verl_cpu_platform,pc_pipelines.training.verl_vllm_compat
    VERL_PLATFORM=cpu
    PYTHONPATH=<repo>/tests/support:...

(passed to Ray's workers with ``runtime_env={"env_vars": ...}``, see :func:`runtime_env`). It is imported by its
bare name from ``tests/support`` because verl's wheel ships a top-level ``tests`` package that shadows ours. Ray
must be started with one fake GPU slot (``ray.init(num_gpus=1)``): verl's resource checks and placement groups count ``GPU`` only, and this platform names ``GPU`` as its Ray resource.

What it does: registers :class:`PlatformCPU` as ``cpu`` (device ``cpu``, gloo, ``torch.cpu`` with no-op memory and
stream calls), registers verl's FSDP engines for device ``cpu`` (verl registers them for cuda / npu only) and
patches verl's process-group backend string (``cpu:gloo,cpu:gloo`` is refused by torch: plain ``gloo``) and its
Qwen token builder's newline check (the toy tokenizer has no newline). Nothing here is needed on a GPU cluster; what a GPU cluster needs as well lives in
:mod:`pc_pipelines.training.verl_vllm_compat`.
"""

from __future__ import annotations

import os
import types
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from verl.plugin.platform.platform_base import PlatformBase
from verl.plugin.platform.platform_manager import PlatformRegistry

MODULES = "verl_cpu_platform,pc_pipelines.training.verl_vllm_compat"
HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def env_vars() -> dict[str, str]:
    """The environment every verl process needs for this platform (the driver's and Ray workers')."""
    path = os.environ.get("PYTHONPATH", "")
    return {
        "VERL_USE_EXTERNAL_MODULES": MODULES,
        "VERL_PLATFORM": "cpu",
        "PYTHONPATH": os.pathsep.join(p for p in (str(HERE), str(ROOT), path) if p),
        "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"),
        "VLLM_CPU_OMP_THREADS_BIND": "nobind",
        "VLLM_TARGET_DEVICE": "cpu",
        "OMP_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }


def runtime_env() -> dict[str, Any]:
    return {"env_vars": env_vars()}


def _zero(*_a, **_k) -> int:
    return 0


def _none(*_a, **_k) -> None:
    return None


class _Stream:
    def __init__(self, *_a, **_k) -> None:
        pass

    def synchronize(self) -> None:
        pass

    def wait_stream(self, *_a) -> None:
        pass

    def wait_event(self, *_a) -> None:
        pass

    def record_event(self, *_a):
        return _Event()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass


class _Event(_Stream):
    def record(self, *_a) -> None:
        pass

    def query(self) -> bool:
        return True

    def elapsed_time(self, *_a) -> float:
        return 0.0


def _mem_get_info(*_a, **_k) -> tuple[int, int]:
    import psutil

    vm = psutil.virtual_memory()
    return int(vm.available), int(vm.total)


class _CPUDevice(types.ModuleType):
    """``torch.cpu`` plus the CUDA-style calls verl makes on its device module (memory and stream calls: no-ops)."""

    def __init__(self) -> None:
        super().__init__("verl_cpu_device")
        self.empty_cache = _none
        self.ipc_collect = _none
        self.synchronize = _none
        self.set_device = _none
        self.set_per_process_memory_fraction = _none
        self.reset_peak_memory_stats = _none
        self.memory_allocated = _zero
        self.memory_reserved = _zero
        self.max_memory_allocated = _zero
        self.max_memory_reserved = _zero
        self.mem_get_info = _mem_get_info
        self.device_count = lambda: 1
        self.current_device = lambda: "cpu"
        self.is_available = lambda: True
        self.get_device_name = lambda *_a: "cpu"
        self.get_rng_state = lambda *_a, **_k: torch.get_rng_state()
        self.set_rng_state = lambda state, *_a, **_k: torch.set_rng_state(state)
        self.manual_seed = torch.manual_seed
        self.manual_seed_all = torch.manual_seed
        self.Stream = _Stream
        self.Event = _Event
        self.current_stream = lambda *_a, **_k: _Stream()

        @contextmanager
        def stream(*_a, **_k):
            yield

        self.stream = stream

    def __getattr__(self, name: str):
        return getattr(torch.cpu, name)


CPU_DEVICE = _CPUDevice()


@PlatformRegistry.register(platform="cpu")
class PlatformCPU(PlatformBase):
    """verl on CPU: device ``cpu``, gloo, one fake ``GPU`` Ray slot per worker."""

    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> types.ModuleType:
        return CPU_DEVICE

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check=False) -> bool:
        return os.environ.get("VERL_PLATFORM", "").strip().lower() == "cpu"

    def current_device(self):
        return "cpu"

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index) -> None:
        pass

    def synchronize(self, device_index=None) -> None:
        pass

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        pass

    def empty_cache(self) -> None:
        pass

    def get_device_capability(self, device_index: int = 0):
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CUDA_VISIBLE_DEVICES"

    @contextmanager
    def nvtx_range(self, msg: str):
        yield

    def profiler_start(self) -> None:
        pass

    def profiler_stop(self) -> None:
        pass

    def ray_resource_name(self) -> str:
        return "GPU"

    def ray_noset_envvars(self) -> list[str]:
        return ["RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"]

    def is_ipc_supported(self) -> bool:
        return False

    def rollout_env_vars(self) -> dict[str, str]:
        return {k: v for k, v in env_vars().items() if k != "PYTHONPATH"}

    def cudart(self):
        return None


def _register_engines() -> None:
    from verl.workers.engine.base import EngineRegistry
    from verl.workers.engine.fsdp import transformer_impl as fsdp

    for model_type, cls in (("language_model", fsdp.FSDPEngineWithLMHead), ("value_model", fsdp.FSDPEngineWithValueHead)):
        for backend in ("fsdp", "fsdp2"):
            EngineRegistry._engines.setdefault(model_type, {}).setdefault(backend, {}).setdefault("cpu", cls)


def _patch_process_group_backend() -> None:
    """verl asks torch for ``cpu:gloo,<device>:<backend>`` = ``cpu:gloo,cpu:gloo``, which torch refuses."""
    import torch.distributed as dist

    if getattr(dist.init_process_group, "_pc_cpu", False):
        return
    original = dist.init_process_group

    def init_process_group(*args, **kwargs):
        backend = kwargs.get("backend")
        if isinstance(backend, str) and "," in backend and all(p.startswith("cpu:") for p in backend.split(",")):
            kwargs["backend"] = "gloo"
        return original(*args, **kwargs)

    init_process_group._pc_cpu = True
    dist.init_process_group = init_process_group


def _patch_newline_check() -> None:
    """verl's Qwen token builder insists that "\\n" is one token; the toy policy's tokenizer (digits and a few
    symbols) has no newline at all. Such a tokenizer gets verl's default builder (single-turn prompts: the same
    tokens)."""
    from verl.experimental.agent_loop import agent_loop
    from verl.utils.tokenizer import continuous_token_wiring as wiring

    original = wiring.create_continuous_token_builder
    if getattr(original, "_pc_cpu", False):
        agent_loop.create_continuous_token_builder = original
        return

    def create_continuous_token_builder(tokenizer, *args, **kwargs):
        if len(tokenizer.encode("\n", add_special_tokens=False)) != 1:
            kwargs["model_family"] = wiring.ContinuousTokenModelFamily.DEFAULT
        return original(tokenizer, *args, **kwargs)

    create_continuous_token_builder._pc_cpu = True
    wiring.create_continuous_token_builder = create_continuous_token_builder
    agent_loop.create_continuous_token_builder = create_continuous_token_builder


def install() -> None:
    """Everything above, in this process (idempotent). Runs on import where ``VERL_PLATFORM=cpu``."""
    _patch_process_group_backend()
    _register_engines()
    _patch_newline_check()


if os.environ.get("VERL_PLATFORM", "").strip().lower() == "cpu":
    install()
