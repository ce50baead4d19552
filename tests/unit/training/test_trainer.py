"""PolicyTrainer: GRPO advantages and clipped loss through verl, PPO minibatches, micro-batching, resume, learning."""

from __future__ import annotations

import copy
import io
import math

import numpy as np
import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from pc_pipelines.config import TrainingConfig
from pc_pipelines.errors import ConfigError
from pc_pipelines.training import (
    PolicyTrainer,
    RolloutBatch,
    clipped_policy_loss,
    grpo_advantages,
    grpo_token_advantages,
    lr_at_step,
)

PAD, EOS, VOCAB = 0, 1, 100
EPS = 1e-6


def tiny_model(seed: int = 0) -> Qwen2ForCausalLM:
    torch.manual_seed(seed)
    cfg = Qwen2Config(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=256,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=64,
        tie_word_embeddings=True,
        pad_token_id=PAD,
        eos_token_id=EOS,
    )
    return Qwen2ForCausalLM(cfg)


def clone(model: torch.nn.Module) -> Qwen2ForCausalLM:
    fresh = tiny_model(seed=123)
    fresh.load_state_dict(model.state_dict())
    return fresh


def params(model: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


def make_batch(
    n_groups: int, group_size: int, seed: int = 0, rewards: np.ndarray | None = None, interleave: bool = False
) -> RolloutBatch:
    """Random prompts (one per group, varying lengths) and responses (varying lengths, some eos-terminated)."""
    rng = np.random.default_rng(seed)
    prompts, responses, groups = [], [], []
    for g in range(n_groups):
        prompt = [int(t) for t in rng.integers(2, VOCAB, rng.integers(1, 6))]
        for _ in range(group_size):
            resp = [int(t) for t in rng.integers(2, VOCAB, rng.integers(1, 8))]
            if rng.random() < 0.5:
                resp.append(EOS)
            prompts.append(prompt)
            responses.append(resp)
            groups.append(g)
    n = len(groups)
    if rewards is None:
        rewards = rng.integers(0, 2, n).astype(float)
    order = rng.permutation(n) if interleave else np.arange(n)
    return RolloutBatch(
        prompt_ids=[prompts[i] for i in order],
        response_ids=[responses[i] for i in order],
        rewards=np.asarray(rewards, dtype=float)[order],
        group_index=np.asarray(groups, dtype=np.int64)[order],
    )


def cfg(**kw) -> TrainingConfig:
    base = {"ppo_minibatch": 2, "lr": 1e-3, "warmup_steps": 0, "weight_decay": 0.1, "grad_clip": 1.0}
    base.update(kw)
    return TrainingConfig(**base)


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """The models are tiny: one intra-op thread is as fast, and immune to oversubscription on a busy machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def base_model() -> Qwen2ForCausalLM:
    return tiny_model(0)


# ---------------------------------------------------------------------------------------------------------------
# Advantages


def test_grpo_advantages_hand_computed_two_groups_normalized_separately():
    # Group 7: [1, 0, 0, 0]: mean 0.25, unbiased std 0.5 -> [1.5, -0.5, -0.5, -0.5].
    # Group 3: [1, 1, 0, 0]: mean 0.5, unbiased std sqrt(1/3) -> +-0.5 * sqrt(3) = +-0.8660.
    # Members interleaved (non-contiguous), group ids arbitrary.
    rewards = np.array([1, 1, 0, 1, 0, 0, 0, 0], dtype=float)
    index = np.array([7, 3, 7, 3, 3, 7, 7, 3])
    adv = grpo_advantages(rewards, index)
    s1, s2 = 0.5, math.sqrt(1 / 3)
    expected = np.array(
        [0.75 / (s1 + EPS), 0.5 / (s2 + EPS), -0.25 / (s1 + EPS), 0.5 / (s2 + EPS), -0.5 / (s2 + EPS)]
        + [-0.25 / (s1 + EPS), -0.25 / (s1 + EPS), -0.5 / (s2 + EPS)]
    )
    np.testing.assert_allclose(adv, expected, rtol=1e-6)
    np.testing.assert_allclose(adv[index == 7], [1.5, -0.5, -0.5, -0.5], atol=1e-5)
    # Population std (paper eq. 3) would give 0.75 / sqrt(0.1875) = 1.732: we follow verl (unbiased).
    assert abs(adv[0] - 0.75 / math.sqrt(0.1875)) > 0.2


def test_token_advantages_broadcast_over_the_response_mask():
    rewards = np.array([1.0, 0.0, 0.0])
    lengths = [3, 1, 5]
    mask = (torch.arange(6)[None, :] < torch.tensor(lengths)[:, None]).float()
    adv, degenerate = grpo_token_advantages(rewards, np.zeros(3, dtype=np.int64), mask)
    std = math.sqrt(((2 / 3) ** 2 + 2 * (1 / 3) ** 2) / 2)
    scalar = torch.tensor([2 / 3, -1 / 3, -1 / 3]) / (std + EPS)
    torch.testing.assert_close(adv, scalar[:, None] * mask)
    assert not degenerate.any()


def test_degenerate_groups_get_exactly_zero_advantage():
    # all-equal non-binary rewards (float mean off by an ulp in verl), all-equal binary, a singleton, a normal group
    rewards = np.array([0.1, 0.1, 0.1, 1.0, 1.0, 1.0, 0.0, 1.0, 0.0])
    index = np.array([0, 0, 0, 1, 1, 2, 3, 3, 3])
    adv = grpo_advantages(rewards, index)
    assert np.all(adv[:6] == 0.0)
    s = math.sqrt(1 / 3)
    np.testing.assert_allclose(adv[6:], [-(1 / 3) / (s + EPS), (2 / 3) / (s + EPS), -(1 / 3) / (s + EPS)], rtol=1e-6)


# ---------------------------------------------------------------------------------------------------------------
# Policy loss


def hand_clipped_loss(ratio, adv, mask, low, high, c, mode):
    """The dual-clip PPO objective written out: per token, A >= 0: max(-A r, -A clip(r)); A < 0: also min(., -A c)."""
    per_token = torch.empty_like(ratio)
    for idx in np.ndindex(*ratio.shape):
        r, a = float(ratio[idx]), float(adv[idx])
        loss = max(-a * r, -a * min(max(r, 1 - low), 1 + high))
        if a < 0:
            loss = min(loss, -a * c)
        per_token[idx] = loss
    if mode == "token-mean":
        return (per_token * mask).sum() / mask.sum()
    seq = (per_token * mask).sum(-1) / mask.sum(-1)
    return seq.mean()


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean"])
def test_clipped_loss_matches_hand_formula(mode):
    config = cfg(loss_agg_mode=mode, clip_low=0.2, clip_high=0.28, dual_clip_c=10.0)
    # ratios covering: below 1-low, inside, above 1+high, and above the dual clip c for negative advantages
    ratio = torch.tensor([[0.5, 0.9, 1.0, 1.1, 1.5, 20.0], [0.5, 0.9, 1.2, 1.5, 20.0, 3.0], [0.7, 1.4, 12.0, 1, 1, 1]])
    adv = torch.tensor([[1.0] * 6, [-1.0] * 6, [-2.0] * 6])
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0]], dtype=torch.float32)
    old = torch.full_like(ratio, -2.0)
    new = old + torch.log(ratio)
    loss, metrics = clipped_policy_loss(old, new, adv, mask, config)
    expected = hand_clipped_loss(ratio, adv, mask, 0.2, 0.28, 10.0, mode)
    torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-6)
    # spot checks of the three regimes: positive A above 1+high is clipped at 1.28 (the asymmetric clip-higher),
    # negative A below 1-low is clipped at 0.8, negative A with ratio 20 is capped at c = 10 (dual clip)
    assert hand_clipped_loss(ratio[:1, 4:5], adv[:1, 4:5], mask[:1, 4:5], 0.2, 0.28, 10.0, mode) == pytest.approx(-1.28)
    assert hand_clipped_loss(ratio[1:2, :1], adv[1:2, :1], mask[1:2, :1], 0.2, 0.28, 10.0, mode) == pytest.approx(0.8)
    assert hand_clipped_loss(ratio[1:2, 4:5], adv[1:2, 4:5], mask[1:2, 4:5], 0.2, 0.28, 10.0, mode) == pytest.approx(10)
    # clipfrac: masked fraction of tokens where the clipped term is the larger one (verl's definition)
    tokens = mask.sum()
    pg1 = -adv * ratio
    pg2 = -adv * ratio.clamp(0.8, 1.28)
    assert metrics["actor/pg_clipfrac"] == pytest.approx(float(((pg2 > pg1).float() * mask).sum() / tokens))
    lower = ((torch.maximum(pg1, pg2) > -adv * 10.0) & (adv < 0)).float()
    assert metrics["actor/pg_clipfrac_lower"] == pytest.approx(float((lower * mask).sum() / tokens))
    assert metrics["actor/pg_clipfrac_lower"] > 0


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"])
def test_clipped_loss_split_with_global_counts_sums_to_whole(mode):
    config = cfg(loss_agg_mode=mode, max_response_length=16)
    g = torch.Generator().manual_seed(0)
    old = -torch.rand(4, 6, generator=g)
    new = old + 0.3 * torch.randn(4, 6, generator=g)
    adv = torch.randn(4, 1, generator=g).expand(4, 6)
    mask = (torch.arange(6)[None, :] < torch.tensor([6, 2, 4, 1])[:, None]).float()
    whole, _ = clipped_policy_loss(old, new, adv, mask, config)
    n_tok, n_seq = int(mask.sum()), 4
    parts = [
        clipped_policy_loss(old[s], new[s], adv[s], mask[s], config, batch_num_tokens=n_tok, global_batch_size=n_seq)[0]
        for s in (slice(0, 1), slice(1, 3), slice(3, 4))
    ]
    torch.testing.assert_close(sum(parts), whole, rtol=1e-6, atol=1e-7)


def test_kl_coef_is_refused(base_model):
    with pytest.raises(ConfigError, match="kl_coef"):
        PolicyTrainer(clone(base_model), cfg(kl_coef=0.001), PAD, train_batch=8, seed=0)


# ---------------------------------------------------------------------------------------------------------------
# Trainer


def test_first_update_loss_is_minus_token_mean_advantage_and_ratio_one(base_model):
    batch = make_batch(3, 4, seed=1, interleave=True)
    trainer = PolicyTrainer(clone(base_model), cfg(ppo_minibatch=8), PAD, train_batch=8, seed=0)
    stats = trainer.train_step(batch, step=0)
    adv = grpo_advantages(batch.rewards, batch.group_index)
    lengths = np.array([len(r) for r in batch.response_ids])
    assert stats.updates == 1 and stats.tokens == lengths.sum() and stats.rollouts == 12 and stats.groups == 3
    assert stats.loss == pytest.approx(-(adv * lengths).sum() / lengths.sum(), abs=1e-6)
    assert abs(stats.ppo_kl) < 1e-6 and stats.pg_clipfrac == 0.0
    assert stats.adv_abs_mean == pytest.approx(np.abs(adv).mean(), rel=1e-6)
    assert 0 < stats.entropy <= math.log(VOCAB) + 1e-4


@pytest.mark.parametrize(("n_groups", "minibatch", "updates"), [(32, 8, 4), (5, 2, 3), (3, 8, 1)])
def test_number_of_optimizer_updates(base_model, n_groups, minibatch, updates):
    batch = make_batch(n_groups, 2, seed=2)
    trainer = PolicyTrainer(clone(base_model), cfg(ppo_minibatch=minibatch), PAD, train_batch=32, seed=0)
    stats = trainer.train_step(batch, step=0)
    assert stats.updates == updates and stats.skipped_updates == 0
    state = trainer.optimizer.state_dict()["state"]
    assert all(int(s["step"]) == updates for s in state.values())


def test_group_batch_limits(base_model):
    with pytest.raises(ConfigError, match="ppo_minibatch"):
        PolicyTrainer(clone(base_model), cfg(ppo_minibatch=16), PAD, train_batch=8, seed=0)
    trainer = PolicyTrainer(clone(base_model), cfg(ppo_minibatch=2), PAD, train_batch=2, seed=0)
    with pytest.raises(ValueError, match="more than train_batch"):
        trainer.train_step(make_batch(3, 2), step=0)


def test_minibatches_are_whole_groups_in_a_seeded_order(base_model):
    batch = make_batch(6, 3, seed=3, interleave=True)
    trainer = PolicyTrainer(clone(base_model), cfg(), PAD, train_batch=8, seed=5)
    order = trainer._group_order(batch.group_index, step=4)
    assert sorted(np.concatenate(order).tolist()) == list(range(18))
    assert all(len(set(batch.group_index[rows].tolist())) == 1 for rows in order)
    again = PolicyTrainer(clone(base_model), cfg(), PAD, train_batch=8, seed=5)._group_order(batch.group_index, 4)
    assert [r.tolist() for r in order] == [r.tolist() for r in again]
    other_steps = [[r.tolist() for r in trainer._group_order(batch.group_index, s)] for s in range(5, 10)]
    assert any(o != [r.tolist() for r in order] for o in other_steps)


def test_all_zero_variance_groups_give_zero_gradient_and_no_move(base_model):
    batch = make_batch(4, 3, seed=4, rewards=np.array([1.0] * 6 + [0.0] * 6))
    model = clone(base_model)
    before = params(model)
    trainer = PolicyTrainer(model, cfg(weight_decay=0.0), PAD, train_batch=8, seed=0)
    trainer.accumulate_gradient(batch)
    assert all(p.grad is None or torch.count_nonzero(p.grad) == 0 for p in model.parameters())
    trainer.optimizer.zero_grad()
    stats = trainer.train_step(batch, step=0)
    assert stats.updates == 2 and stats.grad_norm == 0.0 and stats.loss == 0.0
    assert stats.zero_adv_groups == 4 and stats.adv_abs_mean == 0.0
    assert all(torch.equal(a, b) for a, b in zip(before, params(model), strict=True))


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean"])
def test_micro_batching_gives_the_unsplit_gradient(base_model, mode):
    batch = make_batch(3, 4, seed=5, interleave=True)
    grads = []
    for split in ({}, {"micro_batch_size": 1}, {"micro_batch_tokens": 20}):
        model = clone(base_model)
        trainer = PolicyTrainer(model, cfg(loss_agg_mode=mode), PAD, train_batch=8, seed=0, **split)
        loss, _ = trainer.accumulate_gradient(batch)
        grads.append(([p.grad.clone() for p in model.parameters()], loss))
    (whole, whole_loss), *splits = grads
    assert any(torch.count_nonzero(g) > 0 for g in whole)
    for split, split_loss in splits:
        assert split_loss == pytest.approx(whole_loss, abs=1e-6)
        for a, b in zip(whole, split, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_logprobs_are_padding_invariant_and_use_the_temperature(base_model):
    model = clone(base_model)
    batch = make_batch(3, 3, seed=6)
    trainer = PolicyTrainer(model, cfg(temperature=0.7), PAD, train_batch=8, seed=0, micro_batch_size=4)
    together = trainer.sequence_logprobs(batch)
    model.eval()
    with torch.no_grad():
        for i in (0, 4, 8):
            p, r = batch.prompt_ids[i], batch.response_ids[i]
            ids = torch.tensor([p + r])
            logits = model(input_ids=ids).logits[0, len(p) - 1 : -1] / 0.7
            direct = torch.log_softmax(logits, -1).gather(-1, torch.tensor(r)[:, None])[:, 0]
            assert together[i].shape == (len(r),)
            torch.testing.assert_close(together[i], direct, rtol=1e-5, atol=1e-5)


def test_empty_batch_makes_no_update_but_reports_the_step_lr(base_model):
    model = clone(base_model)
    before = params(model)
    trainer = PolicyTrainer(model, cfg(warmup_steps=4), PAD, train_batch=8, seed=0)
    empty = RolloutBatch([], [], np.zeros(0), np.zeros(0, dtype=np.int64))
    stats = trainer.train_step(empty, step=2)
    assert stats.updates == 0 and stats.tokens == 0 and stats.groups == 0
    assert stats.lr == pytest.approx(0.5e-3)
    assert all(torch.equal(a, b) for a, b in zip(before, params(model), strict=True))
    assert stats.to_dict()["updates"] == 0


def test_lr_schedule_is_verls_constant_with_warmup():
    c = cfg(lr=1e-6, warmup_steps=10)
    assert [lr_at_step(c, t) for t in (0, 1, 5, 9, 10, 500)] == pytest.approx([0, 1e-7, 5e-7, 9e-7, 1e-6, 1e-6])
    assert lr_at_step(cfg(lr=1e-6, warmup_steps=0), 0) == 1e-6


def test_two_trainers_with_the_same_seed_are_bit_identical(base_model):
    batch = make_batch(4, 3, seed=7, interleave=True)
    results = []
    for _ in range(2):
        model = clone(base_model)
        trainer = PolicyTrainer(model, cfg(warmup_steps=1), PAD, train_batch=8, seed=11, micro_batch_size=5)
        stats = [trainer.train_step(batch, step=t).to_dict() for t in range(2)]
        results.append((params(model), stats))
    (p1, s1), (p2, s2) = results
    assert s1 == s2
    assert all(torch.equal(a, b) for a, b in zip(p1, p2, strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(p1, params(base_model), strict=True))


def test_state_round_trip_resumes_exactly(base_model):
    batches = [make_batch(4, 3, seed=10 + t, interleave=True) for t in range(3)]
    config = cfg(warmup_steps=2)
    model = clone(base_model)
    trainer = PolicyTrainer(model, config, PAD, train_batch=8, seed=3)
    for t in range(2):
        trainer.train_step(batches[t], step=t)
    buf = io.BytesIO()
    torch.save({"model": model.state_dict(), "trainer": trainer.state_dict()}, buf)
    trainer.train_step(batches[2], step=2)
    expected = params(model)

    buf.seek(0)
    saved = torch.load(buf, weights_only=True)  # the trainer state is tensors and plain data (trainer.pt)
    resumed_model = tiny_model(seed=99)
    resumed_model.load_state_dict(saved["model"])
    resumed = PolicyTrainer(resumed_model, config, PAD, train_batch=8, seed=3)
    resumed.load_state_dict(copy.deepcopy(saved["trainer"]))
    assert resumed.last_step == 1
    resumed.train_step(batches[2], step=2)
    assert all(torch.equal(a, b) for a, b in zip(expected, params(resumed_model), strict=True))


def test_rewarded_responses_gain_log_probability(base_model):
    rng = np.random.default_rng(8)
    prompts, responses, rewards, groups = [], [], [], []
    for g in range(3):
        prompt = [int(t) for t in rng.integers(2, VOCAB, 3)]
        for k in range(4):
            prompts.append(prompt)
            responses.append([int(t) for t in rng.integers(2, VOCAB, rng.integers(2, 6))] + [EOS])
            rewards.append(1.0 if k == g % 4 else 0.0)
            groups.append(g)
    batch = RolloutBatch(prompts, responses, np.array(rewards), np.array(groups))
    good = np.array(rewards) == 1.0
    model = clone(base_model)
    before = params(model)
    trainer = PolicyTrainer(model, cfg(lr=2e-3, ppo_minibatch=1), PAD, train_batch=3, seed=0)

    def seq_logps() -> np.ndarray:
        return np.array([float(lp.sum()) for lp in trainer.sequence_logprobs(batch)])

    start = seq_logps()
    for t in range(10):
        stats = trainer.train_step(batch, step=t)
        assert stats.updates == 3
    end = seq_logps()
    assert (end - start)[good].min() > 0.5, (end - start)[good]
    assert (end - start)[good].mean() > (end - start)[~good].mean() + 1.0
    assert not all(torch.equal(a, b) for a, b in zip(before, params(model), strict=True))


def test_rollout_batch_validation():
    with pytest.raises(ValueError, match="one entry per rollout"):
        RolloutBatch([[2]], [[3], [4]], np.zeros(1), np.zeros(1, dtype=np.int64))
    with pytest.raises(ValueError, match="empty prompt"):
        RolloutBatch([[]], [[3]], np.zeros(1), np.zeros(1, dtype=np.int64))
    with pytest.raises(ValueError, match="finite"):
        RolloutBatch([[2]], [[3]], np.array([np.nan]), np.zeros(1, dtype=np.int64))


def test_an_empty_response_counts_in_its_group_but_has_no_tokens(base_model):
    batch = RolloutBatch(
        prompt_ids=[[5, 6], [5, 6], [5, 6], [7]],
        response_ids=[[], [8, 9, EOS], [10], [11, 12]],
        rewards=np.array([1.0, 0.0, 0.0, 1.0]),
        group_index=np.array([0, 0, 0, 1]),
    )
    trainer = PolicyTrainer(clone(base_model), cfg(), PAD, train_batch=8, seed=0)
    stats = trainer.train_step(batch, step=0)
    assert stats.tokens == 6 and stats.updates == 1 and stats.zero_adv_groups == 1  # group 1 is a singleton
    assert [lp.numel() for lp in trainer.sequence_logprobs(batch)] == [0, 3, 1, 2]
    adv = grpo_advantages(batch.rewards, batch.group_index)
    assert adv[0] > 0 and adv[1] < 0 and adv[3] == 0.0  # the empty rewarded response still shapes its group
