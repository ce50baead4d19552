"""float32 vs float64 on the benchmark: does a seed give the same run under other CPU kernels, and at what cost?

    .venv/bin/python research/precision.py             # GRPO, bench preset, seed 3, 60 steps: 4 runs, ~25 min
    .venv/bin/python research/precision.py --steps 10  # a quick look

Four runs of one seed: {float32, float64} x {the machine's own kernels, ``ATEN_CPU_CAPABILITY=default`` (scalar)}.
Per precision it reports the first step whose loss differs between the two kernel sets, the first step whose
sampled rewards differ (the runs have become different samples), and the largest weight difference at the end.
The cost ratio float64 / float32 comes from the two native runs, which run side by side (2 workers), so both see
the same load. Results go to the `precision` section of docs/STUDIES.md.
"""

from __future__ import annotations

import argparse
import logging
import sys
from dataclasses import dataclass
from pathlib import Path

# research/ is a package imported from the checkout (never by pc_pipelines); benchmarks/_report.py writes the docs
# sections of benchmarks/, research/ and reliability/ alike.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _report import STUDIES_HEADER, machine, write_section

from pc_pipelines.store import Store
from research import study

ROOT = Path(__file__).resolve().parent.parent
DTYPES = ("float32", "float64")
KERNELS = ("native", "default")


@dataclass(frozen=True)
class Divergence:
    dtype: str
    steps: int
    first_loss_diff: int | None
    """First step whose loss differs between the kernel sets (None: none in the run)."""
    first_reward_diff: int | None
    """First step whose mean sampled reward differs: from there on the runs are different samples."""
    max_weight_diff: float | None
    """Largest absolute difference of any weight after the last step (None: a checkpoint is missing)."""


def jobs(seed: int, steps: int, method: str = "grpo") -> list[study.StudyJob]:
    out = []
    for isa in KERNELS:  # native first: the two timed runs start together
        for dtype in DTYPES:
            env = () if isa == "native" else (("ATEN_CPU_CAPABILITY", isa),)
            out.append(study.StudyJob(f"precision-{dtype}-{isa}-s{seed}", method, seed, steps, "bench", "precision",
                                      (f"training.dtype={dtype}", "training.checkpoint_every=1000"), env))
    return out


def first_difference(a: list[dict], b: list[dict], key: str) -> int | None:
    """The first step at which rows ``a`` and ``b`` (ledgers ordered by step) differ in ``key``; None if never.

    >>> first_difference([{"step": 0, "loss": 1.0}, {"step": 1, "loss": 2.0}],
    ...                  [{"step": 0, "loss": 1.0}, {"step": 1, "loss": 2.5}], "loss")
    1
    """
    for x, y in zip(a, b):
        if x[key] != y[key]:
            return int(x["step"])
    return None


def max_weight_diff(a: Path, b: Path) -> float | None:
    from safetensors.torch import load_file

    if not (a.exists() and b.exists()):
        return None
    wa, wb = load_file(str(a)), load_file(str(b))
    return max(float((wa[k].double() - wb[k].double()).abs().max()) for k in wa)


def divergence(store: Store, out: Path, seed: int, steps: int, dtype: str) -> Divergence:
    def ledger(isa):
        return store.query("SELECT step, loss, mean_reward FROM steps WHERE run_id = ? ORDER BY step",
                           [f"precision-{dtype}-{isa}-s{seed}"])

    a, b = ledger("native"), ledger("default")
    last = f"step-{steps - 1:08d}"
    weights = [out / f"precision-{dtype}-{isa}-s{seed}" / "checkpoints" / last / "policy" / "model.safetensors"
               for isa in KERNELS]
    return Divergence(dtype, min(len(a), len(b)), first_difference(a, b, "loss"), first_difference(a, b, "mean_reward"),
                      max_weight_diff(*weights))


def cost(store: Store, run_id: str) -> dict[str, float]:
    row = store.query("SELECT sum(time_generate_s) AS g, sum(time_update_s) AS u, sum(time_generate_s + "
                      "time_reward_s + time_update_s + time_bookkeeping_s) AS t, count(*) AS n FROM steps "
                      "WHERE run_id = ?", [run_id])[0]
    return {"generate": row["g"] / row["n"], "update": row["u"] / row["n"], "step": row["t"] / row["n"]}


def section(store: Store, out: Path, seed: int, steps: int, cmd: str) -> str:
    caps = {r["run_id"]: r["cap"] for r in store.query(
        "SELECT run_id, json_extract_string(lineage_json, '$.cpu_capability') AS cap FROM runs WHERE family = 'precision'")}
    native = caps.get(f"precision-float32-native-s{seed}", "?")
    lines = [
        "## float32 vs float64: the same run under other CPU kernels? (`research/precision.py`)", "",
        f"Command: `{cmd}`. Machine: {machine()}. GRPO on the `bench` preset, seed {seed}, {steps} steps, trained in "
        f"float32 and in float64 (`training.dtype`), each under this machine's kernels ({native}) and under "
        "`ATEN_CPU_CAPABILITY=default` (scalar).", "",
        "| dtype | steps | first step whose loss differs | first step whose sampled rewards differ | largest weight "
        "difference at the end |",
        "|---|---:|---:|---:|---:|",
    ]
    for dtype in DTYPES:
        d = divergence(store, out, seed, steps, dtype)
        never = f"none in {d.steps}"
        w = "-" if d.max_weight_diff is None else f"{d.max_weight_diff:.1e}"
        lines.append(f"| {dtype} | {d.steps} | {never if d.first_loss_diff is None else d.first_loss_diff} | "
                     f"{never if d.first_reward_diff is None else d.first_reward_diff} | {w} |")
    c32, c64 = (cost(store, f"precision-{dt}-native-s{seed}") for dt in DTYPES)
    lines += ["", "Cost per step under this machine's kernels (the two runs side by side, so under the same load):", "",
              "| dtype | generate s | update s | step s |", "|---|---:|---:|---:|"]
    for dt, c in zip(DTYPES, (c32, c64)):
        lines.append(f"| {dt} | {c['generate']:.2f} | {c['update']:.2f} | {c['step']:.2f} |")
    lines.append(f"| float64 / float32 | {c64['generate'] / c32['generate']:.2f}x | {c64['update'] / c32['update']:.2f}x "
                 f"| {c64['step'] / c32['step']:.2f}x |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--store", default=str(ROOT / "benchmarks/out/precision.duckdb"))
    ap.add_argument("--out", default=str(ROOT / "benchmarks/out/precision-runs"))
    ap.add_argument("--write", default=str(ROOT / "docs/STUDIES.md"), help="Markdown file to update ('' = none)")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    store = Store(args.store)
    study.run_jobs(jobs(args.seed, args.steps), store, args.out, workers=2, show_progress=not args.quiet)
    body = section(store, Path(args.out), args.seed, args.steps,
                   f"python research/precision.py --steps {args.steps} --seed {args.seed}")
    print(body)
    if args.write:
        write_section(Path(args.write), "precision", body, STUDIES_HEADER)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
