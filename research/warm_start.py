"""Is the warm-start recipe itself robust? Rebuild it under several CPU kernel sets and init seeds and compare each
build's pass-rate histogram with the shipped warm start's (issue 16: within 0.05 per bucket).

Every build is a real ``pilot-commit base-policy --out DIR --json`` subprocess with ``ATEN_CPU_CAPABILITY`` set
(PyTorch picks AVX-512 / AVX2 / scalar kernels from it; float results differ between them), two at a time, one
torch thread each. ``native`` is what the machine picks by itself; a capability the CPU lacks is skipped, and one
that resolves to the same kernels as an earlier entry is not built twice.

    python research/warm_start.py --write docs/STUDIES.md                 # seeds 0 1 2 x native, avx2, default
    python research/warm_start.py --seeds 0 --isas native default         # a quicker look
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))  # _report.py: the docs sections
from _report import STUDIES_HEADER, machine, write_section

ROOT = Path(__file__).resolve().parents[1]
BUCKETS = ("below", "between", "above")


def capability(isa: str) -> str | None:
    """The kernel set torch actually uses under ``ATEN_CPU_CAPABILITY=isa`` (None: this CPU lacks it)."""
    env = {k: v for k, v in os.environ.items() if k != "ATEN_CPU_CAPABILITY"}
    if isa != "native":
        env["ATEN_CPU_CAPABILITY"] = isa
    out = subprocess.run([sys.executable, "-c", "import torch; print(torch.backends.cpu.get_cpu_capability())"],
                         env=env, capture_output=True, text=True, check=True).stdout.strip()
    if isa not in ("native", "default") and out.lower() != isa.lower():
        return None
    return out


def build(out: Path, isa: str, seed: int, sets: list[str]) -> dict:
    env = dict(os.environ)
    env.pop("ATEN_CPU_CAPABILITY", None)
    if isa != "native":
        env["ATEN_CPU_CAPABILITY"] = isa
    cmd = [sys.executable, "-m", "pc_pipelines.cli", "base-policy", "--out", str(out), "--json", "--quiet",
           "--set", f"policy.init_seed={seed}"]
    for s in sets:
        cmd += ["--set", s]
    t0 = time.perf_counter()
    res = subprocess.run(cmd, check=False, env=env, capture_output=True, text=True, cwd=ROOT)
    if res.returncode:
        raise RuntimeError(f"build {out.name} failed (exit {res.returncode}):\n{res.stderr[-3000:]}")
    meta = json.loads(res.stdout.strip().splitlines()[-1])
    meta["wall_s"] = time.perf_counter() - t0
    return meta


def row(label: str, meta: dict, ref: dict | None) -> tuple[str, float]:
    hist = meta["warm_start"]["pass_rate_histogram"]
    greedy = meta["warm_start"]["greedy_heldout_accuracy"]
    gap = max(abs(hist["all"][b] - ref["all"][b]) for b in BUCKETS) if ref else 0.0
    per_digit = " / ".join(f"{float(hist[d]['between']):.2f}" for d in sorted(k for k in hist if k != "all"))
    stop = meta["sft_target_reached_at"]
    return (f"| {label} | {meta['cpu_capability']} | {meta['policy']['init_seed']} | "
            f"{meta['sft_steps_run']} ({'stop rule at ' + str(stop) if stop else 'budget'}) | "
            + " / ".join(f"{hist['all'][b]:.2f}" for b in BUCKETS)
            + f" | {per_digit} | " + " / ".join(f"{greedy[d]:.2f}" for d in sorted(greedy)) + f" | {gap:.3f} |", gap)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="policy.init_seed values")
    ap.add_argument("--isas", nargs="+", default=["native", "avx2", "default"],
                    help="ATEN_CPU_CAPABILITY values (native: unset)")
    ap.add_argument("--set", action="append", default=[], help="recipe overrides for every build (--set k=v)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "out" / "warm-start")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--write", type=Path, help="write the section into this Markdown file")
    args = ap.parse_args()

    sys.path.insert(0, str(ROOT))
    from pc_pipelines.config import parse_overrides, resolve
    from pc_pipelines.training.base_policy import ensure_base_policy, read_meta

    cfg = resolve("embedded", parse_overrides(args.set), method="grpo")
    shipped = ensure_base_policy(cfg.task, cfg.policy, cfg.training.prompt_template)
    ref_meta = read_meta(shipped)
    ref = ref_meta["warm_start"]["pass_rate_histogram"]
    isas, seen = [], set()
    for isa in args.isas:
        cap = capability(isa)
        if cap is None:
            print(f"skipping {isa}: this CPU does not have it", file=sys.stderr)
        elif cap not in seen:
            seen.add(cap)
            isas.append(isa)
    jobs = [(isa, seed) for seed in args.seeds for isa in isas]
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with ThreadPoolExecutor(args.workers) as pool:
        metas = list(pool.map(lambda j: build(args.out / f"{j[0]}-seed{j[1]}", j[0], j[1], args.set), jobs))
    wall = time.perf_counter() - t0
    lines = [
        "## Warm start: the same everywhere (`research/warm_start.py`)",
        "",
        f"Machine: {machine()}. Command: `python research/warm_start.py --write docs/STUDIES.md` ({wall / 60:.0f} min, "
        f"{args.workers} builds at a time). Each row is a fresh `pilot-commit base-policy` build of the shipped recipe "
        f"(`{shipped.name}`) under `ATEN_CPU_CAPABILITY` and `policy.init_seed`; its histogram is measured like the "
        "shipped one (640 RL prompts x 16 samples at T = 1: share below 0.125 / in [0.125, 0.75] / above 0.75).",
        "",
        "| build | kernels | init seed | SFT steps | histogram (all) | in band per digit length | greedy held-out per digit | max gap to shipped |",
        "|---|---|---|---|---|---|---|---|",
        row("**shipped**", ref_meta, None)[0],
    ]
    gaps = []
    for (isa, seed), meta in zip(jobs, metas):
        line, gap = row(f"{isa} seed {seed}", meta, ref)
        lines.append(line)
        gaps.append(gap)
    lines += ["", f"Largest gap of any bucket to the shipped histogram: **{max(gaps):.3f}** (goal: <= 0.05)."]
    text = "\n".join(lines)
    print(text)
    if args.write:
        write_section(args.write, "warm-start", text, STUDIES_HEADER)
    return 0 if max(gaps) <= 0.05 else 1


if __name__ == "__main__":
    raise SystemExit(main())
