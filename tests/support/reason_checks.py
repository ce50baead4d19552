"""Does each ``decision_reasons`` row's text agree with its own numbers? (issue 55: "p_hat=0.938 > band upper 0.9375"
for a prompt whose p_hat was 0.9375, the text quoting a band widened after the prompt was decided.)

The text is read back as a person reads it: the numbers it shows, and what it says of them (">", "<", "in"). Each
must hold of the numbers as shown, of the row's own numbers (``p_hat``, ``n``, the band it was decided by), and
agree with the row's decision."""

from __future__ import annotations

import re

NUM = r"(-?\d+(?:\.\d+)?(?:e[-+]?\d+)?)"
ABOVE = re.compile(rf"p_hat={NUM} > band upper {NUM}")
BELOW = re.compile(rf"p_hat={NUM} < band lower {NUM}")
INSIDE = re.compile(rf"p_hat={NUM} in (?:the widened )?band \[{NUM}, {NUM}\]")
EARLY = re.compile(rf"first pilot wave all (correct|wrong) \((\d+) rollouts\): p_hat={NUM} outside the band")
EVICTED = re.compile(rf"; evicted: p_hat={NUM} reached p_solve")
TRAINED = re.compile(r"trained with lag (\d+) on (\d+) rollouts")


def shown(x: float) -> str:
    return format(x, ".4g")


def disagreements(rows: list[dict], p_solve: float = 1.0) -> list[str]:
    """Every row whose text contradicts itself, its numbers or its decision, as ``run/step/prompt: what``; the rows
    need ``decision_reasons``' columns."""
    bad: list[str] = []
    for r in rows:
        text, p = r["reason"], r["p_hat"]
        lo, hi = r.get("band_lower"), r.get("band_upper")

        def fail(what: str, r=r, text=text) -> None:
            bad.append(f"{r['run_id']}/step {r['step']}/round {r['round']}/prompt {r['prompt_id']}: {what}: {text!r}")

        if r["decision"] in ("skipped_easy", "deferred_hard", "kept") and r["stage"] == "pilot" \
                and r["rule"] in ("band", "adaptive_band"):
            if lo is None or hi is None:
                fail("no band recorded for a row the band decided")
                continue
            m = (ABOVE if r["decision"] == "skipped_easy" else BELOW if r["decision"] == "deferred_hard"
                 else INSIDE).search(text)
            if m is None:
                fail(f"no band comparison for decision {r['decision']}")
                continue
            nums = [float(g) for g in m.groups()]
            if m.group(1) != shown(p):
                fail(f"shows p_hat {m.group(1)}, the row's is {p!r}")
            if r["decision"] == "skipped_easy":
                if m.group(2) != shown(hi):
                    fail(f"shows band upper {m.group(2)}, the row's band is [{lo!r}, {hi!r}]")
                if not (nums[0] > nums[1] and p > hi):
                    fail("says above the band, but it is not")
            elif r["decision"] == "deferred_hard":
                if m.group(2) != shown(lo):
                    fail(f"shows band lower {m.group(2)}, the row's band is [{lo!r}, {hi!r}]")
                if not (nums[0] < nums[1] and p < lo):
                    fail("says below the band, but it is not")
            else:
                if (m.group(2), m.group(3)) != (shown(lo), shown(hi)):
                    fail(f"shows band [{m.group(2)}, {m.group(3)}], the row's is [{lo!r}, {hi!r}]")
                if not (nums[1] <= nums[0] <= nums[2] and lo - 1e-9 <= p <= hi + 1e-9):
                    fail("says in the band, but it is not")
                if ("widened band" in text) != (r["rule"] == "adaptive_band"):
                    fail(f"'widened' in the text disagrees with rule {r['rule']}")
        if r["rule"] == "early_wave":
            m = EARLY.search(text)
            if m is None or int(m.group(2)) != r["n"] or m.group(3) != shown(p) \
                    or (m.group(1) == "correct") != (p > 0.5) or p not in (0.0, 1.0):
                fail("an early-wave text that does not match the row's first wave")
        m = EVICTED.search(text)
        if (m is not None) != bool(r["evicted"]):
            fail(f"evicted is {r['evicted']}, the text says otherwise")
        if m is not None and not (float(m.group(1)) >= p_solve and p >= p_solve and m.group(1) == shown(p)):
            fail("says p_solve was reached, but p_hat is below it")
        if r["decision"] == "trained":
            m = TRAINED.search(text)
            if m is None or int(m.group(2)) != r["n"]:
                fail("a trained row whose text does not give its rollouts")
    return bad
