"""The scale simulator: the real allocator against a prompt population with latent pass rates standing in for the
policy, at the paper's scale in seconds, so the allocation logic, its costs and its store can be studied without a
model. It is a test and study harness, not a model of a policy: with its default (``linear``, hand-set) law it makes
no claim about accuracy; with the ``fitted`` law it predicts rollout counts only as far as its validation against
measured runs goes (docs/STUDIES.md, "The simulator's fitted law against the measured benchmark").

* :mod:`.model`: the population model (:class:`PromptPopulation`, every term documented there), one
  :class:`Simulation` (allocator + population) and its per-step :class:`SimStep`; it drives the oracle bound;
* :mod:`.runs`: :func:`record_simulation`, a simulated run recorded in a store as a training run is (one writer,
  step directories, eval rows of benchmark :data:`SIM_BENCHMARK`, an honest end status: :mod:`pc_pipelines.run`'s
  ``lifecycle`` and ``stopping``);
* :mod:`.fit`: the population's pass-rate mix and the ``fitted`` learning law fitted to runs in a store
  (``pilot-commit sim-fit``), with their residuals;
* :mod:`.plan`: budgets ranked by the simulator fitted on runs' first steps (``pilot-commit plan``).

``pilot-commit simulate``, ``sim-fit``, ``plan`` and ``simulate-demo`` (:mod:`pc_pipelines.cli.simulate_commands`), the
studies and the store tests drive it.
"""

from .model import PromptPopulation, SimStep, Simulation
from .runs import SIM_BENCHMARK, RecordedStep, record_simulation

__all__ = ["SIM_BENCHMARK", "PromptPopulation", "RecordedStep", "SimStep", "Simulation", "record_simulation"]
