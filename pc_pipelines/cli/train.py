"""``pilot-commit train`` and ``pilot-commit base-policy``: real training on the embedded default, no UI.

Kept apart from the light subcommands (simulate, sql, report): torch is imported only when these run.

``train --steps N`` means the run's total: ``--resume`` after a crash continues from the newest intact checkpoint up
to N steps, so re-typing the same command with ``--resume`` finishes the run. Without ``--resume`` a run that
already has checkpoints or steps is refused (nothing is overwritten by accident); ``--overwrite`` deletes it and
starts over. Another process writing the same run is refused with its pid and host. SIGTERM or Ctrl-C stops at
the next step boundary with a checkpoint (status ``stopped``, exit 143 / 130, one line on stderr), and so does a
``--json`` whose reader went away (exit 141, as for SIGPIPE; it used to end ``failed`` with an I/O error); a full disk or
another I/O error ends the run ``failed`` with the reason and the fix (exit 1).

Besides every ``training.eval_every`` steps, ``train`` evaluates the run's last step (``--no-final-eval``: the
schedule only), so a run ends with its final held-out accuracy; the evaluation changes nothing the training sees.
The console: one progress bar that stays on screen (transformers' own loading and saving bars are silenced while
it runs), then the closing block (:func:`closing_lines`): the held-out accuracy at the first and the last
evaluated step, one line with the final numbers, and where the checkpoint, TensorBoard and the store are.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import signal
import sys
import threading
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path

from ..errors import ConfigError, installed_command, shell_command
from ..steps import step_label
from .args import add_config_args, check_steps, int_arg, progress_bar, run_config, run_name_arg
from .exits import OK, exit_status

log = logging.getLogger("pc_pipelines.cli")


class _SFTProgress:
    """Progress of the SFT warm start (a minute or two, on first use only): the bar appears when SFT starts."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.total, self.enabled, self.bar = total, enabled, None

    def __call__(self, step: int, loss: float) -> None:
        if self.bar is None:
            self.bar = progress_bar(self.total, "SFT warm start (first use)", self.enabled)
        self.bar.update(1)
        if step % 50 == 0:
            self.bar.set_postfix(loss=f"{loss:.4f}")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


@contextlib.contextmanager
def transformers_bars_off() -> Iterator[None]:
    """Silence transformers' (and huggingface_hub's) own progress bars ("Loading weights", "Writing model shards")
    while ours run, so they do not break into our bar; restored as they were afterwards. Our bars are tqdm's own
    (:func:`~.args.progress_bar`), which this leaves alone."""
    from huggingface_hub import utils as hub_utils
    from transformers.utils import logging as hf_logging

    was_on, hub_was_off = hf_logging.is_progress_bar_enabled(), hub_utils.are_progress_bars_disabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_on:
            with warnings.catch_warnings():  # HF_HUB_DISABLE_PROGRESS_BARS=1 refuses (and warns) for the hub's part
                warnings.simplefilter("ignore")
                hf_logging.enable_progress_bar()
            if hub_was_off:
                hub_utils.disable_progress_bars()


def _cell(value: float | None) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.3f}"


def closing_lines(run_id: str, steps_done: int, rollouts: int, curve: Sequence[dict], last_step: dict | None,
                  eval_samples: int, eval_temperature: float, checkpoint: Path | None, tensorboard_dir: Path,
                  store_path: Path) -> list[str]:
    """The block ``train`` ends with (no ``--json``): the held-out accuracy per set at the first and the last
    evaluated step (columns ``start``, before training (step 0), and ``step N``, the stored step: :mod:`pc_pipelines.steps`) (one column when only one step was evaluated) with their mean over sets, then one line with the
    final numbers (the last step's mean reward, the last evaluation's accuracy, the rollouts sampled), then where the
    checkpoint, TensorBoard and the store are.

    ``curve``: the run's ``eval_results`` rows (step, benchmark, accuracy); ``last_step``: the run's last ``steps``
    row (step, mean_reward, trained_rollouts), None before any step."""
    lines: list[str] = []
    by = {(r["step"], r["benchmark"]): float(r["accuracy"]) for r in curve}
    evaluated = sorted({r["step"] for r in curve})
    final_eval = None
    if evaluated:
        cols = sorted({evaluated[0], evaluated[-1]})
        names = sorted({r["benchmark"] for r in curve})
        means = {s: sum(by[(s, n)] for n in names if (s, n) in by) / max(1, sum((s, n) in by for n in names))
                 for s in cols}
        width = max(10, *(len(n) for n in names))
        lines.append(f"held-out accuracy (mean@{eval_samples}, T={eval_temperature}):")
        lines.append(f"  {'set':<{width}}" + "".join(f" {step_label(s):>10}" for s in cols))
        for n in names:
            lines.append(f"  {n:<{width}}" + "".join(f" {_cell(by.get((s, n))):>10}" for s in cols))
        lines.append(f"  {'mean':<{width}}" + "".join(f" {_cell(means[s]):>10}" for s in cols))
        final_eval = f"final eval accuracy {means[cols[-1]]:.3f} ({step_label(cols[-1])})"
    parts = [f"run {run_id}: {steps_done} steps"]
    if last_step is None:
        parts.append("no step trained yet")
    elif not last_step["trained_rollouts"]:
        parts.append(f"final mean reward - ({step_label(last_step['step'])} trained no group)")
    else:
        parts.append(f"final mean reward {float(last_step['mean_reward']):.3f} ({step_label(last_step['step'])})")
    parts.append(final_eval or "not evaluated")
    parts.append(f"{rollouts:,} rollouts sampled")
    lines.append("; ".join(parts))
    lines.append(f"checkpoint:  {checkpoint if checkpoint is not None else 'none yet'}")
    lines.append(f"tensorboard: {shell_command(installed_command('tensorboard'), '--logdir', tensorboard_dir)}")
    lines.append(f"store:       {shell_command(installed_command('pilot-commit'), 'runs', '--store', store_path)}")
    return lines


def cmd_base_policy(args: argparse.Namespace) -> int:
    from ..training.base_policy import SHIPPED_DIR, build_base_policy, read_meta, recipe_hash, warm_start_report

    cfg = run_config(args)  # the method does not shape the warm start; a --set allocator.* is still validated
    if cfg.task is None or cfg.policy is None:
        raise ConfigError(f"preset {cfg.preset!r} has no embedded task/policy section. Fix: use --preset embedded.")
    if (args.out is None) == (not args.ship):
        raise ConfigError("base-policy needs exactly one of --out DIR (a build of your own) or --ship (replace the "
                          "warm start that ships with the package). Fix: pass one of them.")
    template = cfg.training.prompt_template
    out = args.out or SHIPPED_DIR / f"base-policy-{recipe_hash(cfg.task, cfg.policy, template)}"
    progress = _SFTProgress(cfg.policy.sft_steps, not args.quiet)
    path = build_base_policy(
        out, cfg.task, cfg.policy, template, progress=progress,
        measure=lambda p: warm_start_report(p, cfg.task, template, max_new_tokens=cfg.training.max_response_length),
    )
    progress.close()
    meta = read_meta(path)
    if args.json:
        print(json.dumps(meta))
        return OK
    ws = meta["warm_start"]
    print(f"base policy: {path}  ({meta['parameters']:,} parameters, {meta['sft_steps_run']} SFT steps in "
          f"{meta['sft_seconds']:.0f} s, CPU kernels {meta['cpu_capability']})")
    if meta["sft_probes"]:
        at = meta["sft_target_reached_at"]
        print(f"stop rule: probe pass rate {meta['sft_probes'][-1][1]:.3f} at step {meta['sft_probes'][-1][0]} "
              + (f"reached sft_target {cfg.policy.sft_target}" if at
                 else f"did NOT reach sft_target {cfg.policy.sft_target}: raise policy.sft_max_steps"))
    print("greedy held-out accuracy per digit length: " + "  ".join(f"{d}: {a:.2f}" for d, a in ws["greedy_heldout_accuracy"].items()))
    print(f"pass-rate histogram of {ws['histogram_prompts']} RL prompts x {ws['histogram_samples']} samples "
          "(share below 0.125 / in [0.125, 0.75] / above 0.75):")
    for key, h in ws["pass_rate_histogram"].items():
        label = "all" if key == "all" else f"{key}-digit"
        print(f"  {label:>8}  n={h['n']:4d}  {h['below']:.2f} / {h['between']:.2f} / {h['above']:.2f}")
    return OK


def cmd_train(args: argparse.Namespace) -> int:
    from ..errors import RunError
    from ..run.stopping import StopRequested, failed_write, run_outcome, stop_on_signals

    def run_named() -> str:  # read when the run ends: the run id is known once the run has started
        return f"run {args.run_name}" if args.run_name else "the run"

    with stop_on_signals() as stop:
        try:
            return _train(args, stop)
        except RunError as exc:
            sys.stderr.write(f"pilot-commit: {exc}\n")
            return exit_status(exc)
        except StopRequested as exc:
            sys.stderr.write(f"pilot-commit train: {run_named()} {exc.reason}\n")
            return exit_status(exc)
        except Exception as exc:  # an I/O error, or a full disk a library wrapped (safetensors' SafetensorError)
            if isinstance(exc, (BrokenPipeError, FileNotFoundError)) or not failed_write(exc):
                raise
            _, reason = run_outcome(exc, where=args.out, then="run the same command with --resume")
            sys.stderr.write(f"pilot-commit train: {run_named()} failed: {reason}\n")
            return exit_status(exc)


def refuse_resume_of_unknown_run(store, run_id: str) -> None:
    """``--resume`` of a run the store does not hold (a typo in --run-name, another --store) would train a new run
    from scratch and exit 0: refused, naming the runs the store holds and the command that starts it new."""
    from ..store.names import shown_path

    held = [r["run_id"] for r in store.list_runs()] if store.path.exists() else []
    if run_id in held:
        return
    where = shown_path(store.path)
    listed = (f"it holds {', '.join(held[:8])}" + (f" and {len(held) - 8} more" if len(held) > 8 else "")
              if held else "it holds no run")
    again = [a for a in sys.argv[1:] if a != "--resume"] if sys.argv[1:2] == ["train"] else []
    start = f" (`{shell_command('pilot-commit', *again)}`)" if again else ""
    raise ConfigError(f"--resume: the store {where} holds no run {run_id!r} to resume ({listed}). Fix: drop "
                      f"--resume to start {run_id} as a new run{start}, or give --run-name a run it holds.")


def _train(args: argparse.Namespace, stop) -> int:
    from ..run import latest_checkpoint, run_segment
    from ..run.start import start_training_run
    from ..store import RunBusyError, Store

    check_steps(args.steps, 200)
    if args.resume and args.overwrite:
        raise ConfigError("--resume and --overwrite contradict each other. Fix: --resume continues the run, "
                          "--overwrite deletes it and starts over; pass one.")
    start = "overwrite" if args.overwrite else "resume" if args.resume else "new"  # the driver's one value
    cfg = run_config(args, check=False)  # --method, else --set allocator.method, else the preset's; checked where
    # the run starts (start_training_run: the registries, a simulator-only method, the run id), before any work
    out = Path(args.out)
    store = Store(args.store or out / "pc.duckdb")
    store.check_path(read_only=False)  # /dev/null, a directory, a name too long: refused before the run is prepared
    if args.resume:
        refuse_resume_of_unknown_run(store, args.run_name or cfg.default_run_id())
    show = not args.quiet and not args.json
    stdout_gone = threading.Event()

    def stdout_closed(flag) -> None:
        """The reader of our stdout went away: stop at this step's boundary (checkpoint, status ``stopped``, exit
        141) instead of failing the run with an I/O error that blames the disk; nothing more goes to stdout."""
        stdout_gone.set()
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # Python's own flush at exit would hit the closed pipe again
        os.close(devnull)
        flag.request(signal.SIGPIPE)
    with contextlib.ExitStack() as quiet:
        progress = _SFTProgress(cfg.policy.sft_steps if cfg.policy else 0, show)
        try:  # once the run is checked, our bars only: transformers' loading / saving bars would break into them
            run = start_training_run(cfg, out, args.run_name, policy_path=args.policy, cache_dir=args.cache_dir,
                                     progress=progress,
                                     before_prepare=lambda: quiet.enter_context(transformers_bars_off()))
        finally:
            progress.close()
        args.run_name = run.run_id
        latest = latest_checkpoint(run.checkpoint_dir) if args.resume else None  # the bar's estimate only
        done = min(args.steps, latest[0]) if latest else 0  # steps the checkpoint has
        run = replace(run, planned_steps=args.steps)  # `runs` shows the steps done of these
        bar = progress_bar(args.steps, f"{cfg.method} {run.run_id}", show, leave=True, initial=done)

        def on_step(rec) -> None:
            if args.json and not stdout_gone.is_set():
                try:
                    print(json.dumps(rec.to_json()), flush=True)
                except BrokenPipeError:  # whoever read --json is gone (a study runner stopped, `| head`)
                    stdout_closed(stop)
            trained = rec.ledger.get("trained_rollouts", 1)  # no group trained: no reward to show
            # the numbers of the Dagster UI's per-step progress (pc_pipelines/run/progress.py); tqdm adds
            # step k/N, seconds a step and the time left
            post = {"reward": f"{rec.mean_reward:.3f}" if trained else "-",
                    "reward std": f"{rec.reward_std:.3f}",
                    "informative": f"{rec.ledger.get('informative_share', 0.0):.2f}",
                    "rollouts": f"{rec.ledger.get('sampled_rollouts', 0):,}",
                    "cumulative": f"{rec.cumulative_rollouts:,}"}
            if rec.eval_accuracy is not None:
                post["eval"] = f"{rec.eval_accuracy:.3f}"
            bar.set_postfix(post, refresh=False)
            bar.update(1)  # one refresh, with this step's numbers

        try:
            res = run_segment(run, store, until_step=args.steps, start=start, on_step=on_step, stop=stop,
                              evaluate_last=not args.no_final_eval, finish_at=args.steps)
        except RunBusyError:
            bar.leave = False  # another process writes the run: refused before it started, no bar left on screen
            raise
        finally:
            bar.close()
        if args.resume and res.steps_run == 0:
            sys.stderr.write(f"run {run.run_id} already has {res.last_step} steps (>= --steps {args.steps}); "
                             "nothing to do.\n")
    if args.json:
        return OK
    curve = store.query("SELECT step, benchmark, accuracy FROM eval_results WHERE run_id = ? ORDER BY step, benchmark",
                        [run.run_id])
    last_step = store.query("SELECT step, mean_reward, trained_rollouts FROM steps WHERE run_id = ? "
                            "ORDER BY step DESC LIMIT 1", [run.run_id])
    for line in closing_lines(run.run_id, res.last_step, res.cumulative_rollouts, curve,
                              last_step[0] if last_step else None, cfg.training.eval_samples,
                              cfg.training.eval_temperature, res.checkpoint, res.tensorboard_dir, store.path):
        print(line)
    return OK


def add_parsers(sub) -> None:
    p = sub.add_parser("train", help="train the embedded policy with a registered method (GRPO, DAPO, PC; checkpointed, resumable)")
    add_config_args(p, preset="embedded", training=True)
    p.add_argument("--steps", type=int_arg, default=200, help="the run's total training steps (default 200)")
    p.add_argument("--run-name", type=run_name_arg, help="run id (default: family-method-seed-confighash); letters, "
                   "digits, '.', '_', '-', starting with a letter or digit, at most 128 characters")
    p.add_argument("--out", default="runs", help="runs directory: <out>/<run-name>/ holds checkpoints and TensorBoard")
    p.add_argument("--store", help="the store's DuckDB file (default <out>/pc.duckdb)")
    p.add_argument("--policy", help="a Hugging Face model directory to start from (default: the embedded base policy)")
    p.add_argument("--cache-dir", help="where the embedded base policy is cached (default ~/.cache/pc-pipelines)")
    p.add_argument("--resume", action="store_true", help="continue from the run's newest intact checkpoint")
    p.add_argument("--overwrite", action="store_true",
                   help="delete an existing run of this name (its rows, checkpoints, TensorBoard) and start it over")
    p.add_argument("--no-final-eval", action="store_true",
                   help="evaluate only every training.eval_every steps (default: also the run's last step, so the run "
                        "ends with its final held-out accuracy; the studies pass this to keep their schedule)")
    p.add_argument("--json", action="store_true", help="one JSON object per step on stdout")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("base-policy", help="build the embedded SFT warm start into a Hugging Face model directory")
    add_config_args(p, with_method=False, preset="embedded", training=True)
    p.add_argument("--out", help="the model directory to write (a build of your own; CPUs' kernels change the result)")
    p.add_argument("--ship", action="store_true",
                   help="maintainers: write pc_pipelines/warm_starts/base-policy-<recipe hash>, the canonical warm "
                        "start every machine then uses for this recipe (commit it)")
    p.add_argument("--json", action="store_true", help="print the build's metadata as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_base_policy)
