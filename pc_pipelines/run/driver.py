"""The segment driver: :func:`run_segment` advances a run by K training steps on a backend, for every method.

One segment: take the run's writer lock; restore the run (the newest intact checkpoint, the one a replay names,
or the base policy; a damaged checkpoint is skipped with a warning and moved aside); then per step let the
driver run the allocator's step through the backend (:mod:`.step_loop`), write the step's rows to the store (one atomic step directory), log TensorBoard,
evaluate every ``eval_every`` steps (rows in ``eval_results``; with ``evaluate_last`` also the segment's last step,
as ``pilot-commit train`` does for the run's final step) and checkpoint every ``checkpoint_every`` steps and at the
end. Everything is loaded before the run is touched, so a refusal (every checkpoint damaged, another
config, a policy that does not load) changes nothing.

A stop request (``stop``: SIGTERM / Ctrl-C in the CLI) ends the segment at the next step boundary with a
checkpoint and status ``stopped``; any error ends it ``failed`` with the reason (a full disk says so, with the fix).

**Resume is exact**: every random draw of a step is seeded from (run seed, step[, call]) and the policy, optimizer,
allocator and RNG states are restored bit for bit, so a run killed anywhere (even with SIGKILL mid-step) and
resumed from its last checkpoint produces the same parameters and ledger as the uninterrupted run with the same
seed and ``torch_threads``. The store forgets whatever was written after the checkpoint (``Store.reopen_after``)
and TensorBoard purges its events after it. An evaluation draws nothing from the global RNGs (its sampling is seeded
by ``eval_seed(run seed, step)`` inside a forked RNG) and changes no training state; the driver also puts the
global RNG states back after an evaluation the schedule does not hold (``evaluate_last``), whatever the backend's
evaluation draws, so it leaves the training, the checkpoint and a later resume as they were.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal, get_args

import numpy as np

from ..allocation import Allocator
from ..errors import RunError
from ..rollout import EngineFactory
from ..steps import BEFORE_TRAINING, step_number
from ..store import StepLogWriter, Store, run_has_data, step_tables
from ..store.runlock import holds
from .backend import Backend
from .checkpoint_data import refused, totals_problem
from .checkpoints import (
    checkpoint_at,
    checkpoint_meta,
    list_checkpoints,
    load_run_state,
    newest_intact_checkpoint,
    quarantine_checkpoint,
    restore_rng,
    rng_state,
    save_checkpoint,
)
from .lifecycle import record_end, record_finished, writing_run
from .records import SegmentResult, StepRecord, Totals
from .step_loop import allocator_step
from .stopping import SpaceReserve, StopFlag, StopRequested, run_outcome
from .training_run import TrainingRun

log = logging.getLogger(__name__)


class OpenRun:
    """A run loaded for training: its backend, allocator, ledger and step-log writer."""

    def __init__(self, run: TrainingRun, store: Store, backend: Backend, allocator: Allocator, totals: Totals,
                 restored_from: Path | None) -> None:
        self.run = run
        self.store = store
        self.backend = backend
        self.allocator = allocator
        self.totals = totals
        self.restored_from = restored_from
        self.writer: StepLogWriter = store.writer(run.run_id)
        self._tb = None

    def step(self) -> StepRecord:
        """One training step: the allocator's step through the backend's engine calls (:mod:`.step_loop`), the
        backend's update on its outcome, the payloads the allocator still references kept; its rows go to the
        store."""
        timings = {"generate": 0.0, "reward": 0.0, "update": 0.0, "bookkeeping": 0.0}
        outcome = allocator_step(self.allocator, lambda call: self.backend.generate(call, timings), timings)
        t = time.perf_counter()
        res = self.backend.update(outcome)
        timings["update"] += time.perf_counter() - t
        t = time.perf_counter()
        self.backend.keep_live(self.allocator.live_rollout_ids())
        timings["bookkeeping"] += time.perf_counter() - t
        self.totals.add(outcome)
        t = time.perf_counter()
        extra = {
            "loss": res.loss,
            "mean_reward": res.mean_reward,
            "time_generate_s": timings["generate"],
            "time_reward_s": timings["reward"],
            "time_update_s": timings["update"],
            "time_bookkeeping_s": timings["bookkeeping"],
        }
        step = step_number(outcome.step)  # the run's step number, as stored and shown
        self.writer.write_step(step, step_tables(self.run.run_id, outcome, extra=extra))
        timings["store"] = time.perf_counter() - t
        return StepRecord(
            step=step,
            ledger=outcome.ledger.to_dict() | {"step": step},
            loss=res.loss,
            mean_reward=res.mean_reward,
            reward_std=outcome.ledger.mean_reward_std,
            cumulative_rollouts=self.totals.sampled_rollouts,
            timings=timings,
            train_stats=res.train_stats,
        )

    def evaluate(self, step: int) -> dict[str, float]:
        """Mean@k accuracy of each eval set after ``step`` (0: before training); rows go to ``eval_results``."""
        result = self.backend.evaluate(step)
        self.store.add_eval_results(result.rows(self.run.run_id, step))
        return result.accuracy

    def evaluate_off_schedule(self, step: int) -> dict[str, float]:
        """:meth:`evaluate` with the global RNG states put back afterwards: an evaluation only some runs make (the
        segment's last step, ``evaluate_last``) cannot change the steps or the checkpoint after it."""
        state = rng_state()
        try:
            return self.evaluate(step)
        finally:
            restore_rng(state)

    def save_checkpoint(self) -> Path:
        return save_checkpoint(self.run, self.store, self.allocator, self.totals, self.backend.save)

    # -- TensorBoard ---------------------------------------------------------------------------------------------
    def tensorboard(self, purge_step: int | None):
        if self._tb is None:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(log_dir=str(self.run.tensorboard_dir), purge_step=purge_step)
        return self._tb

    def log_tensorboard(self, rec: StepRecord) -> None:
        """The step's scalars at TensorBoard step ``rec.step`` (the stored step: the first is 1)."""
        tb = self.tensorboard(None)
        s = rec.step
        led = rec.ledger
        for key in ("sampled_rollouts", "trained_rollouts", "rounds", "kept", "skipped_easy", "deferred_hard",
                    "buffer_size", "evicted", "returned", "screened_by_prior", "prior_rollouts_saved",
                    "informative_share", "mean_reward_std", "mean_lag"):
            tb.add_scalar(f"ledger/{key}", led[key], s)
        tb.add_scalar("ledger/cumulative_rollouts", rec.cumulative_rollouts, s)
        tb.add_scalar("train/mean_reward", rec.mean_reward, s)
        if rec.loss is not None:
            tb.add_scalar("train/loss", rec.loss, s)
        for key in ("pg_clipfrac", "ppo_kl", "grad_norm", "lr", "entropy"):
            if rec.train_stats and key in rec.train_stats:
                tb.add_scalar(f"train/{key}", rec.train_stats[key], s)
        for key, v in rec.timings.items():
            tb.add_scalar(f"time/{key}_s", v, s)
        if rec.eval_by_set:
            tb.add_scalar("eval/accuracy", rec.eval_accuracy, s)
            for name, a in rec.eval_by_set.items():
                tb.add_scalar(f"eval/{name}", a, s)

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
            self._tb = None
        self.backend.close()


def _set_aside(run: TrainingRun, damaged: list[tuple[Path, str]], using: str) -> None:
    """Warn about each damaged checkpoint skipped, and move it aside when this process holds the run's lock."""
    for path, problem in damaged:
        moved = quarantine_checkpoint(path) if holds(run.run_dir) else None
        log.warning("run %s: checkpoint %s is damaged: %s; %s; resuming from %s", run.run_id, path.name, problem,
                    f"moved it aside to {moved.name} (delete it once inspected)" if moved else "ignored it", using)


Start = Literal["resume", "new", "overwrite"]
"""How :func:`run_segment` opens its run: one value, so no pair of flags is left to reconcile (``pilot-commit
train`` maps ``--resume`` / ``--overwrite`` to it, refusing both at once)."""


def open_run(run: TrainingRun, store: Store, backend: Backend, resume: bool = True,
             from_step: int | None = None) -> OpenRun:
    """Restore the run from a checkpoint or start it from the base policy, on ``backend``.

    ``from_step`` None: the newest intact checkpoint (``resume``) or the base policy; the store forgets every row
    after the restored step (a crashed run's tail). Without ``resume`` a run that has checkpoints or steps is
    refused. ``from_step`` k: the checkpoint after step k (0: the base policy), keeping the rows of later steps: a
    training segment replayed in the middle of a run rewrites only its own steps (see :func:`run_segment`). A
    damaged checkpoint is skipped for the newest intact one before it (or, for ``from_step``, the base policy),
    with a warning naming it. Everything is loaded before the run's status or rows change, so a refusal changes
    nothing. The caller has initialised ``store`` (:func:`run_segment`, under the run's lock). Returns the opened run
    (its ``restored_from``: the checkpoint restored, None from the base policy).
    """
    chosen: tuple[int, Path] | None = None
    damaged: list[tuple[Path, str]] = []
    if from_step is None:
        if not resume:
            if list_checkpoints(run.checkpoint_dir):
                raise RunError(
                    f"run {run.run_id!r} already has checkpoints in {run.checkpoint_dir}. Fix: pass --resume to "
                    "continue it, --overwrite to delete it and start over, or choose another --run-name."
                )
            have = run_has_data(store, run.run_id)
            if have:
                raise RunError(
                    f"run {run.run_id!r} already has {have} steps in {store.path} (no checkpoint yet). Fix: pass "
                    "--resume to continue it, --overwrite to delete it and start over, or choose another --run-name."
                )
        else:
            chosen, damaged = newest_intact_checkpoint(run.checkpoint_dir)
            if chosen is None and damaged:
                listing = "; ".join(f"{p.name}: {why}" for p, why in damaged)
                raise RunError(
                    f"run {run.run_id!r} has no intact checkpoint to resume from ({listing}). Nothing was changed. "
                    "Fix: restore a checkpoint from a backup, or pass --overwrite (instead of --resume) to start the "
                    "run over from the base policy."
                )
    elif from_step > 0:
        if checkpoint_at(run.checkpoint_dir, from_step) is None:
            have = [s for s, _ in list_checkpoints(run.checkpoint_dir)]
            raise RunError(
                f"run {run.run_id!r} has no checkpoint after step {from_step} in {run.checkpoint_dir} (it has "
                f"{have or 'none'}). Fix: train the steps up to {from_step} first."
            )
        chosen, damaged = newest_intact_checkpoint(run.checkpoint_dir, at_most=from_step)
    if chosen is None:
        backend.start()
        groups = None if run.task.groups is None else np.asarray(run.task.groups, np.int64)  # pools the prior's prior
        allocator = Allocator(run.config.allocator, len(run.task.prompts), prompt_groups=groups, checked=True)
        opened = OpenRun(run, store, backend, allocator, Totals(), None)
    else:
        path = chosen[1]
        meta = checkpoint_meta(run, path)
        rows = store.query("SELECT step, sampled_rollouts, trained_rollouts, engine_calls FROM steps "
                           "WHERE run_id = ? AND step <= ?", [run.run_id, chosen[0]])
        problem = totals_problem(meta.get("totals"), chosen[0], rows)
        if problem is not None:
            raise refused(path, "meta.json", problem)
        allocator, rng = load_run_state(path, run.config.allocator)  # the run's own state first, then the backend's (larger) files
        backend.restore(path)
        opened = OpenRun(run, store, backend, allocator, Totals(**meta["totals"]), path)
        restore_rng(rng)  # last: loading a policy may draw from the global RNGs
    # Loaded: from here on the run changes.
    _set_aside(run, damaged, chosen[1].name if chosen else "the base policy")
    planned = run.planned_steps  # a resumed run past its planned total keeps its own count (`runs`: steps done of these)
    if planned is not None and chosen is not None:
        planned = max(planned, chosen[0])
    store.register_run(run.record(), planned_steps=planned)
    store.vacuum(run.run_id)
    if chosen is None:
        if from_step is None:
            store.reopen_after(run.run_id, -1)  # a fresh start forgets any earlier attempt's rows
            shutil.rmtree(run.tensorboard_dir, ignore_errors=True)
        return opened
    if from_step is None:
        store.reopen_after(run.run_id, chosen[0])
    log.info("resumed run %s from %s (after step %d)", run.run_id, chosen[1], chosen[0])
    return opened


def run_segment(
    run: TrainingRun,
    store: Store,
    steps: int | None = None,
    start: Start = "resume",
    on_step: Callable[[StepRecord], None] | None = None,
    device: str = "cpu",
    engine_factory: EngineFactory | None = None,
    from_step: int | None = None,
    until_step: int | None = None,
    stop: StopFlag | None = None,
    backend: Backend | None = None,
    evaluate_last: bool = False,
    finish_at: int | None = None,
    lock_held: bool = False,
) -> SegmentResult:
    """Advance ``run`` by ``steps`` training steps, or through step ``until_step`` (see the module docstring);
    checkpoint at the end.

    ``backend`` trains the steps; None: :class:`~.local.LocalBackend` on ``device`` with the rollout engine
    ``engine_factory`` builds for the loaded policy (default: the registry's, transformers). ``from_step`` restores
    exactly the checkpoint after that step (0: the base policy) instead of the latest one and keeps the rows of
    later steps: the steps replayed replace their own rows only, atomically at the end (``Store.replace_steps``),
    so re-materializing a Dagster segment in the middle of a run leaves the segments after it intact (with the
    same seed the replay reproduces them bit for bit).

    The run's writer lock is held throughout (a second writer gets :class:`~pc_pipelines.store.RunBusyError`):
    taken here, or, with ``lock_held``, by the caller, which holds it around this call (a segment's attempt recorded
    under it: the ``training_segment`` asset in process, ``train-segment``): one take per process.
    ``start`` (:data:`Start`): ``resume`` (the newest intact checkpoint, or the one ``from_step`` names), ``new``
    (a run with checkpoints or steps is refused) or ``overwrite`` (the run's rows and files deleted first, then
    started over). ``stop`` (a
    :class:`~pc_pipelines.run.stopping.StopFlag`) is looked at between steps: once set, the segment checkpoints and
    ends with :class:`~pc_pipelines.run.stopping.StopRequested`, the run ``stopped``.

    ``evaluate_last`` also evaluates the segment's last step (``until_step``, or the last of ``steps``) when the
    ``training.eval_every`` schedule does not; its rows go to ``eval_results`` like the scheduled ones. Off by
    default (the Dagster segments and the studies keep their schedule); ``pilot-commit train`` turns it on, so a run
    always ends with its final accuracy. A segment that stops early or trains no step evaluates nothing extra.

    ``finish_at``: the run's total steps (``train --steps``); a segment that ends with the run at that many steps or
    more records it ``finished`` (:func:`~.lifecycle.record_finished`), still under the lock."""
    if (steps is None) == (until_step is None):
        raise RunError("run_segment needs exactly one of steps (a count) or until_step (the last step to train).")
    if steps is not None and steps < 0:
        raise RunError(f"steps={steps}: must be >= 0.")
    if start not in get_args(Start):
        raise RunError(f"start={start!r}: use one of {get_args(Start)}.")
    if from_step is not None and start != "resume":
        raise RunError(f"from_step={from_step} restores a checkpoint of the run: it needs start='resume', not "
                       f"{start!r}.")
    if backend is None:
        from .local import LocalBackend  # torch: only when a local segment runs

        backend = LocalBackend(run, device=device, engine_factory=engine_factory)

    def check() -> bool:  # under the lock, before the run is deleted
        if not store.opened:  # one open a process: a caller's session (a segment's) is not opened again
            store.init(vacuum=False)  # never vacuuming other runs: that could race their replays (Store.replace_steps)
        return True

    with writing_run(store, run.run_id, store.run_dir(run.run_id), run.run_dir, command=_command(),
                     overwrite=start == "overwrite", check=check, lock_held=lock_held) as reserve:
        opened = open_run(run, store, backend, resume=start == "resume", from_step=from_step)
        result = _train_segment(opened, steps, until_step, from_step, on_step, stop, reserve, evaluate_last)
        if finish_at is not None:
            record_finished(store, run.run_id, complete=result.last_step >= finish_at)
        return result


def _command() -> str:
    return " ".join(["pilot-commit" if sys.argv and sys.argv[0].endswith((os.path.join("cli", "__main__.py"), "pilot-commit")) else
                     os.path.basename(sys.argv[0] if sys.argv else "python"), *sys.argv[1:2]])


def _train_segment(opened: OpenRun, steps: int | None, until_step: int | None, from_step: int | None,
                   on_step: Callable[[StepRecord], None] | None, stop: StopFlag | None,
                   reserve: SpaceReserve, evaluate_last: bool = False) -> SegmentResult:
    run, store = opened.run, opened.store
    cfg = run.config.training
    first = step_number(opened.allocator.step)  # the segment's first step
    if until_step is not None:
        steps = max(0, until_step - first + 1)
    later = [s for s, _ in list_checkpoints(run.checkpoint_dir) if s >= first + steps]
    last = first + steps - 1  # the segment's last step (evaluate_last)
    records: list[StepRecord] = []
    last_ckpt: Path | None = None
    saved_at: int | None = None
    try:
        # Purging TensorBoard events from `first` on would also drop the later segments a mid-run replay keeps; a run
        # started over also drops its evaluation before training (step 0).
        tb = opened.tensorboard(purge_step=None if later else (BEFORE_TRAINING if first == 1 else first))
        if stop is not None:
            stop.check()
        if first == 1:
            acc = opened.evaluate(BEFORE_TRAINING)
            tb.add_scalar("eval/accuracy", float(np.mean(list(acc.values()))), BEFORE_TRAINING)
        for _ in range(steps):
            if stop is not None:
                stop.check()
            before = opened.totals.sampled_rollouts
            rec = opened.step()
            scheduled = cfg.evaluates_after(rec.step, before, opened.totals.sampled_rollouts)
            if scheduled or (evaluate_last and rec.step == last):
                acc = opened.evaluate(rec.step) if scheduled else opened.evaluate_off_schedule(rec.step)
                rec.eval_by_set = acc
                rec.eval_accuracy = float(np.mean(list(acc.values())))
            opened.log_tensorboard(rec)
            records.append(rec)
            if on_step:
                on_step(rec)
            if rec.step % cfg.checkpoint_every == 0:
                last_ckpt, saved_at = opened.save_checkpoint(), rec.step
            if stop is not None and stop.requested and records:
                if saved_at != rec.step:  # nothing done is lost: the stop boundary gets its checkpoint
                    last_ckpt, saved_at = opened.save_checkpoint(), rec.step
                raise StopRequested(stop.signum, detail=f"after step {rec.step} (checkpoint {last_ckpt.name}); "
                                                        "resume it with --resume")
        if records and saved_at != records[-1].step:
            last_ckpt = opened.save_checkpoint()
        elif not records:
            last_ckpt = opened.restored_from
        if from_step is not None and records:
            store.replace_steps(run.run_id, records[0].step, records[-1].step)
        store.compact(run.run_id)
        store.set_status(run.run_id, "running")
    except BaseException as exc:
        if isinstance(exc, StopRequested) and not exc.detail:
            done = f"after step {records[-1].step}" if records else "before its first step"
            exc = exc.with_detail(f"{done}; resume it with --resume (from its last checkpoint)")
        status, reason = run_outcome(exc, where=f"{run.run_dir} and {store.runs_root}",
                                     then="resume it with --resume (from its last checkpoint)")
        record_end(store, run.run_id, status, reason, opened.writer, reserve)
        if exc is not sys.exc_info()[1]:
            raise exc from None
        raise
    finally:
        opened.close()
    evals = [r for r in records if r.eval_accuracy is not None]
    return SegmentResult(
        run_id=run.run_id,
        first_step=first,
        last_step=opened.allocator.step,  # steps done: the last step's number (0: none)
        steps_run=len(records),
        cumulative_rollouts=opened.totals.sampled_rollouts,
        last_eval_accuracy=evals[-1].eval_accuracy if evals else None,
        mean_reward_std=float(np.mean([r.reward_std for r in records])) if records else None,
        checkpoint=last_ckpt,
        tensorboard_dir=run.tensorboard_dir,
        records=records,
    )
