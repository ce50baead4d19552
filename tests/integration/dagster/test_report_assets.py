"""The report assets materialized by Dagster on a real store of simulated runs: ``pass_rate_timeline`` (PNGs of the
newest runs, or of one run and chosen prompts, inline in the metadata with their run ids and counts; refusals as a
Failure with the fix) and ``rollouts_report``'s tables (rollouts to target and the per-method summary, next to the
Markdown), ``run_comparison`` (the runs overlaid by step and by rollouts, one labelled line per run, the SQL
behind it) and ``budget_plan`` (budgets ranked by the simulator fitted on the runs' first steps). Expected values are read from the store's views with plain SQL."""

from __future__ import annotations

import base64
import re
import shlex

import pytest
from dagster import materialize

from pc_pipelines.config import resolve
from pc_pipelines.reports import DEFAULT_TOP
from pc_pipelines.simulator import record_simulation
from pc_pipelines.store import RunRecord, Store
from pc_pipelines_dagster.assets.reports import budget_plan, pass_rate_timeline, rollouts_report, run_comparison
from pc_pipelines_dagster.resources import StoreResource

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SMALL = {"sim.num_prompts": 400, "allocator.train_batch": 16, "allocator.n": 8, "allocator.n_pilot": None}
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def sim(tmp_path_factory) -> dict:
    """GRPO, DAPO and PC for seeds 0 and 1 (10 steps, evaluated every 5), registered in that order after an older
    GRPO run of seed 0, then a run with no step at all: eight runs, seven with observations."""
    path = tmp_path_factory.mktemp("report-assets") / "runs.duckdb"
    store = Store(path)
    order = ["old-grpo-s0"]
    list(record_simulation(resolve("simulator", SMALL, method="grpo", seed=0), store, 5, run_id="old-grpo-s0"))
    for seed in (0, 1):
        for m in ("grpo", "dapo", "pc"):
            rid = f"{m}-s{seed}"
            list(record_simulation(resolve("simulator", SMALL, method=m, seed=seed), store, 10, run_id=rid))
            order.append(rid)
    store.register_run(RunRecord.for_config(resolve("simulator", SMALL, method="pc", seed=2), "empty",
                                            kind="simulate"))
    return {"path": str(path), "store": store, "newest_first": order[::-1]}


def materialized(asset, sim, out_dir, raise_on_error=True, **config):
    return materialize([asset], resources={"store": StoreResource(path=sim["path"])}, raise_on_error=raise_on_error,
                       run_config={"ops": {asset.op.name: {"config": {"out_dir": str(out_dir), **config}}}})


def metadata(result, asset) -> dict:
    return result.asset_materializations_for_node(asset.op.name)[0].metadata


def failure_description(result) -> str:
    (event,) = result.get_step_failure_events()
    return event.step_failure_data.user_failure_data.description


def test_timeline_without_a_run_draws_the_six_newest_runs_with_observations(sim, tmp_path):
    res = materialized(pass_rate_timeline, sim, tmp_path)
    assert res.success
    md = metadata(res, pass_rate_timeline)
    newest = sim["newest_first"][:6]  # 'empty' (the newest) has no observation; 'old-grpo-s0' is the 7th
    assert md["run_ids"].value == newest
    assert md["runs"].value == 6
    store = sim["store"]
    totals = {r["run_id"]: r["k"] for r in store.query(
        "SELECT run_id, count(DISTINCT prompt_id) AS k FROM pass_rate_history GROUP BY run_id")}
    assert md["total_prompts"].value == {rid: totals[rid] for rid in newest}
    assert md["steps"].value == {rid: 10 for rid in newest}
    for rid in newest:
        top = [r["prompt_id"] for r in store.query(
            "SELECT prompt_id, count(DISTINCT step) AS v FROM pass_rate_history WHERE run_id = ? GROUP BY prompt_id "
            "ORDER BY v DESC, prompt_id LIMIT ?", [rid, DEFAULT_TOP])]
        assert [int(p) for p in md["prompts_shown"].value[rid].split(", ")] == top
        png = tmp_path / f"timeline_{rid}.png"
        assert png.read_bytes()[:8] == PNG_MAGIC
    # The table: four short columns that read at the UI's width (seven were squeezed to "40 mo vi of pr").
    records = [r.data for r in md["table"].value.records]
    assert [c.name for c in md["table"].value.schema.columns] == ["run_id", "method", "prompts", "steps"]
    assert records == [{"run_id": rid, "method": m, "prompts": f"{DEFAULT_TOP} of {totals[rid]:,}", "steps": 10}
                       for rid, m in zip(newest, ["PC", "DAPO", "GRPO", "PC", "DAPO", "GRPO"], strict=True)]
    # each PNG inline, byte for byte, under a heading naming its run
    images = re.findall(r"\(data:image/png;base64,([A-Za-z0-9+/=]+)\)", md["timelines"].value)
    assert [base64.b64decode(i) for i in images] == [(tmp_path / f"timeline_{rid}.png").read_bytes()
                                                      for rid in newest]
    for rid in newest:
        assert f"### `{rid}`" in md["timelines"].value
    assert md["plot_dir"].value == str(tmp_path.resolve())


def test_timeline_of_one_run_and_chosen_prompts(sim, tmp_path):
    store = sim["store"]
    ids = [r["prompt_id"] for r in store.query(
        "SELECT DISTINCT prompt_id FROM pass_rate_history WHERE run_id = 'pc-s0' ORDER BY prompt_id DESC LIMIT 3")]
    res = materialized(pass_rate_timeline, sim, tmp_path, run_id="pc-s0", prompts=ids)
    md = metadata(res, pass_rate_timeline)
    assert md["run_ids"].value == ["pc-s0"]
    assert md["prompts_shown"].value == {"pc-s0": ", ".join(map(str, ids))}
    (record,) = md["table"].value.records
    total = md["total_prompts"].value["pc-s0"]
    assert record.data == {"run_id": "pc-s0", "method": "PC", "prompts": f"3 of {total:,}", "steps": 10}
    assert f"### `pc-s0` (PC): 3 chosen prompts of {total:,}" in md["timelines"].value  # which ones: the heading
    assert (tmp_path / "timeline_pc-s0.png").read_bytes()[:8] == PNG_MAGIC


@pytest.mark.parametrize("config, words", [
    ({"run_id": "nope"}, "no run 'nope'"),
    ({"run_id": "empty"}, "no prompt observations"),
    ({"run_id": "pc-s0", "prompts": [99999]}, "never sampled prompt(s) 99999"),
    ({"top": 0}, "top=0"),
])
def test_timeline_refusals_are_failures_with_the_fix(sim, tmp_path, config, words):
    res = materialized(pass_rate_timeline, sim, tmp_path, raise_on_error=False, **config)
    assert not res.success
    text = failure_description(res)
    assert words in text and "Fix:" in text
    assert not list(tmp_path.glob("*.png"))


def test_timeline_on_a_store_without_observations(tmp_path):
    store = Store(tmp_path / "empty.duckdb")
    store.init()
    res = materialize([pass_rate_timeline], resources={"store": StoreResource(path=str(store.path))},
                      raise_on_error=False)
    assert not res.success
    assert "no run in" in failure_description(res) and "Fix:" in failure_description(res)


SMOKE = ("SMOKE TEST, not a comparison: each method trained 10 steps on 2 seeds, too few for rollout efficiency to show "
         "(the study runs 120 steps x 3 seeds per method and reads the medians)")


def test_rollouts_report_shows_its_tables(sim, tmp_path):
    res = materialized(rollouts_report, sim, tmp_path)
    md = metadata(res, rollouts_report)
    # the keys it had keep their meaning
    assert "| seed | target | GRPO | DAPO | PC |" in md["rollouts_to_target"].value
    assert md["runs"].value == 6  # the latest run of each (family, method, seed): old-grpo-s0 is superseded
    assert set(md["ratios"].value) == {"sim"}
    assert len(re.findall(r"data:image/png;base64,", md["plots"].value)) == 4
    # rollouts to target, one row per seed then the family's median, as the view has them
    view = sim["store"].query("SELECT * FROM rollouts_to_target ORDER BY family, seed")
    assert len(view) == 2
    records = [r.data for r in md["rollouts_to_target_table"].value.records]
    assert [(r["family"], r["seed"]) for r in records] == [("sim", "0"), ("sim", "1"), ("sim", "median")]
    for v, r in zip(view, records):  # numbers rounded to 4 significant digits, counts as the CLI prints them
        assert r["target"] == float(f"{v['target']:.4g}") and len(repr(r["target"])) <= 6
        assert (r["grpo"], r["dapo"], r["pc"]) == tuple("never" if v[m] is None else f"{v[m]:,}"
                                                        for m in ("grpo", "dapo", "pc"))
        assert r["grpo_over_pc"] == float(f"{v['grpo_over_pc']:.4g}")
        assert r["missing_steps"] == v["missing_steps"] == 0
        # the runs compared, with their steps; all of one length here, so no note
        assert r["runs_compared"] == (f"grpo: {v['grpo_run']} (10 steps), dapo: {v['dapo_run']} (10 steps), "
                                      f"pc: {v['pc_run']} (10 steps)")
        assert "old-grpo" not in r["runs_compared"] and r["note"] == SMOKE
    assert records[2]["grpo_over_pc"] == md["ratios"].value["sim"]["median_grpo_over_pc"]
    # 2 seeds of 10 steps: a smoke test, said beside every ratio (each row's note, the median's, the ratios' JSON, and
    # under the family's heading in the Markdown, before its table), in the words of the one rule (reports.smoke_test)
    assert records[2]["note"] == md["ratios"].value["sim"]["smoke_test"] == SMOKE
    text = md["rollouts_to_target"].value
    assert f"**{SMOKE}.**" in text and text.index(SMOKE) < text.index("| seed | target")
    assert records[2]["grpo_over_pc"] == float(f"{sim['store'].report()['sim']['median_grpo_over_pc']:.4g}")
    names = [c.name for c in md["rollouts_to_target_table"].value.schema.columns]
    assert names == ["family", "seed", "target", "grpo", "dapo", "pc", "grpo_over_pc", "dapo_over_pc",
                     "runs_compared", "note", "missing_steps"]
    # the per-method summary: a table (and its rows as JSON)
    rows = [r.data for r in md["summary"].value.records]
    assert [(r["family"], r["method"], r["seeds"]) for r in rows] == [
        ("sim", "GRPO", "0, 1"), ("sim", "DAPO", "0, 1"), ("sim", "PC", "0, 1")]
    sampled = {r["method"]: r["total"] for r in sim["store"].query(
        "SELECT r.method, sum(s.sampled_rollouts) / 2 AS total FROM steps s JOIN runs r USING (run_id) "
        "WHERE run_id IN ('grpo-s0', 'grpo-s1', 'dapo-s0', 'dapo-s1', 'pc-s0', 'pc-s1') GROUP BY r.method")}
    for r in rows:  # rounded for reading: whole rollouts, accuracies to 4 significant digits
        assert r["sampled_rollouts"] == round(sampled[r["method"].lower()]) and isinstance(r["sampled_rollouts"], int)
        assert r["steps"] == 10
        assert len(repr(r["final_accuracy"])) <= 6 and len(repr(r["peak_accuracy"])) <= 6
    assert [r["method"] for r in md["summary_json"].value] == ["grpo", "dapo", "pc"]
    assert md["summary_json"].value[0]["run_ids"] == ["grpo-s0", "grpo-s1"]


def test_run_comparison_overlays_each_familys_runs_with_their_sql_and_tensorboard_line(sim, tmp_path):
    """One figure for the family 'sim': every run with a step, one labelled line each; the printed query returns the
    rows drawn; the run with no step ('empty') is left out."""
    res = materialized(run_comparison, sim, tmp_path)
    md = metadata(res, run_comparison)
    store = sim["store"]
    with_steps = [(r["run_id"], r["method"]) for r in store.query(
        "SELECT DISTINCT r.run_id, r.method FROM runs r JOIN steps s USING (run_id)")]
    order = {"grpo": 0, "dapo": 1, "pc": 2}
    expected = [f"{rid} ({m.upper()})" for rid, m in sorted(with_steps, key=lambda x: (order[x[1]], x[0]))]
    assert md["runs"].value == {"sim": expected} and len(expected) == 7
    png = tmp_path / "compare_sim.png"
    (image,) = re.findall(r"\(data:image/png;base64,([A-Za-z0-9+/=]+)\)", md["comparison"].value)
    assert base64.b64decode(image) == png.read_bytes() and png.read_bytes()[:8] == PNG_MAGIC
    assert "### sim: `grpo-s0 (GRPO)`" in md["comparison"].value
    query = shlex.split(md["sql"].value.split("```")[1])[4]
    rows = store.query(query)
    assert {r["run_id"] for r in rows} == {rid for rid, _ in with_steps}
    totals = {r["run_id"]: r["n"] for r in store.query("SELECT run_id, sum(sampled_rollouts) AS n FROM steps "
                                                       "GROUP BY run_id")}
    last = {r["run_id"]: r["cumulative_rollouts"] for r in rows if r["step"] == 10 or (
        r["run_id"] == "old-grpo-s0" and r["step"] == 5)}
    assert last == totals and min(r["step"] for r in rows if r["mean_reward"] is None and r["accuracy"]) == 0
    assert "no run here has TensorBoard logs" in md["tensorboard_command"].value


def test_run_comparison_of_named_runs_and_its_refusal(sim, tmp_path):
    res = materialized(run_comparison, sim, tmp_path, run_ids=["pc-s1", "grpo-s0"])
    assert metadata(res, run_comparison)["runs"].value == {"selected": ["grpo-s0 (GRPO)", "pc-s1 (PC)"]}
    bad = materialized(run_comparison, sim, tmp_path / "bad", raise_on_error=False, run_ids=["pc-s1", "nope"])
    assert not bad.success and "no run 'nope'" in failure_description(bad) and "Fix:" in failure_description(bad)
    assert not (tmp_path / "bad").exists()


def test_budget_plan_ranks_budgets_from_the_runs_first_steps(sim, tmp_path):
    """Fitted on every run with 10 steps (the six of seeds 0 and 1; the 5-step run and the empty one are left out):
    ten budgets ranked by predicted rollouts to target, each with its refits' interval, the plot inline, and the
    train command of the first; asking for more steps than any run has is a Failure with the fix."""
    from pc_pipelines.simulator.plan import RESAMPLES, SEEDS
    from pc_pipelines_dagster.assets.reports import PlanConfig
    assert (PlanConfig().seeds, PlanConfig().resamples) == (list(SEEDS), RESAMPLES)  # plan's defaults, one copy
    res = materialized(budget_plan, sim, tmp_path, fit_steps=10, horizon=20, seeds=[1], resamples=2)
    md = metadata(res, budget_plan)
    ten = [r["run_id"] for r in sim["store"].query(
        "SELECT r.run_id FROM runs r JOIN steps s USING (run_id) GROUP BY r.run_id, r.seq HAVING count(*) = 10 "
        "ORDER BY r.seq")]
    assert md["runs"].value == ten and len(ten) == 6 and "old-grpo-s0" not in ten
    rows = [r.data for r in md["table"].value.records]
    assert [r["rank"] for r in rows] == list(range(1, 11))
    reached = [r["rollouts_to_target"] for r in rows if r["rollouts_to_target"] is not None]
    assert reached == sorted(reached) and reached  # ranked by predicted rollouts, the reached ones first
    assert 1 <= max(r["first"] for r in rows) <= 2  # every refit ranks a first (a tie counts for each)
    for r in rows:
        assert (r["low"] is None) == (r["high"] is None) and (r["low"] is None or r["low"] <= r["high"])
    assert rows[0]["vs_best"] == "best" and {r["vs_best"] for r in rows[1:]} <= {"indistinguishable", "worse", "never", "-"}
    assert md["ranking"].value.startswith("ranking: ") and md["ranking"].value in md["plan"].value
    assert md["best"].value == rows[0]["budget"]
    method = "grpo" if rows[0]["budget"].startswith("GRPO") else "pc"
    assert f"train --preset simulator --method {method}" in md["best_command"].value
    png = tmp_path / "budget_plan.png"
    (image,) = re.findall(r"\(data:image/png;base64,([A-Za-z0-9+/=]+)\)", md["plan"].value)
    assert base64.b64decode(image) == png.read_bytes() and png.read_bytes()[:8] == PNG_MAGIC
    bad = materialized(budget_plan, sim, tmp_path / "bad", raise_on_error=False, fit_steps=11)
    text = failure_description(bad)
    assert not bad.success and "the longest has 10 steps" in text and "Fix: fit on fewer steps" in text
