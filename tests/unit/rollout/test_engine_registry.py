"""The rollout engine registry (``pc_pipelines.rollout.registry``): an engine registered once is what ``--engine``
offers and builds, what the Dagster resources accept (and refuse on a device it does not run on in a pod), and what
the Ray engine and the run layer build; unregistered, every one of them refuses it again. (Its Ray actors:
``tests/integration/rollout/test_ray_engine_local.py``.)"""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from pc_pipelines.rollout import (
    DEFAULT_ENGINE,
    ENGINES,
    FINISH_LENGTH,
    EngineSpec,
    RequestOutput,
    Rollout,
    RolloutRequest,
    SamplingParams,
    check_outputs,
    engine_factory,
    engine_names,
    get_engine,
    register_engine,
    unregister_engine,
)
from pc_pipelines.rollout.registry import launch_device_problem


class ToyEngine:
    """Echoes each request's seed: ``n`` rollouts of one token (``params.seed + index``)."""

    def __init__(self, device: str, **options) -> None:
        self.device, self.options = device, options

    def generate(self, requests, params, indices=None):
        indices = range(len(requests)) if indices is None else indices
        return [RequestOutput([len(r.prompt)], [Rollout([params.seed + i], str(params.seed + i), [0.0], FINISH_LENGTH)
                                                 for _ in range(r.n)]) for r, i in zip(requests, indices)]

    def sampling_plan(self) -> dict:
        return {"engine": "toy"}


def toy_factory(model, tokenizer, device, **options):
    return ToyEngine(device, **options)


@pytest.fixture
def toy():
    """The toy engine registered for one test: the one registration line an engine needs."""
    spec = register_engine(EngineSpec("toy", toy_factory, "toy (a test's)", launch_devices=("cpu",), ray="requests"))
    yield spec
    unregister_engine("toy")
    assert "toy" not in engine_names()


def test_the_builtin_engines_and_their_facts():
    assert engine_names()[:2] == ("transformers", "vllm") and DEFAULT_ENGINE == "transformers"
    assert get_engine("transformers").ray == "chunks" and get_engine("transformers").ray_gpus == 0.0
    vllm = get_engine("vllm")
    assert (vllm.ray, vllm.ray_gpus, vllm.subprocesses, vllm.requires) == ("requests", None, True, ("vllm",))
    assert vllm.cpu_min_head_dim == 32 and vllm.launch_devices == ("cuda",)
    assert launch_device_problem("vllm", "cpu") == (
        "engine='vllm' needs device='cuda'. Fix: set device to cuda, or engine to transformers.")
    assert launch_device_problem("vllm", "cuda:1") is None and launch_device_problem("transformers", "cpu") is None
    with pytest.raises(ValueError, match=r"engine='nope': use one of \('transformers', 'vllm'"):
        get_engine("nope")


def test_a_name_is_registered_once():
    with pytest.raises(ValueError, match="already registered"):
        register_engine(EngineSpec("transformers", toy_factory, "another transformers"))
    register_engine(ENGINES["transformers"])  # the same spec again changes nothing
    with pytest.raises(ValueError, match="ray='threads'"):
        EngineSpec("toy", toy_factory, "toy", ray="threads")


def test_a_registered_engine_is_built_by_the_run_layer_and_keeps_the_contract(toy):
    engine = engine_factory("toy", "cpu", width=3)(None, None)
    assert isinstance(engine, ToyEngine) and engine.options == {"width": 3}
    reqs = [RolloutRequest("ab", 2), RolloutRequest("c", 1)]
    check_outputs(reqs, engine.generate(reqs, SamplingParams(seed=5)))


def test_the_command_line_offers_and_builds_a_registered_engine(toy, capsys):
    from pc_pipelines.cli import build_parser
    from pc_pipelines.cli.segment import engine_factory as cli_factory

    argv = ["train-segment", "--store", "s", "--run-id", "r", "--runs-root", "runs", "--until-step", "1"]
    parser = build_parser()
    assert parser.parse_args([*argv, "--engine", "toy"]).engine == "toy"
    assert parser.parse_args(argv).engine == DEFAULT_ENGINE
    with pytest.raises(SystemExit):
        parser.parse_args(["eval-segment", "--help"])
    assert "[--engine {transformers,vllm,toy}]" in capsys.readouterr().out
    assert isinstance(cli_factory("toy", "cpu")(None, None), ToyEngine)


def test_the_command_line_refuses_an_unregistered_engine(capsys):
    from pc_pipelines.cli import build_parser
    from pc_pipelines.cli.segment import engine_factory as cli_factory
    from pc_pipelines.errors import RunError

    with pytest.raises(SystemExit):
        build_parser().parse_args(["eval-segment", "--store", "s", "--run-id", "r", "--runs-root", "x", "--step", "1",
                                   "--engine", "toy"])
    assert "invalid choice: 'toy'" in capsys.readouterr().err
    with pytest.raises(RunError, match=r"--engine 'toy': use one of \('transformers', 'vllm'"):
        cli_factory("toy", "cpu")


def test_the_resources_accept_a_registered_engine_and_check_its_devices(toy):
    from pc_pipelines_dagster.resources import (
        K8sComputeResource,
        RayJobComputeResource,
        RayRolloutEngineResource,
        RegisteredEngineResource,
        SubprocessComputeResource,
    )

    assert SubprocessComputeResource(engine="toy").engine == "toy"
    assert RayRolloutEngineResource(engine="toy").engine == "toy"
    assert RayJobComputeResource(address="http://x:8265", engine="toy").engine == "toy"
    built = RegisteredEngineResource(engine="toy", options={"width": 2}).build(None, None)
    assert isinstance(built, ToyEngine) and built.options == {"width": 2} and built.device == "cpu"
    with pytest.raises(ValidationError, match="engine='toy' needs device='cpu'. Fix: set device to cpu"):
        K8sComputeResource(image="registry.example.com/img:1", engine="toy")  # a pod's default device: cuda
    unregister_engine("toy")
    register_engine(EngineSpec("toy", toy_factory, "toy (a test's)"))  # no Ray actors
    with pytest.raises(ValidationError, match=r"engine='toy': Ray actors run one of \('transformers', 'vllm'"):
        RayRolloutEngineResource(engine="toy")


def test_the_resources_refuse_an_unregistered_engine():
    from pc_pipelines_dagster.resources import (
        RayRolloutEngineResource,
        RegisteredEngineResource,
        SubprocessComputeResource,
    )

    for make in (lambda: SubprocessComputeResource(engine="toy"), lambda: RayRolloutEngineResource(engine="toy"),
                 lambda: RegisteredEngineResource(engine="toy")):
        with pytest.raises(ValidationError, match="engine='toy'"):
            make()


def test_the_ray_engine_refuses_an_engine_without_actors_before_starting_ray(toy, monkeypatch):
    import sys

    from pc_pipelines.rollout.ray_engine import RayRolloutEngine

    monkeypatch.setitem(sys.modules, "ray", None)  # a check after `import ray` would fail with ImportError instead
    unregister_engine("toy")
    register_engine(EngineSpec("toy", toy_factory, "toy (a test's)"))
    with pytest.raises(ValueError, match=r"engine='toy': Ray actors run one of"):
        RayRolloutEngine(None, None, engine="toy")
