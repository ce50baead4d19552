"""RayRolloutEngine with no address and no Ray in this process: it starts a local Ray with the CPUs it is given and,
when it fails (here: fewer CPUs than actors), stops that Ray again and leaves no process behind. (A separate module:
test_ray_engine.py holds a cluster for its whole module, with which the engine would join instead.)"""

from __future__ import annotations

import pytest

from pc_pipelines.rollout.ray_engine import RayRolloutEngine

pytestmark = [pytest.mark.integration, pytest.mark.ray]


def test_own_local_ray_is_bounded_and_stopped_on_failure(policy, procs):
    import ray

    assert not ray.is_initialized(), "another test left Ray initialised in this process"
    before = procs.descendants()
    with pytest.raises(RuntimeError, match=r"has 1 CPUs; 2 rollout actors of 1 thread\(s\) need 2. Fix: use num_actors <= 1"):
        RayRolloutEngine(*policy, num_actors=2, num_cpus=1, object_store_memory=100 * 1024**2)
    assert not ray.is_initialized()  # the engine started this Ray, so its failure stopped it
    assert procs.wait_gone(procs.descendants() - before) == set()
