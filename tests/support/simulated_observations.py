"""A simulated run as :func:`pc_pipelines.simulator.fit.read_runs` would give it (trained groups, evaluations, the
run's method and screen strategy), for the fit's and the law terms' unit tests."""

from __future__ import annotations

import numpy as np

from pc_pipelines.allocation import AllocatorConfig
from pc_pipelines.config import SimConfig
from pc_pipelines.simulator import Simulation
from pc_pipelines.simulator.fit import RunObservations


def observe(alloc: AllocatorConfig, sim_cfg: SimConfig, steps: int, run_id: str,
            eval_every: int = 5) -> RunObservations:
    """``steps`` simulated steps of ``alloc`` on ``sim_cfg``, evaluated before training and every ``eval_every``."""
    sim = Simulation(alloc, sim_cfg)
    g_step, g_sigma, g_size = [], [], []
    ev_step, ev_acc = [-1], [sim.population.accuracy()]
    for st in sim.run(steps):
        for g in st.outcome.groups:
            g_step.append(st.outcome.step)
            g_sigma.append(g.reward_std)
            g_size.append(sum(c for _, c in g.spans))
        if (st.outcome.step + 1) % eval_every == 0:
            ev_step.append(st.outcome.step)
            ev_acc.append(st.accuracy)
    return RunObservations(run_id=run_id, method=alloc.method, seed=alloc.seed, steps=steps,
                           group_step=np.array(g_step), group_sigma=np.array(g_sigma),
                           group_size=np.array(g_size, float), eval_step=np.array(ev_step),
                           eval_accuracy=np.array(ev_acc), first_step=np.zeros(0, np.int64),
                           first_n=np.zeros(0, np.int64), first_correct=np.zeros(0, np.int64),
                           num_prompts=sim_cfg.num_prompts, screen_strategy=alloc.screen_strategy)
