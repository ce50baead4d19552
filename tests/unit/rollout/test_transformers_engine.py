"""TransformersEngine against the RolloutEngine contract, on a tiny random Qwen2 with the embedded tokenizer."""

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

from pc_pipelines.config import PolicyConfig
from pc_pipelines.data.tokenizer import INSTRUCTION, build_tokenizer
from pc_pipelines.rollout import (
    FINISH_LENGTH,
    RolloutEngine,
    RolloutRequest,
    SamplingParams,
)
from pc_pipelines.rollout.transformers_engine import TransformersEngine, naive_generate
from pc_pipelines.training.base_policy import model_config


@pytest.fixture(scope="module")
def engine():
    torch.manual_seed(0)
    tok = build_tokenizer()
    cfg = model_config(PolicyConfig(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64), len(tok), 0, 1)
    model = AutoModelForCausalLM.from_config(cfg).eval()
    return TransformersEngine(model, tok, max_batch_sequences=16)


REQS = [RolloutRequest("00012+00003" + INSTRUCTION, 3), RolloutRequest("7+8", 5), RolloutRequest("1" + INSTRUCTION, 1)]


def test_contract_counts_and_alignment(engine):
    assert isinstance(engine, RolloutEngine)
    outs = engine.generate(REQS, SamplingParams(1.0, 1.0, 6, seed=3))
    assert [len(o.rollouts) for o in outs] == [3, 5, 1]
    for req, out in zip(REQS, outs):
        assert out.prompt_ids == engine.tokenizer(req.prompt, add_special_tokens=False)["input_ids"]
        for r in out.rollouts:
            assert 1 <= len(r.token_ids) <= 6 and len(r.logprobs) == len(r.token_ids)
            assert all(lp <= 1e-6 for lp in r.logprobs)
            if r.finish_reason == FINISH_LENGTH:
                assert len(r.token_ids) == 6 and engine.eos_id not in r.token_ids
            else:
                assert r.token_ids[-1] == engine.eos_id and engine.eos_id not in r.token_ids[:-1]


def test_seeded_and_leaves_global_rng_alone(engine):
    p = SamplingParams(1.0, 1.0, 6, seed=11)
    torch.manual_seed(123)
    before = torch.get_rng_state()
    a = engine.generate(REQS, p)
    assert torch.equal(before, torch.get_rng_state())
    b = engine.generate(REQS, p)
    c = engine.generate(REQS, SamplingParams(1.0, 1.0, 6, seed=12))
    toks = lambda outs: [r.token_ids for o in outs for r in o.rollouts]  # noqa: E731
    assert toks(a) == toks(b)
    assert toks(a) != toks(c)


def test_logprobs_are_the_sampling_distribution(engine):
    """At temperature T (top_p 1) the reported log-prob of each sampled token is log_softmax(logits / T)."""
    T = 0.7
    out = engine.generate([REQS[0]], SamplingParams(T, 1.0, 5, seed=5))[0]
    for r in out.rollouts:
        ids = torch.tensor([out.prompt_ids + r.token_ids])
        with torch.no_grad():
            logits = engine.model(input_ids=ids).logits[0].float()
        start = len(out.prompt_ids) - 1
        ref = torch.log_softmax(logits[start : start + len(r.token_ids)] / T, -1)
        ref = ref.gather(-1, torch.tensor(r.token_ids)[:, None]).squeeze(-1)
        assert np.allclose(r.logprobs, ref.numpy(), atol=1e-4)


def test_greedy_batched_equals_one_prompt_at_a_time(engine):
    """Left padding and chunking change nothing: greedy batched output = the naive per-prompt loop."""
    greedy = SamplingParams(0.0, 1.0, 6, seed=0)
    batched = engine.generate(REQS, greedy)
    naive = naive_generate(engine.model, engine.tokenizer, REQS, greedy)
    assert [r.token_ids for o in batched for r in o.rollouts] == [r.token_ids for o in naive for r in o.rollouts]
    # greedy: all samples of one request agree
    assert len({tuple(r.token_ids) for r in batched[1].rollouts}) == 1


def test_bad_sampling_params_say_how_to_fix():
    with pytest.raises(ValueError, match="temperature"):
        SamplingParams(temperature=-1)
    with pytest.raises(ValueError, match="top_p"):
        SamplingParams(top_p=0)


def test_plan_round_orders_cuts_and_seeds():
    """The plan both engines share: sequences sorted by prompt length (longest first, ties in request order), cut
    into chunks of max_batch_sequences, chunk c seeded seed + c."""
    from pc_pipelines.rollout.transformers_engine import plan_round

    prompts = [[1, 2], [3, 4, 5, 6], [7], [8, 9, 10, 11]]  # lengths 2, 4, 1, 4
    plan = plan_round(prompts, [2, 1, 3, 2], max_batch_sequences=3, seed=40)
    assert plan.owner.tolist() == [0, 0, 1, 2, 2, 2, 3, 3]
    assert [c.tolist() for c in plan.chunks] == [[2, 6, 7], [0, 1, 3], [4, 5]]
    assert plan.seeds == [40, 41, 42]
    assert plan.chunk_prompts(0) == [[3, 4, 5, 6], [8, 9, 10, 11], [8, 9, 10, 11]]
    with pytest.raises(ValueError, match="max_batch_sequences"):
        plan_round(prompts, [1, 1, 1, 1], max_batch_sequences=0, seed=0)


def test_an_engine_refuses_a_model_whose_weights_are_elsewhere():
    """The lent GPU's check once passed a CPU model to a "cuda" engine: generation ran on the CPU and the check
    compared the CPU with itself. The engine now says where the weights are and how to move them."""
    tok = build_tokenizer()
    cfg = model_config(PolicyConfig(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64), len(tok), 0, 1)
    model = AutoModelForCausalLM.from_config(cfg)  # on the CPU
    with pytest.raises(ValueError, match=r"weights are on cpu but the engine samples on meta.*Fix: move the model"):
        TransformersEngine(model, tok, device="meta")
    assert TransformersEngine(model, tok, device="cpu").device.type == "cpu"
