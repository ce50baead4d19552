"""Embedded engine benchmark: batched TransformersEngine vs a naive per-prompt ``generate`` loop, and the step-time
split (generation / reward / update / bookkeeping) of GRPO, DAPO and PC through the real loop.

    python benchmarks/engine.py --write docs/BENCHMARKS.md     (make bench-engine)

Both engines run on the same model (the embedded base policy, built or taken from the cache) and the same
requests: one PC-like round of ``--prompts`` prompts x ``--samples`` samples at T = 1. The naive loop calls
``generate`` once per prompt (its samples batched through ``num_return_sequences``-style expansion), which is what
a per-prompt implementation does. The two are timed side by side in one process, alternating, and the ratio of
medians is reported (this machine is shared and noisy; absolute numbers drift, ratios less so).

The step-time split runs ``--steps`` steps of each method on the embedded default (after one warm-up step) and
reports the median share of each phase; bookkeeping is the allocator's own time (begin / next_call / observe /
finish plus the sidecar's pruning).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import machine, write_section


def bench_engines(policy: Path, prompts: int, samples: int, repeats: int) -> dict:
    import torch

    from pc_pipelines.config import resolve
    from pc_pipelines.data.task import embedded_task
    from pc_pipelines.rollout import RolloutRequest, SamplingParams
    from pc_pipelines.rollout.transformers_engine import TransformersEngine, naive_generate
    from pc_pipelines.training.base_policy import load_policy

    cfg = resolve("embedded", method="pc")
    torch.set_num_threads(cfg.training.torch_threads)
    task = embedded_task(cfg.task, cfg.training.prompt_template)
    model, tok = load_policy(policy)
    engine = TransformersEngine(model, tok)
    reqs = [RolloutRequest(p, samples) for p in task.prompts[:prompts]]
    out: dict[str, list[float]] = {"batched": [], "naive": []}
    tokens: dict[str, int] = {}
    for r in range(repeats):
        params = SamplingParams(1.0, 1.0, cfg.training.max_response_length, seed=r)
        for name in ("batched", "naive"):
            t0 = time.perf_counter()
            res = engine.generate(reqs, params) if name == "batched" else naive_generate(model, tok, reqs, params)
            out[name].append(time.perf_counter() - t0)
            tokens[name] = sum(len(x.token_ids) for o in res for x in o.rollouts)
    n = prompts * samples
    med = {k: statistics.median(v) for k, v in out.items()}
    return {
        "rollouts": n,
        "batched_s": med["batched"],
        "naive_s": med["naive"],
        "batched_rps": n / med["batched"],
        "naive_rps": n / med["naive"],
        "batched_tps": tokens["batched"] / med["batched"],
        "naive_tps": tokens["naive"] / med["naive"],
        "ratio": med["naive"] / med["batched"],
    }


def bench_split(policy: Path, steps: int) -> dict[str, dict]:
    from pc_pipelines.config import resolve
    from pc_pipelines.run import prepare_run, run_segment
    from pc_pipelines.store import Store

    result = {}
    with tempfile.TemporaryDirectory() as tmp:
        for method in ("grpo", "dapo", "pc"):
            cfg = resolve("embedded", {"training.eval_every": 10_000}, method=method)
            run = prepare_run(cfg, Path(tmp) / "runs", run_name=f"bench-{method}", policy_path=policy)
            res = run_segment(run, Store(Path(tmp) / "pc.duckdb"), steps + 1)
            recs = res.records[1:]  # the first step also pays PC's two-round start and lazy imports
            phases = ("generate", "reward", "update", "bookkeeping", "store")
            totals = [sum(r.timings[p] for p in phases) for r in recs]
            result[method] = {
                "step_s": statistics.median(totals),
                "sampled": statistics.median(r.ledger["sampled_rollouts"] for r in recs),
                **{p: statistics.median(r.timings[p] / t for r, t in zip(recs, totals)) for p in phases},
            }
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--policy", help="HF model directory (default: the embedded base policy, built on first use)")
    ap.add_argument("--prompts", type=int, default=48)
    ap.add_argument("--samples", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=8, help="steps per method for the time split")
    ap.add_argument("--write", type=Path, help="write the section into this Markdown file")
    args = ap.parse_args()

    from pc_pipelines.config import resolve
    from pc_pipelines.training.base_policy import ensure_base_policy

    cfg = resolve("embedded", method="pc")
    policy = Path(args.policy) if args.policy else ensure_base_policy(cfg.task, cfg.policy, cfg.training.prompt_template)
    t0 = time.perf_counter()
    eng = bench_engines(policy, args.prompts, args.samples, args.repeats)
    split = bench_split(policy, args.steps)
    wall = time.perf_counter() - t0
    lines = [
        "## Embedded engine (`benchmarks/engine.py`)",
        "",
        f"Machine: {machine()}. Command: `python benchmarks/engine.py --write docs/BENCHMARKS.md` "
        f"({wall:.0f} s). Model: the embedded base policy (Qwen2, d=64, 3 layers), torch threads "
        f"{cfg.training.torch_threads}.",
        "",
        f"Generation, {eng['rollouts']} rollouts ({args.prompts} prompts x {args.samples}, T=1, up to "
        f"{cfg.training.max_response_length} new tokens), median of {args.repeats}, timed side by side:",
        "",
        "| engine | seconds | rollouts/s | tokens/s |",
        "|---|---|---|---|",
        f"| TransformersEngine (one batched call) | {eng['batched_s']:.2f} | {eng['batched_rps']:,.0f} | {eng['batched_tps']:,.0f} |",
        f"| naive loop (one `generate` per prompt) | {eng['naive_s']:.2f} | {eng['naive_rps']:,.0f} | {eng['naive_tps']:,.0f} |",
        "",
        f"Batched / naive throughput: **{eng['ratio']:.1f}x**.",
        "",
        f"Step-time split on the embedded default (b_t 32, n 64 = 16+48, b_g 96), median share over {args.steps} "
        "steps after one warm-up step:",
        "",
        "| method | step s | sampled/step | generation | reward | update | bookkeeping | store write |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for m, s in split.items():
        lines.append(
            f"| {m} | {s['step_s']:.2f} | {s['sampled']:,.0f} | {s['generate']:.1%} | {s['reward']:.1%} | "
            f"{s['update']:.1%} | {s['bookkeeping']:.2%} | {s['store']:.1%} |"
        )
    lines += [
        "",
        "Bookkeeping (the allocator) stays far under 1% of a step. Generation does not dominate every method here:",
        "a 0.2M-parameter model on a CPU is compute-bound in both phases, and the update makes four passes over",
        "each trained token (old log-probs, then forward and backward per minibatch) against one for each sampled",
        "token, so methods that train most of what they sample (GRPO trains all of it, PC two thirds) spend more",
        "on the update; only for DAPO, which samples three times what it trains, is generation the largest share. At LLM scale",
        "decoding is memory-bound and long, and generation dominates (paper section 5).",
    ]
    text = "\n".join(lines)
    print(text)
    if args.write:
        write_section(args.write, "engine", text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
