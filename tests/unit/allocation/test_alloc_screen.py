"""The history prior (``screen_strategy: posterior``, pc_pipelines/allocation/screen.py): its arithmetic by hand, its
skips on both sides, the exploration cap, the draw cap, its checkpoint, and GRPO / DAPO with it."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from pc_pipelines.allocation import Allocator, AllocatorConfig, Decision, Rule, Stage
from pc_pipelines.allocation.screen import PosteriorScreen, beta_binomial_pmf
from pc_pipelines.errors import ConfigError

sys.path.insert(0, str(Path(__file__).resolve().parent))
from alloc_fakes import FakeEngine, bernoulli_rule, make_rates, run_steps


def posterior_cfg(**kw) -> AllocatorConfig:
    base = dict(method="pc", train_batch=4, n=16, n_pilot=8, seed=1, screen_strategy="posterior",
                screen_explore=0.0, screen_min_evidence=4.0, screen_discount=1.0,
                screen_prior_strength=0.5)
    return AllocatorConfig(**{**base, **kw})


# ---- arithmetic ----------------------------------------------------------------------------------------------------
def test_posterior_update_and_discount_by_hand():
    cfg = posterior_cfg(screen_discount=0.5, screen_prior_strength=2.0)
    s = PosteriorScreen(cfg, 5, groups=np.array([0, 0, 1, 1, 1]))
    # step 0: prompt 1 has two rows (a pilot of 4 with 3 correct, a commit of 8 with 2); prompt 3 a full group
    s.observe(0, np.array([1, 1, 3, 4]), np.array([4, 8, 4, 0]), np.array([3.0, 2.0, 0.0, 0.0]))
    s.observe(2, np.array([1]), np.array([4]), np.array([1.0]))
    alpha, beta, ev = s.posterior(np.array([1, 3, 0]), 3)
    a1, b1 = 5 * 0.5**3 + 1 * 0.5, 7 * 0.5**3 + 3 * 0.5
    a3, b3 = 0.0, 4 * 0.5**3
    # group 0 holds prompt 1's totals, group 1 prompt 3's; the prior mean is (A + 1) / (A + B + 2)
    m0 = (a1 + 1) / (a1 + b1 + 2)
    m1 = (a3 + 1) / (a3 + b3 + 2)
    assert alpha == pytest.approx([a1 + 2 * m0, a3 + 2 * m1, 2 * m0], abs=1e-12)
    assert beta == pytest.approx([b1 + 2 * (1 - m0), b3 + 2 * (1 - m1), 2 * (1 - m0)], abs=1e-12)
    assert ev == pytest.approx([a1 + b1, a3 + b3, 0.0], abs=1e-12)
    assert s.seen.tolist() == [0, 3, 0, 1, 0]  # observed groups (the n = 0 row is none)


def test_beta_binomial_against_closed_forms_and_a_fine_grid():
    # Beta(1, 1): K is uniform on 0..n
    assert beta_binomial_pmf(np.array([1.0]), np.array([1.0]), 16)[0] == pytest.approx(np.full(17, 1 / 17), abs=1e-12)
    # any other posterior: integrate Binomial(n, p) x Beta(alpha, beta) on a fine midpoint grid
    x = (np.arange(200_000) + 0.5) / 200_000
    for alpha, beta, n in ((2.5, 7.3, 16), (11.2, 1.7, 64), (3.0, 3.0, 5)):
        dens = np.exp((alpha - 1) * np.log(x) + (beta - 1) * np.log1p(-x))
        dens /= dens.sum()
        ref = np.array([math.comb(n, k) * np.sum(dens * x**k * (1 - x) ** (n - k)) for k in range(n + 1)])
        got = beta_binomial_pmf(np.array([alpha]), np.array([beta]), n)[0]
        assert got == pytest.approx(ref, abs=1e-6)
        assert got.sum() == pytest.approx(1.0, abs=1e-12)


def test_usefulness_is_the_pilot_landing_in_band_for_pc_and_an_informative_group_otherwise():
    pc = PosteriorScreen(posterior_cfg(n_pilot=16, n=64), 3)
    # Beta(1, 1): a 16-rollout pilot lands in [0.125, 0.75] for k = 2..12, 11 of 17 equally likely counts
    assert pc.useful(np.array([1.0]), np.array([1.0]))[0] == pytest.approx(11 / 17, abs=1e-12)
    grpo = PosteriorScreen(posterior_cfg(method="grpo", n=8), 3, pilots=False)
    assert grpo.useful(np.array([1.0]), np.array([1.0]))[0] == pytest.approx(1 - 2 / 9, abs=1e-12)
    # P(informative) = 1 - E[p^n] - E[(1 - p)^n], E[p^n] = prod (alpha + i) / (alpha + beta + i)
    a, b = 2.0, 5.0
    e_pn = np.prod([(a + i) / (a + b + i) for i in range(8)])
    e_qn = np.prod([(b + i) / (a + b + i) for i in range(8)])
    assert grpo.useful(np.array([a]), np.array([b]))[0] == pytest.approx(1 - e_pn - e_qn, abs=1e-12)


# ---- decisions -----------------------------------------------------------------------------------------------------
def three_kinds(m: int = 60) -> np.ndarray:
    """A third never solved, a third always, a third at 0.5."""
    return np.array([0.0, 1.0, 0.5] * (m // 3))


def test_skips_both_sides_with_their_reasons_and_never_a_middling_prompt():
    rates = three_kinds()
    alloc = Allocator(posterior_cfg(evict=False), 60)
    outs = run_steps(alloc, FakeEngine(bernoulli_rule(rates, seed=2)), 20)
    easy = hard = 0
    for out in outs:
        o = out.observations
        rows = np.flatnonzero(o.decision == Decision.SCREENED_BY_PRIOR)
        assert out.ledger.screened_by_prior == rows.shape[0]
        assert out.ledger.prior_rollouts_saved == 8 * rows.shape[0]  # the pilot they would have had
        assert (o.n[rows] == 0).all() and (o.stage[rows] == Stage.PILOT).all()
        assert (o.prior_useful[rows] < 0.1).all() and (o.prior_evidence[rows] >= 4.0).all()
        r = rates[o.prompt_id[rows]]
        assert (r != 0.5).all()  # only the hopeless and the solved are skipped
        assert ((o.rule[rows] == Rule.PRIOR_EASY) == (r == 1.0)).all()
        easy += int((r == 1.0).sum())
        hard += int((r == 0.0).sum())
        # every drawn prompt has one pilot-stage row: skipped (n = 0) or piloted
        assert out.ledger.prompts_consumed == int((o.stage == Stage.PILOT).sum())
    assert easy > 20 and hard > 20
    from pc_pipelines.allocation.reasons import observation_reason
    last = outs[-1].observations
    i = int(np.flatnonzero(last.rule == Rule.PRIOR_EASY)[0])
    text = observation_reason(last, i)
    assert text.startswith(f"skipped by prior, easy side: P(pilot in band) {last.prior_useful[i]:.2f} from ")
    assert f"from {int(last.prior_observations[i])} observations (discounted {last.prior_evidence[i]:.1f} rollouts)" \
        in text and text.endswith(f"posterior mean {last.prior_mean[i]:.2f}")


def test_the_prior_raises_the_share_of_pilots_in_band_and_lowers_the_pilot_cost():
    rates = three_kinds(90)
    result = {}
    for strategy in ("none", "posterior"):
        alloc = Allocator(posterior_cfg(evict=False, screen_strategy=strategy, sampling_strategy="survival"), 90)
        outs = run_steps(alloc, FakeEngine(bernoulli_rule(rates, seed=4)), 30)[10:]
        kept = sum(o.ledger.kept for o in outs)
        piloted = sum(o.ledger.kept + o.ledger.skipped_easy + o.ledger.deferred_hard for o in outs)
        result[strategy] = (kept / piloted, sum(o.ledger.pilot_rollouts for o in outs))
    assert result["none"][0] < 0.5 < result["posterior"][0]
    assert result["posterior"][1] < 0.6 * result["none"][1]


def test_a_prompt_skipped_max_skips_times_in_a_row_is_piloted_on_its_next_draw():
    rates = three_kinds()
    alloc = Allocator(posterior_cfg(evict=False, screen_max_skips=2), 60)
    outs = run_steps(alloc, FakeEngine(bernoulli_rule(rates, seed=5)), 40)
    runs: dict[int, int] = {}
    longest = 0
    piloted_after_cap = 0
    for out in outs:
        o = out.observations
        pilot = o.stage == Stage.PILOT
        for p in np.unique(o.prompt_id[pilot]).tolist():
            mine = pilot & (o.prompt_id == p)
            skipped = int((o.decision[mine] == Decision.SCREENED_BY_PRIOR).sum())
            if (o.n[mine] > 0).any():
                # piloted this step (a prompt drawn twice in one draw, across an epoch boundary, may also be
                # skipped in it, before or after: the rows cannot tell, so the run restarts)
                piloted_after_cap += runs.get(p, 0) == 2 and skipped == 0
                runs[p] = 0
            else:
                runs[p] = runs.get(p, 0) + skipped
            longest = max(longest, runs[p])
        assert int(alloc.screen.skips.max()) <= 2
    assert longest == 2 and piloted_after_cap > 10


def test_a_draw_reads_at_most_draw_cap_times_what_it_wants_and_still_fills():
    rates = np.array([1.0, 0.0] * 30)  # every prompt useless: the prior would skip all of them
    cfg = posterior_cfg(evict=False, screen_draw_cap=2, screen_max_skips=50, max_rounds=2)
    alloc = Allocator(cfg, 60)
    outs = run_steps(alloc, FakeEngine(bernoulli_rule(rates, seed=6)), 12)
    b_g = cfg.sampling_batch
    capped = 0
    for out in outs:
        o = out.observations
        screened = int((o.decision == Decision.SCREENED_BY_PRIOR).sum())
        piloted = int(out.ledger.pilot_rollouts // 8)
        assert piloted == b_g * out.ledger.rounds  # every round pilots its b_g: the prior never shortens a draw
        assert screened <= b_g * out.ledger.rounds  # and skips at most (draw_cap - 1) * b_g per draw
        capped += screened == b_g * out.ledger.rounds
    assert capped >= 6


def _unpiloted_at_skips(outs) -> list[int]:
    """For every prior skip: the steps since the prompt's last sampled rollout (0 before any)."""
    last: dict[int, int] = {}
    gaps = []
    for out in outs:
        o = out.observations
        for p in o.prompt_id[o.decision == Decision.SCREENED_BY_PRIOR].tolist():
            gaps.append(out.step - last.get(p, 0))
        for p in o.prompt_id[o.n > 0].tolist():
            last[p] = out.step
    return gaps


def test_the_time_floor_pilots_a_prompt_at_most_max_unseen_steps_after_its_last_rollout():
    # every prompt drawn every step (b_g 12 of 60 with 4 skips a prompt allowed a draw): with no skip cap, the time
    # floor alone decides when a useless prompt is piloted again: never more than 8 steps after its last rollout
    rates = three_kinds()
    cfg = posterior_cfg(evict=False, screen_max_skips=0, screen_max_unseen=8, screen_draw_cap=0)
    alloc = Allocator(cfg, 60)
    eng = FakeEngine(bernoulli_rule(rates, seed=5))
    outs, in_a_row = [], 0
    for _ in range(40):
        outs += run_steps(alloc, eng, 1)
        in_a_row = max(in_a_row, int(alloc.screen.skips.max()))
    gaps = _unpiloted_at_skips(outs)
    assert max(gaps) == 8 and gaps.count(8) > 10
    assert in_a_row > 3  # more skips in a row than a cap of 3 would allow
    # the same run under the consecutive-skip cap pilots a useless prompt far more often
    capped = run_steps(Allocator(posterior_cfg(evict=False, screen_max_skips=1, screen_draw_cap=0), 60),
                       FakeEngine(bernoulli_rule(rates, seed=5)), 40)
    assert sum(o.ledger.screened_by_prior for o in outs[10:]) > 1.3 * sum(o.ledger.screened_by_prior
                                                                        for o in capped[10:])


def test_draw_cap_zero_reads_one_pass_over_the_pool_a_step_and_counts_capped_draws():
    rates = np.array([1.0, 0.0] * 30)  # every prompt useless: the prior would skip all of them
    cfg = posterior_cfg(evict=False, screen_draw_cap=0, screen_max_skips=0, screen_max_unseen=1000, max_rounds=2)
    alloc = Allocator(cfg, 60)
    outs = run_steps(alloc, FakeEngine(bernoulli_rule(rates, seed=6)), 12)
    b_g = cfg.sampling_batch
    late = outs[6:]  # every prompt has its evidence: the step reads one pass over the pool of 60 in all
    for out in late:  # nothing is kept, so each step runs its 2 rounds: the first draw skips 60 - b_g, then pilots
        # its b_g unscreened; the second draw, the pass read, pilots its b_g unscreened
        assert out.ledger.rounds == 2 and out.ledger.screened_by_prior == 60 - b_g
        assert out.ledger.prompts_consumed == 60 + b_g
        assert out.ledger.prior_draw_capped == b_g * 2
        assert out.ledger.pilot_rollouts == b_g * 2 * 8
    # a cap of 2 reads b_g more at most and counts the rest as capped
    two = run_steps(Allocator(posterior_cfg(evict=False, screen_draw_cap=2, screen_max_skips=0,
                                            screen_max_unseen=1000, max_rounds=2), 60),
                    FakeEngine(bernoulli_rule(rates, seed=6)), 12)
    assert all(o.ledger.screened_by_prior == 2 * b_g and o.ledger.prior_draw_capped == 2 * b_g for o in two[6:])
    assert all(o.ledger.prior_draw_capped == 0 for o in run_steps(
        Allocator(posterior_cfg(evict=False), 60), FakeEngine(bernoulli_rule(three_kinds(), seed=6)), 3)[:1])


def test_continue_useful_by_hand():
    # Beta(1, 1) prior mass only (kappa tiny, no history): after a first wave of 2 right of 2, the posterior is
    # Beta(~3, ~1); the 6 later rollouts K2 are beta-binomial(6, 3, 1) and the full pilot of 8 lands in [1/8, 6/8]
    # for 2 + K2 <= 6, i.e. K2 <= 4: P = 1 - P(K2 = 5) - P(K2 = 6)
    s = PosteriorScreen(posterior_cfg(screen_prior_strength=2.0, pilot_strategy="sequential", pilot_wave=2), 4)
    got = s.continue_useful(np.array([0, 1]), 0, np.array([2.0, 0.0]), 2)
    pmf = [math.comb(6, k) * math.gamma(3 + k) * math.gamma(1 + 6 - k) / math.gamma(4 + 6) / (
        math.gamma(3) * math.gamma(1) / math.gamma(4)) for k in range(7)]
    assert got[0] == pytest.approx(1 - pmf[5] - pmf[6], abs=1e-12)
    # 0 of 2: in band needs K2 >= 1 (and <= 6): 1 - P(K2 = 0) under beta-binomial(6, 1, 3)
    pmf0 = [math.comb(6, k) * math.gamma(1 + k) * math.gamma(3 + 6 - k) / math.gamma(4 + 6) / (
        math.gamma(1) * math.gamma(3) / math.gamma(4)) for k in range(7)]
    assert got[1] == pytest.approx(1 - pmf0[0], abs=1e-12)


def test_early_wave_sends_flat_first_waves_of_middling_prompts_on_and_raises_the_share_in_band():
    rates = np.array([0.0, 1.0, 0.7, 0.3] * 15)
    res = {}
    for early in (False, True):
        cfg = posterior_cfg(evict=False, pilot_strategy="sequential", pilot_wave=2, screen_early_wave=early,
                            screen_max_skips=0, screen_max_unseen=5, screen_draw_cap=0, screen_threshold=0.15)
        outs = run_steps(Allocator(cfg, 60), FakeEngine(bernoulli_rule(rates, seed=11)), 30)[10:]
        kept = sum(o.ledger.kept for o in outs)
        piloted = sum(o.ledger.kept + o.ledger.skipped_easy + o.ledger.deferred_hard for o in outs)
        cont = sum(o.ledger.prior_continued for o in outs)
        flat_mid = 0
        for o in outs:  # early decisions on the middling prompts
            x = o.observations
            e = (x.rule == Rule.EARLY_WAVE)
            flat_mid += int((e & np.isin(rates[x.prompt_id], [0.3, 0.7])).sum())
        res[early] = (kept / piloted, cont, flat_mid)
    assert res[False][1] == 0 and res[True][1] > 50
    assert res[True][2] < 0.5 * res[False][2]  # the prior keeps middling prompts past two equal rewards
    assert res[True][0] > res[False][0] + 0.05


def test_early_threshold_sends_fewer_flat_first_waves_on_than_the_skip_threshold():
    rates = np.array([0.0, 1.0, 0.9, 0.5] * 15)
    cont = {}
    for level in (None, 0.5, 0.95):
        cfg = posterior_cfg(evict=False, pilot_strategy="sequential", pilot_wave=2, screen_early_wave=True,
                            screen_max_skips=0, screen_max_unseen=5, screen_draw_cap=0, screen_threshold=0.1,
                            screen_early_threshold=level)
        outs = run_steps(Allocator(cfg, 60), FakeEngine(bernoulli_rule(rates, seed=12)), 20)
        cont[level] = sum(o.ledger.prior_continued for o in outs)
    assert cont[None] > cont[0.5] > cont[0.95] >= 0 and cont[None] > 20


def test_explore_pilots_a_share_of_would_be_skips():
    rates = three_kinds()
    counts = []
    for explore in (0.0, 0.5):
        alloc = Allocator(posterior_cfg(evict=False, screen_explore=explore, screen_max_skips=100), 60)
        outs = run_steps(alloc, FakeEngine(bernoulli_rule(rates, seed=7)), 20)
        counts.append(sum(o.ledger.screened_by_prior for o in outs))
    assert counts[1] < 0.75 * counts[0]


# ---- state ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("method", ["pc", "grpo", "dapo"])
def test_resume_mid_run_equals_the_uninterrupted_run(method):
    rates = make_rates(60, 3, p_zero=0.3, p_one=0.3)
    cfg = posterior_cfg(method=method, screen_explore=0.2, oversample=2.0, train_batch=8)
    groups = np.arange(60) % 3
    whole = Allocator(cfg, 60, prompt_groups=groups)
    eng = FakeEngine(bernoulli_rule(rates, seed=8))
    run_steps(whole, eng, 12)
    state = json.loads(json.dumps(whole.state_dict()))
    assert state["screen"]["prompts"] and state["screen"]["groups"] == groups.tolist()
    resumed = Allocator.from_state_dict(state)
    a = run_steps(whole, FakeEngine(bernoulli_rule(rates, seed=9)), 8)
    b = run_steps(resumed, FakeEngine(bernoulli_rule(rates, seed=9)), 8)
    assert sum(o.ledger.screened_by_prior for o in a) > 0
    for x, y in zip(a, b):
        assert x.ledger.to_dict() == y.ledger.to_dict()
        for f in ("prompt_id", "decision", "rule", "n", "n_correct", "prior_observations"):
            assert getattr(x.observations, f).tolist() == getattr(y.observations, f).tolist()
        assert np.array_equal(x.observations.prior_useful, y.observations.prior_useful, equal_nan=True)
    assert json.dumps(whole.state_dict(), sort_keys=True) == json.dumps(resumed.state_dict(), sort_keys=True)


def test_the_prior_off_adds_nothing_to_the_checkpoint():
    alloc = Allocator(AllocatorConfig(method="pc", train_batch=4, n=16), 40)
    run_steps(alloc, FakeEngine(bernoulli_rule(make_rates(40, 1, 0.3, 0.3))), 3)
    assert "screen" not in alloc.state_dict()


# ---- GRPO / DAPO ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("method", ["grpo", "dapo"])
def test_grpo_and_dapo_sample_fewer_useless_groups_with_the_prior(method):
    rates = three_kinds(90)
    informative = {}
    for strategy in ("none", "posterior"):
        cfg = AllocatorConfig(method=method, train_batch=10, n=8, seed=2, screen_strategy=strategy,
                              screen_explore=0.0, screen_min_evidence=4.0, screen_discount=1.0,
                              screen_prior_strength=0.5)
        outs = run_steps(Allocator(cfg, 90), FakeEngine(bernoulli_rule(rates, seed=3)), 30)[10:]
        full = [o.observations for o in outs]
        sampled = sum(int((x.stage == Stage.FULL).sum() - (x.n == 0).sum()) for x in full)
        useful = sum(int(((x.n > 0) & (rates[x.prompt_id] == 0.5)).sum()) for x in full)
        informative[strategy] = useful / sampled
        screened = np.concatenate([x.prompt_id[x.decision == Decision.SCREENED_BY_PRIOR] for x in full])
        if strategy == "posterior":
            assert screened.shape[0] > 0 and (rates[screened] != 0.5).all()
            assert all((x.stage[x.n == 0] == Stage.FULL).all() for x in full)
            if method == "grpo":  # GRPO still trains b_t groups a step
                assert all(o.ledger.trained_prompts == 10 for o in outs)
    assert informative["posterior"] > informative["none"] + 0.2


# ---- refusals ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("field,value,fix", [
    ("screen_discount", 0.0, "set screen_discount=0.9, or 1 for no forgetting"),
    ("screen_threshold", 1.0, "set screen_threshold=0.1"),
    ("screen_explore", -0.1, "set screen_explore=0.05, or 0 for none"),
    ("screen_min_evidence", -1.0, "set screen_min_evidence=16"),
    ("screen_prior_strength", 0.0, "set screen_prior_strength=2"),
    ("screen_max_skips", -1, "set screen_max_skips=3, or 0 with screen_max_unseen > 0"),
    ("screen_max_unseen", -2, "set screen_max_unseen=10 (steps), or 0 for no time floor"),
    ("screen_draw_cap", 1, "set screen_draw_cap=4"),
    ("screen_early_threshold", 1.0, "set screen_early_threshold=0.4, or leave it unset for screen_threshold"),
])
def test_bad_settings_are_refused_with_the_field_and_a_fix(field, value, fix):
    with pytest.raises(ConfigError) as err:
        AllocatorConfig(**{field: value})
    msg = str(err.value)
    assert msg.startswith(f"AllocatorConfig.{field}={value!r}: must be") and f"Fix: {fix}" in msg and "\n" not in msg


def test_no_exploration_floor_is_refused():
    with pytest.raises(ConfigError) as err:
        AllocatorConfig(screen_strategy="posterior", screen_max_skips=0, screen_max_unseen=0)
    assert str(err.value) == ("AllocatorConfig.screen_max_skips=0: is 0 with screen_max_unseen 0: the prior would have "
                              "no exploration floor and could starve a prompt for the whole run. Fix: set "
                              "screen_max_unseen=10 (steps) or screen_max_skips=3.")
    AllocatorConfig(screen_strategy="posterior", screen_max_skips=0, screen_max_unseen=5)  # one floor is enough


def test_early_wave_without_sequential_pc_pilots_is_refused():
    with pytest.raises(ConfigError) as err:
        AllocatorConfig(method="grpo", screen_strategy="posterior", screen_early_wave=True)
    assert str(err.value) == (
        "AllocatorConfig.screen_early_wave=True: needs PC with sequential pilots and a screen: it decides first pilot "
        "waves (method 'grpo', pilot_strategy 'single', screen_strategy 'posterior'). Fix: set screen_early_wave=false,"
        " or method=pc pilot_strategy=sequential screen_strategy=posterior.")
    with pytest.raises(ConfigError, match="screen_early_wave='yes': must be true or false"):
        AllocatorConfig(screen_early_wave="yes")


def test_unknown_screen_and_the_oracle_are_refused():
    with pytest.raises(ConfigError, match=r"screen_strategy='thompson': unknown screen strategy.*'none', 'posterior'"):
        Allocator(AllocatorConfig(screen_strategy="thompson"), 50)
    with pytest.raises(ConfigError, match="the oracle draws no prompts. Fix: set screen_strategy=none"):
        Allocator(AllocatorConfig(method="oracle", train_batch=4, screen_strategy="posterior"), 50)
