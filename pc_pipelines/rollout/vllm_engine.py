"""The :class:`~.base.RolloutEngine` protocol over ``vllm.LLM``, for GPU hosts running the local loop.

**Experimental** until it has run on a GPU: vLLM ships CUDA-only wheels, so neither this module's engine nor its
contract test (``tests/unit/rollout/test_engine_contract.py``, which every engine must pass and which runs here
against :class:`~.transformers_engine.TransformersEngine`) has run against vLLM yet. ``vllm`` is imported when an
engine is built, never when this module is imported (the package imports on CPU machines).

One :meth:`VLLMEngine.generate` call serves a whole generation round as ONE ``LLM.generate`` call: one prompt per
request with its own ``SamplingParams(n=request.n, seed=call seed + request index)`` (vLLM takes a list of sampling
params, one per prompt), so per-request rollout counts cost nothing and a call's result depends only on its inputs,
the weights and the seed.

Weights. The local loop updates the policy in PyTorch after every step; vLLM holds its own copy. Before each call
whose policy changed since the last sync (:meth:`VLLMEngine.mark_stale`, or ``sync_every_call``) the engine pushes
the HF model's ``state_dict`` into the vLLM model with ``LLM.apply_model(lambda m: m.load_weights(...))``, the
in-process route for a single GPU. A multi-GPU run uses the verl recipe (vLLM servers with verl's weight sync).

Log-probs are vLLM's for the sampled token (``logprobs=0``), under the raw model distribution unless vLLM is set
to processed log-probs; the trainer recomputes old log-probs itself, so these are for inspection only.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from .base import FINISH_LENGTH, FINISH_STOP, RequestOutput, Rollout, RolloutRequest, SamplingParams, check_outputs

log = logging.getLogger(__name__)


class _LoadWeights:
    """Picklable ``apply_model`` callback: load a state dict (CPU tensors) into the vLLM model."""

    def __init__(self, state: dict[str, Any]) -> None:
        self.state = state

    def __call__(self, model) -> None:
        model.load_weights(self.state.items())


class VLLMEngine:
    """Experimental. ``llm``: a ``vllm.LLM`` (or anything with its ``generate`` / ``get_tokenizer``)."""

    def __init__(self, llm, policy=None, sync_every_call: bool = True) -> None:
        self.llm = llm
        self.policy = policy
        self.sync_every_call = sync_every_call
        self._stale = policy is not None
        tok = llm.get_tokenizer()
        self.eos_id = tok.eos_token_id
        self.tokenizer = tok

    @classmethod
    def for_policy(cls, model, tokenizer, gpu_memory_utilization: float = 0.5, **llm_kwargs) -> VLLMEngine:
        """An engine serving ``model`` (a loaded HF causal LM whose directory is ``model.name_or_path``); the loop's
        engine factory. Raises ImportError with the fix when vLLM is missing."""
        try:
            import vllm
        except ImportError as exc:  # CPU machines: vLLM has CUDA-only wheels
            raise ImportError("the vllm engine needs vLLM on a CUDA host. Fix: pip install -e '.[gpu]' there, or use "
                              "--engine transformers.") from exc
        path = getattr(model, "name_or_path", None) or model.config._name_or_path
        llm = vllm.LLM(model=str(path), tokenizer=str(path), gpu_memory_utilization=gpu_memory_utilization,
                       enable_prefix_caching=True, **llm_kwargs)
        return cls(llm, policy=model)

    def sampling_plan(self) -> dict:
        """What decides this engine's draws besides the seed, the prompts and the weights: vLLM's own sampler."""
        return {"engine": "vllm"}

    def mark_stale(self) -> None:
        """The policy's weights changed: push them before the next call."""
        self._stale = True

    def _sync(self) -> None:
        if self.policy is None or not (self._stale or self.sync_every_call):
            return
        state = {k: v.detach().to("cpu") for k, v in self.policy.state_dict().items()}
        self.llm.apply_model(_LoadWeights(state))
        self._stale = False

    def generate(self, requests: Sequence[RolloutRequest], params: SamplingParams,
                 indices: Sequence[int] | None = None) -> list[RequestOutput]:
        """One call for the whole round; request ``j`` samples from ``params.seed + indices[j]`` (default: its
        position ``j``). A part of a round served elsewhere (:class:`~.ray_engine.RayRolloutEngine` deals requests
        to vLLM actors) passes the requests' positions in the whole round, so the parts equal the whole call."""
        import vllm

        if indices is None:
            indices = range(len(requests))
        elif len(indices) != len(requests):
            raise ValueError(f"{len(indices)} indices for {len(requests)} requests: give one per request.")
        self._sync()
        prompt_ids = [self.tokenizer(r.prompt, add_special_tokens=False)["input_ids"] for r in requests]
        sampling = [
            vllm.SamplingParams(n=r.n, temperature=params.temperature, top_p=params.top_p,
                                max_tokens=params.max_new_tokens, seed=params.seed + i, logprobs=0,
                                skip_special_tokens=True)
            for i, r in zip(indices, requests)
        ]
        outs = self.llm.generate([{"prompt_token_ids": ids} for ids in prompt_ids], sampling, use_tqdm=False)
        results = [RequestOutput(prompt_ids=ids, rollouts=[self._rollout(c) for c in out.outputs])
                   for ids, out in zip(prompt_ids, outs)]
        check_outputs(requests, results)
        return results

    def _rollout(self, c) -> Rollout:
        toks = list(c.token_ids)
        logprobs = [float(step[t].logprob) if step and t in step else 0.0 for t, step in zip(toks, c.logprobs or [])]
        logprobs += [0.0] * (len(toks) - len(logprobs))
        reason = FINISH_LENGTH if c.finish_reason == "length" else FINISH_STOP
        return Rollout(toks, c.text, logprobs, reason)
