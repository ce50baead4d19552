"""The pass-rate timeline (pc_pipelines/reports/timeline.py) on a REAL DuckDB store of simulated runs: a PC run whose
solved prompts wait in an easy pool and come back (so it has kept, skipped, deferred, trained, evicted and returned
cells), a DAPO and a GRPO run, and a run registered without any step.

Expected values come from the store's ``pass_rate_history`` view through plain SQL, never from the module's own
query: which prompts are picked, every cell's pooled pass rate, the markers and the per-step counts of the lower
panel."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from pc_pipelines.allocation import Decision
from pc_pipelines.config import resolve
from pc_pipelines.reports import (
    DECISIONS,
    DEFAULT_TOP,
    TimelineError,
    load_timeline,
    make_timeline_figure,
    recent_runs,
    write_timeline,
)
from pc_pipelines.simulator import record_simulation
from pc_pipelines.store import RunRecord, Store

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
PC = {"sim.num_prompts": 200, "allocator.train_batch": 16, "allocator.n": 16, "allocator.n_pilot": 4,
      "allocator.eviction_strategy": "easy_pool", "allocator.return_share": 0.25}
FULL = {"sim.num_prompts": 300, "allocator.train_batch": 16, "allocator.n": 8, "allocator.n_pilot": None}
PRIOR = {**{k: v for k, v in PC.items() if k != "allocator.return_share"}, "allocator.eviction_strategy": "strict", "allocator.screen_strategy": "posterior",
         "allocator.screen_discount": 1.0, "allocator.screen_min_evidence": 4.0, "allocator.screen_explore": 0.0}
RANK = "CASE decision " + " ".join(f"WHEN '{d}' THEN {i}" for i, d in enumerate(
    ("trained", "kept", "surplus", "skipped_easy", "deferred_hard", "screened_by_prior"))) + " END"


@pytest.fixture(scope="module")
def sim(tmp_path_factory) -> dict:
    store = Store(tmp_path_factory.mktemp("timeline") / "runs.duckdb")
    runs = {}
    for name, over, steps in (("grpo", FULL, 12), ("dapo", FULL, 12), ("pc", PC, 40), ("prior", PRIOR, 30)):
        cfg = resolve("simulator", over, method="pc" if name == "prior" else name, seed=0)
        runs[name] = f"tl-{name}"
        list(record_simulation(cfg, store, steps, run_id=runs[name]))
    empty = resolve("simulator", FULL, method="pc", seed=1)
    store.register_run(RunRecord.for_config(empty, "tl-empty", kind="simulate"))  # registered, no step written
    runs["empty"] = "tl-empty"
    return {"store": store, "runs": runs}


def sql_visits(store: Store, run_id: str) -> list[tuple[int, int]]:
    """(prompt, steps sampled), most visited first, ties by prompt id."""
    return [(r["prompt_id"], r["v"]) for r in store.query(
        "SELECT prompt_id, count(DISTINCT step) AS v FROM pass_rate_history WHERE run_id = ? GROUP BY prompt_id "
        "ORDER BY v DESC, prompt_id", [run_id])]


def sql_cells(store: Store, run_id: str) -> dict[tuple[int, int], dict]:
    """(prompt, step) -> pooled pass rate, the decision of highest precedence, evicted, returned, rows."""
    return {(r["prompt_id"], r["step"]): r for r in store.query(
        f"""SELECT prompt_id, step, sum(n_correct) / sum(n) AS p, arg_min(decision, {RANK}) AS decision,
                   bool_or(evicted) AS evicted, bool_or(returned) AS returned, count(*) AS rows
            FROM pass_rate_history WHERE run_id = ? GROUP BY ALL""", [run_id])}


def test_the_decisions_are_the_allocators_own():
    # but ``continued``: a first pilot wave's own row is evidence (its pass rate counts in the cell), never the
    # cell's marker: its later wave's row, in the same step, holds the decision
    assert set(DECISIONS) == {d.label for d in Decision} - {"continued"}


def test_the_pc_run_has_every_kind_of_cell(sim):
    """The fixture's PC run exercises every marker and both flags (else the tests below would prove little)."""
    rows = sim["store"].query("SELECT decision, bool_or(evicted) AS e, bool_or(returned) AS r, count(*) AS n "
                              "FROM pass_rate_history WHERE run_id = 'tl-pc' GROUP BY ALL")
    assert {r["decision"] for r in rows} == {"trained", "kept", "skipped_easy", "deferred_hard"}
    assert any(r["e"] for r in rows) and any(r["r"] for r in rows)


@pytest.mark.parametrize("method", ["pc", "dapo", "grpo"])
def test_top_rows_are_the_most_visited_prompts_ties_by_id(sim, method):
    store, rid = sim["store"], sim["runs"][method]
    data = load_timeline(store, rid)
    visits = sql_visits(store, rid)
    assert data.total_prompts == len(visits)
    assert list(data.prompt_ids) == [p for p, _ in visits[:DEFAULT_TOP]]
    assert list(data.visits) == [v for _, v in visits[:DEFAULT_TOP]]
    assert data.picked == "top"
    assert data.describe() == f"{DEFAULT_TOP} most-visited of {len(visits):,} prompts"
    assert list(load_timeline(store, rid, top=7).prompt_ids) == [p for p, _ in visits[:7]]


def test_pc_prompts_come_back_so_visits_differ(sim):
    visits = sql_visits(sim["store"], "tl-pc")
    assert visits[0][1] > visits[-1][1] >= 1  # the pick is not just the lowest ids


def test_grpo_ties_are_broken_by_the_lower_prompt_id(sim):
    store = sim["store"]
    visits = sql_visits(store, "tl-grpo")
    assert {v for _, v in visits} == {1}  # 12 steps of 16 prompts out of 300: each prompt sampled once
    all_ids = sorted(p for p, _ in visits)
    assert list(load_timeline(store, "tl-grpo").prompt_ids) == all_ids[:DEFAULT_TOP]


def test_the_pick_is_deterministic(sim):
    a = load_timeline(sim["store"], "tl-pc")
    b = load_timeline(sim["store"], "tl-pc")
    assert a.prompt_ids == b.prompt_ids
    np.testing.assert_array_equal(a.p_hat, b.p_hat)
    np.testing.assert_array_equal(a.marker, b.marker)


@pytest.mark.parametrize("method", ["pc", "dapo", "grpo"])
def test_every_cell_is_the_pooled_pass_rate_of_the_step(sim, method):
    store, rid = sim["store"], sim["runs"][method]
    data = load_timeline(store, rid)
    cells = sql_cells(store, rid)
    steps = [r["step"] for r in store.query("SELECT step FROM steps WHERE run_id = ? ORDER BY step", [rid])]
    assert data.steps.tolist() == steps
    for r, p in enumerate(data.prompt_ids):
        for c, s in enumerate(steps):
            cell = cells.get((p, s))
            if cell is None:  # not sampled at that step: blank
                assert np.isnan(data.p_hat[r, c]) and data.marker[r, c] == -1
                assert not data.evicted[r, c] and not data.returned[r, c]
                continue
            assert data.p_hat[r, c] == pytest.approx(cell["p"])
            assert DECISIONS[data.marker[r, c]] == cell["decision"]
            assert bool(data.evicted[r, c]) == cell["evicted"]
            assert bool(data.returned[r, c]) == cell["returned"]


def test_a_kept_and_committed_prompt_pools_pilot_and_commit(sim):
    """A prompt piloted (kept) and committed (trained) in the same step: one cell, (pilot + commit correct) /
    (pilot + commit rollouts), marked trained."""
    store = sim["store"]
    row = store.query(
        """SELECT prompt_id, step, sum(n_correct) AS c, sum(n) AS n,
                  sum(n) FILTER (WHERE stage = 'pilot') AS n_pilot, sum(n) FILTER (WHERE stage = 'commit') AS n_commit
           FROM pass_rate_history WHERE run_id = 'tl-pc' GROUP BY ALL
           HAVING bool_or(stage = 'pilot' AND decision = 'kept') AND bool_or(stage = 'commit') AND count(*) = 2
           ORDER BY step, prompt_id LIMIT 1""")[0]
    assert row["n_pilot"] == 4 and row["n_commit"] == 12
    data = load_timeline(store, "tl-pc", prompts=[row["prompt_id"]])
    p, decision, _, _ = data.cell(row["prompt_id"], row["step"])
    assert p == pytest.approx(row["c"] / row["n"])
    assert decision == "trained"


@pytest.mark.parametrize("method", ["pc", "dapo", "grpo"])
def test_the_lower_panel_counts_all_prompts_per_step(sim, method):
    store, rid = sim["store"], sim["runs"][method]
    data = load_timeline(store, rid)
    steps = data.steps.tolist()
    observed = {r["step"]: r["k"] for r in store.query(
        "SELECT step, count(DISTINCT prompt_id) AS k FROM pass_rate_history WHERE run_id = ? GROUP BY step", [rid])}
    assert data.observed.tolist() == [observed.get(s, 0) for s in steps]  # the stack = prompts sampled per step
    per_step = {}
    for (_, s), cell in sql_cells(store, rid).items():
        per_step.setdefault((s, cell["decision"]), 0)
        per_step[(s, cell["decision"])] += 1
    for d in DECISIONS:
        assert data.counts[d].tolist() == [per_step.get((s, d), 0) for s in steps], d
    flags = {r["step"]: r for r in store.query(
        """SELECT step, count(DISTINCT prompt_id) FILTER (WHERE evicted) AS e,
                  count(DISTINCT prompt_id) FILTER (WHERE returned) AS r
           FROM pass_rate_history WHERE run_id = ? GROUP BY step""", [rid])}
    assert data.evicted_counts.tolist() == [flags[s]["e"] if s in flags else 0 for s in steps]
    assert data.returned_counts.tolist() == [flags[s]["r"] if s in flags else 0 for s in steps]


def test_where_a_step_samples_each_prompt_once_counts_are_the_decision_counts(sim):
    """DAPO's steps that sample no prompt twice (a prompt comes twice only across an epoch boundary): the counts are
    plain SQL decision counts there."""
    store = sim["store"]
    cells = sql_cells(store, "tl-dapo")
    twice = {s for (_, s), c in cells.items() if c["rows"] > 1}
    data = load_timeline(store, "tl-dapo")
    once = [s for s in data.steps.tolist() if s not in twice]
    assert len(once) >= len(data.steps) - 3
    rows = store.query("SELECT step, decision, count(*) AS k FROM pass_rate_history WHERE run_id = 'tl-dapo' "
                       "GROUP BY ALL")
    assert {r["decision"] for r in rows} == {"trained", "surplus", "skipped_easy", "deferred_hard"}
    for r in rows:
        if r["step"] in once:
            assert data.counts[r["decision"]][r["step"] - int(data.steps[0])] == r["k"]


def test_chosen_prompts_in_the_order_given_each_once(sim):
    store = sim["store"]
    visits = dict(sql_visits(store, "tl-pc"))
    some = sorted(visits)[:3]
    ask = [some[2], some[0], some[2], some[1]]
    data = load_timeline(store, "tl-pc", prompts=ask)
    assert data.prompt_ids == (some[2], some[0], some[1])
    assert data.visits == tuple(visits[p] for p in data.prompt_ids)
    assert data.picked == "chosen"
    assert data.describe() == f"3 chosen prompts of {len(visits):,}"


def test_marker_counts_on_the_figure_match_the_data(sim):
    data = load_timeline(sim["store"], "tl-pc")
    fig = make_timeline_figure(data)
    heat = fig.axes[0]
    drawn = {c.get_gid(): c for c in heat.collections}
    for i, d in enumerate(DECISIONS):
        k = int((data.marker == i).sum())
        if k:
            assert len(drawn[f"decision:{d}"].get_offsets()) == k, d
        else:
            assert f"decision:{d}" not in drawn
    assert len(drawn["evicted"].get_paths()) == int(data.evicted.sum()) > 0
    assert len(drawn["returned"].get_paths()) == int(data.returned.sum()) > 0
    img = next(i for i in heat.get_images() if i.get_gid() == "heatmap")
    np.testing.assert_array_equal(np.ma.getmaskarray(img.get_array()), np.isnan(data.p_hat))  # blank = masked
    assert img.get_clim() == (0.0, 1.0)
    assert any(ax.get_ylabel() == "pass rate" for ax in fig.axes)  # the colorbar
    assert data.describe() in heat.get_title(loc="left")
    assert "lower panel: all prompts" in heat.get_title(loc="left")


def test_a_prior_skip_is_a_marker_on_a_blank_cell_and_counted_below(sim):
    """The history prior's skips (no rollout) get their own marker on a blank cell, and their count per step."""
    store = sim["store"]
    data = load_timeline(store, "tl-prior", top=200)
    cells = sql_cells(store, "tl-prior")
    prior = DECISIONS.index("screened_by_prior")
    rr, cc = np.nonzero(data.marker == prior)
    assert rr.shape[0] > 20
    for r, c in zip(rr.tolist(), cc.tolist()):
        cell = cells[(data.prompt_ids[r], int(data.steps[c]))]
        assert cell["decision"] == "screened_by_prior"
        if cell["p"] is None:  # only prior rows that step: no rollout, a blank cell
            assert np.isnan(data.p_hat[r, c])
    per_step = {r["step"]: r["k"] for r in store.query(
        f"""SELECT step, count(*) AS k FROM (SELECT step, prompt_id, arg_min(decision, {RANK}) AS d
                                             FROM pass_rate_history WHERE run_id = 'tl-prior' GROUP BY ALL)
            WHERE d = 'screened_by_prior' GROUP BY step""")}
    assert data.counts["screened_by_prior"].tolist() == [per_step.get(int(s), 0) for s in data.steps]
    fig = make_timeline_figure(data)
    drawn = {c.get_gid(): c for c in fig.axes[0].collections}
    assert len(drawn["decision:screened_by_prior"].get_offsets()) == rr.shape[0]
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "skipped by prior (no rollout)" in labels


def test_write_timeline_writes_a_png_and_says_what_it_shows(sim, tmp_path):
    out = tmp_path / "deep" / "tl.png"
    res = write_timeline(sim["store"], "tl-pc", out, top=12)
    blob = out.read_bytes()
    assert blob[:8] == PNG_MAGIC
    width, height = struct.unpack(">II", blob[16:24])
    assert 1000 <= width <= 4000 and 500 <= height <= 6000
    assert res.path == out and len(res.prompts) == 12 and res.steps == 40
    assert (res.first_step, res.last_step) == (1, 40)
    assert res.total_prompts == len(sql_visits(sim["store"], "tl-pc"))
    assert res.summary().startswith(f"run tl-pc (PC): 12 most-visited of {res.total_prompts:,} prompts x 40 steps")
    assert not list(out.parent.glob(".*.tmp"))  # written whole, no temporary left


def test_recent_runs_are_the_newest_with_observations(sim):
    assert recent_runs(sim["store"]) == ["tl-prior", "tl-pc", "tl-dapo", "tl-grpo"]  # tl-empty (newest) has none
    assert recent_runs(sim["store"], 2) == ["tl-prior", "tl-pc"]


def test_an_unknown_run_names_the_fix_and_known_runs(sim):
    with pytest.raises(TimelineError, match="no run 'nope'") as exc:
        load_timeline(sim["store"], "nope")
    assert "Fix:" in str(exc.value) and "tl-pc" in str(exc.value)


def test_a_run_without_observations_says_so(sim):
    with pytest.raises(TimelineError, match="no prompt observations") as exc:
        load_timeline(sim["store"], "tl-empty")
    text = str(exc.value)
    assert "no recorded step" in text and "Fix:" in text and "tl-pc" in text


def test_unknown_prompts_are_named_with_the_fix(sim):
    best = [p for p, _ in sql_visits(sim["store"], "tl-pc")[:5]]
    with pytest.raises(TimelineError, match="never sampled prompt\\(s\\) 99999, 123456") as exc:
        load_timeline(sim["store"], "tl-pc", prompts=[best[0], 99999, 123456])
    assert "Fix:" in str(exc.value) and ", ".join(map(str, best)) in str(exc.value)


@pytest.mark.parametrize("kwargs", [{"top": 0}, {"prompts": []}])
def test_no_rows_asked_for_is_refused(sim, kwargs):
    with pytest.raises(TimelineError, match="Fix:"):
        load_timeline(sim["store"], "tl-pc", **kwargs)
