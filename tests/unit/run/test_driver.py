"""The segment driver over its backend protocol, with a test backend (a numpy "policy", no model): a segment that
fails mid-step and is resumed ends exactly where the uninterrupted segment does (policy, payloads, allocator,
ledger rows, evaluations), a stop request ends at a step boundary with a checkpoint, and a resume refused by the
config hash changes nothing. The local backend's resume is tested for real in tests/integration/training."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from pc_pipelines.allocation import EngineCall, StepOutcome
from pc_pipelines.config import resolve
from pc_pipelines.data.task import EvalSet, TaskData
from pc_pipelines.errors import RunError
from pc_pipelines.evaluation import EvalResult
from pc_pipelines.run import TrainingRun, list_checkpoints, run_segment
from pc_pipelines.run.backend import Update
from pc_pipelines.run.stopping import StopFlag, StopRequested
from pc_pipelines.store import Store

PROMPTS = 40


class Crash(RuntimeError):
    pass


class ToyBackend:
    """A policy of one logit per prompt; rewards are Bernoulli draws from the GLOBAL numpy RNG (so a resume is
    only exact if the driver restores the RNG states), the update moves each trained prompt's logit by its mean
    reward minus 0.5. Payloads are the rewards by rollout id (what the allocator's buffered pilots need)."""

    name = "toy"

    def __init__(self, run: TrainingRun, crash_in_step: int | None = None) -> None:
        self.run = run
        self.crash_in_step = crash_in_step
        self.logits: np.ndarray | None = None
        self.payloads: dict[int, float] = {}
        self.closed = False

    def start(self) -> None:
        np.random.seed(self.run.config.seed)  # as a model's init would: the run starts from its seed
        self.logits = np.random.normal(0.0, 1.5, PROMPTS)

    def restore(self, checkpoint: Path) -> None:
        state = json.loads((checkpoint / "toy.json").read_text())
        self.logits = np.array(state["logits"])
        self.payloads = {int(k): v for k, v in state["payloads"].items()}

    def save(self, directory: Path) -> list[str]:
        (directory / "toy.json").write_text(json.dumps({"logits": self.logits.tolist(), "payloads": self.payloads}))
        return ["toy.json"]

    def generate(self, call: EngineCall, timings: dict[str, float]) -> list[np.ndarray]:
        if call.step == self.crash_in_step:  # mid-step: the step is open
            raise Crash(f"killed in step {call.step}")
        rewards = []
        for p, n, start in zip(call.prompt_ids.tolist(), call.n.tolist(), call.rollout_starts.tolist()):
            r = (np.random.random(n) < 1 / (1 + np.exp(-self.logits[p]))).astype(float)
            self.payloads.update({start + j: float(v) for j, v in enumerate(r)})
            rewards.append(r)
        return rewards

    def update(self, outcome: StepOutcome) -> Update:
        trained = [self.payloads[i] for g in outcome.groups for i in g.rollout_ids.tolist()]
        for g in outcome.groups:
            self.logits[g.prompt_id] += float(np.mean([self.payloads[i] for i in g.rollout_ids.tolist()])) - 0.5
        return Update(loss=float(np.mean(trained)) if trained else None,
                      mean_reward=float(np.mean(trained)) if trained else 0.0)

    def keep_live(self, rollout_ids: np.ndarray) -> None:
        live = set(rollout_ids.tolist())
        self.payloads = {i: v for i, v in self.payloads.items() if i in live}

    def evaluate(self, step: int) -> EvalResult:
        acc = float(np.mean(1 / (1 + np.exp(-self.logits))))
        return EvalResult({"toy": acc}, {"toy": PROMPTS}, 1, 1.0, {"toy": 1})

    def close(self) -> None:
        self.closed = True


def toy_run(tmp_path: Path, name: str, **training) -> TrainingRun:
    sets = {"training.checkpoint_every": 2, "training.eval_every": 3, "training.keep_checkpoints": 10,
            "allocator.train_batch": 4, "allocator.n": 8, "allocator.n_pilot": 4, "allocator.pilot_wave": 2,
            "allocator.commit_mean": 4, "task.num_prompts": PROMPTS,
            **{f"training.{k}": v for k, v in training.items()}}
    cfg = resolve("embedded", sets, method="pc", seed=7)
    task = TaskData([f"p{i}" for i in range(PROMPTS)], [str(i) for i in range(PROMPTS)], [EvalSet("toy", ["q"], ["a"])])
    return TrainingRun(name, cfg, tmp_path / "runs" / name, tmp_path / "no-policy", task)


def untimed(rec) -> dict:
    """A step record's JSON without its seconds (wall clock)."""
    return {k: v for k, v in rec.to_json().items() if not k.startswith("time_")}


def final_state(run: TrainingRun, store: Store) -> dict:
    ckpt = list_checkpoints(run.checkpoint_dir)[-1][1]
    steps = store.query(f"SELECT step, rounds, sampled_rollouts, trained_rollouts, buffer_size, loss, mean_reward "
                        f"FROM steps WHERE run_id = '{run.run_id}' ORDER BY step")
    evals = store.query(f"SELECT step, accuracy FROM eval_results WHERE run_id = '{run.run_id}' ORDER BY step")
    return {"toy": json.loads((ckpt / "toy.json").read_text()),
            "allocator": json.loads((ckpt / "allocator.json").read_text()),
            "totals": json.loads((ckpt / "meta.json").read_text())["totals"], "steps": steps, "evals": evals}


def test_a_segment_that_crashes_mid_step_resumes_to_the_uninterrupted_result(tmp_path):
    store = Store(tmp_path / "pc.duckdb")
    whole = toy_run(tmp_path, "whole")
    res = run_segment(whole, store, until_step=7, backend=ToyBackend(whole))
    assert (res.first_step, res.last_step, res.steps_run) == (1, 7, 7)  # steps count from 1
    assert [s for s, _ in list_checkpoints(whole.checkpoint_dir)] == [2, 4, 6, 7]

    cut = toy_run(tmp_path, "cut")
    crashing = ToyBackend(cut, crash_in_step=4)  # the allocator's index 4: step 5
    with pytest.raises(Crash):
        run_segment(cut, store, until_step=7, backend=crashing)
    assert crashing.closed
    assert store.get_run("cut")["status"] == "failed"
    assert [s for s, _ in list_checkpoints(cut.checkpoint_dir)] == [2, 4]  # step 5 was never finished
    resumed = run_segment(cut, store, until_step=7, backend=ToyBackend(cut))
    assert (resumed.first_step, resumed.last_step, resumed.steps_run) == (5, 7, 3)
    assert resumed.cumulative_rollouts == res.cumulative_rollouts
    assert [untimed(r) for r in resumed.records] == [untimed(r) for r in res.records[4:]]
    assert final_state(cut, store) == final_state(whole, store)
    assert store.get_run("cut")["status"] == "running"


def test_a_stop_request_ends_at_a_step_boundary_with_a_checkpoint(tmp_path):
    store = Store(tmp_path / "pc.duckdb")
    run = toy_run(tmp_path, "stopped")
    stop = StopFlag()
    seen = []

    def on_step(rec):
        seen.append(rec.step)
        if rec.step == 3:
            stop.request(15)

    with pytest.raises(StopRequested, match=r"after step 3 \(checkpoint step-00000003\)"):  # one number everywhere
        run_segment(run, store, until_step=7, backend=ToyBackend(run), on_step=on_step, stop=stop)
    assert seen == [1, 2, 3]
    assert [s for s, _ in list_checkpoints(run.checkpoint_dir)] == [2, 3]  # the boundary got its checkpoint
    assert store.get_run("stopped")["status"] == "stopped"
    rest = run_segment(run, store, until_step=7, backend=ToyBackend(run))
    assert rest.first_step == 4


def test_a_checkpoint_of_another_config_is_refused_before_anything_changes(tmp_path):
    store = Store(tmp_path / "pc.duckdb")
    run = toy_run(tmp_path, "r")
    run_segment(run, store, until_step=2, backend=ToyBackend(run))
    rows = store.query("SELECT count(*) AS n FROM steps WHERE run_id = 'r'")
    other = toy_run(tmp_path, "r", lr=0.5)  # another config hash, same directory
    with pytest.raises(RunError, match="belongs to config"):
        run_segment(other, store, until_step=4, backend=ToyBackend(other))
    assert store.query("SELECT count(*) AS n FROM steps WHERE run_id = 'r'") == rows
    assert store.get_run("r")["status"] == "running"


class DrawingToyBackend(ToyBackend):
    """Its evaluation draws from the global numpy RNG, as a careless backend's might."""

    def evaluate(self, step: int) -> EvalResult:
        np.random.random(3)
        return super().evaluate(step)


def test_evaluate_last_evaluates_the_segments_last_step_and_changes_no_training(tmp_path):
    store = Store(tmp_path / "pc.duckdb")
    whole = toy_run(tmp_path, "whole")  # eval_every 3: steps 3 and 6 on the schedule
    res = run_segment(whole, store, until_step=7, backend=DrawingToyBackend(whole))  # default: the schedule only
    assert [r.step for r in res.records if r.eval_accuracy is not None] == [3, 6]

    split = toy_run(tmp_path, "split")
    first = run_segment(split, store, until_step=4, backend=DrawingToyBackend(split), evaluate_last=True)
    assert [r.step for r in first.records if r.eval_accuracy is not None] == [3, 4]  # 4: the segment's last
    assert first.last_eval_accuracy == first.records[-1].eval_accuracy is not None
    rest = run_segment(split, store, until_step=7, backend=DrawingToyBackend(split), evaluate_last=True)
    assert [r.step for r in rest.records if r.eval_accuracy is not None] == [6, 7]
    sched = toy_run(tmp_path, "sched")
    on_schedule = run_segment(sched, store, until_step=6, backend=DrawingToyBackend(sched), evaluate_last=True)
    assert [r.step for r in on_schedule.records if r.eval_accuracy is not None] == [3, 6]  # 6 is on it: once

    # The training is the uninterrupted run's, bit for bit (its evaluations draw from the global RNG: the extra
    # ones are undone): records, rows, allocator, policy, checkpoints with their RNG states.
    def training(records):
        return [{k: v for k, v in untimed(r).items() if k not in ("eval", "eval_accuracy")} for r in records]

    assert training(first.records + rest.records) == training(res.records)
    assert [r.eval_accuracy for r in first.records + rest.records if r.step in (3, 6)] == \
        [r.eval_accuracy for r in res.records if r.step in (3, 6)]
    a, b = final_state(whole, store), final_state(split, store)
    assert {k: v for k, v in a.items() if k != "evals"} == {k: v for k, v in b.items() if k != "evals"}
    assert [e["step"] for e in a["evals"]] == [0, 3, 6]
    assert [e["step"] for e in b["evals"]] == [0, 3, 4, 6, 7]
    assert [e for e in b["evals"] if e["step"] not in (4, 7)] == a["evals"]
    assert [s for s, _ in list_checkpoints(split.checkpoint_dir)] == [2, 4, 6, 7]
    for step in (2, 4, 6, 7):  # the same checkpoints: the one after the extra evaluation (4) included
        ca, cb = (r.checkpoint_dir / f"step-{step:08d}" for r in (whole, split))
        for name in ("toy.json", "allocator.json", "rng.pt"):
            assert (ca / name).read_bytes() == (cb / name).read_bytes(), (step, name)


def test_a_run_checkpointed_before_steps_counted_from_1_resumes_to_the_uninterrupted_result(tmp_path):
    """Issue 55: a store and checkpoints written before store v12 (steps from 0: the checkpoint after 4 steps is
    ``step-00000003``, its meta step 3, format 2) resume with this code: the store is renumbered when it is opened,
    the old checkpoint is listed as the one after step 4, and the run goes on to the uninterrupted run's end."""
    from pc_pipelines import durable
    from pc_pipelines.run.checkpoints import CHECKPOINT_MANIFEST
    from tests.support.old_numbering import count_from_zero

    whole_store = Store(tmp_path / "whole.duckdb")
    whole = toy_run(tmp_path, "whole")
    run_segment(whole, whole_store, until_step=7, backend=ToyBackend(whole))
    store = Store(tmp_path / "old.duckdb")
    old = toy_run(tmp_path, "old")
    run_segment(old, store, until_step=4, backend=ToyBackend(old))
    count_from_zero(store.path, store.runs_root)  # the store as v11 wrote it
    for step, ck in list_checkpoints(old.checkpoint_dir):  # the checkpoints as format 2 wrote them, lowest first
        meta = json.loads((ck / "meta.json").read_text())
        (ck / "meta.json").write_text(json.dumps({**meta, "step": step - 1, "format": 2}))
        required = json.loads((ck / "manifest.json").read_text())["required"]
        durable.seal(ck.rename(ck.with_name(f"step-{step - 1:08d}")), CHECKPOINT_MANIFEST,
                     {"format": 2, "required": required})
    assert sorted(p.name for p in old.checkpoint_dir.iterdir()) == ["step-00000001", "step-00000003"]
    assert [s for s, _ in list_checkpoints(old.checkpoint_dir)] == [2, 4]  # listed under the run's steps

    resumed = run_segment(old, store, until_step=7, backend=ToyBackend(old))
    assert (resumed.first_step, resumed.last_step, resumed.steps_run) == (5, 7, 3)
    assert store.schema_version() == 12
    assert [s for s, _ in list_checkpoints(old.checkpoint_dir)] == [2, 4, 6, 7]
    assert final_state(old, store) == final_state(whole, whole_store)
