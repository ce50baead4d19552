"""RayJobComputeResource without a cluster: the job it would submit (entrypoint, runtime environment, resources,
absolute paths), its refusals, and the ``ray`` environment that selects it. The real round trip is
tests/integration/dagster/test_ray_job_segments.py (marker ``ray``)."""

import shlex
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from pydantic import ValidationError

from pc_pipelines.run.segment_attempt import SegmentRequest
from pc_pipelines_dagster.resources import (
    ENVIRONMENTS,
    LocalComputeResource,
    PipesComputeResource,
    RayJobComputeResource,
    environment_resources,
    ray_resources,
)


def fake_run(tmp_path: Path):
    run = SimpleNamespace(run_id="pc-run.1", run_dir=tmp_path / "runs" / "pc-run.1")
    return run, SimpleNamespace(path=tmp_path / "pc.duckdb")


def test_segment_job_runs_the_entrypoint_with_absolute_paths(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    res = RayJobComputeResource(address="http://127.0.0.1:8265", python="/venv/bin/python")
    assert isinstance(res, PipesComputeResource)
    request = SegmentRequest(store=str(tmp_path / "pc.duckdb"), run_id="pc-run.1", until_step=3, from_step=1,
                             runs_root=str(tmp_path / "runs"))
    args = res.segment_args(request)
    params = res.submit_job_params(args)
    argv = shlex.split(params["entrypoint"])
    assert argv[:4] == ["/venv/bin/python", "-m", "pc_pipelines.cli", "train-segment"]
    flags = dict(zip(argv[4::2], argv[5::2]))
    assert flags["--store"] == str(tmp_path / "pc.duckdb") and flags["--run-id"] == "pc-run.1"
    assert flags["--runs-root"] == str(tmp_path / "runs")
    assert flags["--data-dir"] == str(tmp_path / "runs" / "data")  # the relative default, made absolute here
    assert flags["--until-step"] == "3" and flags["--from-step"] == "1"
    assert flags["--engine"] == "transformers" and flags["--device"] == "cpu"
    # env_vars only (dagster-ray adds the Pipes variables): the code is installed where the job runs.
    assert params["runtime_env"] == {"env_vars": {}}
    assert params["entrypoint_num_cpus"] == 1.0 and "entrypoint_num_gpus" not in params
    assert params["metadata"] == {"pc_run_id": "pc-run.1", "pc_command": "train-segment"}
    assert params["submission_id"].startswith("pc-train-segment-pc-run_1-")
    assert params["submission_id"] != res.submit_job_params(args)["submission_id"]  # unique per submission


def test_eval_job_and_what_a_real_cluster_sets(tmp_path):
    res = RayJobComputeResource(address="http://rc-head-svc.ns.svc:8265", engine="vllm", device="cuda",
                                entrypoint_num_gpus=1, entrypoint_memory_bytes=2**34, env_vars={"HF_HOME": "/data/hf"},
                                py_modules=["/src/pc_pipelines"], pip=["verl==0.9.1"], working_dir="/src/job",
                                store_path="/data/pc.duckdb", runs_root="/data/runs", data_dir="/data/data")
    run, store = fake_run(tmp_path)
    params = res.submit_job_params(res.eval_args(run, store, step=7))
    argv = shlex.split(params["entrypoint"])
    assert argv[:2] == ["pilot-commit", "eval-segment"]  # the image's console script
    flags = dict(zip(argv[2::2], argv[3::2]))
    assert (flags["--store"], flags["--runs-root"], flags["--data-dir"]) == ("/data/pc.duckdb", "/data/runs", "/data/data")
    assert flags["--step"] == "7" and flags["--engine"] == "vllm" and flags["--device"] == "cuda"
    assert params["runtime_env"] == {"env_vars": {"HF_HOME": "/data/hf"}, "working_dir": "/src/job",
                                     "py_modules": ["/src/pc_pipelines"], "pip": ["verl==0.9.1"]}
    assert params["entrypoint_num_gpus"] == 1 and params["entrypoint_memory"] == 2**34


def test_refuses_a_cuda_job_without_a_gpu_and_vllm_on_cpu():
    with pytest.raises(ValidationError, match="entrypoint_num_gpus"):
        RayJobComputeResource(address="http://x:8265", device="cuda")
    with pytest.raises(ValidationError, match="vllm"):
        RayJobComputeResource(address="http://x:8265", engine="vllm")


def test_the_ray_environment_selects_it_on_one_shared_directory(tmp_path):
    env = {"PC_PIPELINES_ENV": "ray", "PC_RAY_ADDRESS": "http://127.0.0.1:8265", "PC_RAY_SHARED_DIR": str(tmp_path),
           "PC_RAY_PYTHON": "/venv/bin/python", "PC_RAY_ENTRYPOINT_CPUS": "2"}
    assert "ray" in ENVIRONMENTS
    res = environment_resources(env)
    compute = res["compute"]
    assert isinstance(compute, RayJobComputeResource)
    assert compute.address == "http://127.0.0.1:8265" and compute.python == "/venv/bin/python"
    assert compute.entrypoint_num_cpus == 2.0 and compute.data_dir == str(tmp_path / "data")
    assert res["store"].path == str(tmp_path / "pc.duckdb")
    assert res["checkpoints"].run_dir("r") == tmp_path / "r"
    assert res["data"].out_dir == str(tmp_path / "data")
    assert isinstance(environment_resources({})["compute"], LocalComputeResource)
    with pytest.raises(RuntimeError, match="PC_RAY_ADDRESS"):
        ray_resources({"PC_PIPELINES_ENV": "ray"})
    env = {"PC_RAY_ADDRESS": "http://127.0.0.1:8265", "PC_RAY_SHARED_DIR": str(tmp_path)}
    assert ray_resources({**env, "PC_RAY_ENTRYPOINT_CPUS": "0.5"})["compute"].entrypoint_num_cpus == 0.5
    for bad in ("two", "-1", "nan"):
        with pytest.raises(RuntimeError, match=rf"PC_RAY_ENTRYPOINT_CPUS='{bad}': must be a number >= 0\. Fix: set it"):
            ray_resources({**env, "PC_RAY_ENTRYPOINT_CPUS": bad})


def test_a_bad_ray_worker_count_names_the_variable_and_the_fix():
    from pc_pipelines_dagster.resources import k8s_resources

    env = {"PC_K8S_IMAGE": "img:1", "PC_K8S_COMPUTE": "rayjob"}
    assert k8s_resources({**env, "PC_K8S_RAY_WORKERS": "4"})["compute"].workers == 4
    for bad in ("2.5", "0", "many"):
        with pytest.raises(RuntimeError, match=rf"PC_K8S_RAY_WORKERS='{bad}': must be a whole number >= 1\. Fix"):
            k8s_resources({**env, "PC_K8S_RAY_WORKERS": bad})


def test_the_resource_imports_neither_ray_nor_dagster_ray_until_it_launches():
    code = ("import sys, pc_pipelines_dagster.resources as resources; "
            "r = resources.RayJobComputeResource(address='http://x:8265'); "
            "print(sorted(m for m in ('ray', 'dagster_ray') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out.splitlines()[-1] == "[]"


def test_the_token_goes_in_a_header_from_the_environment_never_in_the_config(monkeypatch):
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    res = RayJobComputeResource(address="http://x:8265")
    assert res.headers() is None  # no token: no header (an open cluster)
    monkeypatch.setenv("RAY_AUTH_TOKEN", "t0ken")
    assert res.headers() == {"Authorization": "Bearer t0ken"}
    monkeypatch.setenv("PC_OTHER_TOKEN", "other")
    assert RayJobComputeResource(address="http://x:8265", auth_token_env="PC_OTHER_TOKEN").headers() == {
        "Authorization": "Bearer other"}
    assert RayJobComputeResource(address="http://x:8265", auth_token_env=None).headers() is None


def test_the_local_loops_engine_is_chosen_by_pc_rollout_actors():
    from pc_pipelines_dagster.resources import RayRolloutEngineResource, TransformersEngineResource
    from pc_pipelines_dagster.resources.environments import local_engine

    assert isinstance(local_engine({}), TransformersEngineResource)
    engine = local_engine({"PC_ROLLOUT_ACTORS": "3", "PC_ROLLOUT_CHUNK": "64"})
    assert isinstance(engine, RayRolloutEngineResource)
    assert (engine.num_actors, engine.max_batch_sequences, engine.ray_address) == (3, 64, None)
    assert local_engine({"PC_ROLLOUT_ACTORS": "2"}).max_batch_sequences == 4096  # the single engine's chunks
    for bad in ({"PC_ROLLOUT_ACTORS": "two"}, {"PC_ROLLOUT_ACTORS": "0"}, {"PC_ROLLOUT_ACTORS": "2", "PC_ROLLOUT_CHUNK": "-1"}):
        with pytest.raises(RuntimeError, match=r"PC_ROLLOUT_(ACTORS|CHUNK)=.*Fix:"):
            local_engine(bad)


def test_an_engine_with_processes_is_closed_when_the_evaluation_ends(monkeypatch, tmp_path):
    """evaluate_policy closes the engine it built (a Ray engine's actors and local Ray), also when grading fails."""
    from types import SimpleNamespace

    from pc_pipelines.run import checkpoint_eval as evaluate_mod

    closed = []

    class Engine:
        def close(self):
            closed.append(True)

    monkeypatch.setattr("pc_pipelines.training.base_policy.load_policy", lambda path, dtype=None: ("model", "tok"))
    monkeypatch.setattr(evaluate_mod, "evaluate_sets", lambda *a, **k: "result")
    run = SimpleNamespace(config=SimpleNamespace(training=SimpleNamespace(
        overlong_reward=0.0, eval_samples=1, eval_temperature=1.0, eval_top_p=1.0, max_response_length=4,
        dtype="float32"), seed=0),
        task=SimpleNamespace(eval_sets=[]), run_id="r", run_dir=tmp_path)
    assert evaluate_mod.evaluate_policy(run, tmp_path, 0, lambda m, t: Engine()) == "result"
    assert closed == [True]

    def boom(*a, **k):
        raise ValueError("grading failed")

    monkeypatch.setattr(evaluate_mod, "evaluate_sets", boom)
    with pytest.raises(ValueError, match="grading failed"):
        evaluate_mod.evaluate_policy(run, tmp_path, 0, lambda m, t: Engine())
    assert closed == [True, True]
