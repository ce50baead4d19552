"""RayRolloutEngine with vLLM actors, run here against a stand-in ``vllm`` module (vLLM itself needs CUDA): the
dealing of requests to actors, their per-request seeds, the first and the later weight pushes and the reassembly in
request order, checked against one :class:`VLLMEngine` call over the whole round with the same stand-in.

The stand-in (written to a temp dir, put on this process's path and shipped to the actors with the runtime env's
``py_modules``) keeps vLLM's documented surface that :class:`VLLMEngine` uses (``LLM(model=, tokenizer=, ...)``,
``get_tokenizer``, ``apply_model``, ``generate`` with one ``SamplingParams`` per prompt) and samples each request's
tokens from a hash of its prompt, its seed, its sample index and the weights it was last given (their bytes), so any
mix-up of requests, seeds or weights changes the output. What it cannot show: vLLM's own numerics on a GPU."""

from __future__ import annotations

import textwrap

import pytest
import torch

from pc_pipelines.rollout import RolloutRequest, SamplingParams

pytestmark = [pytest.mark.integration, pytest.mark.ray]

STAND_IN = '''
"""A stand-in for the parts of vllm that pc_pipelines' VLLMEngine uses (tests only)."""
import hashlib
import random
from types import SimpleNamespace

from transformers import AutoTokenizer


class SamplingParams:
    def __init__(self, n, temperature, top_p, max_tokens, seed, logprobs, skip_special_tokens):
        self.n, self.max_tokens, self.seed = n, max_tokens, seed


class _Served:
    def __init__(self):
        self.digest = b"no weights yet"

    def load_weights(self, items):
        h = hashlib.sha256()
        for name, tensor in items:
            h.update(name.encode())
            h.update(tensor.contiguous().numpy().tobytes())
        self.digest = h.digest()


class LLM:
    def __init__(self, model, tokenizer, gpu_memory_utilization, enable_prefix_caching, **kwargs):
        self._tok = AutoTokenizer.from_pretrained(tokenizer)
        self._served = _Served()

    def get_tokenizer(self):
        return self._tok

    def apply_model(self, fn):
        return [fn(self._served)]

    def generate(self, prompts, sampling, use_tqdm=False):
        outs = []
        for p, sp in zip(prompts, sampling):
            completions = []
            for k in range(sp.n):
                key = hashlib.sha256(repr((p["prompt_token_ids"], sp.seed, k)).encode() + self._served.digest)
                rng = random.Random(key.digest())
                toks = [rng.randrange(len(self._tok)) for _ in range(sp.max_tokens)]
                completions.append(SimpleNamespace(
                    token_ids=toks, text=self._tok.decode(toks), finish_reason="length",
                    logprobs=[{t: SimpleNamespace(logprob=-rng.random())} for t in toks]))
            outs.append(SimpleNamespace(outputs=completions))
        return outs
'''

REQS = [RolloutRequest(p, n) for p, n in (("12+7", 3), ("5+5", 1), ("100+23", 4), ("8+9", 2), ("3+4", 5))]
PARAMS = SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=6, seed=11)


def _flat(outputs):
    return [(o.prompt_ids, r.token_ids, r.logprobs, r.finish_reason, r.text) for o in outputs for r in o.rollouts]


def test_vllm_actors_equal_one_vllm_engine_call_and_get_new_weights(base_policy, tmp_path, monkeypatch, procs):
    from pc_pipelines.rollout.ray_engine import RayRolloutEngine
    from pc_pipelines.rollout.vllm_engine import VLLMEngine
    from pc_pipelines.training.base_policy import load_policy

    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm" / "__init__.py").write_text(textwrap.dedent(STAND_IN))
    monkeypatch.syspath_prepend(str(tmp_path))
    model, tok = load_policy(base_policy)
    single = VLLMEngine.for_policy(model, tok)  # pushes the policy's weights before every call
    before = procs.descendants()
    with pytest.raises(RuntimeError, match=r"has 0 GPUs; 2 vllm rollout actors of 1 GPU\(s\) need 2\. Fix:"):
        RayRolloutEngine(model, tok, num_actors=2, engine="vllm", object_store_memory=100 * 1024**2)
    engine = RayRolloutEngine(model, tok, num_actors=2, engine="vllm", gpus_per_actor=0,
                              object_store_memory=100 * 1024**2,
                              runtime_env={"py_modules": [str(tmp_path / "vllm")]})
    try:
        first = engine.generate(REQS, PARAMS)
        assert [len(o.rollouts) for o in first] == [r.n for r in REQS]
        assert _flat(first) == _flat(single.generate(REQS, PARAMS))
        assert engine.pushes == 0
        with torch.no_grad():  # an update in place (as optimizer.step): the actors get it before the next round
            next(model.parameters()).add_(0.01)
        second = engine.generate(REQS, PARAMS)
        assert engine.pushes == 1
        assert _flat(second) == _flat(single.generate(REQS, PARAMS))
        assert _flat(second) != _flat(first)  # the new weights reached the actors' vLLM
        shifted = engine.generate(REQS, SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=6, seed=12))
        assert _flat(shifted) != _flat(second) and engine.pushes == 1  # the seed matters; no push without a change
    finally:
        engine.close()
    assert procs.wait_gone(procs.descendants() - before) == set()
