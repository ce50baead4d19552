"""Issue 55 point 1: one step numbering everywhere, the store and SQL included. A real ``pilot-commit train --steps
3`` (then ``--resume`` to 5) on the embedded default, walked as the README's journeys read it: its console (the
progress bar, the closing block), ``train --json``, ``runs``, ``sql``, its TensorBoard event file, the run plot's data,
the timeline, and the progress the Dagster UI shows for the same steps. On each the first step is 1, the last 3 (5
after the resume), the evaluation before training 0, and a step shown carries the number and the value SQL gives for
that step (``WHERE step = 3`` is step 3 on every screen)."""

import json
import math
import re
from functools import partial

import pytest
from pilot_cli import MODULE, run_cli

from pc_pipelines.reports.run_plot import PANELS, load_run_progress, run_progress_figure
from pc_pipelines.reports.timeline import load_timeline
from pc_pipelines.run.progress import SegmentProgress
from pc_pipelines.run.records import StepRecord
from pc_pipelines.store import Store

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

# GRPO at the smallest size tests/e2e/test_cli_train.py trains; evaluated after the 2nd step and the last one.
SMALL = ["allocator.train_batch=8", "allocator.n=8", "allocator.commit_mean=6", "task.num_prompts=100",
         "training.ppo_minibatch=4", "training.eval_every=2", "training.eval_samples=1"]


cli = partial(run_cli, exe=MODULE, timeout=600)


def bar_counts(stderr: str) -> list[tuple[int, int]]:
    """Every ``k/N`` the run's tqdm bar drew, in order (its refreshes are separated by carriage returns)."""
    return [(int(a), int(b)) for a, b in re.findall(r"\| *(\d+)/(\d+) \[", stderr)]


def tensorboard_scalars(logdir) -> dict[str, dict[int, float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(logdir))
    acc.Reload()
    return {tag: {e.step: e.value for e in acc.Scalars(tag)} for tag in ("train/mean_reward", "eval/accuracy")}


def sql(store_path, query: str) -> list[dict]:
    """What ``pilot-commit sql --json`` answers, as a user asks it."""
    out = cli("sql", "--store", str(store_path), query, "--json")
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout)


def test_every_screen_and_sql_carry_the_same_step_numbers_and_values(base_policy, tmp_path):
    args = ["train", "--method", "grpo", "--out", str(tmp_path), "--run-name", "r", "--policy", str(base_policy),
            *(a for s in SMALL for a in ("--set", s))]
    store_path = tmp_path / "pc.duckdb"
    r = cli(*args, "--steps", "3")
    assert r.returncode == 0, r.stderr[-2000:]
    steps = sql(store_path, "SELECT step, mean_reward, sampled_rollouts FROM steps WHERE run_id = 'r' ORDER BY step")
    curve = {e["step"]: e["accuracy"] for e in sql(
        store_path, "SELECT step, accuracy FROM eval_curve WHERE run_id = 'r' ORDER BY step")}
    assert [s["step"] for s in steps] == [1, 2, 3]  # SQL: the first step is 1
    assert sorted(curve) == [0, 2, 3]  # before training (0), eval_every 2, the last step
    reward = {s["step"]: s["mean_reward"] for s in steps}

    # the console: the bar counts 1..3 of 3; the closing table's columns are "start" (step 0) and "step 3", its
    # means SQL's accuracy at steps 0 and 3; the last step's reward is SQL's at step 3
    assert bar_counts(r.stderr)[0] == (0, 3) and bar_counts(r.stderr)[-1] == (3, 3)
    out = r.stdout.splitlines()
    assert out[1].split() == ["set", "start", "step", "3"]
    mean = next(line.split() for line in out if line.split()[:1] == ["mean"])
    assert mean[1:] == [f"{curve[0]:.3f}", f"{curve[3]:.3f}"]
    closing = next(line for line in out if line.startswith("run r: 3 steps"))
    assert f"final mean reward {reward[3]:.3f} (step 3)" in closing
    assert f"final eval accuracy {curve[3]:.3f} (step 3)" in closing
    assert sql(store_path, "SELECT step FROM checkpoints WHERE run_id = 'r'") == [{"step": 3}]
    assert (tmp_path / "r" / "checkpoints" / "step-00000003").is_dir()  # the checkpoint after step 3
    runs = json.loads(cli("runs", "--store", str(store_path), "--json").stdout)
    assert [(x["run_id"], x["steps"], x["planned_steps"]) for x in runs] == [("r", 3, 3)]

    # TensorBoard: SQL's steps and values
    tb = tensorboard_scalars(tmp_path / "r" / "tensorboard")
    assert sorted(tb["train/mean_reward"]) == [1, 2, 3] and sorted(tb["eval/accuracy"]) == [0, 2, 3]
    assert all(math.isclose(tb["train/mean_reward"][s], reward[s], rel_tol=1e-6) for s in reward)
    assert all(math.isclose(tb["eval/accuracy"][s], curve[s], rel_tol=1e-6) for s in curve)

    # the run plot (the segment's materialization shows it): SQL's steps and values
    store = Store(store_path)
    axes = dict(zip(PANELS, run_progress_figure(load_run_progress(store, "r")).axes, strict=True))
    line = axes["mean reward"].lines[0]
    assert list(line.get_xdata()) == [1, 2, 3] and list(line.get_ydata()) == [reward[s] for s in (1, 2, 3)]
    acc = axes["held-out accuracy"].lines[0]
    assert list(acc.get_xdata()) == [0, 2, 3] and list(acc.get_ydata()) == [curve[s] for s in (0, 2, 3)]

    # the timeline (README journey 3): its columns are SQL's steps, a cell SQL's pass rate at that step
    tl = load_timeline(store, "r", top=3)
    assert list(tl.steps) == [1, 2, 3]
    prompt, col = tl.prompt_ids[0], int(next(c for c in range(3) if not math.isnan(tl.p_hat[0, c])))
    (cell,) = sql(store_path, f"SELECT sum(n_correct) / sum(n) AS p FROM pass_rate_history WHERE run_id = 'r' "
                              f"AND prompt_id = {prompt} AND step = {int(tl.steps[col])}")
    assert math.isclose(tl.p_hat[0, col], cell["p"], rel_tol=1e-9)

    # the progress the Dagster UI shows for these steps (one observation and one log line per step)
    progress = SegmentProgress("r", 0, 1, 1, 3, 3)
    seen, total = [], 0
    for row in steps:
        total += row["sampled_rollouts"]
        rec = StepRecord(step=row["step"], ledger={"sampled_rollouts": row["sampled_rollouts"]}, loss=None,
                         mean_reward=row["mean_reward"], reward_std=0.1, cumulative_rollouts=total, timings={})
        seen.append(progress.observe(rec))
    assert [(p.metadata()["step"], p.metadata()["mean_reward"]) for p in seen] == [
        (s, round(reward[s], 3)) for s in (1, 2, 3)]
    assert seen[0].metadata()["progress"] == "r: segment seg-0000 of 1, step 1 of 3; run step 1 of 3"
    assert seen[-1].line().startswith("step 3/3 of segment seg-0000 of 1 (run step 3/3)")

    # --resume to 4 steps: the bar starts where the run is (3/4); then to 5 with --json: its line is SQL's step 5
    # with SQL's values; TensorBoard goes on at 4 and 5, nothing twice
    again = cli(*args, "--steps", "4", "--resume")
    assert again.returncode == 0, again.stderr[-2000:]
    assert bar_counts(again.stderr)[0] == (3, 4) and bar_counts(again.stderr)[-1] == (4, 4)
    assert again.stdout.splitlines()[1].split() == ["set", "start", "step", "4"]
    more = cli(*args, "--steps", "5", "--resume", "--json")
    assert more.returncode == 0, more.stderr[-2000:]
    printed = [json.loads(x) for x in more.stdout.splitlines() if x.startswith("{")]
    later = sql(store_path, "SELECT step, mean_reward, sampled_rollouts FROM steps WHERE run_id = 'r' AND step > 4 "
                            "ORDER BY step")
    assert [(p["step"], p["mean_reward"], p["sampled_rollouts"]) for p in printed] == [
        (s["step"], s["mean_reward"], s["sampled_rollouts"]) for s in later] and [s["step"] for s in later] == [5]
    assert math.isclose(printed[0]["eval_accuracy"], sql(store_path, "SELECT accuracy FROM eval_curve WHERE "
                                                                     "run_id = 'r' AND step = 5")[0]["accuracy"])
    tb = tensorboard_scalars(tmp_path / "r" / "tensorboard")
    assert sorted(tb["train/mean_reward"]) == [1, 2, 3, 4, 5] and sorted(tb["eval/accuracy"]) == [0, 2, 3, 4, 5]
    assert sql(store_path, "SELECT step FROM checkpoints WHERE run_id = 'r' ORDER BY step") == [
        {"step": 3}, {"step": 4}, {"step": 5}]
