"""Runs compared by step and by rollouts (pc_pipelines/reports/compare.py) on a REAL DuckDB store: two trained-like
runs of one family (steps written through the store's writer with a mean reward, two held-out sets evaluated before
training and every other step, a TensorBoard folder in the run directory) and a simulated run of another family.

Expected values come from plain SQL over the store's tables (``steps``, ``eval_results``), never from the module's
own query; the figure is checked line by line (one per run, labelled, the points it draws)."""

from __future__ import annotations

import math
import shlex

import pytest

from pc_pipelines.config import resolve
from pc_pipelines.errors import installed_command
from pc_pipelines.reports.compare import (
    PANELS,
    CompareError,
    RunLine,
    compare_query,
    comparison_figure,
    load_comparison,
    plot_comparison,
    tensorboard_dirs,
    tensorboard_overlay_command,
)
from pc_pipelines.simulator import Simulation, record_simulation
from pc_pipelines.store import RunRecord, Store, step_tables

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
CFG = {"sim.num_prompts": 100, "allocator.train_batch": 8, "allocator.n": 8}
STEPS = 6


def trained_like(store: Store, run_id: str, method: str, run_dir, reward0: float) -> None:
    """A run registered as trained, with a run directory holding a TensorBoard folder: its steps are the
    simulator's outcomes with a mean reward, evaluated on two held-out sets before training and after steps 2, 4, 6."""
    cfg = resolve("simulator", {**CFG, "allocator.n_pilot": 4 if method == "pc" else None, "family": "fam"},
                  method=method, seed=0)
    store.register_run(RunRecord.for_config(cfg, run_id, "train", {"run_dir": str(run_dir)}))
    (run_dir / "tensorboard").mkdir(parents=True)
    sim = Simulation(cfg.allocator, cfg.sim)
    writer = store.writer(run_id)
    evals = []
    for step in range(0, STEPS + 1):  # 0: before training, then steps 1..STEPS
        if step >= 1:
            out = sim.step().outcome
            writer.write_step(step, step_tables(run_id, out, extra={"mean_reward": reward0 + 0.05 * (step - 1)}))
        if step % 2 == 0:
            evals += [{"run_id": run_id, "step": step, "benchmark": b, "k": 1, "temperature": 0.6,
                       "accuracy": 0.2 + 0.01 * step + d + reward0, "n_prompts": 10}
                      for b, d in (("set-a", 0.0), ("set-b", 0.1))]
    store.add_eval_results(evals)
    store.compact(run_id)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("compare")
    st = Store(root / "runs.duckdb")
    st.init()
    trained_like(st, "fam-grpo", "grpo", root / "run dirs" / "fam-grpo", 0.1)
    trained_like(st, "fam-pc", "pc", root / "run dirs" / "it's pc", 0.3)
    list(record_simulation(resolve("simulator", {**CFG, "allocator.n_pilot": None, "family": "other"}, method="grpo",
                                   seed=1), st, 4, run_id="other-grpo"))
    return st


def sql_points(st: Store, run_id: str) -> list[tuple]:
    """(step, cumulative sampled rollouts, mean reward, mean held-out accuracy or None) per training step, after
    (0, 0, None, accuracy) for the evaluation before training (step 0): the store's own numbers."""
    steps = st.query("SELECT step, sampled_rollouts, mean_reward FROM steps WHERE run_id = ? ORDER BY step", [run_id])
    acc = {r["step"]: r["a"] for r in st.query(
        "SELECT step, avg(accuracy) AS a FROM eval_results WHERE run_id = ? GROUP BY step", [run_id])}
    out, total = [], 0
    if 0 in acc:
        out.append((0, 0, None, acc[0]))
    for r in steps:
        total += r["sampled_rollouts"]
        out.append((r["step"], total, r["mean_reward"], acc.get(r["step"])))
    return out


def as_points(line) -> list[tuple]:
    nan = lambda v: None if isinstance(v, float) and math.isnan(v) else v  # noqa: E731
    return [(s, c, nan(m), nan(a)) for s, c, m, a in
            zip(line.step, line.cumulative_rollouts, line.mean_reward, line.accuracy, strict=True)]


def close(a: list[tuple], b: list[tuple]) -> bool:
    return len(a) == len(b) and all(
        x == y or (isinstance(x, float) and isinstance(y, float) and math.isclose(x, y, rel_tol=1e-12))
        for p, q in zip(a, b, strict=True) for x, y in zip(p, q, strict=True))


def test_a_family_is_one_line_per_run_with_the_stores_values(store):
    lines = load_comparison(store, family="fam")
    assert [r["run_id"] for r in store.query("SELECT run_id FROM runs WHERE family = 'fam' ORDER BY run_id")] == \
        sorted(ln.run_id for ln in lines) == ["fam-grpo", "fam-pc"]
    for ln in lines:
        assert close(as_points(ln), sql_points(store, ln.run_id)), ln.run_id
        assert ln.step[0] == 0 and ln.step[1] == 1  # before training, then training step 1
    by_id = {ln.run_id: ln for ln in lines}
    assert by_id["fam-pc"].label == "fam-pc (PC)" and by_id["fam-grpo"].label == "fam-grpo (GRPO)"
    assert [ln.method for ln in lines] == ["grpo", "pc"]  # the registry's order


def test_named_runs_across_families_and_the_query_the_metadata_prints(store):
    lines = load_comparison(store, run_ids=["fam-pc", "other-grpo"])
    assert [ln.run_id for ln in lines] == ["other-grpo", "fam-pc"]
    assert close(as_points(lines[0]), sql_points(store, "other-grpo"))
    # The printed query returns the very rows drawn.
    rows = store.query(compare_query(run_ids=["fam-pc", "other-grpo"]))
    assert [(r["run_id"], r["step"], r["cumulative_rollouts"]) for r in rows] == [
        (ln.run_id, s, c) for ln in sorted(lines, key=lambda x: x.run_id)
        for s, c in zip(ln.step, ln.cumulative_rollouts, strict=True)]
    every = load_comparison(store)
    assert sorted(ln.run_id for ln in every) == ["fam-grpo", "fam-pc", "other-grpo"]


def test_unknown_runs_and_empty_families_are_refused_with_the_fix(store):
    with pytest.raises(CompareError, match=r"no run .nope. in the store .*Fix: name runs that `\S*pilot-commit runs"):
        load_comparison(store, run_ids=["fam-pc", "nope"])
    with pytest.raises(CompareError, match=r"family 'zz' .* no recorded step yet.*Fix:"):
        load_comparison(store, family="zz")


def test_the_figure_draws_one_labelled_line_per_run_by_step_and_by_rollouts(store, tmp_path):
    lines = load_comparison(store, run_ids=["fam-grpo", "fam-pc"])
    fig = comparison_figure(lines, "t")
    axes = fig.axes
    assert [ax.get_title() for ax in axes] == [
        "held-out accuracy by training step", "held-out accuracy by cumulative sampled rollouts",
        "mean reward by training step", "mean reward by cumulative sampled rollouts"]
    assert [t.get_text() for t in axes[0].get_legend().get_texts()] == ["fam-grpo (GRPO)", "fam-pc (PC)"]
    for ax, (y, x) in zip(axes, [("a", "s"), ("a", "c"), ("m", "s"), ("m", "c")], strict=True):
        assert [ln.get_label() for ln in ax.get_lines()] == ["fam-grpo (GRPO)", "fam-pc (PC)"]
        for drawn, rid in zip(ax.get_lines(), ["fam-grpo", "fam-pc"], strict=True):
            pts = [p for p in sql_points(store, rid) if p[3 if y == "a" else 2] is not None]
            assert list(drawn.get_xdata()) == [p[0 if x == "s" else 1] for p in pts]
            assert list(drawn.get_ydata()) == pytest.approx([p[3 if y == "a" else 2] for p in pts])
    # mean reward by step starts at training step 1 (nothing is trained before it)
    assert list(axes[2].get_lines()[0].get_xdata())[0] == 1
    png = plot_comparison(lines, tmp_path / "out" / "c.png", "t")
    assert png.read_bytes()[:8] == PNG_MAGIC


def test_steps_are_whole_numbers_and_rollouts_plain_counts():
    """Issue 41 point 8, as for the run plot: no 2.5 on a step axis, no 1e4 offset on a rollouts axis (the demo's
    three 20-step runs: evaluations every 5 steps, up to 64,512 rollouts)."""
    steps = tuple(range(21))
    lines = [RunLine(run_id=f"r-{m}", method=m, family="f", step=steps,
                     cumulative_rollouts=tuple(per * s for s in steps), mean_reward=(math.nan,) + (0.5,) * 20,
                     accuracy=tuple(0.6 if s % 5 == 0 else math.nan for s in steps))
             for m, per in (("grpo", 1024), ("dapo", 3072), ("pc", 852))]
    fig = comparison_figure(lines, "t")
    fig.canvas.draw()
    for ax, (_, x) in zip(fig.axes, PANELS, strict=True):
        lo, hi = ax.get_xlim()
        ticks = [t for t in ax.get_xticks() if lo <= t <= hi]
        labels = [t.get_text().replace("\u2212", "-") for t in ax.get_xticklabels() if t.get_text()]
        assert ax.xaxis.get_offset_text().get_text() == "", x
        if x == "step":
            assert ticks and all(float(t).is_integer() for t in ticks), ticks
        else:
            assert labels and all("e" not in lb and lb.replace(",", "").lstrip("-").isdigit() for lb in labels), labels


def test_the_tensorboard_overlay_names_each_run_and_pastes_as_one_argument(store):
    dirs = tensorboard_dirs(store, ["fam-grpo", "fam-pc", "other-grpo"])
    assert set(dirs) == {"fam-grpo", "fam-pc"}  # a simulated run has no TensorBoard logs
    cmd = tensorboard_overlay_command(dirs)
    argv = shlex.split(cmd)
    assert argv[:2] == [installed_command("tensorboard"), "--logdir_spec"] and len(argv) == 3
    assert argv[2] == f"fam-grpo:{dirs['fam-grpo']},fam-pc:{dirs['fam-pc']}" and "it's pc" in argv[2]
    assert tensorboard_overlay_command({}) is None
