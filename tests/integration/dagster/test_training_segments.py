"""Training segments end to end in Dagster, on a temporary store: start_run registers a run and its partitions, the
sensor requests segments in order, the assets train and evaluate them, re-materializing a segment reproduces its
rows, a retried failed segment resumes from its last checkpoint, and repeated failures pause the run."""

import json
from pathlib import Path

import pyarrow as pa
import pytest
import torch
from dagster import (
    DagsterInstance,
    FloatMetadataValue,
    SensorResult,
    SkipReason,
    TextMetadataValue,
    build_sensor_context,
    materialize,
)
from dagster_runs import local_resources, register_run, step_failures
from safetensors.torch import load_file

from pc_pipelines.run import latest_checkpoint, list_checkpoints
from pc_pipelines.store import Store
from pc_pipelines_dagster.assets.evaluation import segment_eval
from pc_pipelines_dagster.assets.training import NOT_CURVES, SEGMENT_PROGRESS, SEGMENTS, training_segment
from pc_pipelines_dagster.automation.jobs import start_run
from pc_pipelines_dagster.automation.sensors import build_advance_runs_sensor
from pc_pipelines_dagster.resources import StoreResource, TransformersEngineResource
from pc_pipelines_dagster.resources.engines import RolloutEngineResource

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# Small and fast: 8 prompts per step, n=16 as 4+12, two-step segments, evaluation every other step (the end of each
# segment) with one sample of each of the 600 held-out prompts (the evaluations were most of the time at four).
SMALL = ["allocator.train_batch=8", "allocator.n=16", "allocator.n_pilot=4", "allocator.pilot_wave=2",
         "allocator.commit_mean=12", "training.ppo_minibatch=4",
         "training.eval_every=2", "training.eval_samples=1", "training.checkpoint_every=1",
         "training.keep_checkpoints=1"]
# Where no evaluation is looked at (a retried segment equals an uninterrupted one): 5 held-out prompts a length.
NO_EVAL_LOOKED_AT = ["task.heldout_per_length=5"]


def resources(tmp_path, engine: RolloutEngineResource | None = None) -> dict:
    return local_resources(tmp_path, engine=engine)


def start(instance, tmp_path, base_policy, name, method="pc", segment_steps=2, total_steps=4, policy=None, extra=()):
    return register_run(instance, tmp_path, policy or base_policy, name, [*SMALL, *extra], method=method,
                        segment_steps=segment_steps, total_steps=total_steps)


def train(instance, tmp_path, key, engine=None, raise_on_error=True):
    return materialize([training_segment, segment_eval], partition_key=key, instance=instance,
                       resources=resources(tmp_path, engine), raise_on_error=raise_on_error, tags={"pc/run": key.split("/")[0]})


def tick(instance, tmp_path, max_failures=3):
    sensor = build_advance_runs_sensor(max_failures=max_failures)
    ctx = build_sensor_context(instance=instance, resources={"store": StoreResource(path=str(tmp_path / "pc.duckdb"))})
    return sensor(ctx)


def requests(result) -> list[tuple[str, str]]:
    if isinstance(result, SkipReason):
        return []
    return [(r.run_key, r.partition_key) for r in result.run_requests]


def steps_rows(store: Store, run_id: str) -> list[dict]:
    return store.query("SELECT step, sampled_rollouts, trained_rollouts, mean_reward_std, loss, kept, evicted "
                       "FROM steps WHERE run_id = ? ORDER BY step", [run_id])


def tensorboard_scalars(folder) -> dict[str, list[tuple[int, float]]]:
    """Every scalar of the TensorBoard event files in ``folder``: tag -> [(step, value)] in step order."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder))
    acc.Reload()
    return {tag: sorted((e.step, e.value) for e in acc.Scalars(tag)) for tag in acc.Tags()["scalars"]}


def params(path) -> dict[str, torch.Tensor]:
    return load_file(str(path / "policy" / "model.safetensors"))


def test_segments_train_in_order_and_rematerialize_reproduces(tmp_path, base_policy):
    instance = DagsterInstance.ephemeral()
    run_id = start(instance, tmp_path, base_policy, "seg-pc")
    store = Store(tmp_path / "pc.duckdb")
    assert instance.get_dynamic_partitions(SEGMENTS.name) == ["seg-pc/seg-0000", "seg-pc/seg-0001"]
    segs = store.segments(run_id)
    assert [(s["first_step"], s["last_step"], s["status"]) for s in segs] == [(1, 2, "planned"), (3, 4, "planned")]
    run = store.get_run(run_id)
    assert json.loads(run["config_json"])["training"]["keep_every"] == 2  # segment boundaries stay
    assert json.loads(run["lineage_json"])["segment_steps"] == 2

    # Out of order: segment 1 refuses while segment 0 is not done.
    bad = train(instance, tmp_path, "seg-pc/seg-0001", raise_on_error=False)
    assert not bad.success
    assert "previous segment is not done" in step_failures(bad) and "seg-pc/seg-0000" in step_failures(bad)
    # A partition added by hand carries no config.
    instance.add_dynamic_partitions(SEGMENTS.name, ["nobody/seg-0000"])
    bad = train(instance, tmp_path, "nobody/seg-0000", raise_on_error=False)
    assert not bad.success and "start_run" in step_failures(bad)

    # The sensor asks for segment 0, then 1, then finishes the run.
    assert requests(tick(instance, tmp_path)) == [("seg-pc/0", "seg-pc/seg-0000")]
    res = train(instance, tmp_path, "seg-pc/seg-0000")
    meta = res.asset_materializations_for_node("training_segment")[-1].metadata
    assert meta["steps"].value == "1..2" and meta["steps_run"].value == "2"
    assert meta["resumed_after_step"].value == "fresh (the base policy)"
    rows = steps_rows(store, run_id)
    assert [r["step"] for r in rows] == [1, 2]
    assert meta["cumulative_rollouts"].value == sum(r["sampled_rollouts"] for r in rows)
    ev = res.asset_materializations_for_node("segment_eval")[0].metadata
    stored = store.query("SELECT benchmark, accuracy FROM eval_results WHERE run_id = ? AND step = 2", [run_id])
    assert len(stored) == 6 and ev["step"].value == 2  # the stored step, as SQL has it
    assert ev["average_accuracy"].value == pytest.approx(sum(r["accuracy"] for r in stored) / 6)
    # The loop evaluated step 2 too (eval_every=2) with the same seed: the asset reproduces it exactly.
    assert meta["eval_accuracy"].value == pytest.approx(ev["average_accuracy"].value, abs=5e-5)  # 4 places in the UI
    # The segment-end evaluation is in TensorBoard too, at the step number of the run's training scalars.
    scalars = tensorboard_scalars(tmp_path / "runs" / run_id / "tensorboard")
    assert scalars["segment_eval/accuracy"] == [(2, pytest.approx(ev["average_accuracy"].value, abs=1e-6))]
    assert sorted(k for k in scalars if k.startswith("segment_eval/")) == sorted(
        ["segment_eval/accuracy", *(f"segment_eval/{r['benchmark']}" for r in stored)])
    assert [s for s, _ in scalars["eval/accuracy"]][-1] == 2  # the loop's own evaluation of that step: same x
    assert str(ev["tensorboard"].value) == str(tmp_path / "runs" / run_id / "tensorboard")
    assert requests(tick(instance, tmp_path)) == [("seg-pc/1", "seg-pc/seg-0001")]
    res1 = train(instance, tmp_path, "seg-pc/seg-0001")
    # While it trained: the state, then one observation per step with the segment's and the run's progress.
    obs = [e.asset_observation.metadata for e in instance.all_logs(res1.run_id) if e.asset_observation is not None]
    assert obs[0]["state"].value.startswith(
        "training segment seg-0001 of 2 (steps 3..4 of 4) from the checkpoint after step 2")
    per_step = [{k: v.value for k, v in o.items()} for o in obs[1:]]
    after = steps_rows(store, run_id)
    # Counters are text (Dagster's Plots tab draws every number by time, mixing runs); the curves stay numbers.
    assert [(o["segment_step"], o["segment_steps"], o["run_step"], o["run_steps"], o["segment"], o["segments"])
            for o in per_step] == [("1", "2", "3", "4", "seg-0001", "2"), ("2", "2", "4", "4", "seg-0001", "2")]
    assert all(isinstance(o[k], TextMetadataValue) for o in obs[1:] for k in NOT_CURVES if k in o)
    assert all(isinstance(o["mean_reward"], FloatMetadataValue) for o in obs[1:])
    # The same numbers on segment_progress's own partition page: one materialization of that partition per step.
    progress = [e.asset_materialization for e in instance.all_logs(res1.run_id)
                if e.asset_materialization is not None and e.asset_materialization.asset_key == SEGMENT_PROGRESS.key]
    assert [m.partition for m in progress] == ["seg-pc/seg-0001"] * 4
    # Before the first step: its start-up phases (issue 55 point 7: the page was blank for the first ~80 s).
    startup = [{k: v.value for k, v in m.metadata.items()} for m in progress[:2]]
    assert [s["phase"] for s in startup] == [
        "start-up 1 of 2: loading the run's config and training data",
        "start-up 2 of 2: restoring the checkpoint after step 2 and starting the rollout engine; each step's progress "
        "follows"]
    assert [s["progress"].split(": ", 1)[0] for s in startup] == ["seg-pc"] * 2
    assert startup[1]["progress"].startswith("seg-pc: segment seg-0001 of 2, starting (2 of 2): restoring the checkpoint")
    since = [float(s["since_start"].removesuffix(" s")) for s in startup]
    assert 0 <= since[0] <= since[1]
    assert [{k: v.value for k, v in m.metadata.items()} for m in progress[2:]] == per_step
    latest = instance.get_latest_materialization_event(SEGMENT_PROGRESS.key).asset_materialization
    assert latest.partition == "seg-pc/seg-0001" and latest.metadata["progress"].value.startswith("seg-pc: segment seg-0001")
    assert [o["step_rollouts"] for o in per_step] == [r["sampled_rollouts"] for r in after[2:]]
    assert [o["cumulative_rollouts"] for o in per_step] == [sum(r["sampled_rollouts"] for r in after[:k + 1])
                                                            for k in (2, 3)]
    assert [o["reward_std"] for o in per_step] == [round(r["mean_reward_std"], 3) for r in after[2:]]
    assert per_step[-1]["eta_s"] == "0" and abs(int(per_step[0]["eta_s"]) - per_step[0]["seconds_per_step"]) <= 0.5
    assert per_step[0]["progress"] == "seg-pc: segment seg-0001 of 2, step 1 of 2; run step 3 of 4" and "eval_accuracy" in per_step[1]
    assert [o["step"] for o in per_step] == ["3", "4"] == [str(r["step"]) for r in after[2:]]  # SQL's steps
    lines = [e.message for e in instance.all_logs(res1.run_id)
             if (e.message or "").startswith("step 2/2 of segment seg-0001 of 2")]
    assert len(lines) == 1 and f"rollouts {after[3]['sampled_rollouts']:,} (cumulative " in lines[0]
    # The segment's materialization: the run so far as a plot, its SQL (which returns the steps) and TensorBoard.
    meta1 = res1.asset_materializations_for_node("training_segment")[-1].metadata
    # First, for the asset's overview (the latest segment of any run): whose segment this is.
    assert next(iter(meta1)) == "materialized" and meta1["materialized"].value.startswith(
        "seg-pc: segment seg-0001 of 2 done (run steps 3..4 of 4)")
    assert meta1["segment"].value == "seg-0001 of 2" and meta1["advanced_by"].value == "by hand (UI, CLI or API)"
    assert meta1["run_plot"].value.startswith("![seg-pc so far](data:image/png;base64,")
    assert Path(meta1["run_plot_path"].value).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    sql = meta1["sql"].value.split('"')[1]
    assert [r["step"] for r in store.query(sql)] == [1, 2, 3, 4]  # the steps the plot beside it shows
    assert [r["cumulative_rollouts"] for r in store.query(sql)][-1] == meta1["cumulative_rollouts"].value
    assert f"tensorboard --logdir {tmp_path / 'runs' / run_id / 'tensorboard'}" in meta1["tensorboard_command"].value
    assert [s["status"] for s in store.segments(run_id)] == ["done", "done"]
    assert store.get_run(run_id)["status"] == "finished"
    assert requests(tick(instance, tmp_path)) == [("report-seg-pc", None)]  # no segment; the report job, for the finish

    # Re-materializing segment 0 recomputes it from the base policy: the same rows, segment 1 left intact.
    before = steps_rows(store, run_id)
    ckpts = tmp_path / "runs" / run_id / "checkpoints"
    assert sorted(p.name for p in ckpts.iterdir()) == ["step-00000002", "step-00000004"]  # keep_every + newest
    p1, p3 = params(ckpts / "step-00000002"), params(ckpts / "step-00000004")
    res = train(instance, tmp_path, "seg-pc/seg-0000")
    assert res.asset_materializations_for_node("training_segment")[-1].metadata["resumed_after_step"].value == "fresh (the base policy)"
    assert steps_rows(store, run_id) == before
    again = params(ckpts / "step-00000002")
    assert all(torch.equal(p1[k], again[k]) for k in p1)
    assert all(torch.equal(p3[k], v) for k, v in params(ckpts / "step-00000004").items())
    assert store.segments(run_id)[0]["attempts"] == 2


class FlakyEngineResource(TransformersEngineResource):
    """Raises on the first generate call made after the checkpoint of step ``after_step`` exists in ``checkpoints``,
    while ``flag`` exists (deleting the flag ends the failures). Keyed on checkpoints, not on a call count: the number
    of engine calls per step depends on the allocator's strategies (sequential pilots add a call per round)."""

    flag: str
    checkpoints: str
    after_step: int

    def build(self, model, tokenizer):
        engine = super().build(model, tokenizer)
        inner, flag, ckpts = engine.generate, self.flag, Path(self.checkpoints)

        def generate(requests, params):
            import os

            latest = latest_checkpoint(ckpts)
            if os.path.exists(flag) and latest and latest[0] >= self.after_step:
                raise RuntimeError("engine lost (test)")
            return inner(requests, params)

        engine.generate = generate
        return engine


def test_retried_segment_resumes_from_its_last_checkpoint_and_matches(tmp_path, base_policy):
    instance = DagsterInstance.ephemeral()
    ref = start(instance, tmp_path, base_policy, "ref", segment_steps=4, total_steps=4, extra=NO_EVAL_LOOKED_AT)
    flaky = start(instance, tmp_path, base_policy, "flaky", segment_steps=4, total_steps=4, extra=NO_EVAL_LOOKED_AT)
    train(instance, tmp_path, f"{ref}/seg-0000")
    flag = tmp_path / "fail"
    flag.write_text("1")
    # fails at the first engine call of step 3 (or at step 2's eval): the run dies with step 2 checkpointed at most.
    engine = FlakyEngineResource(flag=str(flag), checkpoints=str(tmp_path / "runs" / flaky / "checkpoints"), after_step=2)
    bad = train(instance, tmp_path, f"{flaky}/seg-0000", engine=engine, raise_on_error=False)
    assert not bad.success and "engine lost" in step_failures(bad)
    store = Store(tmp_path / "pc.duckdb")
    seg = store.segments(flaky)[0]
    assert seg["status"] == "failed" and seg["consecutive_failures"] == 1 and "engine lost" in seg["error"]
    done = [step for step, _ in list_checkpoints(tmp_path / "runs" / flaky / "checkpoints")]
    assert done and max(done) < 4
    # The sensor retries it under a new run key; the retry resumes inside the segment.
    assert requests(tick(instance, tmp_path)) == [(f"{flaky}/0/retry-1", f"{flaky}/seg-0000"),
                                                  (f"report-{ref}", None)]  # ref (one segment) is finished
    flag.unlink()
    res = train(instance, tmp_path, f"{flaky}/seg-0000", engine=engine)
    meta = res.asset_materializations_for_node("training_segment")[-1].metadata
    assert meta["resumed_after_step"].value == str(max(done)) and max(done) >= 1
    assert meta["steps_run"].value == str(4 - max(done))
    assert store.segments(flaky)[0]["consecutive_failures"] == 0
    assert steps_rows(store, flaky) == steps_rows(store, ref)
    a = params(tmp_path / "runs" / ref / "checkpoints" / "step-00000004")
    b = params(tmp_path / "runs" / flaky / "checkpoints" / "step-00000004")
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_sensor_pauses_a_run_after_consecutive_failures(tmp_path, base_policy):
    instance = DagsterInstance.ephemeral()
    broken = tmp_path / "not-a-model"
    broken.mkdir()
    run_id = start(instance, tmp_path, base_policy, "broken", policy=broken)
    store = Store(tmp_path / "pc.duckdb")
    for attempt in range(2):
        (key, part), = requests(tick(instance, tmp_path, max_failures=2))
        assert part == f"{run_id}/seg-0000" and key == (f"{run_id}/0" if attempt == 0 else f"{run_id}/0/retry-1")
        assert not train(instance, tmp_path, part, raise_on_error=False).success
    result = tick(instance, tmp_path, max_failures=2)
    assert isinstance(result, SensorResult) and not result.run_requests
    (obs,) = result.asset_events
    assert obs.partition == f"{run_id}/seg-0000" and "failed 2 times in a row" in obs.metadata["paused"].value
    run = store.get_run(run_id)
    assert run["status"] == "paused" and "failed 2 times in a row" in run["status_reason"]
    assert "not-a-model" in run["status_reason"] or "Error" in run["status_reason"]
    assert requests(tick(instance, tmp_path, max_failures=2)) == []  # a paused run stays paused


def prepared(rows: list[tuple[str, str, str]]) -> pa.Table:
    """Rows (problem, answer, split) in the data assets' prepared schema."""
    from pc_pipelines.data.prepare import PREPARED_SCHEMA

    return pa.table(
        {"id": [f"r{i}" for i in range(len(rows))], "problem": [r[0] for r in rows], "answer": [r[1] for r in rows],
         "difficulty": pa.array([None] * len(rows), pa.float64()), "source": ["deepmath"] * len(rows),
         "split": [r[2] for r in rows], "row_index": pa.array(range(len(rows)), pa.int64())},
        schema=PREPARED_SCHEMA,
    )


def test_a_run_on_a_prepared_dataset_evaluates_on_heldout_and_benchmarks(tmp_path):
    """dataset=deepmath: prompts from the deepmath asset's Parquet, a local HF model, evaluation on the held-out
    split and every prepared benchmark (mean@k) into the store."""
    import pyarrow.parquet as pq

    from pc_pipelines.config import resolve
    from pc_pipelines.data.evaluation_sets import BENCHMARKS
    from pc_pipelines.data.tokenizer import build_tokenizer
    from pc_pipelines.training.base_policy import model_config

    tok = build_tokenizer()
    policy = resolve("embedded", method="grpo").policy
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_config(model_config(policy, len(tok), tok.pad_token_id, tok.eos_token_id, 256))
    model.save_pretrained(tmp_path / "hf-model")
    tok.save_pretrained(tmp_path / "hf-model")

    instance = DagsterInstance.ephemeral()
    overrides = ["allocator.train_batch=4", "allocator.n=8", "allocator.n_pilot=2", "training.ppo_minibatch=2",
                 "training.max_response_length=6", "training.eval_every=1", "training.eval_samples=2"]
    cfg = {"method": "pc", "preset": "paper", "dataset": "deepmath", "overrides": overrides, "segment_steps": 1,
           "total_steps": 1, "run_name": "real", "policy_path": str(tmp_path / "hf-model")}
    run_config = {"ops": {"register_training_run": {"config": cfg}}}
    # Not prepared yet: start_run says which asset to materialize.
    bad = start_run.execute_in_process(run_config=run_config, instance=instance, resources=resources(tmp_path),
                                       raise_on_error=False)
    assert not bad.success and "materialize the `deepmath` asset first" in step_failures(bad)

    data = tmp_path / "data"
    (data / "benchmarks").mkdir(parents=True)
    rows = [(f"{a}+{b}=?", str(a + b), "train") for a in range(6) for b in range(4)] + [("7+8=?", "15", "heldout")] * 3
    pq.write_table(prepared(rows), data / "deepmath.parquet")
    for i, name in enumerate(BENCHMARKS):
        pq.write_table(prepared([(f"{i}+{j}=?", str(i + j), "test") for j in range(i + 1)]),
                       data / "benchmarks" / f"{name}.parquet")
    res = start_run.execute_in_process(run_config=run_config, instance=instance, resources=resources(tmp_path))
    run_id = res.output_for_node("register_training_run")
    res = train(instance, tmp_path, f"{run_id}/seg-0000")
    assert res.success
    store = Store(tmp_path / "pc.duckdb")
    assert store.query("SELECT count(*) AS n FROM steps WHERE run_id = ?", [run_id]) == [{"n": 1}]
    evals = {r["benchmark"]: r for r in store.query("SELECT * FROM eval_results WHERE run_id = ? AND step = 0", [run_id])}
    assert set(evals) == {"deepmath_heldout", *BENCHMARKS}
    assert evals["deepmath_heldout"]["n_prompts"] == 3
    assert [evals[n]["n_prompts"] for n in BENCHMARKS] == list(range(1, len(BENCHMARKS) + 1))
    # training.eval_samples=2, except the small competition sets at their own mean@32
    assert {n: e["k"] for n, e in evals.items()} == {n: 32 if n in ("aime24", "aime25", "amc23") else 2 for n in evals}
    md = res.asset_materializations_for_node("segment_eval")[0].metadata["accuracy"].value
    assert all(f"| {n} | {evals[n]['n_prompts']} | {evals[n]['k']} |" in md for n in evals)
    lineage = json.loads(store.get_run(run_id)["lineage_json"])
    assert lineage["dataset"] == "deepmath" and lineage["policy"] == str((tmp_path / "hf-model").resolve())
