"""The verl recipe's Hydra config: the paper's defaults on verl 0.9's ppo_trainer, the (n_pilot, n_commit)
settings, the cross-checks against verl's batch settings, and a run's resolved config carried over exactly."""

import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from pc_pipelines.config import resolve
from pc_pipelines.errors import ConfigError
from pc_pipelines.training.verl_recipe import PCSettings, compose_recipe_config, run_overrides

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def default():
    return compose_recipe_config()


def with_(cfg, **updates):
    """A copy of a composed config with dotted-key updates (interpolations re-resolve)."""
    out = OmegaConf.create(OmegaConf.to_container(cfg, resolve=False))
    for key, value in updates.items():
        OmegaConf.update(out, key.replace("__", "."), value, force_add=False)
    return out


def test_defaults_are_the_papers(default):
    cfg = default
    actor = cfg.actor_rollout_ref.actor
    assert cfg.data.train_batch_size == 128 and actor.ppo_mini_batch_size == 32
    assert (actor.clip_ratio_low, actor.clip_ratio_high, actor.clip_ratio_c) == (0.2, 0.28, 10.0)
    assert actor.use_kl_loss is False and cfg.algorithm.use_kl_in_reward is False and actor.kl_loss_coef == 0.0
    assert actor.optim.lr == pytest.approx(1e-6) and actor.optim.lr_warmup_steps == 10 and actor.optim.weight_decay == 0.1
    assert actor.loss_agg_mode == "token-mean" and cfg.algorithm.adv_estimator == "grpo"
    rollout = cfg.actor_rollout_ref.rollout
    assert rollout.name == "vllm" and rollout.temperature == 1.0 and rollout.top_p == 1.0
    assert (cfg.pc.n_pilot, cfg.pc.n_commit, rollout.n) == (32, 96, 96)
    assert (cfg.pc.p_lower, cfg.pc.p_upper, cfg.pc.p_solve, cfg.pc.max_age, cfg.pc.max_rounds) == (0.125, 0.75, 1.0, 4, 10)
    s = PCSettings.from_config(cfg)
    assert s.allocator_config(0).sampling_batch == 384 and s.data_parallel == 16


@pytest.mark.parametrize("setting, pilot, commit", [("n64", 16, 48), ("n16", 4, 12)])
def test_settings_pick_the_split(default, setting, pilot, commit):
    cfg = with_(default, pc__setting=setting)
    assert (cfg.pc.n_pilot, cfg.pc.n_commit, cfg.actor_rollout_ref.rollout.n) == (pilot, commit, commit)
    assert PCSettings.from_config(cfg).allocator_config(1).pilot_n == pilot


def test_cross_field_errors_say_how_to_fix(default):
    assert PCSettings.from_config(with_(default, pc__setting="n16")).data_parallel == 16  # 16 rows over 16 GPUs
    with pytest.raises(ConfigError, match="multiple of the 24 training GPUs.*Fix"):
        PCSettings.from_config(with_(default, pc__setting="n16", trainer__nnodes=3))
    with pytest.raises(ConfigError, match="does not divide train_batch=128.*Fix"):
        PCSettings.from_config(with_(default, actor_rollout_ref__actor__ppo_mini_batch_size=48))


def test_a_runs_resolved_config_is_carried_over_exactly():
    run = resolve("paper-n16", {"allocator.p_upper": 0.9375}, method="pc", seed=3)
    cfg = compose_recipe_config(run_overrides(run, "/data/models/qwen", nnodes=1, gpus_per_node=8))
    assert PCSettings.from_config(cfg).allocator_config(3).to_dict() == run.allocator.to_dict()
    assert cfg.actor_rollout_ref.model.path == "/data/models/qwen" and cfg.trainer.n_gpus_per_node == 8
    assert cfg.actor_rollout_ref.actor.optim.lr == pytest.approx(run.training.lr)
    assert cfg.data.max_response_length == run.training.max_response_length


def test_config_is_package_data_and_the_recipe_imports_lazily():
    tomllib = pytest.importorskip("tomllib")  # stdlib only from Python 3.11, and requires-python allows 3.10
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert "*.yaml" in data["pc_pipelines.training.verl_conf"]
    code = ("import sys, pc_pipelines.training.verl_recipe, pc_pipelines.rollout.vllm_engine; "
            "print(sorted(m for m in ('ray', 'vllm', 'verl.trainer.ppo.ray_trainer') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]"


def test_float64_is_refused_for_verl_and_unknown_dtypes_name_the_fix():
    run = resolve("bench", {}, method="pc", seed=3)
    assert run.training.dtype == "float64"  # the benchmark trains in float64 on the embedded loop ...
    with pytest.raises(ConfigError, match=r"TrainingConfig\.dtype=.float64.: the verl recipe trains in its own precision.*Fix: set "
                                          r"training\.dtype=float32"):
        run_overrides(run, "/data/models/qwen", nnodes=1, gpus_per_node=8)  # ... which verl cannot honour
    with pytest.raises(ConfigError, match=r"dtype.*'bfloat16'.*Fix: use float32"):
        resolve("bench", {"training.dtype": "bfloat16"}, method="pc", seed=3)


def test_verl_loads_the_reward_hook_as_a_module_in_a_fresh_process():
    """The reward-loop workers resolve ``reward.custom_reward_function`` with verl's own loader: the hook must import
    with its package (a loose-file load of verl_recipe.py fails on its relative imports)."""
    code = ("from pc_pipelines.training.verl_recipe import REWARD_OVERRIDES, compose_recipe_config; "
            "from verl.trainer.ppo.reward import get_custom_reward_fn; "
            "fn = get_custom_reward_fn(compose_recipe_config(REWARD_OVERRIDES)); "
            "print(fn(data_source='arith', solution_str='\\\\boxed{3}', ground_truth='3'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "0.0"
    # what the recipe used to pass, a file path, does not load (the bug the probe hit with verl's real workers)
    old = code.replace("compose_recipe_config(REWARD_OVERRIDES)", "compose_recipe_config(["
                       "'reward.custom_reward_function.path=pc_pipelines/training/verl_recipe.py', "
                       "'reward.custom_reward_function.name=null_score'])")
    assert subprocess.run([sys.executable, "-c", old], capture_output=True, text=True, check=False,
                          cwd=ROOT).returncode != 0


@pytest.mark.parametrize(("rows", "groups", "per_minibatch", "want"), [
    (128, 16, 4, 32),  # a full step: b_t / ppo_mini_batch_size = 4 minibatches of whole-step rows / 4
    (24, 3, 4, 24),    # the shortfall verl asserted on (24 % 16): fewer groups than one minibatch holds -> one
    (40, 5, 2, 20),    # 2 wanted minibatches (5 // 2) divide 40 rows
    (36, 4, 1, 9),     # groups of different sizes (PC commits): 4 minibatches of 9 rows
    (35, 4, 1, 35),    # 4 wanted, but no count in 2..4 divides 35 rows: one minibatch
])
def test_minibatch_rows_divide_the_batch(rows, groups, per_minibatch, want):
    from pc_pipelines.training.verl_recipe import minibatch_rows

    got = minibatch_rows(rows, groups, per_minibatch)
    assert rows % got == 0 and rows // got <= max(1, groups // per_minibatch)
    assert got == want


@pytest.mark.parametrize("key", ["actor_rollout_ref.model.trust_remote_code", "data.trust_remote_code",
                                 "critic.model.trust_remote_code", "reward_model.model.trust_remote_code"])
def test_a_recipe_asking_for_a_models_own_code_is_refused(key):
    from pc_pipelines.training.verl_recipe import no_remote_code

    cfg = compose_recipe_config([f"{key}=true"])
    with pytest.raises(ConfigError, match=rf"{key}=True: pc-pipelines runs no Python code that comes with a model.*"
                                          r"Fix: drop the override"):
        no_remote_code(cfg)


def test_every_trust_remote_code_is_pinned_false_and_the_policy_checked(default, base_policy, tmp_path):
    import json
    import shutil

    from omegaconf import OmegaConf

    from pc_pipelines.errors import RunError
    from pc_pipelines.training.verl_recipe import no_remote_code

    cfg = compose_recipe_config([f"actor_rollout_ref.model.path={base_policy}"])
    keys = no_remote_code(cfg)
    assert {"actor_rollout_ref.model.trust_remote_code", "data.trust_remote_code", "critic.model.trust_remote_code",
            "reward_model.model.trust_remote_code"} <= set(keys)
    assert [OmegaConf.select(cfg, k) for k in keys] == [False] * len(keys)  # reward_model's was null: now false
    custom = tmp_path / "custom"
    shutil.copytree(base_policy, custom)
    config = json.loads((custom / "config.json").read_text())
    (custom / "config.json").write_text(json.dumps({**config, "auto_map": {"AutoModelForCausalLM": "m.LM"}}))
    with pytest.raises(RunError, match="needs Python code of its own"):
        no_remote_code(compose_recipe_config([f"actor_rollout_ref.model.path={custom}"]))
