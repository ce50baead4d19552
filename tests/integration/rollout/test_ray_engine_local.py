"""RayRolloutEngine in the real training loop, with no address and no Ray in this process: the engine starts a local
Ray bounded to its actors' CPUs, the run equals the single engine's bit for bit, and close() stops that Ray with every
process it started. (A separate module: test_ray_engine.py holds a cluster for its whole module, which the engine
would join instead.)"""

from __future__ import annotations

import pytest
import torch
from proc_waits import START_S

from pc_pipelines.rollout.ray_engine import RayRolloutEngine

pytestmark = [pytest.mark.integration, pytest.mark.ray]


def test_training_loop_through_ray_equals_single_engine(base_policy, policy_cache, tmp_path, procs):
    """Two GRPO steps of the real loop with a RayRolloutEngine (2 actors, 2 chunks a round; it starts and owns its
    Ray) write the same step rows and the same final weights, bit for bit, as with the single engine: the optimizer
    step's new weights reach the actors with no hook in the loop (the engine sees the version counters move)."""
    import ray
    from safetensors.torch import load_file

    from pc_pipelines.config import resolve
    from pc_pipelines.rollout.transformers_engine import TransformersEngine
    from pc_pipelines.run import prepare_run, run_segment
    from pc_pipelines.store import Store

    overrides = {"task.num_prompts": 8, "allocator.train_batch": 4, "allocator.n": 8, "training.ppo_minibatch": 4,
                 "training.eval_every": 100,
                 "training.eval_samples": 1}  # 32 rollouts a step: 2 chunks of 16
    engines: list[RayRolloutEngine] = []
    cpus: list[float] = []

    def ray_engine(model, tok):
        engines.append(RayRolloutEngine(model, tok, num_actors=2, max_batch_sequences=16,
                                        object_store_memory=100 * 1024**2, start_timeout_s=START_S))
        cpus.append(ray.cluster_resources()["CPU"])
        return engines[-1]

    factories = {"single": lambda model, tok: TransformersEngine(model, tok, max_batch_sequences=16), "ray": ray_engine}
    assert not ray.is_initialized()
    before = procs.descendants()
    rows, weights = {}, {}
    try:
        for name, factory in factories.items():
            run = prepare_run(resolve("embedded", overrides, method="grpo", seed=0), tmp_path / name, run_name=name,
                              cache_dir=policy_cache)
            assert run.policy_path == base_policy
            store = Store(tmp_path / f"{name}.duckdb")
            res = run_segment(run, store, 2, engine_factory=factory)
            if name == "ray":
                assert cpus == [2]  # bounded: num_actors x threads_per_actor
                assert not ray.is_initialized()  # the segment closed its engine: the Ray it started is stopped
            rows[name] = (
                store.query(f"SELECT step, sampled_rollouts, trained_rollouts, kept, loss, mean_reward, mean_reward_std, "
                            f"informative_share FROM steps WHERE run_id = '{name}' ORDER BY step"),
                store.query(f"SELECT step, benchmark, accuracy FROM eval_results WHERE run_id = '{name}' "
                            "ORDER BY step, benchmark"),  # the evaluation before training runs through the engine too
            )
            weights[name] = load_file(str(res.checkpoint / "policy" / "model.safetensors"))
    finally:
        for engine in engines:
            engine.close()
    assert len(engines) == 1 and engines[0].pushes == 1  # step 0's update, pushed before step 1's round
    procs.assert_none_left(before, "processes of Ray or its actors outlived the engine")
    steps, evals = rows["ray"]
    assert [r["step"] for r in steps] == [1, 2] and all(r["sampled_rollouts"] == 32 for r in steps)
    assert len(evals) == 6 and {r["step"] for r in evals} == {0}
    assert rows["ray"] == rows["single"]
    assert weights["ray"].keys() == weights["single"].keys()
    assert all(torch.equal(weights["ray"][k], weights["single"][k]) for k in weights["single"])


def test_a_dagster_segment_on_ray_actors_equals_the_single_engine_and_lets_its_ray_go(base_policy, tmp_path, procs):
    """The local Dagster path with the Ray engine resource (``PC_ROLLOUT_ACTORS``): a 2-step GRPO segment and its
    evaluation, materialized with ``RayRolloutEngineResource`` (2 actors), write the same step rows, evaluations and
    weights as with ``TransformersEngineResource`` at the same chunk size; when each asset ends, its engine's actors
    and the local Ray it started are gone (the backend and the evaluation close their engine)."""
    import ray
    from dagster import DagsterInstance, materialize
    from safetensors.torch import load_file

    from pc_pipelines.store import Store
    from pc_pipelines_dagster.assets.evaluation import segment_eval
    from pc_pipelines_dagster.assets.training import training_segment
    from pc_pipelines_dagster.automation.jobs import start_run
    from pc_pipelines_dagster.resources import (
        DataResource,
        LocalCheckpointResource,
        LocalComputeResource,
        RayRolloutEngineResource,
        StoreResource,
        TransformersEngineResource,
    )

    overrides = ["task.num_prompts=8", "allocator.train_batch=4", "allocator.n=8", "training.ppo_minibatch=4",
                 "training.eval_every=100", "training.eval_samples=1"]  # 32 rollouts a step: 2 chunks of 16
    engines = {"single": TransformersEngineResource(max_batch_sequences=16),
               "ray": RayRolloutEngineResource(num_actors=2, max_batch_sequences=16, object_store_memory=100 * 1024**2)}
    instance = DagsterInstance.ephemeral()
    before = procs.descendants()
    for name, engine in engines.items():
        res = {"data": DataResource(out_dir=str(tmp_path / "data")), "store": StoreResource(path=str(tmp_path / "pc.duckdb")),
               "checkpoints": LocalCheckpointResource(root=str(tmp_path / "runs")), "compute": LocalComputeResource(),
               "engine": engine}
        cfg = {"method": "grpo", "overrides": overrides, "segment_steps": 2, "total_steps": 2, "run_name": name,
               "policy_path": str(base_policy)}
        assert start_run.execute_in_process(run_config={"ops": {"register_training_run": {"config": cfg}}},
                                            instance=instance, resources=res).success
        out = materialize([training_segment, segment_eval], partition_key=f"{name}/seg-0000", instance=instance,
                          resources=res)
        assert out.success
        assert not ray.is_initialized()  # the segment's engine started this process's Ray and stopped it
    procs.assert_none_left(before, "processes of Ray or its actors outlived the engine")
    store = Store(tmp_path / "pc.duckdb")
    got = {name: (store.query("SELECT step, sampled_rollouts, trained_rollouts, loss, mean_reward, informative_share "
                              "FROM steps WHERE run_id = ? ORDER BY step", [name]),
                  store.query("SELECT step, benchmark, accuracy FROM eval_results WHERE run_id = ? "
                              "ORDER BY step, benchmark", [name]))
           for name in engines}
    steps, evals = got["ray"]
    assert [r["step"] for r in steps] == [1, 2] and all(r["sampled_rollouts"] == 32 for r in steps)
    assert {r["step"] for r in evals} == {0, 2}  # the loop's evaluation before training and segment_eval's after
    assert got["ray"] == got["single"]
    w = {name: load_file(str(tmp_path / "runs" / name / "checkpoints" / "step-00000002" / "policy" / "model.safetensors"))
         for name in engines}
    assert all(torch.equal(w["ray"][k], w["single"][k]) for k in w["single"])


def test_an_engine_registered_in_the_driver_runs_in_the_actors(policy, round_requests, procs):
    """An engine registered only in this process (``ray="requests"``, defined in this test) runs in two Ray actors:
    the spec travels with the actors, each builds its engine there, request ``i`` goes to actor ``i % 2`` with its
    position (the round equals one call of the engine), the engine's sampling plan is the Ray engine's; then it is
    unregistered and refused."""
    import os

    import ray

    from pc_pipelines.rollout import (
        FINISH_LENGTH,
        EngineSpec,
        RequestOutput,
        Rollout,
        SamplingParams,
        register_engine,
        unregister_engine,
    )

    class Toy:
        def generate(self, requests, params, indices=None):
            indices = range(len(requests)) if indices is None else indices
            return [RequestOutput([len(r.prompt)], [Rollout([params.seed + i], f"{params.seed + i}@{os.getpid()}", [0.0],
                                                            FINISH_LENGTH) for _ in range(r.n)])
                    for r, i in zip(requests, indices)]

        def sampling_plan(self):
            return {"engine": "toy"}

    register_engine(EngineSpec("toy", lambda model, tok, device, **options: Toy(), "toy (a test's)", ray="requests"))
    before = procs.descendants()
    try:
        with RayRolloutEngine(*policy, num_actors=2, engine="toy", object_store_memory=100 * 1024**2,
                              start_timeout_s=START_S) as engine:
            assert engine.sampling_plan() == {"engine": "toy"} and engine.gpus_per_actor == 0
            got = engine.generate(round_requests, SamplingParams(seed=7))
        assert not ray.is_initialized()
        want = Toy().generate(round_requests, SamplingParams(seed=7))
        strip = lambda outs: [[(r.token_ids, r.text.split("@")[0]) for r in o.rollouts] for o in outs]  # noqa: E731
        assert strip(got) == strip(want)
        pids = [int(o.rollouts[0].text.split("@")[1]) for o in got]
        assert os.getpid() not in pids and pids[0] == pids[2] != pids[1] == pids[3]  # request i on actor i % 2
    finally:
        unregister_engine("toy")
    procs.assert_none_left(before, "processes of Ray or its actors outlived the engine")
    with pytest.raises(ValueError, match="engine='toy': Ray actors run one of"):
        RayRolloutEngine(*policy, engine="toy")
