"""Issue 41 point 6: one step numbering for people. A real ``pilot-commit train --steps 3`` (then ``--resume`` to 5)
is read on every surface a person looks at: its console (the progress bar, the closing block), its TensorBoard
event file, the run plot's data and the progress lines the Dagster UI shows for the same steps. Each says the first
step is 1 and the last is 3 (5 after the resume); the store keeps its own steps 0..2 (pc_pipelines/steps.py)."""

import re
from functools import partial

import pytest
from pilot_cli import MODULE, run_cli

from pc_pipelines.reports.run_plot import PANELS, load_run_progress, run_progress_figure
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


def tensorboard_steps(logdir) -> dict[str, list[int]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(logdir))
    acc.Reload()
    return {tag: [e.step for e in acc.Scalars(tag)] for tag in ("train/mean_reward", "eval/accuracy")}


def test_every_surface_counts_the_first_step_as_1(base_policy, tmp_path):
    args = ["train", "--method", "grpo", "--out", str(tmp_path), "--run-name", "r", "--policy", str(base_policy),
            *(a for s in SMALL for a in ("--set", s))]
    r = cli(*args, "--steps", "3")
    assert r.returncode == 0, r.stderr[-2000:]
    # the console: the bar counts 1..3 of 3; the closing table's columns are "start" (before any step) and
    # "step 3"; the last step's numbers say step 3
    assert bar_counts(r.stderr)[0] == (0, 3) and bar_counts(r.stderr)[-1] == (3, 3)
    out = r.stdout.splitlines()
    assert out[1].split() == ["set", "start", "step", "3"]
    assert "final mean reward " in out[9] and "(step 3)" in out[9] and "final eval accuracy" in out[9]
    # TensorBoard: steps 1..3; the evaluations at 0 (before training), 2 (eval_every) and 3 (the last step)
    tb = tensorboard_steps(tmp_path / "r" / "tensorboard")
    assert tb == {"train/mean_reward": [1, 2, 3], "eval/accuracy": [0, 2, 3]}
    # the run plot (the segment's materialization shows it): x from 1 to 3, the evaluations at 0, 2 and 3
    store = Store(tmp_path / "pc.duckdb")
    assert [row["step"] for row in store.query("SELECT step FROM steps WHERE run_id = 'r' ORDER BY step")] == [0, 1, 2]
    axes = dict(zip(PANELS, run_progress_figure(load_run_progress(store, "r")).axes, strict=True))
    assert list(axes["mean reward"].lines[0].get_xdata()) == [1, 2, 3]
    assert list(axes["held-out accuracy"].lines[0].get_xdata()) == [0, 2, 3]
    # the progress the Dagster UI shows for these steps (one observation and one log line per step)
    rows = store.query("SELECT step, sampled_rollouts FROM steps WHERE run_id = 'r' ORDER BY step")
    progress = SegmentProgress("r", 0, 1, 0, 2, 3)
    seen, total = [], 0
    for row in rows:
        total += row["sampled_rollouts"]
        rec = StepRecord(step=row["step"], ledger={"sampled_rollouts": row["sampled_rollouts"]}, loss=None,
                         mean_reward=0.5, reward_std=0.1, cumulative_rollouts=total, timings={})
        seen.append(progress.observe(rec))
    assert [p.metadata()["step"] for p in seen] == [1, 2, 3]
    assert seen[0].metadata()["progress"] == "r: segment 1 of 1, step 1 of 3; run step 1 of 3"  # names its run
    assert seen[-1].line().startswith("step 3/3 of segment 1/1 (run step 3/3)")

    # --resume to 5 steps: the bar starts where the run is (3/5), TensorBoard goes on at 4 and 5, nothing twice
    again = cli(*args, "--steps", "5", "--resume")
    assert again.returncode == 0, again.stderr[-2000:]
    assert bar_counts(again.stderr)[0] == (3, 5) and bar_counts(again.stderr)[-1] == (5, 5)
    assert again.stdout.splitlines()[1].split() == ["set", "start", "step", "5"]
    assert tensorboard_steps(tmp_path / "r" / "tensorboard") == {"train/mean_reward": [1, 2, 3, 4, 5],
                                                                 "eval/accuracy": [0, 2, 3, 4, 5]}
