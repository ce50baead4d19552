"""The efficiency study's headline (:func:`study_headline`, read from the results file the package ships), which short
runs print beside their own table; one rule every report of a rollout ratio applies to its own runs (:func:`.tables.smoke_test`: fewer seeds or steps
than the study's is a smoke test, and says so beside the ratio)."""

from __future__ import annotations

from pathlib import Path

from .tables import STUDY_RESULTS, format_ratio


def study_headline(path: str | Path = STUDY_RESULTS) -> str:
    """One paragraph: the committed study's median rollout ratios, its seeds, preset and run length."""
    import json

    try:
        res = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return "No efficiency study is committed yet (`make bench-efficiency` writes it)."
    med = res["medians"]
    ours = ", ".join(f"{k.split(' / ')[0]} {format_ratio(v)}" for k, v in med.items() if k.endswith("our PC"))
    paper = ", ".join(f"{k.split(' / ')[0]} {format_ratio(v)}" for k, v in med.items() if k.endswith("paper PC"))
    rep = res.get("reproducibility") or {}
    rep_txt = (f" Re-run under the {rep['other_kernels']} CPU kernels: GRPO64 / our PC {format_ratio(rep['median_other'])}"
               f" (main {format_ratio(rep['median_main'])})." if rep.get("median_other") is not None else "")
    seeds = ", ".join(map(str, res.get("core_seeds") or res["seeds"]))
    if res.get("core_seeds") and res["core_seeds"] != res["seeds"]:
        seeds += f" (GRPO64 / our PC on {', '.join(map(str, res['seeds']))})"
    smooth = res.get("smooth_evals", 1)
    curves = f" on curves smoothed over {smooth} evals" if smooth > 1 else ""
    dtype = f" in {res['dtype']}" if res.get("dtype") else ""
    return (f"The study (`make bench-efficiency`, docs/STUDIES.md): preset `{res['preset']}`{dtype}, {res['steps']} steps a "
            f"run, seeds {seeds}; median rollouts-to-target ratio{curves}, baseline / PC "
            f"(> 1: PC needed fewer sampled rollouts): our PC {ours}; the paper's PC {paper}.{rep_txt}"
            + "".join(_regime_sentence(name, r) for name, r in (res.get("regimes") or {}).items()
                      if isinstance(r, dict)))


def _regime_sentence(name: str, r: dict) -> str:
    """One more sentence per regime of the file's ``regimes`` (``bench-tuned``: both sides at their tuned settings):
    every median ratio by PC variant (its goals, met or missed, are in docs/STUDIES.md beside the reading), and the
    study's advice in one sentence when it states one (``small-groups``: what its decision means for a user)."""
    med = r.get("medians") or {}
    never = set(r.get("baseline_never") or ())  # ratios with no finite value: the baseline never reached the target
    pc_never = set(r.get("pc_never") or ())  # ratios of 0: the PC variant never reached it
    by_pc: dict[str, list[str]] = {}
    for k, v in med.items():
        base, _, pc = k.partition(" / ")
        by_pc.setdefault(pc, []).append(f"{base} never reached the target" if v is None and k in never
                                        else f"{base} {format_ratio(v)} (PC never reached the target)" if k in pc_never
                                        else f"{base} {format_ratio(v)}")
    budget = (r.get("pc_best") or {}).get("name")
    tuned = ", ".join(x for x in (f"GRPO n = {r['grpo_best_n']}" if r.get("grpo_best_n") else "",
                                  f"our PC's budget {budget}" if budget else "") if x)
    seeds = ", ".join(map(str, r.get("seeds") or []))
    advice = r.get("advice")
    return (f" Regime `{name}` (seeds {seeds}" + (f"; tuned on other seeds: {tuned}" if tuned else "") + "): "
            + "; ".join(f"{pc} {', '.join(v)}" for pc, v in by_pc.items()) + "."
            + _kernels_sentence(r.get("reproducibility"))
            + (f" In short: {advice}." if isinstance(advice, str) and advice else ""))


def _kernels_sentence(rep: object) -> str:
    """A regime's re-run under other CPU kernels (``reproducibility``: kernel set -> runs, steps, identical steps,
    runs with the same rollouts to target), in one sentence; nothing when it has none."""
    if not isinstance(rep, dict) or not rep or not all(isinstance(v, dict) for v in rep.values()):
        return ""
    same = all(v.get("identical_steps") == v.get("steps") and v.get("same_rollouts_to_target") == v.get("runs")
               for v in rep.values())
    steps = {v.get("steps", 0) for v in rep.values()}
    each = (f"{steps.pop():,} steps" + (" each" if len(rep) > 1 else "") if len(steps) == 1 else
            ", ".join(f"{isa} {v.get('steps', 0):,} steps" for isa, v in rep.items()))
    return (f" Re-run under the {' and '.join(rep)} CPU kernels ({each}): "
            + ("every sampled rollout and rollouts to target the same." if same else
               "some steps sampled differently (docs/STUDIES.md)."))
