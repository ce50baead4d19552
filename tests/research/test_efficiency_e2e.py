"""`research/efficiency.py` as a user runs it: a tiny primary comparison (2 methods, 1 seed, 3 steps) through real
`pilot-commit train` subprocesses into one store, its Markdown section and plots; then a simulator ablation."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from pc_pipelines.store import Store

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def bench(tmp_path, cache, *args):
    cmd = [sys.executable, str(ROOT / "research/efficiency.py"), "--store", str(tmp_path / "eff.duckdb"),
           "--out", str(tmp_path / "runs"), "--img-dir", str(tmp_path / "img"), "--write", str(tmp_path / "STUDIES.md"),
           "--cache-dir", str(cache), "--quiet", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=ROOT, check=False)


def test_primary_then_report_and_a_simulator_ablation(tmp_path, base_policy, policy_cache):
    res = bench(tmp_path, policy_cache, "primary", "--seeds", "5", "--steps", "3", "--methods", "grpo", "pc")
    assert res.returncode == 0, res.stderr[-3000:]
    store = Store(tmp_path / "eff.duckdb")
    runs = store.query("SELECT run_id, method, seed, family, preset FROM runs ORDER BY run_id")
    assert [(r["run_id"], r["method"], r["seed"], r["family"], r["preset"]) for r in runs] == [
        ("efficiency-grpo-s5", "grpo", 5, "efficiency", "efficiency"),
        ("efficiency-pc-s5", "pc", 5, "efficiency", "efficiency")]
    steps = store.query("SELECT run_id, count(*) AS n, sum(sampled_rollouts) AS s FROM steps GROUP BY run_id ORDER BY run_id")
    assert [(r["n"], r["s"]) for r in steps][0] == (3, 3 * 16 * 64)  # GRPO: b_t 16 x n 64 per step
    assert steps[1]["n"] == 3 and steps[1]["s"] > 3 * 16 * 64  # PC pays for its pilots
    text = (tmp_path / "STUDIES.md").read_text()
    section = text.split("<!-- efficiency:begin -->", 1)[1].split("<!-- efficiency:end -->", 1)[0]
    assert "Rollouts to target (paper Table 2)" in section and "Wall time:" in section
    assert re.search(r"\| `efficiency-grpo-s5` \| GRPO \| 5 \| 3 \| 3,072 \| 3,072 \| 1\.000 \| 100% \| 0% \|", section)
    for name in ("accuracy_vs_rollouts", "accuracy_vs_steps", "fill_rate_per_step", "rounds_per_step"):
        png = tmp_path / "img" / f"{name}.png"
        assert png.read_bytes()[:4] == b"\x89PNG" and f"({png})" in section
    # A second run finds both runs complete and trains nothing: same runs, same steps.
    res = bench(tmp_path, policy_cache, "primary", "--seeds", "5", "--steps", "3", "--methods", "grpo", "pc")
    assert res.returncode == 0, res.stderr[-3000:]
    assert store.query("SELECT count(*) AS n FROM steps")[0]["n"] == 6

    res = bench(tmp_path, policy_cache, "ablate", "evict", "--engine", "sim", "--sim-seeds", "0", "--sim-steps", "20")
    assert res.returncode == 0, res.stderr[-3000:]
    text = (tmp_path / "STUDIES.md").read_text()
    assert "<!-- efficiency-ablate-evict-sim:begin -->" in text and "<!-- efficiency:begin -->" in text
    rows = [line for line in text.splitlines() if line.startswith("| evict o") and line.split(" | ")[1] == "0"]
    assert [r.split(" | ")[0] for r in rows] == ["| evict on", "| evict off"]
    # The rollout breakdown: one row per variant (seeds summed), its parts adding up to what was sampled.
    parts = [line.split(" | ") for line in text.split("Where the rollouts went")[1].splitlines()
             if line.startswith("| evict o")]
    assert [p[0] for p in parts] == ["| evict on", "| evict off"]
    for p in parts:
        sampled, trained, *rest = (float(x) for x in p[1:7])
        assert sampled > trained > 0 and sampled == pytest.approx(trained + sum(rest), abs=3)
    evicted = {r.split(" | ")[0]: int(r.split(" | ")[10].replace(",", "")) for r in rows}
    assert evicted["| evict off"] == 0 and evicted["| evict on"] > 0
