"""RayRolloutEngine on a real local Ray cluster (2 CPUs, 100 MB object store, no dashboard) that this module starts
and stops: its rounds equal TransformersEngine's bit for bit (1 and 2 actors, 4 chunks), it pushes the driver's
new weights before the next round, and its errors say how to fix them."""

from __future__ import annotations

import sys

import pytest
import torch
from proc_waits import START_S

from pc_pipelines.rollout import SamplingParams
from pc_pipelines.rollout.ray_engine import RayRolloutEngine
from pc_pipelines.rollout.transformers_engine import TransformersEngine, plan_round

pytestmark = [pytest.mark.integration, pytest.mark.ray]

CHUNK = 4  # 14 sequences -> 4 chunks
PARAMS = SamplingParams(temperature=1.0, top_p=0.9, max_new_tokens=8, seed=3)


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory, procs):
    """A local Ray head this module starts with bounded resources and stops; every process it spawned is gone after."""
    import ray

    assert not ray.is_initialized(), "another test left Ray initialised in this process"
    before = procs.descendants()
    ray.init(address="local", num_cpus=2, object_store_memory=100 * 1024**2, include_dashboard=False,
             _node_ip_address="127.0.0.1", _temp_dir=str(tmp_path_factory.mktemp("ray")))
    yield ray
    assert procs.descendants() - before, "ray.init started no process"
    ray.shutdown()
    procs.assert_none_left(before, "processes of the Ray cluster outlived ray.shutdown()")


@pytest.fixture(scope="module")
def engine2(ray_cluster, policy):
    with RayRolloutEngine(*policy, num_actors=2, max_batch_sequences=CHUNK, start_timeout_s=START_S) as engine:
        yield engine


def _flat(outputs):
    return [(o.prompt_ids, r.token_ids, r.logprobs, r.finish_reason, r.text) for o in outputs for r in o.rollouts]


def test_round_equals_single_engine_with_one_actor(ray_cluster, policy, round_requests):
    """Every chunk generated in the actor's process equals the driver's chunk: token ids, log-probs (exact floats),
    finish reasons, texts, in request order."""
    model, tok = policy
    single = TransformersEngine(model, tok, max_batch_sequences=CHUNK)
    plan = plan_round([single.encode(r.prompt) for r in round_requests], [r.n for r in round_requests], CHUNK, 3)
    assert plan.num_chunks == 4
    expected = single.generate(round_requests, PARAMS)
    with RayRolloutEngine(model, tok, num_actors=1, max_batch_sequences=CHUNK, start_timeout_s=START_S) as engine:
        got = engine.generate(round_requests, PARAMS)
        assert engine.pushes == 0  # the actor started from a copy of these weights
    assert _flat(got) == _flat(expected)
    with pytest.raises(RuntimeError, match="closed. Fix: build a new one"):
        engine.generate(round_requests, PARAMS)
    assert [len(o.rollouts) for o in got] == [3, 5, 4, 2]
    # not vacuous: another seed draws other rollouts
    other = single.generate(round_requests, SamplingParams(1.0, 0.9, 8, seed=4))
    assert [x[1] for x in _flat(other)] != [x[1] for x in _flat(expected)]


def test_round_equals_single_engine_with_two_actors(engine2, policy, round_requests):
    model, tok = policy
    single = TransformersEngine(model, tok, max_batch_sequences=CHUNK)
    for seed in (3, 11):  # two rounds on one engine: each equals the single engine's
        params = SamplingParams(1.0, 0.9, 8, seed=seed)
        assert _flat(engine2.generate(round_requests, params)) == _flat(single.generate(round_requests, params))
    greedy = SamplingParams(0.0, 1.0, 8, seed=0)
    assert _flat(engine2.generate(round_requests, greedy)) == _flat(single.generate(round_requests, greedy))
    assert engine2.pushes == 0


def test_new_weights_are_pushed_before_the_next_round(engine2, policy, round_requests):
    model, tok = policy
    single = TransformersEngine(model, tok, max_batch_sequences=CHUNK)
    before = engine2.generate(round_requests, PARAMS)
    pushes = engine2.pushes

    # an optimizer step on the driver's model (what the trainer does): seen through the version counters
    opt = torch.optim.AdamW(model.parameters(), lr=0.5)
    ids = torch.tensor([single.encode(round_requests[0].prompt)])
    model.train()
    model(input_ids=ids, labels=ids).loss.backward()
    opt.step()
    model.eval()
    after = engine2.generate(round_requests, PARAMS)
    assert engine2.pushes == pushes + 1
    assert _flat(after) == _flat(single.generate(round_requests, PARAMS))
    assert _flat(after) != _flat(before)  # the update changed the round, so the actors really have new weights

    engine2.generate(round_requests, PARAMS)
    assert engine2.pushes == pushes + 1  # unchanged weights: no push

    # a write through .data bypasses the version counters: mark_stale() says so
    with torch.no_grad():
        new = {k: v * 1.5 for k, v in model.state_dict().items() if k.endswith("mlp.down_proj.weight")}
    for name, p in model.named_parameters():
        if name in new:
            p.data.copy_(new[name])
    assert engine2.sync_weights() is False  # the version counters did not move
    engine2.mark_stale()
    assert engine2.sync_weights() is True and engine2.pushes == pushes + 2
    assert engine2.sync_weights() is False
    assert _flat(engine2.generate(round_requests, PARAMS)) == _flat(single.generate(round_requests, PARAMS))


def test_more_actors_than_cpus_says_how_to_fix(ray_cluster, policy):
    with pytest.raises(RuntimeError, match=r"has 2 CPUs; 3 rollout actors of 1 thread\(s\) need 3. Fix: use num_actors <= 2"):
        RayRolloutEngine(*policy, num_actors=3)
    assert ray_cluster.is_initialized()  # the engine joined this cluster: its failure leaves the cluster up
    with pytest.raises(RuntimeError, match="need 4. Fix: use num_actors <= 1"):
        RayRolloutEngine(*policy, num_actors=2, threads_per_actor=2)
    with pytest.raises(ValueError, match="num_actors=0"):
        RayRolloutEngine(*policy, num_actors=0)
    with pytest.raises(ValueError, match="max_batch_sequences=0: must be >= 1. Fix"):
        RayRolloutEngine(*policy, num_actors=1, max_batch_sequences=0)


def test_missing_ray_says_how_to_fix(policy, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # what `import ray` meets where Ray is not installed
    with pytest.raises(ImportError, match=r"needs Ray, which is not importable here. Fix: .*make install"):
        RayRolloutEngine(*policy, num_actors=1)

