"""The reason templates (pc_pipelines/allocation/reasons.py): every decision has words, and the SQL rendering is
built from the same text (the row-for-row check against DuckDB is tests/integration/store/test_store_reasons.py)."""

from __future__ import annotations

import itertools

import pytest

from pc_pipelines.allocation import Decision, Rule, Stage, reasons
from pc_pipelines.allocation.reasons import REASONS, ReasonTemplate, reason_sql, render, template_for

COLS = {"p_hat": "o.p_hat", "n": "o.n", "lag": "o.lag", "band_lower": "s.lo", "band_upper": "s.hi",
        "prior_useful": "o.pu", "prior_mean": "o.pm", "prior_evidence": "o.pe", "prior_observations": "o.po"}


@pytest.mark.parametrize("decision,stage,rule", list(itertools.product(Decision, Stage, Rule)))
def test_every_decision_stage_and_rule_has_a_template(decision, stage, rule):
    t = template_for(decision, stage, rule)
    assert t.matches(decision, stage, rule)
    assert t.decision in (None, decision)  # never a template written for another decision


def test_the_docstrings_worked_example():
    text = render(Decision.SKIPPED_EASY, Stage.PILOT, Rule.EARLY_WAVE, p_hat=1.0, n=4, lag=0, band_lower=0.125,
                  band_upper=0.75, evicted=True)
    assert text == ("first pilot wave all correct (4 rollouts): p_hat=1 outside the band, decided without the "
                    "second wave; evicted: p_hat=1 reached p_solve")


@pytest.mark.parametrize("decision,stage,rule,expected", [
    (Decision.KEPT, Stage.PILOT, Rule.BAND, "p_hat=0.25 in band [0.125, 0.75]"),
    (Decision.KEPT, Stage.PILOT, Rule.ADAPTIVE_BAND, "p_hat=0.25 in the widened band [0.125, 0.75] (the batch was short)"),
    (Decision.SKIPPED_EASY, Stage.PILOT, Rule.BAND, "p_hat=0.25 > band upper 0.75"),
    (Decision.DEFERRED_HARD, Stage.PILOT, Rule.BAND, "p_hat=0.25 < band lower 0.125"),
    (Decision.SKIPPED_EASY, Stage.FULL, Rule.NONE, "all rollouts correct (no signal)"),
    (Decision.DEFERRED_HARD, Stage.FULL, Rule.NONE, "all rollouts wrong (no signal)"),
    (Decision.SURPLUS, Stage.FULL, Rule.NONE, "informative, but the batch already had b_t groups"),
    (Decision.TRAINED, Stage.COMMIT, Rule.NONE, "trained with lag 3 on 12 rollouts"),
])
def test_render(decision, stage, rule, expected):
    assert render(decision, stage, rule, p_hat=0.25, n=12, lag=3, band_lower=0.125, band_upper=0.75,
                  evicted=False) == expected


def test_sql_has_one_branch_per_template_in_order_and_quotes_its_literals(monkeypatch):
    sql = reason_sql(decision="o.decision", stage="o.stage", rule="o.rule", evicted="o.evicted", columns=COLS)
    # + the early wave's outcome word, the prior's two side words, the eviction suffix, the returned prefix and the
    # not-solved-again suffix
    assert sql.count(" WHEN ") == len(REASONS) + 6
    assert "CASE WHEN o.rule = 'prior_easy' THEN 'easy' ELSE 'hard' END" in sql
    assert sql.index("'early_wave'") < sql.index("'adaptive_band'") < sql.index("o.decision = 'kept' THEN")
    assert "printf('p_hat=%.4g in band [%.4g, %.4g]', o.p_hat, s.lo, s.hi)" in sql
    monkeypatch.setattr(reasons, "REASONS", (ReasonTemplate("it's 100% {n}"),))
    sql = reason_sql(decision="d", stage="s", rule="r", evicted="e", columns=COLS)
    assert "WHEN true THEN printf('it''s 100%% %d', o.n)" in sql
    monkeypatch.setattr(reasons, "REASONS", (ReasonTemplate("it's 100%"),))
    assert "WHEN true THEN 'it''s 100%'" in reason_sql(decision="d", stage="s", rule="r", evicted="e", columns=COLS)


def test_a_template_field_without_a_printf_twin_is_refused(monkeypatch):
    monkeypatch.setattr(reasons, "REASONS", (ReasonTemplate("p_hat={p_hat:.2f}"),))
    with pytest.raises(ValueError, match=r"\{p_hat:.2f\}.*use one of \{p_hat:.4g\}"):
        reason_sql(decision="d", stage="s", rule="r", evicted="e", columns=COLS)
    with pytest.raises(ValueError, match=r"no SQL expression for \['lag'\]"):
        reason_sql(decision="d", stage="s", rule="r", evicted="e", columns={k: v for k, v in COLS.items() if k != "lag"})


def test_a_missing_template_names_the_file_to_edit(monkeypatch):
    monkeypatch.setattr(reasons, "REASONS", REASONS[:-1])  # drop TRAINED's
    with pytest.raises(LookupError, match="decision=trained.*pc_pipelines/allocation/reasons.py"):
        template_for(Decision.TRAINED, Stage.COMMIT, Rule.NONE)


@pytest.mark.parametrize("evicted,expected", [
    (True, "returned from the easy pool; p_hat=1 > band upper 0.75; evicted: p_hat=1 reached p_solve"),
    (False, "returned from the easy pool; p_hat=1 > band upper 0.75; not solved again: back in the stream from the "
            "next epoch"),
])
def test_a_returned_prompts_reason_says_so(evicted, expected):
    """easy_pool eviction: a pilot of a prompt back from the easy pool is prefixed as such, and says whether it was
    solved again (back to the pool) or not (back in the stream)."""
    text = render(Decision.SKIPPED_EASY, Stage.PILOT, Rule.BAND, p_hat=1.0, n=8, lag=0, band_lower=0.125,
                  band_upper=0.75, evicted=evicted, returned=True)
    assert text == expected
    assert render(Decision.SKIPPED_EASY, Stage.PILOT, Rule.BAND, p_hat=1.0, n=8, lag=0, band_lower=0.125,
                  band_upper=0.75, evicted=evicted) == expected.removeprefix("returned from the easy pool; ").split(
                      "; not solved")[0]


def test_sql_puts_the_returned_prefix_first_and_its_suffix_after_the_eviction_one():
    sql = reason_sql(decision="o.decision", stage="o.stage", rule="o.rule", evicted="o.evicted",
                     returned="o.returned", columns=COLS)
    assert sql.startswith("CASE WHEN o.returned THEN 'returned from the easy pool; ' ELSE '' END || CASE ")
    assert sql.index("WHEN o.evicted THEN") < sql.index("WHEN o.returned THEN '; not solved again")


def test_a_pass_rate_and_a_band_edge_print_so_that_the_comparison_reads_as_decided():
    """Issue 55: "p_hat=0.938 > band upper 0.9375" for a p_hat of 0.9375. p_hat and the band's edges print with one
    spec, and any two distinct pass rates of pilots up to 64 rollouts (every preset's n_pilot is at most 32) print as
    distinct numbers in the same order, so a text's "<", ">" and "in" read true of the numbers it shows."""
    rates = sorted({k / n for n in range(1, 65) for k in range(n + 1)} | {0.125, 0.75})
    shown = [float(format(r, ".4g")) for r in rates]
    assert all(a < b for a, b in zip(shown, shown[1:]))
    assert render(Decision.SKIPPED_EASY, Stage.PILOT, Rule.BAND, p_hat=15 / 16, n=16, lag=0, band_lower=0.125,
                  band_upper=0.875, evicted=False) == "p_hat=0.9375 > band upper 0.875"
    assert render(Decision.KEPT, Stage.PILOT, Rule.ADAPTIVE_BAND, p_hat=15 / 16, n=16, lag=0, band_lower=0.125,
                  band_upper=15 / 16, evicted=False) == (
        "p_hat=0.9375 in the widened band [0.125, 0.9375] (the batch was short)")
