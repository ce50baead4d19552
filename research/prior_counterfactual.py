"""What a history prior would have saved, replayed from finished runs (issue 7, point 4).

For each run, walk its ``pass_rate_history`` in step order and keep, per prompt, a Beta posterior over its pass
rate built from every pilot and commit group it had (counts weighted by ``0.5 ** (age / half_life)``, on a flat
Beta(1, 1) prior). A *visit* is the first pilot row of a (prompt, step). The prior would have skipped the visit
when the posterior puts ``P(p > p_upper) >= confidence``; the script counts the pilot rollouts that visit cost
(saved) and whether the pilot then kept the prompt (a skip that loses a training prompt).

This is an estimate from logged runs: a run with the prior would have drawn other prompts in place of the skipped
ones and trained a slightly different policy. Read the store read-only, so a study may hold it meanwhile only if
it is not writing (DuckDB: one writer excludes all readers).

    python research/prior_counterfactual.py --store benchmarks/out/efficiency.duckdb \
        --runs efficiency-ablate-all_four-pc-s0 efficiency-ablate-all_four-pc-s1 efficiency-ablate-all_four-pc-s2
"""

from __future__ import annotations

import argparse
import itertools
from collections import defaultdict

import duckdb
import numpy as np

_GRID = np.linspace(0.0, 1.0, 4001)[1:-1]


def beta_sf(x: float, a: float, b: float) -> float:
    """P(p > x) for p ~ Beta(a, b), a, b >= 1, by integrating the density on a fine grid (no scipy needed)."""
    logpdf = (a - 1.0) * np.log(_GRID) + (b - 1.0) * np.log1p(-_GRID)
    w = np.exp(logpdf - logpdf.max())
    return float(w[_GRID > x].sum() / w.sum())


def replay(rows: list[tuple], half_life: float, confidence: float, p_upper: float) -> tuple[int, int, int]:
    """(visits skipped, pilot rollouts saved, skipped visits the pilot kept) for one run's ordered rows."""
    visit_cost: dict[tuple[int, int], int] = defaultdict(int)
    visit_kept: dict[tuple[int, int], bool] = defaultdict(bool)
    for pid, step, stage, n, _nc, decision in rows:
        if stage == "pilot":
            visit_cost[(pid, step)] += n
            visit_kept[(pid, step)] |= decision == "kept"
    post: dict[int, tuple[float, float, int]] = {}
    seen: set[tuple[int, int]] = set()
    skipped = saved = lost = 0
    for pid, step, stage, n, nc, _decision in rows:
        key = (pid, step)
        if stage == "pilot" and key not in seen:
            seen.add(key)
            if pid in post:
                a, b, last = post[pid]
                w = 0.5 ** ((step - last) / half_life)
                if beta_sf(p_upper, 1.0 + a * w, 1.0 + b * w) >= confidence:
                    skipped += 1
                    saved += visit_cost[key]
                    lost += visit_kept[key]
        a, b, last = post.get(pid, (0.0, 0.0, step))
        w = 0.5 ** ((step - last) / half_life)
        post[pid] = (a * w + nc, b * w + (n - nc), step)
    return skipped, saved, lost


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", required=True, help="a study store (opened read-only)")
    ap.add_argument("--runs", nargs="+", required=True, help="PC run ids to replay")
    ap.add_argument("--half-lives", nargs="+", type=float, default=[50, 100, float("inf")])
    ap.add_argument("--confidences", nargs="+", type=float, default=[0.8, 0.9, 0.95])
    ap.add_argument("--p-upper", type=float, default=0.75, help="the band's upper edge the prior must clear")
    args = ap.parse_args(argv)
    con = duckdb.connect(args.store, read_only=True)
    data = {}
    for rid in args.runs:
        data[rid] = con.execute(
            """SELECT prompt_id, step, stage, n, n_correct, decision FROM pass_rate_history WHERE run_id = ?
               ORDER BY step, round, stage DESC, wave""", [rid]).fetchall()
        steps = con.execute("SELECT count(*) FROM steps WHERE run_id = ?", [rid]).fetchone()[0]
        if not data[rid] or not steps:
            raise SystemExit(f"prior_counterfactual.py: run {rid!r} has no history in {args.store}. "
                             "Fix: pass run ids from `SELECT run_id FROM runs`.")
        data[rid] = (data[rid], steps)
    print("| half-life h | c | rollouts saved / step | skipped visits the pilot kept |")
    print("|---|---:|---|---|")
    for hl, c in itertools.product(args.half_lives, args.confidences):
        res = [(replay(rows, hl, c, args.p_upper), steps) for rows, steps in data.values()]
        saved = " / ".join(f"{s / steps:.1f}" for (_k, s, _l), steps in res)
        lost = " / ".join(str(l_) for (_k, _s, l_), _ in res)
        print(f"| {'none' if hl == float('inf') else f'{hl:g} steps'} | {c:g} | {saved} | {lost} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
