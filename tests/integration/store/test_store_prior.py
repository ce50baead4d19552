"""The history prior's posterior is rebuilt by SQL from the store: docs/DESIGN.md section 3's query, run on a REAL
DuckDB store of a simulated run, gives every prompt's (alpha, beta, evidence) exactly as the allocator held them."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from pc_pipelines.config import resolve
from pc_pipelines.simulator import Simulation, record_simulation
from pc_pipelines.store import Store

DESIGN = Path(__file__).resolve().parents[3] / "docs" / "DESIGN.md"
PRIOR = {"allocator.train_batch": 16, "sim.num_prompts": 150, "sim.difficulty_spread": 3.0,
         "allocator.screen_strategy": "posterior", "allocator.screen_discount": 0.9,
         "allocator.screen_prior_strength": 2.0, "allocator.screen_min_evidence": 4.0}
T = 12


def documented_query() -> str:
    text = DESIGN.read_text()
    return re.search(r"```sql\n(WITH h AS .*?)```", text, re.S).group(1)


@pytest.mark.parametrize(("method", "pool"), [("pc", 150), ("dapo", 1500)])
def test_sql_rebuilds_the_posterior_the_allocator_used(tmp_path, method, pool):
    """A small pool for PC (its prior skips prompts before step T), a large one for DAPO (some prompts are never
    drawn before step T: their posterior is the group prior alone)."""
    cfg = resolve("simulator", {**PRIOR, "sim.num_prompts": pool}, method=method, seed=3)
    st = Store(tmp_path / "s.duckdb")
    list(record_simulation(cfg, st, T + 3, run_id="r", compact_every=5))
    sim = Simulation(cfg.allocator, cfg.sim)
    for _ in range(T - 1):  # steps 1..T-1 (the allocator's indices 0..T-2)
        sim.step()
    screen = sim.allocator.screen
    ids = np.arange(cfg.sim.num_prompts)
    alpha, beta, evidence = screen.posterior(ids, T - 1)  # as read in step T (the allocator's index T - 1)
    if method == "pc":
        assert st.query("SELECT sum(screened_by_prior) AS k FROM steps WHERE step < ?", [T])[0]["k"] > 0

    sql = documented_query()
    for prompt in (int(np.argmax(evidence)), int(np.argmin(evidence)), 7, 8):
        q = sql.replace("step < 40", f"step < {T}").replace("40 - step", f"{T} - step").replace(
            "h.prompt_id = 7", f"h.prompt_id = {prompt}")
        (row,) = st.query(q)
        assert (row["alpha"], row["beta"], row["evidence"]) == pytest.approx(
            (alpha[prompt], beta[prompt], evidence[prompt]), rel=1e-9, abs=1e-9)
    assert evidence.max() > 20  # seen often
    if method == "dapo":
        assert evidence.min() == 0  # and never seen: both rebuilt
