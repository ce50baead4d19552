"""``runs`` shows steps done of planned for every training run (issue 41 point 8): a Dagster run's total comes from
its segment plan, a ``pilot-commit train --steps N`` run's from the ``planned_steps`` its registration records in
``lineage_json`` (a resume may change it; the rest of the lineage stays the first registration's). Real CLI runs:
tests/e2e/test_cli_train.py."""

from __future__ import annotations

import json

from pc_pipelines.store import RunRecord, Store


def record(run_id: str, lineage: dict | None) -> RunRecord:
    return RunRecord(run_id=run_id, family="f", method="pc", preset="p", seed=0, config={"method": "pc"},
                     config_hash="h", kind="train", lineage=lineage)


def planned(st: Store) -> dict[str, int | None]:
    return {r["run_id"]: r["planned_steps"] for r in st.list_runs()}


def test_a_train_runs_planned_total_is_recorded_and_a_resume_updates_only_that(tmp_path):
    st = Store(tmp_path / "pc.duckdb")
    st.init()
    st.register_run(record("cli", {"policy": "/p", "cpu_capability": "AVX2"}), planned_steps=200)
    st.register_run(record("old", {"policy": "/p"}))  # registered without a total (a run of an older version)
    assert planned(st) == {"cli": 200, "old": None}
    # a resume on another machine asking for 300: the total changes, the lineage of the first registration stays
    st.register_run(record("cli", {"policy": "/q", "cpu_capability": "AVX512"}), planned_steps=300)
    st.register_run(record("old", {"policy": "/q"}))
    assert planned(st) == {"cli": 300, "old": None}
    assert json.loads(st.get_run("cli")["lineage_json"]) == {"policy": "/p", "cpu_capability": "AVX2",
                                                             "planned_steps": 300}
    assert json.loads(st.get_run("old")["lineage_json"]) == {"policy": "/p"}


def test_a_segment_plan_is_the_total_where_there_is_one(tmp_path):
    st = Store(tmp_path / "pc.duckdb")
    st.init()
    st.register_run(record("dag", None))
    st.plan_segments("dag", [(1, 5), (6, 10)])
    assert planned(st) == {"dag": 10}
    st.register_run(record("both", None), planned_steps=7)  # a segment plan wins over a recorded total
    st.plan_segments("both", [(1, 3)])
    assert planned(st) == {"both": 3, "dag": 10}
