"""``pilot-commit``: the command line for everything the pipeline does without the UI.

Subcommands so far:

* ``simulate``: drive the real allocator against the scale simulator; one JSON object per step with ``--json``,
  otherwise a progress bar and a readable table.
* ``demo``: GRPO, DAPO, PC (and the oracle bound) side by side in the simulator, as ``make demo`` runs it.

Output a user asked for goes to stdout; progress bars and logs go to stderr, so ``--json`` output pipes cleanly.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
from typing import Sequence

import numpy as np

from .allocation import SELECTION_STRATEGIES, AllocatorConfig, ConfigError
from .simulate import SimConfig, Simulation, SimStep

log = logging.getLogger("pc_pipelines.cli")

# (ledger key, column header, width, format spec) of the readable `simulate` table.
TABLE_FIELDS = (
    ("step", "step", 5, "d"),
    ("rounds", "rnd", 3, "d"),
    ("sampled_rollouts", "sampled", 8, "d"),
    ("trained_rollouts", "trained", 8, "d"),
    ("pilot_rollouts", "pilot", 7, "d"),
    ("commit_rollouts", "commit", 7, "d"),
    ("trained_prompts", "groups", 6, "d"),
    ("buffer_size", "buffer", 6, "d"),
    ("skipped_easy", "easy", 5, "d"),
    ("deferred_hard", "hard", 5, "d"),
    ("evicted", "evict", 5, "d"),
    ("mean_reward_std", "r_std", 6, ".3f"),
    ("accuracy", "acc", 6, ".3f"),
    ("cumulative_sampled", "cum_sampled", 12, ",d"),
)


def _progress(total: int, desc: str, enabled: bool):
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="step", file=sys.stderr, disable=not enabled, leave=False)


# ---- config from arguments --------------------------------------------------------------------------------------
def _add_allocator_args(p: argparse.ArgumentParser, with_method: bool = True) -> None:
    if with_method:
        p.add_argument("--method", default="pc", choices=["grpo", "dapo", "pc", "oracle"], help="allocation method")
    p.add_argument("--train-batch", type=int, default=128, help="b_t: prompts per training step (default 128)")
    p.add_argument("--n", type=int, default=None, help="rollouts per trained group (default n_pilot+n_commit, or 64)")
    p.add_argument("--n-pilot", type=int, default=None, help="PC pilot rollouts per prompt (default n//4)")
    p.add_argument("--n-commit", type=int, default=None, help="PC commit rollouts per kept prompt (default n-n_pilot)")
    p.add_argument("--oversample", type=float, default=3.0, help="s: sampling batch b_g = s*b_t (default 3)")
    p.add_argument("--p-lower", type=float, default=0.125, help="keep band lower edge, inclusive (default 0.125)")
    p.add_argument("--p-upper", type=float, default=0.75, help="keep band upper edge, inclusive (default 0.75)")
    p.add_argument("--p-solve", type=float, default=1.0, help="evict at pilot p_hat >= this (default 1.0)")
    p.add_argument("--no-evict", action="store_true", help="PC: never evict solved prompts")
    p.add_argument("--max-age", type=int, default=4, help="d: max policy lag of a buffered pilot (default 4)")
    p.add_argument("--max-rounds", type=int, default=10, help="generation rounds per step before shortfall")
    p.add_argument("--no-binding", action="store_true", help="PC: separate pilot and commit engine calls")
    p.add_argument("--selection", default="max_variance", choices=sorted(SELECTION_STRATEGIES))
    p.add_argument("--seed", type=int, default=0, help="seeds the prompt stream, tie-breaks and the simulator")


def _resolve_n(args: argparse.Namespace) -> tuple[int, int | None]:
    """(n, n_pilot) from --n / --n-pilot / --n-commit; inconsistent values are an error naming the flags."""
    n, p, c = args.n, args.n_pilot, args.n_commit
    if p is not None and c is not None:
        if n is not None and n != p + c:
            raise ConfigError(
                f"--n {n} differs from --n-pilot {p} + --n-commit {c} = {p + c}. Fix: drop --n or make it {p + c} "
                "(training rollouts per prompt are matched across methods: n = n_pilot + n_commit)."
            )
        return p + c, p
    if n is None:
        n = 64
    if c is not None:
        return n, n - c
    return n, p


def allocator_config(args: argparse.Namespace, method: str | None = None) -> AllocatorConfig:
    n, n_pilot = _resolve_n(args)
    method = method or args.method
    return AllocatorConfig(
        method=method,
        train_batch=args.train_batch,
        n=n,
        n_pilot=n_pilot if method == "pc" else None,
        oversample=args.oversample,
        p_lower=args.p_lower,
        p_upper=args.p_upper,
        p_solve=args.p_solve,
        evict=not args.no_evict,
        max_age=args.max_age,
        max_rounds=args.max_rounds,
        binding=not args.no_binding,
        selection=args.selection,
        seed=args.seed,
    )


def _sim_config(args: argparse.Namespace) -> SimConfig:
    return SimConfig(num_prompts=args.prompts, difficulty_spread=args.spread, seed=args.seed)


def _add_sim_args(p: argparse.ArgumentParser, steps: int) -> None:
    p.add_argument("--steps", type=int, default=steps, help=f"training steps (default {steps})")
    p.add_argument("--prompts", type=int, default=85_000, help="simulated prompt pool size (default 85000)")
    p.add_argument("--spread", type=float, default=SimConfig.difficulty_spread, help="difficulty spread knob")


# ---- simulate ---------------------------------------------------------------------------------------------------
def cmd_simulate(args: argparse.Namespace) -> int:
    sim = Simulation(allocator_config(args), _sim_config(args))
    out = sys.stdout
    every = max(1, args.steps // 20)
    if not args.json:
        out.write(
            f"simulate {args.method}: b_t={sim.alloc_config.train_batch} b_g={sim.alloc_config.sampling_batch} "
            f"n={sim.alloc_config.n}"
            + (f" ({sim.alloc_config.pilot_n}+{sim.alloc_config.commit_n})" if args.method == "pc" else "")
            + f" prompts={args.prompts} steps={args.steps} seed={args.seed}\n"
        )
        out.write(" ".join(f"{h:>{w}}" for _, h, w, _ in TABLE_FIELDS) + "\n")
    last: SimStep | None = None
    with _progress(args.steps, f"simulate {args.method}", enabled=not args.json) as bar:
        for st in sim.run(args.steps):
            last = st
            rec = st.record()
            if args.json:
                out.write(json.dumps(rec) + "\n")
            elif rec["step"] % every == 0 or rec["step"] == args.steps - 1:
                bar.clear()
                out.write(" ".join(f"{rec[k]:>{w}{spec}}" for k, _, w, spec in TABLE_FIELDS) + "\n")
                out.flush()
            bar.update(1)
    if not args.json and last is not None:
        out.write(
            f"done: {last.cumulative_sampled:,} rollouts sampled, {last.cumulative_trained:,} trained, "
            f"accuracy {last.accuracy:.3f}, {sim.allocator.stream.evicted_count:,} prompts evicted\n"
        )
    return 0


# ---- demo ---------------------------------------------------------------------------------------------------------
def _first_reaching(acc: np.ndarray, cum: np.ndarray, target: float) -> int | None:
    hit = np.flatnonzero(acc >= target - 1e-12)
    return int(cum[hit[0]]) if hit.shape[0] else None


def cmd_demo(args: argparse.Namespace) -> int:
    """GRPO, DAPO and PC (and the oracle bound) in the simulator, summarized side by side."""
    methods = ["grpo", "dapo", "pc", "oracle"]
    rows = []
    curves: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for m in methods:
        sim = Simulation(allocator_config(args, method=m), _sim_config(args))
        acc, cum, std, multi = [], [], [], 0
        with _progress(args.steps, f"demo {m:>6}", enabled=True) as bar:
            for st in sim.run(args.steps):
                led = st.outcome.ledger
                acc.append(st.accuracy)
                cum.append(st.cumulative_sampled)
                std.append(led.mean_reward_std)
                multi += led.rounds > 1
                bar.update(1)
        curves[m] = (np.asarray(acc), np.asarray(cum))
        rows.append(
            {
                "method": m,
                "sampled": cum[-1],
                "trained": st.cumulative_trained,
                "reward_std": float(np.mean(std)),
                "evicted": sim.allocator.stream.evicted_count,
                "multi_round": multi / args.steps,
                "accuracy": acc[-1],
            }
        )
    target = float(min(curves["grpo"][0].max(), curves["pc"][0].max()))
    for r in rows:
        acc, cum = curves[r["method"]]
        r["to_target"] = _first_reaching(acc, cum, target)
    pc_cost = next(r["to_target"] for r in rows if r["method"] == "pc")
    cfg = allocator_config(args, method="pc")
    out = sys.stdout
    out.write(
        f"\nPilot-Commit allocation in the scale simulator: {args.prompts:,} prompts, {args.steps} steps, "
        f"b_t={cfg.train_batch}, b_g={cfg.sampling_batch}, n={cfg.n} (PC {cfg.pilot_n}+{cfg.commit_n}), seed {args.seed}\n"
        f"target accuracy = min(GRPO peak, PC peak) = {target:.3f}\n\n"
    )
    header = (
        f"{'method':<8} {'sampled':>12} {'trained':>12} {'mean r_std':>10} {'evicted':>8} {'rounds>1':>8} "
        f"{'final acc':>9} {'to target':>12} {'x vs PC':>8}"
    )
    out.write(header + "\n" + "-" * len(header) + "\n")
    for r in rows:
        to = r["to_target"]
        ratio = "-" if to is None or not pc_cost else f"{to / pc_cost:.2f}"
        out.write(
            f"{r['method']:<8} {r['sampled']:>12,} {r['trained']:>12,} {r['reward_std']:>10.3f} {r['evicted']:>8,} "
            f"{r['multi_round']:>8.1%} {r['accuracy']:>9.3f} {('never' if to is None else f'{to:,}'):>12} {ratio:>8}\n"
        )
    out.write(
        "\n'to target' = cumulative sampled rollouts at the first step at or above the target; 'x vs PC' = that "
        "cost over PC's (GRPO/PC and DAPO/PC as in the paper's Table 2). The simulator is a harness for the "
        "allocator, not a claim about model accuracy: see `pilot-commit simulate --help`.\n"
    )
    return 0


# ---- entry point -------------------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pilot-commit", description=__doc__.split("\n")[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging on stderr")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("simulate", help="run one allocation method against the scale simulator")
    _add_allocator_args(p)
    _add_sim_args(p, steps=200)
    p.add_argument("--json", action="store_true", help="one JSON object per step on stdout")
    p.set_defaults(func=cmd_simulate)

    p = sub.add_parser("demo", help="GRPO vs DAPO vs PC (vs oracle) in the simulator, side by side")
    _add_allocator_args(p, with_method=False)
    _add_sim_args(p, steps=300)
    p.set_defaults(func=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        return int(args.func(args) or 0)
    except ConfigError as exc:
        sys.stderr.write(f"pilot-commit: configuration error: {exc}\n")
        return 2
    except BrokenPipeError:  # `pilot-commit simulate --json | head`
        return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
