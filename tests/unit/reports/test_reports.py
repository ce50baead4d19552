"""The report library (pc_pipelines/reports/) and `pilot-commit report --plots` on a REAL DuckDB store filled with
simulated GRPO / DAPO / PC runs (two seeds), plus an older GRPO run of seed 0 that must not be reported (only the
latest run of each family, method and seed counts, as in `rollouts_to_target`).

Expected values come from the store's base tables (``eval_results``, ``steps``) and from the simulation's own
records, not from the report module's queries."""

from __future__ import annotations

import json
import math
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from pc_pipelines import cli
from pc_pipelines.config import resolve
from pc_pipelines.reports import (
    METHOD_COLORS,
    PLOT_NAMES,
    RUN_GID,
    TARGET_GID,
    Report,
    ReportError,
    build_report,
    load_curves,
    make_figures,
    rollouts_to_target_markdown,
    summarize,
    write_plots,
)
from pc_pipelines.simulator import record_simulation
from pc_pipelines.store import Store, StoreError

METHODS = ("grpo", "dapo", "pc")
SEEDS = (0, 1)
STEPS = 20
SMALL = {"sim.num_prompts": 3000, "allocator.train_batch": 16, "allocator.n": 8, "allocator.n_pilot": None}
EXE = str(Path(sys.executable).parent / "pilot-commit")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def simulate(store: Store, method: str, seed: int, steps: int = STEPS, family: str | None = None,
             run_id: str | None = None) -> tuple[str, list]:
    cfg = resolve("simulator", SMALL, method=method, seed=seed, family=family)
    rid = run_id or cfg.default_run_id()
    return rid, [r.sim_step for r in record_simulation(cfg, store, steps, run_id=rid)]


@pytest.fixture(scope="module")
def sim(tmp_path_factory) -> dict:
    store = Store(tmp_path_factory.mktemp("reports") / "runs.duckdb")
    simulate(store, "grpo", 0, steps=10, run_id="sim-grpo-s0-older")  # registered first: superseded
    runs = {}
    for seed in SEEDS:
        for m in METHODS:
            runs[(m, seed)] = simulate(store, m, seed)
    return {"store": store, "runs": runs}


@pytest.fixture(scope="module")
def two_families(tmp_path_factory) -> Store:
    store = Store(tmp_path_factory.mktemp("families") / "runs.duckdb")
    for family in ("sim", "alt"):
        for m in ("grpo", "pc"):
            simulate(store, m, 0, steps=10, family=family)
    return store


# ---- what the store holds, read from its base tables ----------------------------------------------------------
def store_eval(store: Store, rid: str) -> tuple[list[int], list[int], list[float]]:
    """(steps, cumulative sampled rollouts, mean accuracy over benchmarks) from eval_results and steps."""
    rows = store.query("SELECT step, avg(accuracy) AS acc FROM eval_results WHERE run_id = ? GROUP BY step "
                       "ORDER BY step", [rid])
    sampled = {r["step"]: r["sampled_rollouts"] for r in store.query(
        "SELECT step, sampled_rollouts FROM steps WHERE run_id = ?", [rid])}
    cum = [sum(v for s, v in sampled.items() if s <= r["step"]) for r in rows]
    return [r["step"] for r in rows], cum, [r["acc"] for r in rows]


def store_steps(store: Store, rid: str) -> list[dict]:
    return store.query("SELECT step, sampled_rollouts, trained_rollouts, mean_reward_std, informative_share "
                       "FROM steps WHERE run_id = ? ORDER BY step", [rid])


def same(xs, ys) -> bool:
    xs, ys = list(map(float, xs)), list(map(float, ys))
    return len(xs) == len(ys) and all((math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, rel=1e-12, abs=0)
                                      for a, b in zip(xs, ys))


def png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == PNG_MAGIC and head[12:16] == b"IHDR", path
    return struct.unpack(">II", head[16:24])


# ---- Markdown ----------------------------------------------------------------------------------------------------
HAND = {
    "fam": {
        "seeds": [
            {"seed": 0, "target": 0.5, "rollouts": {"grpo": 200, "dapo": None, "pc": 110},
             "grpo_over_pc": 200 / 110, "dapo_over_pc": None},
            {"seed": 1, "target": 0.625, "rollouts": {"grpo": 1234567, "dapo": 160, "pc": 40},
             "grpo_over_pc": 1234567 / 40, "dapo_over_pc": 4.0},
        ],
        "median_grpo_over_pc": (200 / 110 + 1234567 / 40) / 2,
        "median_dapo_over_pc": 4.0,
    }
}


def table_rows(md: str) -> list[list[str]]:
    return [[c.strip() for c in ln.strip().strip("|").split("|")] for ln in md.splitlines() if ln.startswith("|")]


def test_markdown_table_of_a_hand_made_report():
    md = rollouts_to_target_markdown(HAND)
    assert "### Family `fam`" in md
    assert table_rows(md) == [
        ["seed", "target", "GRPO", "DAPO", "PC", "GRPO/PC", "DAPO/PC"],
        ["---:"] * 7,
        ["0", "0.5000", "200", "never", "110", "1.82x", "-"],
        ["1", "0.6250", "1,234,567", "160", "40", "30864.17x", "4.00x"],
        ["median", "", "", "", "", f"{(200 / 110 + 1234567 / 40) / 2:.2f}x", "4.00x"],
    ]
    assert "min(GRPO peak, PC peak)" in md and "never" in md


def test_markdown_of_an_empty_report_says_why():
    md = rollouts_to_target_markdown({})
    assert "No family has both a GRPO and a PC run" in md and "|" not in md


def test_markdown_numbers_equal_the_stores_report(sim):
    rep = sim["store"].report()
    assert set(rep) == {"sim"} and [s["seed"] for s in rep["sim"]["seeds"]] == list(SEEDS)
    rows = table_rows(rollouts_to_target_markdown(rep))
    body, median = rows[2:-1], rows[-1]
    assert len(body) == len(SEEDS)
    for row, s in zip(body, rep["sim"]["seeds"]):
        seed, target, grpo, dapo, pc, g_pc, d_pc = row
        assert int(seed) == s["seed"] and float(target) == pytest.approx(s["target"], abs=5e-5)
        for cell, m in zip((grpo, dapo, pc), METHODS):
            v = s["rollouts"][m]
            assert cell == ("never" if v is None else f"{v:,}")
            if v is not None:
                assert int(cell.replace(",", "")) == v
        assert g_pc == f"{s['grpo_over_pc']:.2f}x" and g_pc.endswith("x")
        assert d_pc == ("-" if s["dapo_over_pc"] is None else f"{s['dapo_over_pc']:.2f}x")
    assert median[0] == "median"
    assert median[5] == f"{rep['sim']['median_grpo_over_pc']:.2f}x"
    assert median[6] == ("-" if rep["sim"]["median_dapo_over_pc"] is None
                         else f"{rep['sim']['median_dapo_over_pc']:.2f}x")


# ---- curves -------------------------------------------------------------------------------------------------------
def test_curves_are_the_latest_runs_with_the_stores_values(sim):
    store, runs = sim["store"], sim["runs"]
    curves = load_curves(store)
    assert [(c.method, c.seed) for c in curves] == [(m, s) for m in METHODS for s in SEEDS]  # method order, seed
    assert "sim-grpo-s0-older" not in {c.run_id for c in curves}
    assert "sim-grpo-s0-older" in {c.run_id for c in load_curves(store, latest_only=False)}
    for c in curves:
        rid, sim_steps = runs[(c.method, c.seed)]
        assert c.run_id == rid and c.family == "sim"
        steps, cum, acc = store_eval(store, rid)
        assert list(c.eval_step) == steps == [0, 5, 10, 15, 20]  # before training, every 5 steps
        assert list(c.eval_rollouts) == cum and same(c.eval_accuracy, acc)
        st = store_steps(store, rid)
        assert list(c.step) == list(range(1, STEPS + 1)) == [r["step"] for r in st]
        assert same(c.reward_std, [r["mean_reward_std"] for r in st])
        assert same(c.informative_share, [r["informative_share"] for r in st])
        # ... which are the simulation's own numbers
        assert same(c.reward_std, [s.outcome.ledger.mean_reward_std for s in sim_steps])
        assert same(c.informative_share, [s.outcome.ledger.informative_share for s in sim_steps])
        assert list(c.cumulative_sampled) == [s.cumulative_sampled for s in sim_steps]
        assert list(c.cumulative_trained) == [s.cumulative_trained for s in sim_steps]
        assert same(c.eval_accuracy[1:], [sim_steps[k - 1].accuracy for k in steps[1:]])
        assert c.final_accuracy == c.eval_accuracy[-1] and c.peak_accuracy == max(c.eval_accuracy)


def test_curves_of_one_family(two_families):
    assert {c.family for c in load_curves(two_families, "alt")} == {"alt"}
    assert len(load_curves(two_families, "alt")) == 2 and len(load_curves(two_families)) == 4
    assert load_curves(two_families, "nope") == []


def test_summary_is_the_mean_over_seeds(sim):
    curves = load_curves(sim["store"])
    summary = summarize(curves)
    assert [(s.family, s.method) for s in summary] == [("sim", m) for m in METHODS]
    for s in summary:
        per_seed = [store_steps(sim["store"], sim["runs"][(s.method, seed)][0]) for seed in SEEDS]
        accs = [store_eval(sim["store"], sim["runs"][(s.method, seed)][0])[2] for seed in SEEDS]
        assert s.seeds == SEEDS and s.steps == STEPS
        assert s.total_sampled_rollouts == pytest.approx(sum(sum(r["sampled_rollouts"] for r in st)
                                                             for st in per_seed) / 2)
        assert s.total_trained_rollouts == pytest.approx(sum(sum(r["trained_rollouts"] for r in st)
                                                             for st in per_seed) / 2)
        assert s.final_accuracy == pytest.approx(sum(a[-1] for a in accs) / 2)
        assert s.peak_accuracy == pytest.approx(sum(max(a) for a in accs) / 2)
        assert s.to_dict()["seeds"] == list(SEEDS)


# ---- plots --------------------------------------------------------------------------------------------------------
def expected_xy(store: Store, rid: str, name: str) -> tuple[list, list]:
    steps, cum, acc = store_eval(store, rid)
    st = store_steps(store, rid)
    return {
        "accuracy_vs_rollouts": (cum, acc),
        "accuracy_vs_steps": (steps, acc),  # the stored steps, 0 = before training
        "reward_std_per_step": ([r["step"] for r in st], [r["mean_reward_std"] for r in st]),
        "informative_share_per_step": ([r["step"] for r in st], [r["informative_share"] for r in st]),
    }[name]


def test_plotted_lines_are_the_stores_curves(sim):
    store, runs = sim["store"], sim["runs"]
    rep = store.report()
    targets = {s["seed"]: s["target"] for s in rep["sim"]["seeds"]}
    figures = make_figures(load_curves(store), targets, "sim")
    assert list(figures) == list(PLOT_NAMES)
    by_rid = {rid: (m, seed) for (m, seed), (rid, _) in runs.items()}
    for name, fig in figures.items():
        (ax,) = fig.axes
        assert ax.get_title().startswith("sim: ") and ax.get_xlabel() and ax.get_ylabel()
        lines = [ln for ln in ax.get_lines() if str(ln.get_gid()).startswith(RUN_GID)]
        assert len(lines) == len(runs) == 6  # one line per run, the superseded run left out
        assert {ln.get_gid()[len(RUN_GID):] for ln in lines} == set(by_rid)
        for ln in lines:
            rid = ln.get_gid()[len(RUN_GID):]
            method, _seed = by_rid[rid]
            x, y = expected_xy(store, rid, name)
            assert same(ln.get_xdata(), x), (name, rid)
            assert same(ln.get_ydata(), y), (name, rid)
            assert ln.get_color() == METHOD_COLORS[method]
        # each method labelled once, its seeds drawn in its colour
        legend = [t.get_text() for t in ax.get_legend().get_texts()]
        assert legend[:3] == ["GRPO (2 seeds)", "DAPO (2 seeds)", "PC (2 seeds)"]
        target_lines = [ln for ln in ax.get_lines() if str(ln.get_gid()).startswith(TARGET_GID)]
        if name.startswith("accuracy"):
            assert len(target_lines) == len(SEEDS) and len(legend) == 4 and "target" in legend[3]
            for ln in target_lines:
                seed = int(ln.get_gid()[len(TARGET_GID):])
                assert set(ln.get_ydata()) == {targets[seed]} and ln.get_linestyle() == "--"
        else:
            assert target_lines == [] and len(legend) == 3


def test_write_plots_writes_four_valid_pngs(sim, tmp_path):
    out = tmp_path / "plots"
    paths = write_plots(sim["store"], out)
    assert [p.name for p in paths] == [f"{n}.png" for n in PLOT_NAMES]
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in paths)  # no temp files left
    for p in paths:
        assert p.stat().st_size > 15_000, p  # four runs' worth of lines, not an empty canvas
        assert png_size(p) == (750, 480)


def test_plots_leave_matplotlibs_global_state_alone(sim, tmp_path):
    code = (
        "import sys, matplotlib\n"
        "before = dict.__getitem__(matplotlib.rcParams, 'backend')\n"
        "from pc_pipelines.reports import write_plots\nfrom pc_pipelines.store import Store\n"
        f"write_plots(Store({str(sim['store'].path)!r}), {str(tmp_path)!r})\n"
        "assert 'matplotlib.pyplot' not in sys.modules, 'pyplot imported'\n"
        "assert dict.__getitem__(matplotlib.rcParams, 'backend') == before, 'backend changed'\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
    assert len(list(tmp_path.glob("*.png"))) == 4


def test_several_families_get_prefixed_file_names(two_families, tmp_path):
    paths = write_plots(two_families, tmp_path / "all")
    assert sorted(p.name for p in paths) == sorted(f"{f}_{n}.png" for f in ("alt", "sim") for n in PLOT_NAMES)
    assert all(png_size(p) == (750, 480) for p in paths)
    one = write_plots(two_families, tmp_path / "alt", family="alt")
    assert [p.name for p in one] == [f"{n}.png" for n in PLOT_NAMES]


# ---- build_report ------------------------------------------------------------------------------------------------
def test_build_report(sim, tmp_path):
    store = sim["store"]
    rep = build_report(store, tmp_path / "out")
    assert isinstance(rep, Report)
    assert rep.report == store.report()
    assert rollouts_to_target_markdown(rep.report).strip() in rep.markdown
    assert [p.name for p in rep.plots] == [f"{n}.png" for n in PLOT_NAMES] and all(p.exists() for p in rep.plots)
    assert all(f"`{p.name}`" in rep.markdown for p in rep.plots)
    assert rep.summary == summarize(load_curves(store)) and rep.curves == load_curves(store)
    rows = rep.summary_rows()
    assert [r["method"] for r in rows] == list(METHODS)
    json.dumps(rows)  # metadata-ready
    # the summary table in the markdown carries the same numbers
    md_rows = {r[1]: r for r in table_rows(rep.markdown) if r[0] == "`sim`"}
    for s in rep.summary:
        r = md_rows[{"grpo": "GRPO", "dapo": "DAPO", "pc": "PC"}[s.method]]
        assert r[2] == "0, 1" and r[3] == str(STEPS)
        assert r[4] == f"{s.total_sampled_rollouts:,.0f}" and r[6] == f"{s.final_accuracy:.4f}"
    no_plots = build_report(store)
    assert no_plots.plots == [] and no_plots.report == rep.report and "## Plots" not in no_plots.markdown


def test_an_empty_store_says_what_to_run_first(tmp_path):
    store = Store(tmp_path / "empty.duckdb").init()
    for call in (lambda: build_report(store, tmp_path / "p"), lambda: write_plots(store, tmp_path / "p")):
        with pytest.raises(ReportError, match="no runs") as exc:
            call()
        # the fix records runs into this store by training; simulated runs are never advised into it (issue 55)
        assert "pilot-commit train --store" in str(exc.value) and "Fix" in str(exc.value)
        assert "simulate-demo --store" not in str(exc.value) and "simulate --store" not in str(exc.value)
    assert not (tmp_path / "p").exists()
    with pytest.raises(ReportError, match="for family 'nope'"):
        build_report(store, family="nope")
    with pytest.raises(StoreError, match="no store at"):
        build_report(Store(tmp_path / "missing.duckdb"))


def test_runs_without_eval_results_say_so(tmp_path):
    store = Store(tmp_path / "noeval.duckdb")
    simulate(store, "pc", 0, steps=3)
    with store.connect(read_only=False) as con:
        con.execute("DELETE FROM eval_results")
    with pytest.raises(ReportError, match="no eval results") as exc:
        write_plots(store, tmp_path / "p")
    assert "pilot-commit train --store" in str(exc.value)


# ---- CLI ----------------------------------------------------------------------------------------------------------
def test_cli_report_plots_in_process(sim, tmp_path, capsys):
    path = str(sim["store"].path)
    plain = cli.main(["report", "--store", path])
    before = capsys.readouterr().out
    assert plain == 0 and "family sim" in before
    assert cli.main(["report", "--store", path, "--plots", str(tmp_path / "p")]) == 0
    out = capsys.readouterr().out
    assert out.startswith(before)  # the table as before, then where the plots are
    assert f"4 plots in {(tmp_path / 'p').resolve()}" in out
    assert all(f"  {n}.png" in out for n in PLOT_NAMES)
    assert sorted(p.name for p in (tmp_path / "p").iterdir()) == sorted(f"{n}.png" for n in PLOT_NAMES)
    # --json keeps stdout one JSON document; the plot location goes to stderr
    assert cli.main(["report", "--store", path, "--json", "--plots", str(tmp_path / "j")]) == 0
    cap = capsys.readouterr()
    assert json.loads(cap.out) == json.loads(json.dumps(sim["store"].report()))
    assert "4 plots in" in cap.err and len(list((tmp_path / "j").glob("*.png"))) == 4


def test_cli_report_plots_on_an_empty_store(tmp_path, capsys):
    path = str(Store(tmp_path / "empty.duckdb").init().path)
    assert cli.main(["report", "--store", path]) == 0  # the table alone: a message, as before
    assert "no family has both" in capsys.readouterr().out
    assert cli.main(["report", "--store", path, "--plots", str(tmp_path / "p")]) == 2
    err = capsys.readouterr().err
    assert "pilot-commit report: no runs" in err and "pilot-commit train --store" in err and "Traceback" not in err
    assert not (tmp_path / "p").exists()


@pytest.mark.e2e
def test_cli_report_plots_as_a_user_runs_it(sim, tmp_path):
    out = subprocess.run([EXE, "report", "--store", str(sim["store"].path), "--plots", str(tmp_path / "plots")],
                         capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr
    assert "family sim" in out.stdout and "4 plots in" in out.stdout
    for n in PLOT_NAMES:
        assert png_size(tmp_path / "plots" / f"{n}.png") == (750, 480)
