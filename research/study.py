"""The rollout-efficiency study: GRPO vs DAPO vs PC on one store, its statistics, tables and plots.

The studies of research/ (``bench_study.py``, ``efficiency.py`` and the others) are the commands; this module is
what they run, so the tests (tests/research/) exercise the same code. It imports ``pc_pipelines``, never the reverse:

* :class:`StudyJob` + :func:`run_jobs`: real training runs as ``pilot-commit train`` subprocesses, ``workers`` at a
  time (each torch process on one thread, so 2 workers use the 2 cores), longest jobs first, one progress bar over
  every step of every job. Every job writes into ONE store (runs open the DuckDB catalog only for short
  transactions; step logs are files), resumes from its checkpoints when the study is re-run, and a failed job
  stops the study with the tail of its log.
* :func:`simulate_jobs`: the same jobs against the simulator (ablations where real runs are too slow).
* :func:`run_stats`: per run, from the store's ``steps`` table: the fill rate of b_t per step, the share of steps
  that needed more than one generation round (paper section 6.3), evictions, prompts consumed (section 6.4),
  the mean reward std and informative share of the trained groups.
* :func:`versus`: rollouts to target of any run against a GRPO (and DAPO) run of the same seed, with the store's
  rule (target = min(GRPO peak, the run's peak); cost = cumulative sampled rollouts at the first eval at or above
  it; ``pc_pipelines/store/rollouts_to_target.py``, the functions the store's view agrees with), for ablation variants
  that are not in the primary family's ``rollouts_to_target`` view, optionally on smoothed curves.

Worked example of :func:`versus`: GRPO evals ``[(0, .70), (10240, .80), (20480, .84), (30720, .83)]`` peak at .84;
PC evals ``[(0, .70), (15360, .82), (30720, .86)]`` peak at .86; target = min(.84, .86) = .84; GRPO first reaches
it at 20480, PC at 30720; GRPO/PC = 20480 / 30720 = 0.67x (PC needed more).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import queue
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from pc_pipelines.allocation import training_methods
from pc_pipelines.reports import (
    OTHER_COLORS,
    RunCurves,
    format_count,
    format_ratio,
    load_curves,
    method_color,
    method_label,
    new_figure,
    save_figure,
)
from pc_pipelines.store import Store
from pc_pipelines.store.rollouts_to_target import first_reaching, median, target_accuracy

log = logging.getLogger(__name__)

# Relative cost of one step per method on the embedded default (measured: GRPO 1.7 s, PC 2.2 s, DAPO ~3 s at
# b_t 16, n 64); only used to start the longest jobs first.
STEP_COST = {"grpo": 1.0, "pc": 1.3, "dapo": 1.8}


class StudyError(RuntimeError):
    """A study job failed or the store lacks what a table needs; the message says what and how to fix it."""


# ---- jobs -----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class StudyJob:
    """One training run of the study."""

    run_id: str
    """Run id in the store and directory name under the study's runs directory."""
    method: str
    """grpo, dapo or pc."""
    seed: int
    """Run seed: prompt stream, sampling and init."""
    steps: int
    """Training steps (the fixed budget)."""
    preset: str
    """Preset the run resolves from (the study's frozen preset)."""
    family: str
    """Runs compared in one rollouts-to-target table share a family."""
    overrides: tuple[str, ...] = ()
    """``section.key=value`` overrides on top of the preset (ablation variants)."""
    env: tuple[tuple[str, str], ...] = ()
    """Extra environment of the run's process, e.g. ``(("ATEN_CPU_CAPABILITY", "default"),)`` for the benchmark's
    reproducibility row (the other CPU kernels)."""

    @property
    def cost(self) -> float:
        return self.steps * STEP_COST.get(self.method, 1.5)

    def argv(self, store: Path, out_dir: Path, cache_dir: Path | None = None, resume: bool = True) -> list[str]:
        """The run's ``pilot-commit train`` command; ``resume``: the store holds the run already (``train`` refuses
        ``--resume`` of a run it does not hold, so a study's first start of a run leaves it out)."""
        cmd = [
            sys.executable, "-m", "pc_pipelines.cli", "train", "--preset", self.preset, "--method", self.method,
            "--seed", str(self.seed), "--family", self.family, "--steps", str(self.steps), "--run-name", self.run_id,
            "--out", str(out_dir), "--store", str(store), *(["--resume"] if resume else []), "--json", "--quiet",
            "--no-final-eval",  # the study's held-out curve is its training.eval_every schedule, nothing more
        ]
        for kv in self.overrides:
            cmd += ["--set", kv]
        if cache_dir is not None:
            cmd += ["--cache-dir", str(cache_dir)]
        return cmd


def primary_jobs(seeds: Sequence[int], steps: int, preset: str, family: str,
                 methods: Sequence[str] | None = None) -> list[StudyJob]:
    """One run per seed and method (default: every registered training method: GRPO, DAPO, PC)."""
    methods = training_methods() if methods is None else methods
    return [StudyJob(f"{family}-{m}-s{s}", m, s, steps, preset, family) for s in seeds for m in methods]


def variant_jobs(name: str, overrides: Sequence[str], seeds: Sequence[int], steps: int, preset: str,
                 family_prefix: str, method: str = "pc") -> list[StudyJob]:
    """PC (or ``method``) runs of one ablation variant; each variant is its own family ``<prefix>/<name>``."""
    fam = f"{family_prefix}/{name}"
    return [StudyJob(f"{family_prefix}-{name}-{method}-s{s}", method, s, steps, preset, fam, tuple(overrides))
            for s in seeds]


def _done_steps(store: Store, run_id: str) -> int:
    if not store.path.exists():
        return 0
    rows = store.query("SELECT count(*) AS n FROM steps WHERE run_id = ?", [run_id])
    return int(rows[0]["n"]) if rows else 0


def run_jobs(
    jobs: Sequence[StudyJob],
    store: Store,
    out_dir: str | Path,
    workers: int = 2,
    cache_dir: str | Path | None = None,
    show_progress: bool = True,
    on_step: Callable[[StudyJob, dict[str, Any]], None] | None = None,
) -> dict[str, float]:
    """Run ``jobs`` as ``pilot-commit train`` subprocesses, ``workers`` at a time; returns each job's wall seconds.

    Jobs already complete in the store are skipped (a re-run of the study only finishes what is missing; each
    subprocess resumes from its run's checkpoints). Raises :class:`StudyError` with the job's log tail when one
    fails; the other running jobs are stopped (their checkpoints stay, so a re-run resumes them)."""
    from tqdm.auto import tqdm

    if workers < 1:
        raise StudyError(f"workers={workers}: need at least 1. Fix: --workers 2 on a 2-core machine.")
    out = Path(out_dir).resolve()
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    store.init(vacuum=False)
    done = {j.run_id: min(_done_steps(store, j.run_id), j.steps) for j in jobs}
    todo = sorted((j for j in jobs if done[j.run_id] < j.steps), key=lambda j: -j.cost)
    bar = tqdm(total=sum(j.steps for j in jobs), initial=sum(done.values()), unit="step", desc="study",
               disable=not show_progress, dynamic_ncols=True)
    events: queue.Queue = queue.Queue()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    running: dict[str, tuple[StudyJob, subprocess.Popen, float, Path]] = {}
    walls: dict[str, float] = {}

    def reader(job: StudyJob, proc: subprocess.Popen) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            line = line.strip()
            if line.startswith("{"):
                with contextlib.suppress(json.JSONDecodeError):
                    events.put(("step", job, json.loads(line)))
        events.put(("exit", job, proc.wait()))

    def start(job: StudyJob) -> None:
        log_path = logs / f"{job.run_id}.log"
        with open(log_path, "ab") as err:  # the child gets its own copy of the descriptor
            known = store.get_run(job.run_id) is not None  # resumed (its checkpoints), or started new
            proc = subprocess.Popen(job.argv(store.path, out, Path(cache_dir) if cache_dir else None, resume=known),
                                    stdout=subprocess.PIPE, stderr=err, text=True, env={**env, **dict(job.env)})
        running[job.run_id] = (job, proc, time.monotonic(), log_path)
        threading.Thread(target=reader, args=(job, proc), daemon=True).start()
        log.info("started %s (pid %d)", job.run_id, proc.pid)

    pending = list(todo)
    # Until some job has trained a step, only one runs: the first run builds the embedded warm start into the cache
    # (minutes), and the others must find it there rather than build it again, concurrently, into the same place.
    warmed = False
    try:
        while pending or running:
            while pending and len(running) < (workers if warmed else 1):
                start(pending.pop(0))
            kind, job, payload = events.get()
            if kind == "step":
                warmed = True
                bar.update(1)
                bar.set_postfix_str(f"{job.run_id} step {payload.get('step')}")
                if on_step:
                    on_step(job, payload)
                continue
            _, proc, t0, log_path = running.pop(job.run_id)
            walls[job.run_id] = time.monotonic() - t0
            if payload != 0:
                tail = log_path.read_text(errors="replace")[-2000:]
                raise StudyError(
                    f"study job {job.run_id} exited with {payload}. Its log ({log_path}) ends:\n{tail}\n"
                    f"Fix the cause and re-run the same command: finished runs are skipped and this one resumes."
                )
    finally:
        for _, proc, _, _ in running.values():
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
        bar.close()
    return walls


def simulate_jobs(jobs: Sequence[StudyJob], store: Store, show_progress: bool = True) -> None:
    """Run ``jobs`` against the simulator (their preset must have a ``sim`` section), into ``store``."""
    from tqdm.auto import tqdm

    from pc_pipelines.config import parse_overrides, resolve
    from pc_pipelines.simulator import record_simulation

    store.init(vacuum=False)
    done = {j.run_id for j in jobs if _done_steps(store, j.run_id) >= j.steps}  # a re-run reuses finished runs
    bar = tqdm(total=sum(j.steps for j in jobs), initial=sum(j.steps for j in jobs if j.run_id in done), unit="step",
               desc="simulate", disable=not show_progress, dynamic_ncols=True)
    try:
        for job in jobs:
            if job.run_id in done:
                continue
            cfg = resolve(job.preset, parse_overrides(list(job.overrides)), method=job.method, seed=job.seed,
                          family=job.family)
            for _ in record_simulation(cfg, store, job.steps, run_id=job.run_id):
                bar.update(1)
    finally:
        bar.close()


# ---- running jobs to a budget of sampled rollouts ---------------------------------------------------------------
def sampled_so_far(store: Store, run_id: str) -> tuple[int, int]:
    """(steps, cumulative sampled rollouts) of a run in the store; (0, 0) before its first step."""
    if not store.path.exists():
        return 0, 0
    row = store.query("SELECT count(*) AS steps, coalesce(sum(sampled_rollouts), 0) AS sampled FROM steps "
                      "WHERE run_id = ?", [run_id])
    return (int(row[0]["steps"]), int(row[0]["sampled"])) if row else (0, 0)


def recent_rate(store: Store, run_id: str, last: int = 32) -> float | None:
    """Sampled rollouts a step over the run's last ``last`` steps (None before its first step)."""
    row = store.query("SELECT avg(sampled_rollouts) AS r FROM (SELECT sampled_rollouts FROM steps WHERE run_id = ? "
                      "ORDER BY step DESC LIMIT ?)", [run_id, last])
    return float(row[0]["r"]) if row and row[0]["r"] is not None else None


def next_steps(steps: int, sampled: int, budget: int, first_guess: int = 64,
               rate: float | None = None) -> int | None:
    """The step count to train a run to next so that it reaches ``budget`` sampled rollouts (None: it has).

    A run's sampled rollouts a step are known only once it trains, so a run goes in chunks: the first to
    ``first_guess`` steps, then to the steps its own mean says reach the budget (at least one more step: a step
    samples at least one rollout, so the count grows and the loop ends). Resumed chunks reproduce the uninterrupted run exactly.

    >>> next_steps(0, 0, 40_960), next_steps(64, 4096, 40_960), next_steps(640, 40960, 40_960)
    (64, 640, None)"""
    if sampled >= budget:
        return None
    if steps == 0:
        return first_guess
    # ``rate``: the recent cost a step (a PC run's grows as prompts leave the band, so the mean undershoots it and
    # the chunk overshot the budget 2x on `bench-paper`); the run's mean otherwise
    return steps + max(1, math.ceil((budget - sampled) / max(rate or 0.0, sampled / steps)))


def run_to_budget(jobs: Sequence[StudyJob], store: Store, out_dir: str | Path, workers: int, budget: int,
                  label: str = "study") -> None:
    """Train every job until it has sampled ``budget`` rollouts (chunks of :func:`next_steps`; resumable)."""
    rounds = 0
    while True:
        todo = []
        for j in jobs:
            steps, sampled = sampled_so_far(store, j.run_id)
            rate = recent_rate(store, j.run_id) if 0 < sampled < budget else None
            want = next_steps(steps, sampled, budget, first_guess=max(8, budget // (16 * _trained_per_step(j))),
                              rate=rate)
            if want is not None:
                todo.append(replace(j, steps=want))
        if not todo:
            return
        rounds += 1
        print(f"[{label}] round {rounds}: {len(todo)} runs below {budget:,} sampled rollouts", flush=True)
        run_jobs(todo, store, out_dir, workers=workers)


def _trained_per_step(job) -> int:
    """n * b_t from the job's overrides (the bench preset's 64 and 16 otherwise). The first chunk assumes 16 sampled
    rollouts a trained one (PC with pilots of 2 on `bench` sampled 14: the first tuning runs, which assumed 8,
    overshot the budget by 60%), so it stays under the budget; the next one is measured."""
    over = dict(o.split("=", 1) for o in job.overrides)
    return int(over.get("allocator.n", 64)) * int(over.get("allocator.train_batch", 16))


def budget_status(store: Store, jobs: Sequence[StudyJob], budget: int) -> list[str]:
    """One line a job: its steps and sampled rollouts so far against ``budget``."""
    out = []
    for j in jobs:
        steps, sampled = sampled_so_far(store, j.run_id)
        out.append(f"{j.run_id}: {steps} steps, {sampled:,} of {budget:,} sampled rollouts"
                   f"{' (done)' if sampled >= budget else ''}")
    return out


# ---- statistics ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RunStats:
    """Per-run aggregates of the store's ``steps`` table (paper sections 6.3 and 6.4)."""

    run_id: str
    family: str
    method: str
    seed: int
    steps: int
    train_batch: int
    sampled_rollouts: int
    trained_rollouts: int
    fill_rate: float
    """Mean over steps of trained groups / b_t (1.0 = every step trained a full batch)."""
    full_share: float
    """Share of steps whose batch was full."""
    multi_round_share: float
    """Share of steps that needed more than one generation round."""
    mean_rounds: float
    evicted: int
    """Prompts marked solved (PC eviction)."""
    prompts_consumed: int
    """Fresh prompts drawn from the stream over the run."""
    mean_reward_std: float
    informative_share: float
    compute_s: float
    """Generate + reward + update seconds summed over the steps (the run's compute, without evaluation)."""
    fill_per_step: tuple[float, ...] = field(default=(), repr=False)
    rounds_per_step: tuple[int, ...] = field(default=(), repr=False)


def run_stats(store: Store, run_ids: Sequence[str]) -> dict[str, RunStats]:
    runs = {r["run_id"]: r for r in store.query(
        "SELECT run_id, family, method, seed, config_json FROM runs WHERE list_contains(?, run_id)", [list(run_ids)])}
    rows: dict[str, list[dict]] = {}
    for r in store.query(
        """SELECT run_id, step, rounds, sampled_rollouts, trained_rollouts, trained_prompts, prompts_consumed,
                  evicted, mean_reward_std, informative_share,
                  coalesce(time_generate_s, 0) + coalesce(time_reward_s, 0) + coalesce(time_update_s, 0) AS compute_s
           FROM steps WHERE list_contains(?, run_id) ORDER BY run_id, step""", [list(run_ids)]):
        rows.setdefault(r["run_id"], []).append(r)
    out = {}
    for rid, st in rows.items():
        meta = runs[rid]
        bt = int(json.loads(meta["config_json"])["allocator"]["train_batch"])
        fill = tuple(min(1.0, int(r["trained_prompts"]) / bt) for r in st)
        rounds = tuple(int(r["rounds"]) for r in st)
        out[rid] = RunStats(
            run_id=rid, family=meta["family"], method=meta["method"], seed=int(meta["seed"]), steps=len(st),
            train_batch=bt,
            sampled_rollouts=sum(int(r["sampled_rollouts"]) for r in st),
            trained_rollouts=sum(int(r["trained_rollouts"]) for r in st),
            fill_rate=sum(fill) / len(fill),
            full_share=sum(f >= 1.0 for f in fill) / len(fill),
            multi_round_share=sum(k > 1 for k in rounds) / len(rounds),
            mean_rounds=sum(rounds) / len(rounds),
            evicted=sum(int(r["evicted"] or 0) for r in st),
            prompts_consumed=sum(int(r["prompts_consumed"] or 0) for r in st),
            mean_reward_std=_nanmean([r["mean_reward_std"] for r in st]),
            informative_share=_nanmean([r["informative_share"] for r in st]),
            compute_s=sum(float(r["compute_s"]) for r in st),
            fill_per_step=fill,
            rounds_per_step=rounds,
        )
    return out


@dataclass(frozen=True)
class RolloutBreakdown:
    """Where a run's sampled rollouts went: a row of the store's ``rollout_breakdown`` view.

    ``trained`` is what the policy update saw; the other parts add up to ``sampled - trained`` (every sampled
    rollout is in exactly one): ``early_screen`` (first pilot waves that decided a prompt out of band, rule
    ``early_wave``), ``screened_out`` (full pilots and GRPO/DAPO groups decided out of band: too easy or too hard),
    ``surplus`` (DAPO groups generated past a full batch) and ``kept_unused`` (pilots kept for the buffer that
    never reached a trained batch: left at the end, evicted as stale, or in the buffer when the run stopped).
    ``headroom`` = sampled / trained is how much cheaper a step would be if screening cost nothing at the same
    learning per step: an upper bound on what better screening alone can buy.
    """

    run_id: str
    steps: int
    sampled: int
    trained: int
    early_screen: int
    screened_out: int
    surplus: int
    kept_unused: int

    @property
    def headroom(self) -> float:
        return self.sampled / self.trained if self.trained else math.nan

    def per_step(self, part: str) -> float:
        return getattr(self, part) / self.steps if self.steps else math.nan

    @classmethod
    def total(cls, label: str, parts: Sequence[RolloutBreakdown]) -> RolloutBreakdown:
        """Several runs (a variant's seeds) as one: every count summed, so per-step values are step-weighted."""
        return cls(label, *(sum(getattr(p, c) for p in parts) for c in _BREAKDOWN_COUNTS))


_BREAKDOWN_COUNTS = tuple(f.name for f in fields(RolloutBreakdown) if f.name != "run_id")


def rollout_breakdown(store: Store, run_ids: Sequence[str]) -> dict[str, RolloutBreakdown]:
    """:class:`RolloutBreakdown` per run from the store's ``rollout_breakdown`` view (runs without steps are left
    out). In SQL: ``SELECT * FROM rollout_breakdown WHERE run_id = '...'``."""
    rows = store.query(f"SELECT run_id, {', '.join(_BREAKDOWN_COUNTS)} FROM rollout_breakdown "
                       "WHERE list_contains(?, run_id)", [list(run_ids)])
    return {r["run_id"]: RolloutBreakdown(r["run_id"], *(int(r[c]) for c in _BREAKDOWN_COUNTS)) for r in rows}


def breakdown_markdown(rows: Mapping[str, RolloutBreakdown]) -> str:
    """One row per run (label -> breakdown): rollouts per step by where they went, and the screening headroom."""
    lines = [
        "| run | sampled / step | trained / step | early screen / step | screened out / step | DAPO surplus / step "
        "| kept, never trained / step | headroom (sampled / trained) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for label, b in rows.items():
        lines.append(
            f"| {label} | {b.per_step('sampled'):.0f} | {b.per_step('trained'):.0f} | {b.per_step('early_screen'):.0f} "
            f"| {b.per_step('screened_out'):.0f} | {b.per_step('surplus'):.0f} | {b.per_step('kept_unused'):.0f} "
            f"| {b.headroom:.2f}x |"
        )
    return "\n".join(lines) + "\n"


def _nanmean(vals: Sequence[Any]) -> float:
    xs = [float(v) for v in vals if v is not None and not math.isnan(float(v))]
    return sum(xs) / len(xs) if xs else math.nan


# ---- rollouts to target for any pair of runs ------------------------------------------------------------------
def first_at_or_above(curve: RunCurves, target: float) -> int | None:
    """Cumulative sampled rollouts at the curve's first eval at or above ``target`` (None: never)."""
    return first_reaching(curve.eval_rollouts, curve.eval_accuracy, target)


@dataclass(frozen=True)
class Versus:
    """One run against the GRPO (and DAPO) run of its seed."""

    run_id: str
    seed: int
    target: float | None
    rollouts: int | None
    grpo: int | None
    dapo: int | None

    @property
    def grpo_over(self) -> float | None:
        return self.grpo / self.rollouts if self.grpo is not None and self.rollouts else None

    @property
    def dapo_over(self) -> float | None:
        return self.dapo / self.rollouts if self.dapo is not None and self.rollouts else None


def smoothed(curve: RunCurves, window: int) -> RunCurves:
    """``curve`` with each eval's accuracy replaced by the mean of it and the ``window - 1`` evals before it (fewer at
    the start): a trailing mean, so the smoothed value at an eval uses nothing the run had not measured by then, and
    its rollouts stay the ones sampled through that eval. ``window`` 1 returns the curve unchanged.

    Worked example, window 3: accuracies (.70, .80, .84, .83) become (.70, .75, .78, .8233): the second is
    mean(.70, .80), the fourth mean(.80, .84, .83)."""
    if window < 1:
        raise ValueError(f"smoothing window must be >= 1 evals, got {window}")
    acc = curve.eval_accuracy
    spans = (acc[max(0, i - window + 1):i + 1] for i in range(len(acc)))
    return replace(curve, eval_accuracy=tuple(sum(w) / len(w) for w in spans))


def within_budget(curve: RunCurves, budget: int) -> RunCurves:
    """``curve``'s evaluations up to the first at or past ``budget`` sampled rollouts: a run that trained past its
    study's budget (a chunk overshot) is read as if it had stopped there."""
    k = next((i + 1 for i, r in enumerate(curve.eval_rollouts) if r >= budget), len(curve.eval_rollouts))
    return replace(curve, eval_step=curve.eval_step[:k], eval_rollouts=curve.eval_rollouts[:k],
                   eval_accuracy=curve.eval_accuracy[:k])


def budget_cost(curve: RunCurves, target: float, budget: int, smooth: int, equal_budgets: Sequence[int]) -> dict:
    """One run's numbers by a tuning study's protocol: sampled rollouts to ``target`` (smoothed over ``smooth``
    evaluations, read up to the first at or past ``budget``; None: never), the smoothed accuracy at each of
    ``equal_budgets`` (the first evaluation at or past it) and the peak within the budget, and the whole run's costs a
    step."""
    sm = within_budget(smoothed(curve, smooth), budget)
    steps = max(curve.steps, 1)
    return {"rollouts": first_at_or_above(sm, target), "peak": sm.peak_accuracy,
            **{b: next((a for r, a in zip(sm.eval_rollouts, sm.eval_accuracy) if r >= b), None)
               for b in equal_budgets},
            "sampled_per_step": curve.total_sampled / steps, "trained_per_step": curve.total_trained / steps,
            "sampled_per_trained": curve.total_sampled / max(curve.total_trained, 1), "steps": curve.steps}


def lowest_median(rows: Mapping[tuple[str, int], dict], names: Sequence[str], seeds: Sequence[int],
                  tie_budget: int) -> str | None:
    """A tuning rule: the name with the lowest median over ``seeds`` of ``rows[(name, seed)]["rollouts"]`` (None:
    never, infinitely costly), ties to the higher median accuracy at ``tie_budget``; None while a row is missing."""
    if any((c, s) not in rows for c in names for s in seeds):
        return None

    def key(c: str) -> tuple[float, float]:
        r = [rows[(c, s)] for s in seeds]
        return (statistics.median(math.inf if x["rollouts"] is None else x["rollouts"] for x in r),
                -statistics.median(-math.inf if x[tie_budget] is None else x[tie_budget] for x in r))

    return min(names, key=key)


def versus(run: RunCurves, grpo: RunCurves, dapo: RunCurves | None = None, window: int = 1) -> Versus:
    """Rollouts to target of ``run`` against ``grpo``: target = min(GRPO peak, run peak) (see module docstring),
    on the curves smoothed by a trailing mean over ``window`` evals (:func:`smoothed`; 1: the raw evals)."""
    if window != 1:
        run, grpo = smoothed(run, window), smoothed(grpo, window)
        dapo = smoothed(dapo, window) if dapo is not None else None
    target = target_accuracy(grpo.peak_accuracy, run.peak_accuracy)
    if target is None:
        return Versus(run.run_id, run.seed, None, None, None, None)
    return Versus(run.run_id, run.seed, target, first_at_or_above(run, target), first_at_or_above(grpo, target),
                  first_at_or_above(dapo, target) if dapo is not None else None)


def curves_by_run(store: Store, run_ids: Sequence[str]) -> dict[str, RunCurves]:
    wanted = set(run_ids)
    return {c.run_id: c for c in load_curves(store, latest_only=False) if c.run_id in wanted}


def baselines(store: Store, family: str) -> dict[tuple[str, int], RunCurves]:
    """The latest run of each (method, seed) in ``family``, by (method, seed)."""
    return {(c.method, c.seed): c for c in load_curves(store, family)}


def plain_json(v: Any) -> Any:
    """``v`` with every infinite or NaN float as None, so the results file stays strict JSON (an arm that never
    reached the target is said in docs/STUDIES.md's table)."""
    if isinstance(v, dict):
        return {k: plain_json(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [plain_json(x) for x in v]
    return None if isinstance(v, float) and not math.isfinite(v) else v


def ratio(base: int | None, run: int | None) -> float | None:
    """``base`` / ``run`` of rollouts to the fixed target: a run that never reaches it costs infinity (0 when only it
    never does, infinity when only the base never does, None when neither does)."""
    if run is None and base is None:
        return None
    if run is None:
        return 0.0
    if base is None:
        return math.inf
    return base / run


def ratio_cell(v: float | None) -> str:
    """A ratio's table cell: ``inf`` when only the base never reached the target, else ``format_ratio``'s."""
    from pc_pipelines.reports.tables import format_ratio
    return "inf" if v is not None and math.isinf(v) else format_ratio(v)


# ---- tables ----------------------------------------------------------------------------------------------------
def seed_ratio_table(seeds: Sequence[int], columns: Mapping[str, tuple[Any, Any]],
                     curve: Callable[[Any, int], RunCurves | None], window: int = 1,
                     ) -> tuple[list[str], dict[str, dict[int, float | None]], dict[str, float | None]]:
    """A markdown table of baseline / run rollouts-to-target ratios, a row per seed and a median row, a column per
    label of ``columns`` (label -> (run variant, baseline variant)). ``curve(variant, seed)`` gives a variant's curves
    on a seed (None: the cell is "-"); each ratio is :func:`versus` on curves smoothed over ``window`` evals.
    Returns the lines, the values by label and seed, and the medians by label."""
    labels = list(columns)
    per: dict[str, dict[int, float | None]] = {lab: {} for lab in labels}
    rows = []
    for s in seeds:
        cells = []
        for lab in labels:
            run, base = (curve(v, s) for v in columns[lab])
            v = versus(run, base, window=window).grpo_over if run is not None and base is not None else None
            per[lab][s] = v
            cells.append(format_ratio(v))
        rows.append(f"| {s} | " + " | ".join(cells) + " |")
    medians = {lab: median(list(per[lab].values())) for lab in labels}
    lines = ["| seed | " + " | ".join(labels) + " |", "|---:|" + "---:|" * len(labels), *rows,
             "| **median** | " + " | ".join(f"**{format_ratio(medians[lab])}**" for lab in labels) + " |"]
    return lines, per, medians


def stats_markdown(stats: Sequence[RunStats]) -> str:
    lines = [
        "| run | method | seed | steps | sampled | trained | fill of b_t | full steps | steps > 1 round | evicted "
        "| prompts consumed | reward std | informative | compute |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in stats:
        lines.append(
            f"| `{s.run_id}` | {method_label(s.method)} | {s.seed} | {s.steps} | {s.sampled_rollouts:,} | "
            f"{s.trained_rollouts:,} | {s.fill_rate:.3f} | {s.full_share:.0%} | {s.multi_round_share:.0%} | "
            f"{s.evicted:,} | {s.prompts_consumed:,} | {s.mean_reward_std:.3f} | {s.informative_share:.3f} | "
            f"{s.compute_s / 60:.1f} min |"
        )
    return "\n".join(lines) + "\n"


def versus_markdown(rows: Mapping[str, Sequence[Versus]], stats: Mapping[str, RunStats] | None = None) -> str:
    """One block of rows per variant (name -> its runs' :class:`Versus`), each closed by a median row."""
    stats = stats or {}
    lines = [
        "| variant | seed | target | rollouts | GRPO | DAPO | GRPO/variant | DAPO/variant | fill of b_t | "
        "steps > 1 round | evicted | prompts consumed |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, vs in rows.items():
        for v in sorted(vs, key=lambda v: v.seed):
            s = stats.get(v.run_id)
            extra = (f"{s.fill_rate:.3f} | {s.multi_round_share:.0%} | {s.evicted:,} | {s.prompts_consumed:,}"
                     if s else "- | - | - | -")
            lines.append(
                f"| {name} | {v.seed} | {'-' if v.target is None else f'{v.target:.4f}'} | {format_count(v.rollouts)} "
                f"| {format_count(v.grpo)} | {format_count(v.dapo)} | {format_ratio(v.grpo_over)} | "
                f"{format_ratio(v.dapo_over)} | {extra} |"
            )
        lines.append(
            f"| **{name}** median | | | | | | {format_ratio(median([v.grpo_over for v in vs]))} | "
            f"{format_ratio(median([v.dapo_over for v in vs]))} | | | | |"
        )
    return "\n".join(lines) + "\n"


# ---- plots -----------------------------------------------------------------------------------------------------
def plot_per_step(stats: Sequence[RunStats], out: Path, what: str = "fill",
                  labels: Mapping[str, str] | None = None) -> Path:
    """Fill rate of b_t (``what="fill"``) or generation rounds (``"rounds"``) per step, one line per run. Runs are
    coloured by method, or by ``labels`` (run id -> variant name, one colour per name) when given: two variants of
    one method (strict and easy_pool eviction) then read apart."""
    title = "fill rate of b_t per step (trained groups / b_t)" if what == "fill" else "generation rounds per step"
    fig, ax = new_figure(title, "training step", "trained groups / b_t" if what == "fill" else "rounds")
    seen: set[str] = set()
    colors: dict[str, str] = {}
    for s in stats:
        y = s.fill_per_step if what == "fill" else s.rounds_per_step
        if labels is not None and s.run_id in labels:
            name = labels[s.run_id]
            color = colors.setdefault(name, VARIANT_COLORS[len(colors) % len(VARIANT_COLORS)])
        else:
            name, color = method_label(s.method), method_color(s.method)
        label = name if name not in seen else f"_{s.run_id}"
        seen.add(name)
        ax.plot(range(1, len(y) + 1), list(y), color=color, label=label, linewidth=1.0, alpha=0.8,
                gid=f"run:{s.run_id}")
    if what == "fill":
        ax.set_ylim(-0.02, 1.05)
    if seen:
        ax.legend(loc="best", fontsize="small")
    out.parent.mkdir(parents=True, exist_ok=True)
    return save_figure(fig, out)


# Variants of an ablation plot, in order: the report's other-method colours, then four more (9 distinct).
VARIANT_COLORS = (*OTHER_COLORS, "#d62728", "#393b79", "#637939", "#843c39")


def plot_variants(curves: Mapping[str, Sequence[RunCurves]], out: Path, title: str) -> Path:
    """Accuracy vs cumulative sampled rollouts, one colour per variant (name -> its runs), e.g. the band ablation
    with the GRPO and DAPO baselines."""
    from matplotlib.ticker import FuncFormatter

    fig, ax = new_figure(title, "cumulative sampled rollouts", "mean eval accuracy")
    # Methods keep their report colours; variants take distinct colours in order (a hashed colour repeated one).
    k = 0
    for name, runs in curves.items():
        if name.lower() in training_methods():
            color = method_color(name.lower())
        else:
            color, k = VARIANT_COLORS[k % len(VARIANT_COLORS)], k + 1
        for j, c in enumerate(runs):
            ax.plot(list(c.eval_rollouts), list(c.eval_accuracy), color=color, marker="o", markersize=2.5,
                    linewidth=1.2, alpha=0.85, label=f"{name} ({len(runs)} seeds)" if j == 0 else f"_{c.run_id}",
                    gid=f"run:{c.run_id}")
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:,.0f}"))
    ax.legend(loc="best", fontsize="small")
    out.parent.mkdir(parents=True, exist_ok=True)
    return save_figure(fig, out)
