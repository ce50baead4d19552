"""AllocatorConfig validates itself: each bad value fails at construction with a ConfigError naming the field and
saying how to fix it; what needs the registries (method and strategy names, what PC's method accepts) fails where
the allocator is built, with the same message format. Acceptance criterion 10 of the allocator issue (docs/DESIGN.md
section 2: errors say how to fix).
"""

from __future__ import annotations

import math

import pytest

from pc_pipelines.allocation import Allocator, AllocatorConfig
from pc_pipelines.errors import ConfigError

BAD = [
    # (kwargs, field the message must name)
    (dict(p_lower=0.8, p_upper=0.75), "p_lower"),
    (dict(p_lower=-0.1), "p_lower"),
    (dict(p_lower=1.5, p_upper=1.0), "p_lower"),
    (dict(p_lower=math.nan), "p_lower"),
    (dict(p_upper=1.2), "p_upper"),
    (dict(p_upper=-0.5), "p_upper"),
    (dict(p_solve=1.01), "p_solve"),
    (dict(p_solve=-0.01), "p_solve"),
    (dict(method="pc", n=8, n_pilot=0), "n_pilot", "allocator"),
    (dict(method="pc", n=8, n_pilot=-2), "n_pilot", "allocator"),
    (dict(method="pc", n=8, n_pilot=8), "n_pilot", "allocator"),  # n_pilot >= n leaves no commit rollout
    (dict(method="pc", n=8, n_pilot=9), "n_pilot", "allocator"),
    (dict(method="pc", n=1), "n_pilot", "allocator"),  # default n_pilot = max(1, n // 4) = 1 = n
    (dict(method="pc", max_rounds=1), "max_rounds", "allocator"),
    (dict(max_rounds=0), "max_rounds"),
    (dict(train_batch=-1), "train_batch"),
    (dict(train_batch=0), "train_batch"),
    (dict(train_batch=2.5), "train_batch"),
    (dict(train_batch=True), "train_batch"),
    (dict(n=-3), "n"),
    (dict(method="grpo", n=0), "n"),
    (dict(max_age=-1), "max_age"),
    (dict(oversample=0.5), "oversample"),
    (dict(oversample=math.inf), "oversample"),
    (dict(method="ppo"), "method", "allocator"),
    (dict(selection="fifo"), "selection", "allocator"),
    (dict(seed=-1), "seed"),
]


BAD = [case if len(case) == 3 else (*case, "config") for case in BAD]  # where it fails: config or allocator


@pytest.mark.parametrize("kwargs,field,where", BAD, ids=[f"{f}:{k}" for k, f, _ in BAD])
def test_bad_config_fails_naming_the_field(kwargs, field, where):
    """Values no method can run fail at construction; what needs the registries fails where the allocator is built
    (``check_config``, which ``Allocator`` runs)."""
    if where == "config":
        with pytest.raises(ConfigError) as info:
            AllocatorConfig(**kwargs)
    else:
        cfg = AllocatorConfig(**kwargs)  # constructs: the config layer does not know the registries
        with pytest.raises(ConfigError) as info:
            Allocator(cfg, num_prompts=1000)
    msg = str(info.value)
    assert f"AllocatorConfig.{field}=" in msg
    assert "Fix" in msg


@pytest.mark.parametrize("method", ["pc", "grpo", "dapo"])
def test_train_batch_larger_than_the_pool_fails_at_allocator_construction(method):
    cfg = AllocatorConfig(method=method, train_batch=10, n=8)
    with pytest.raises(ConfigError) as info:
        Allocator(cfg, num_prompts=9)
    assert "train_batch" in str(info.value) and "Fix" in str(info.value)
    with pytest.raises(ConfigError, match="Fix"):
        Allocator(cfg, num_prompts=0)
    Allocator(cfg, num_prompts=10)  # exactly b_t prompts is enough


def test_config_error_is_a_value_error():
    assert issubclass(ConfigError, ValueError)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(),
        dict(method="pc", n=128, n_pilot=32),
        dict(method="pc", n=16, n_pilot=8),
        dict(method="pc", p_lower=0.75, p_upper=0.75),  # a single-point band is allowed
        dict(method="pc", p_solve=0.75, evict=False, binding=False, selection="random"),
        dict(method="dapo", max_rounds=1),  # only PC needs two rounds
        dict(method="grpo", n=1, max_age=0, oversample=1),
    ],
)
def test_valid_configs_construct_and_round_trip(kwargs):
    cfg = AllocatorConfig(**kwargs)
    assert AllocatorConfig.from_dict(cfg.to_dict()) == cfg
    assert cfg.sampling_batch >= cfg.train_batch


def test_derived_numbers():
    cfg = AllocatorConfig(method="pc", train_batch=128, oversample=3.0, n=64)
    assert (cfg.sampling_batch, cfg.pilot_n, cfg.commit_n) == (384, 16, 48)
    assert AllocatorConfig(method="pc", n=128).pilot_n == 32
    assert AllocatorConfig(train_batch=5, oversample=1.5).sampling_batch == 8  # ceil(7.5)


def test_unknown_setting_in_dict_fails_with_fix():
    with pytest.raises(ConfigError, match="Fix"):
        AllocatorConfig.from_dict({"method": "pc", "bogus": 1})
    with pytest.raises(ConfigError, match="AllocatorConfig.p_upper=.*Fix"):
        AllocatorConfig().replace(p_upper=2.0)
