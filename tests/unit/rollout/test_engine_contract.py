"""The contract every RolloutEngine must pass (docs/DESIGN.md section 2: one protocol, several real engines).

Parametrized over engines: ``transformers`` runs everywhere; ``vllm`` (experimental) runs only on a CUDA host with
vLLM installed and is skipped here, saying so. Each engine serves the same tiny random Qwen2 (saved as an HF
directory, which vLLM needs) with the embedded tokenizer."""

import importlib.util
import math

import pytest
import torch
from transformers import AutoModelForCausalLM

from pc_pipelines.config import PolicyConfig
from pc_pipelines.data.tokenizer import INSTRUCTION, build_tokenizer
from pc_pipelines.rollout import (
    FINISH_LENGTH,
    FINISH_STOP,
    RolloutEngine,
    RolloutRequest,
    SamplingParams,
)
from pc_pipelines.rollout.transformers_engine import TransformersEngine
from pc_pipelines.training.base_policy import model_config


def _vllm_ready() -> bool:
    return importlib.util.find_spec("vllm") is not None and torch.cuda.is_available()


ENGINES = [
    "transformers",
    pytest.param("vllm", marks=pytest.mark.skipif(not _vllm_ready(), reason="vLLM needs a CUDA host with vllm "
                                                  "installed (experimental until run on a GPU)")),
]
REQS = [RolloutRequest("00012+00003" + INSTRUCTION, 3), RolloutRequest("7+8", 5), RolloutRequest("1" + INSTRUCTION, 1)]
MAX_NEW = 6


@pytest.fixture(params=ENGINES)
def served(request, tmp_path):
    """(engine, policy, tokenizer): a fresh policy per test (one test edits its weights)."""
    torch.manual_seed(0)
    tok = build_tokenizer()
    cfg = model_config(PolicyConfig(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64), len(tok),
                       tok.pad_token_id, tok.eos_token_id)
    AutoModelForCausalLM.from_config(cfg).save_pretrained(tmp_path / "policy")
    tok.save_pretrained(tmp_path / "policy")
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "policy").eval()
    if request.param == "vllm":
        from pc_pipelines.rollout.vllm_engine import VLLMEngine

        return VLLMEngine.for_policy(model, tok, gpu_memory_utilization=0.2), model, tok
    return TransformersEngine(model, tok, max_batch_sequences=4), model, tok


def test_counts_order_and_fields(served):
    engine, _, tok = served
    assert isinstance(engine, RolloutEngine)
    outs = engine.generate(REQS, SamplingParams(1.0, 1.0, MAX_NEW, seed=3))
    assert [len(o.rollouts) for o in outs] == [r.n for r in REQS]
    for req, out in zip(REQS, outs):
        assert out.prompt_ids == tok(req.prompt, add_special_tokens=False)["input_ids"]  # request order kept
        for r in out.rollouts:
            assert 1 <= len(r.token_ids) <= MAX_NEW and len(r.logprobs) == len(r.token_ids)
            assert all(math.isfinite(lp) and lp <= 1e-6 for lp in r.logprobs)
            assert r.text == tok.decode(r.token_ids, skip_special_tokens=True)
            if r.finish_reason == FINISH_STOP:
                assert r.token_ids[-1] == tok.eos_token_id and tok.eos_token_id not in r.token_ids[:-1]
            else:
                assert r.finish_reason == FINISH_LENGTH and len(r.token_ids) == MAX_NEW
                assert tok.eos_token_id not in r.token_ids


def test_seeded_calls_repeat_and_greedy_is_one_answer(served):
    engine, _, _ = served
    a = engine.generate(REQS, SamplingParams(1.0, 1.0, MAX_NEW, seed=11))
    b = engine.generate(REQS, SamplingParams(1.0, 1.0, MAX_NEW, seed=11))
    c = engine.generate(REQS, SamplingParams(1.0, 1.0, MAX_NEW, seed=12))
    ids = lambda outs: [[r.token_ids for r in o.rollouts] for o in outs]  # noqa: E731
    assert ids(a) == ids(b) and ids(a) != ids(c)
    greedy = engine.generate(REQS, SamplingParams(0.0, 1.0, MAX_NEW, seed=0))
    for out in greedy:
        assert len({tuple(r.token_ids) for r in out.rollouts}) == 1


def test_serves_the_current_policy_after_an_update(served):
    engine, model, _ = served
    before = engine.generate(REQS, SamplingParams(0.0, 1.0, MAX_NEW, seed=0))
    with torch.no_grad():
        model.lm_head.weight.zero_()  # every logit ties: greedy emits one and the same sequence for every prompt
    if hasattr(engine, "mark_stale"):
        engine.mark_stale()
    after = engine.generate(REQS, SamplingParams(0.0, 1.0, MAX_NEW, seed=0))
    seqs = {tuple(r.token_ids) for o in after for r in o.rollouts}
    assert len(seqs) == 1 and len({tuple(o.rollouts[0].token_ids) for o in before}) > 1
