"""Why each observed group got its decision, in words: one table of templates, rendered two ways.

The record is the columns (``decision``, ``stage``, ``rule``, ``n``, ``p_hat``, ``lag``, ``evicted``, ``returned`` and
the row's own ``band_lower`` / ``band_upper``: the band in force when the row was decided, which an adaptive band
widens between a step's rounds, so a step's widest band would contradict the rows decided before it widened);
the reason is text computed from them on demand, in Python by :func:`observation_reason` and in SQL by the store's
``decision_reasons`` view. Both come from ``REASONS`` below (``render`` and ``reason_sql``), so a wording change is
made once and the two cannot drift; ``tests/integration/store/test_store_reasons.py`` checks them row for row.

The first template whose ``decision`` / ``stage`` / ``rule`` all match (``None`` matches anything) is used. Worked
example: a PC pilot with 4 rollouts, all correct, decided by the first sequential wave, is
``(SKIPPED_EASY, PILOT, EARLY_WAVE)``; the first template (``rule=EARLY_WAVE``) matches, giving
``first pilot wave all correct (4 rollouts): p_hat=1 outside the band, decided without the second wave``; if the
prompt was also evicted, ``; evicted: p_hat=1 reached p_solve`` follows. A prompt back from the easy pool
(``returned``, ``easy_pool`` eviction) has ``returned from the easy pool; `` in front, and when it was not solved again
``; not solved again: back in the stream from the next epoch`` at the end (where ``; evicted: ...`` would be).

Fields a template may use, each with the one format spec it is written with (Python ``str.format`` and DuckDB
``printf`` agree on these): ``p_hat``, ``band_lower`` / ``band_upper`` (all three ``.4g``, so that a pass rate and a
band edge print alike: any two distinct pass rates of up to 64 rollouts print differently, and a text's comparison
reads as the decision was taken, ``tests/unit/allocation/test_alloc_reasons.py``), ``n`` and ``lag``
(integers) and ``outcome`` (``correct`` when ``p_hat > 0.5``, else ``wrong``); a ``screened_by_prior`` row's
``prior_useful`` and ``prior_mean`` (``.2f``), ``prior_evidence`` (``.1f``), ``prior_observations`` (integer) and
``side`` (``easy`` when its rule is ``prior_easy``, else ``hard``).
"""

from __future__ import annotations

import math
import string
from collections.abc import Mapping
from dataclasses import dataclass

from .types import Decision, Observations, Rule, Stage

# field -> (format spec in the templates, printf conversion)
_FIELDS: dict[str, tuple[str, str]] = {
    "p_hat": (".4g", "%.4g"),
    "band_lower": (".4g", "%.4g"),
    "band_upper": (".4g", "%.4g"),
    "n": ("", "%d"),
    "lag": ("", "%d"),
    "outcome": ("", "%s"),
    "prior_useful": (".2f", "%.2f"),
    "prior_mean": (".2f", "%.2f"),
    "prior_evidence": (".1f", "%.1f"),
    "prior_observations": ("", "%d"),
    "side": ("", "%s"),
}
COLUMNS = tuple(f for f in _FIELDS if f not in ("outcome", "side"))
"""The fields ``reason_sql`` takes as SQL expressions (``outcome`` is derived from ``p_hat``, ``side`` from
``rule``)."""


@dataclass(frozen=True)
class ReasonTemplate:
    """The reason of every group matching ``decision`` / ``stage`` / ``rule`` (``None``: any)."""

    text: str
    decision: Decision | None = None
    stage: Stage | None = None
    rule: Rule | None = None

    def matches(self, decision: Decision, stage: Stage, rule: Rule) -> bool:
        return ((self.decision is None or self.decision is decision) and (self.stage is None or self.stage is stage)
                and (self.rule is None or self.rule is rule))


_PRIOR_VIEW = ("{prior_useful:.2f} from {prior_observations} observations (discounted {prior_evidence:.1f} rollouts), "
               "posterior mean {prior_mean:.2f}")

REASONS: tuple[ReasonTemplate, ...] = (
    ReasonTemplate("skipped by prior, {side} side: P(pilot in band) " + _PRIOR_VIEW,
                   decision=Decision.SCREENED_BY_PRIOR, stage=Stage.PILOT),
    ReasonTemplate("skipped by prior, {side} side: P(informative group) " + _PRIOR_VIEW,
                   decision=Decision.SCREENED_BY_PRIOR),
    ReasonTemplate("first pilot wave all {outcome} ({n} rollouts): p_hat={p_hat:.4g} outside the band, "
                   "decided without the second wave", rule=Rule.EARLY_WAVE),
    ReasonTemplate("first pilot wave ({n} rollouts, p_hat={p_hat:.4g}) decided nothing: sent on to the later wave, "
                   "whose row holds the decision", decision=Decision.CONTINUED),
    ReasonTemplate("p_hat={p_hat:.4g} in the widened band [{band_lower:.4g}, {band_upper:.4g}] (the batch was short)",
                   decision=Decision.KEPT, rule=Rule.ADAPTIVE_BAND),
    ReasonTemplate("p_hat={p_hat:.4g} in band [{band_lower:.4g}, {band_upper:.4g}]", decision=Decision.KEPT),
    ReasonTemplate("p_hat={p_hat:.4g} > band upper {band_upper:.4g}", decision=Decision.SKIPPED_EASY, stage=Stage.PILOT),
    ReasonTemplate("all rollouts correct (no signal)", decision=Decision.SKIPPED_EASY),
    ReasonTemplate("p_hat={p_hat:.4g} < band lower {band_lower:.4g}", decision=Decision.DEFERRED_HARD, stage=Stage.PILOT),
    ReasonTemplate("all rollouts wrong (no signal)", decision=Decision.DEFERRED_HARD),
    ReasonTemplate("informative, but the batch already had b_t groups", decision=Decision.SURPLUS),
    ReasonTemplate("trained with lag {lag} on {n} rollouts", decision=Decision.TRAINED),
)
EVICTED = "; evicted: p_hat={p_hat:.4g} reached p_solve"
"""Appended to the reason of a group whose prompt was evicted (marked solved) by it."""
RETURNED = "returned from the easy pool; "
"""Put in front of the reason of a pilot whose prompt came back from the easy pool (``easy_pool`` eviction)."""
REJOINED = "; not solved again: back in the stream from the next epoch"
"""Appended (instead of ``EVICTED``) to the reason of a returned prompt whose pilot did not reach p_solve again."""


def template_for(decision: Decision, stage: Stage, rule: Rule) -> ReasonTemplate:
    """The first template of ``REASONS`` that matches; every (decision, stage, rule) has one (a unit test checks)."""
    for t in REASONS:
        if t.matches(decision, stage, rule):
            return t
    raise LookupError(f"no reason template for decision={decision.label}, stage={stage.label}, rule={rule.label}: "
                      "add one to REASONS in pc_pipelines/allocation/reasons.py")


def render(decision: Decision, stage: Stage, rule: Rule, *, p_hat: float, n: int, lag: int,
           band_lower: float | None, band_upper: float | None, evicted: bool, returned: bool = False,
           prior_useful: float = float("nan"), prior_mean: float = float("nan"), prior_evidence: float = float("nan"),
           prior_observations: int = 0) -> str:
    """The reason in Python (``Observations.reason``). The band is None on GRPO / DAPO steps (no template of
    theirs uses it); the ``prior_*`` values are a ``screened_by_prior`` row's (the history prior's view)."""
    values = {"p_hat": float(p_hat), "n": int(n), "lag": int(lag), "band_lower": band_lower,
              "band_upper": band_upper, "outcome": "correct" if p_hat > 0.5 else "wrong",
              "prior_useful": float(prior_useful), "prior_mean": float(prior_mean),
              "prior_evidence": float(prior_evidence), "prior_observations": int(prior_observations),
              "side": "easy" if rule is Rule.PRIOR_EASY else "hard"}
    text = template_for(decision, stage, rule).text.format(**values)
    if returned:
        text = RETURNED + text
    if evicted:
        return text + EVICTED.format(**values)
    return text + REJOINED if returned else text


def observation_reason(obs: Observations, i: int) -> str:
    """The reason for row ``i`` of ``obs``, with the band in force when the row was decided (its own
    ``band_lower`` / ``band_upper``: an adaptive band widens between a step's rounds)."""
    lo, hi = float(obs.band_lower[i]), float(obs.band_upper[i])
    return render(Decision(int(obs.decision[i])), Stage(int(obs.stage[i])), Rule(int(obs.rule[i])),
                  p_hat=float(obs.p_hat[i]), n=int(obs.n[i]), lag=int(obs.lag[i]),
                  band_lower=None if math.isnan(lo) else lo, band_upper=None if math.isnan(hi) else hi,
                  evicted=bool(obs.evicted[i]), returned=bool(obs.returned[i]),
                  prior_useful=float(obs.prior_useful[i]), prior_mean=float(obs.prior_mean[i]),
                  prior_evidence=float(obs.prior_evidence[i]), prior_observations=int(obs.prior_observations[i]))


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _sql_text(template: str, columns: Mapping[str, str]) -> str:
    """``template`` as a SQL string expression: a quoted literal, or ``printf(fmt, args...)``."""
    fmt, plain, args = [], [], []
    for literal, name, spec, conversion in string.Formatter().parse(template):
        fmt.append(literal.replace("%", "%%"))
        plain.append(literal)
        if name is None:
            continue
        if name not in _FIELDS or conversion or spec != _FIELDS[name][0]:
            raise ValueError(f"reason template field {{{name}:{spec}}} in {template!r}: use one of "
                             + ", ".join(f"{{{k}:{s}}}" if s else f"{{{k}}}" for k, (s, _) in _FIELDS.items()))
        fmt.append(_FIELDS[name][1])
        args.append(f"CASE WHEN {columns['p_hat']} > 0.5 THEN 'correct' ELSE 'wrong' END" if name == "outcome"
                    else columns[name])  # side: reason_sql puts its CASE in columns
    if not args:
        return _quote("".join(plain))
    return f"printf({', '.join([_quote(''.join(fmt)), *args])})"


def reason_sql(*, decision: str, stage: str, rule: str, evicted: str, columns: Mapping[str, str],
               returned: str = "false") -> str:
    """The reason as one SQL expression. ``decision`` / ``stage`` / ``rule`` are expressions holding the labels the
    store writes (``Decision.label``, ...; ``rule`` must not be NULL), ``evicted`` and ``returned`` boolean ones
    (``returned`` must not be NULL), and ``columns`` maps each of ``COLUMNS`` to its expression."""
    missing = [c for c in COLUMNS if c not in columns]
    if missing:
        raise ValueError(f"reason_sql: no SQL expression for {missing}")
    columns = {**columns, "side": f"CASE WHEN {rule} = '{Rule.PRIOR_EASY.label}' THEN 'easy' ELSE 'hard' END"}
    conds = {"decision": decision, "stage": stage, "rule": rule}
    whens = []
    for t in REASONS:
        parts = [f"{conds[k]} = '{getattr(t, k).label}'" for k in conds if getattr(t, k) is not None]
        whens.append(f"WHEN {' AND '.join(parts) or 'true'} THEN {_sql_text(t.text, columns)}")
    case = "CASE " + " ".join(whens) + " END"
    return (f"CASE WHEN {returned} THEN {_sql_text(RETURNED, columns)} ELSE '' END || {case} || "
            f"CASE WHEN {evicted} THEN {_sql_text(EVICTED, columns)} "
            f"WHEN {returned} THEN {_sql_text(REJOINED, columns)} ELSE '' END")
