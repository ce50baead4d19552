"""`research/bench_study.py` as a user runs it, shrunk: tune GRPO's group size, the study's main runs, the
reproducibility runs under the other CPU kernels, and the Markdown section, from real `pilot-commit train` runs."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from proc_waits import HANG_S

from pc_pipelines.reports import format_ratio, study_headline
from pc_pipelines.store import Store

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.e2e, pytest.mark.slow]
TRAIN_BATCH = 8
"""Prompts a step (the preset's b_t is 16), in two PPO minibatches as the preset's: every run's two steps on half the
rollouts, groups of n kept (the sizes and variants the assertions read); held-out evaluations of one sample a prompt
(issue 53: less work, the same assertions). The kernels' ledger comparison still fails on a float32 run here: run in
float32 under the machine's and the scalar kernels, GRPO seed 5's step-2 losses part (-8.6246e-4 / -8.6261e-4); at
b_t 4 in one minibatch they did not, the ledger was equal to the last bit."""
SMALL = ["--set", f"allocator.train_batch={TRAIN_BATCH}", "--set", f"training.ppo_minibatch={TRAIN_BATCH // 2}",
         "--set", "training.eval_samples=1"]


def bench(tmp_path, cache, part, *args):
    cmd = [sys.executable, str(ROOT / "research/bench_study.py"), part, "--store", str(tmp_path / "b.duckdb"),
           "--out", str(tmp_path / "runs"), "--img-dir", str(tmp_path / "img"), "--write", str(tmp_path / "STUDIES.md"),
           "--results", str(tmp_path / "results.json"),
           "--cache-dir", str(cache), "--quiet", "--steps", "2", "--seeds", "5", "--tune-seeds", "7",
           "--sizes", "16", "64", *SMALL, *args]
    # The bound only stops a hung study: a part runs up to 11 two-step trainings, and on a loaded 2-core machine (load
    # 12) one took over 900 s, which failed the test for being slow, not wrong.
    return subprocess.run(cmd, capture_output=True, text=True, timeout=HANG_S, cwd=ROOT, check=False)


def test_tune_then_main_and_repro_then_the_section(tmp_path, base_policy, policy_cache):
    res = bench(tmp_path, policy_cache, "tune")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "Choice by the rule" in res.stdout and not (tmp_path / "STUDIES.md").exists()  # tune writes no section

    res = bench(tmp_path, policy_cache, "all", "--best-n", "16", "--variants", "grpo", "pc-paper", "pc-paper-noevict", "pc",
                "--primary-seeds", "6")
    assert res.returncode == 0, res.stderr[-3000:]
    store = Store(tmp_path / "b.duckdb")
    runs = {r["run_id"]: r for r in store.query("SELECT * FROM runs")}
    assert sorted(runs) == sorted([
        "bench-tune-grpo-n16-s7", "bench-tune-grpo-s7", "bench-grpo-s5", "bench-pc-paper-s5",
        "bench-pc-paper-noevict-s5", "bench-pc-s5", "bench-grpo-n16-s5", "bench-isa-grpo-s5", "bench-isa-pc-s5",
        "bench-grpo-s6", "bench-pc-s6", "bench-isa-grpo-s6", "bench-isa-pc-s6"])  # seed 6: the primary pair only
    cfg = {rid: json.loads(r["config_json"])["allocator"] for rid, r in runs.items()}
    assert cfg["bench-grpo-n16-s5"]["n"] == 16 and cfg["bench-grpo-s5"]["n"] == 64
    assert {c["train_batch"] for c in cfg.values()} == {TRAIN_BATCH}
    assert cfg["bench-pc-paper-noevict-s5"]["evict"] is False and cfg["bench-pc-paper-s5"]["evict"] is True
    assert cfg["bench-pc-paper-s5"]["band_strategy"] == "static" and cfg["bench-pc-s5"]["band_strategy"] == "adaptive"
    kernels = {rid: json.loads(r["lineage_json"])["cpu_capability"] for rid, r in runs.items()}
    assert kernels["bench-isa-grpo-s5"] == kernels["bench-isa-pc-s5"] == "DEFAULT"
    assert kernels["bench-grpo-s5"] in ("AVX2", "AVX512")
    steps = {r["run_id"]: r["n"] for r in store.query("SELECT run_id, count(*) AS n FROM steps GROUP BY run_id")}
    assert set(steps.values()) == {2}
    # The bench preset trains in float64: same seed, other kernels, same run (the ledger's losses to the last bit).
    assert all(json.loads(r["config_json"])["training"]["dtype"] == "float64" for r in runs.values())

    def ledger(run_id):
        return store.query("SELECT step, sampled_rollouts, loss, mean_reward FROM steps WHERE run_id = ? ORDER BY step",
                           [run_id])

    for name in ("grpo-s5", "pc-s5", "grpo-s6", "pc-s6"):
        assert ledger(f"bench-isa-{name}") == ledger(f"bench-{name}")

    text = (tmp_path / "STUDIES.md").read_text()
    section = text.split("<!-- bench-study:begin -->", 1)[1].split("<!-- bench-study:end -->", 1)[0]
    for heading in ("GRPO's group size", "Rollouts to target, per seed and median", "Where the rollouts went",
                    "Reproducibility"):
        assert heading in section
    ratio_rows = [line for line in section.splitlines() if line.startswith("| 5 | ")]
    assert len(ratio_rows) == 1 and ratio_rows[0].count("|") == 8  # seed + 6 ratios (DAPO's empty: not run)
    row6 = next(line for line in section.splitlines() if line.startswith("| 6 | "))
    cells = [c.strip() for c in row6.split("|")[1:-1]]  # seed, 3 paper-PC ratios, GRPO64 / GRPO16 / DAPO over ours
    assert cells[1:4] + cells[5:7] == ["-"] * 5  # seed 6 ran GRPO-64 and our PC only: at most one ratio of six
    assert "| main | AVX" in section and "| reproducibility | DEFAULT |" in section
    assert "Over seeds 5 alone (every variant's seeds)" in section and "Median GRPO64 / our PC over seeds 5 alone" in section
    assert (tmp_path / "img" / "bench_accuracy_vs_rollouts.png").read_bytes()[:4] == b"\x89PNG"
    # The headline `make demo` prints: the same medians as the section's table.
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["seeds"] == [5, 6] and results["core_seeds"] == [5]
    assert results["grpo_best_n"] == 16 and results["steps"] == 2
    assert "seeds 5 (GRPO64 / our PC on 5, 6)" in study_headline(tmp_path / "results.json")
    assert results["reproducibility"]["other_kernels"] == "DEFAULT" and results["smooth_evals"] == 3
    headline = study_headline(tmp_path / "results.json")
    median_row = next(line for line in section.splitlines() if line.startswith("| **median** |"))
    v = results["medians"]["GRPO64 / our PC"]
    assert (format_ratio(v) in median_row and format_ratio(v) in headline) if v is not None else "-" in median_row


def test_a_second_regime_main_and_report_merge_into_the_results_file(tmp_path, base_policy, policy_cache):
    """The tuned regime's parts (main, then the section) on a shrunk run (--preset bench, the regime's own), the frozen choices come from the command line, and the results file already holds
    `bench`'s headline, which the regime's entry joins without changing a key."""
    bench_keys = {"preset": "bench", "dtype": "float64", "steps": 120, "seeds": [8, 9, 10], "core_seeds": [8, 9, 10],
                  "grpo_best_n": 16, "medians": {"GRPO64 / paper PC": 0.9, "GRPO64 / our PC": 1.6077035796525017},
                  "reproducibility": {"median_main": 1.6}, "smooth_evals": 3, "command": "make bench-efficiency"}
    (tmp_path / "results.json").write_text(json.dumps(bench_keys, indent=1) + "\n")
    noise = ("--regime", "bench-tuned", "--preset", "bench", "--best-n", "16", "--pc-best", "p4+12/c8",
             "--pc-best-set", "allocator.commit_mean=8")
    res = bench(tmp_path, policy_cache, "tune", *noise)
    assert res.returncode == 2 and "research/noise_regime.py" in res.stderr
    res = bench(tmp_path, policy_cache, "main", *noise, "--variants", "grpo", "pc-paper-easy", "pc", "pc-best")
    assert res.returncode == 0, res.stderr[-3000:]
    store = Store(tmp_path / "b.duckdb")
    runs = {r["run_id"]: r for r in store.query("SELECT * FROM runs")}
    assert sorted(runs) == sorted(["bench-tuned-grpo-s5", "bench-tuned-pc-paper-easy-s5", "bench-tuned-pc-s5",
                                   "bench-tuned-pc-best-s5", "bench-tuned-grpo-n16-s5"])
    assert {r["family"] for r in runs.values()} == {"bench-tuned"}
    cfg = {rid: json.loads(r["config_json"])["allocator"] for rid, r in runs.items()}
    easy = cfg["bench-tuned-pc-paper-easy-s5"]
    assert easy["eviction_strategy"] == "easy_pool" and easy["band_strategy"] == "static" and easy["evict"] is True
    assert cfg["bench-tuned-pc-s5"]["eviction_strategy"] == "strict"
    assert cfg["bench-tuned-pc-best-s5"]["commit_mean"] == 8 and cfg["bench-tuned-pc-s5"]["commit_mean"] == 16
    assert cfg["bench-tuned-grpo-n16-s5"]["n"] == 16

    res = bench(tmp_path, policy_cache, "report", *noise, "--variants", "grpo", "pc-paper-easy", "pc", "pc-best")
    assert res.returncode == 0, res.stderr[-3000:]
    text = (tmp_path / "STUDIES.md").read_text()
    assert "<!-- bench-study:begin -->" not in text
    section = text.split("<!-- bench-tuned-study:begin -->", 1)[1].split("<!-- bench-tuned-study:end -->", 1)[0]
    assert "## The benchmark with both sides tuned, on fresh seeds" in section
    assert "Reproducibility" not in section and "Wall time per part: main " in section
    head = next(line for line in section.splitlines() if line.startswith("| seed | GRPO64 / paper PC |"))
    assert [c.strip() for c in head.split("|")[1:-1]][1:] == [
        f"{base} / {pc}" for pc in ("paper PC", "paper PC easy_pool", "our PC", "our PC best")
        for base in ("GRPO64", "GRPO16", "DAPO")]
    row = next(line for line in section.splitlines() if line.startswith("| 5 | "))
    cells = [c.strip() for c in row.split("|")[1:-1]]
    assert len(cells) == 13 and cells[1:4] == ["-"] * 3  # the paper's strict PC did not run
    assert cells[3] == cells[6] == cells[9] == cells[12] == "-"  # nor DAPO

    # The results: bench's keys and values untouched, the regime's entry beside them.
    results = json.loads((tmp_path / "results.json").read_text())
    assert {k: v for k, v in results.items() if k != "regimes"} == bench_keys
    assert list(results) == [*bench_keys, "regimes"] and list(results["regimes"]) == ["bench-tuned"]
    mine = results["regimes"]["bench-tuned"]
    assert (mine["seeds"], mine["steps"], mine["grpo_best_n"], mine["family"], mine["preset"]) == (
        [5], 2, 16, "bench-tuned", "bench")
    assert mine["pc_best"] == {"name": "p4+12/c8", "overrides": ["allocator.commit_mean=8"]}
    assert len(mine["medians"]) == 12 and mine["command"] == "make study-bench-tuned"
    median_row = next(line for line in section.splitlines() if line.startswith("| **median** |"))
    medians = [c.strip().strip("*") for c in median_row.split("|")[2:-1]]
    assert medians == [format_ratio(v) for v in mine["medians"].values()]
    goals = mine["goals"]
    assert list(goals) == ["a", "b", "c"]
    assert goals["a"]["value"] == mine["medians"]["GRPO16 / our PC best"] and goals["a"]["threshold"] == 1.3
    assert goals["b"]["value"] == mine["medians"]["GRPO64 / our PC"] and goals["b"]["threshold"] == 2.0
    for g in ("a", "b"):
        v = goals[g]["value"]
        assert goals[g]["met"] == (None if v is None else v >= goals[g]["threshold"])
    # Goal (c) from the store: steps of the easy-pool run short of b_t, and its held-out first and last evals.
    short = store.query("SELECT count(*) AS n FROM steps WHERE run_id = 'bench-tuned-pc-paper-easy-s5' "
                        f"AND trained_prompts < {TRAIN_BATCH}")[0]["n"]
    from research import study

    acc = study.curves_by_run(store, ["bench-tuned-pc-paper-easy-s5"])["bench-tuned-pc-paper-easy-s5"].eval_accuracy
    c = goals["c"]["per_seed"]["5"]
    assert (c["steps"], c["short_steps"], c["heldout_first"], c["heldout_last"]) == (2, short, acc[0], acc[-1])
    assert goals["c"]["met"] == (short == 0 and acc[-1] >= acc[0])
    status = {True: "met", False: "missed", None: "not measured"}
    for key, g in goals.items():
        assert f"- ({key}) {g['goal']}: **{status[g['met']]}**: {g['detail']}." in section
    easy_row = next(line for line in section.splitlines() if line.startswith("| `bench-tuned-pc-paper-easy-s5` |"))
    most = max(r["rounds"] for r in store.query("SELECT rounds FROM steps WHERE run_id = ?",
                                                 ["bench-tuned-pc-paper-easy-s5"]))
    assert easy_row.endswith(f"| {short} | {most} | {acc[0]:.3f} -> {acc[-1]:.3f} |")
    for png in ("bench_tuned_accuracy_vs_rollouts.png", "bench_tuned_fill_per_step.png"):
        assert (tmp_path / "img" / png).read_bytes()[:4] == b"\x89PNG"
