"""Presets and resolved, hashed run configs (pc_pipelines.config)."""

from __future__ import annotations

from dataclasses import fields

import pytest

from pc_pipelines.allocation import AllocatorConfig
from pc_pipelines.config import (
    SECTIONS,
    RunConfig,
    SimConfig,
    TrainingConfig,
    available_presets,
    from_dict,
    load_preset,
    parse_overrides,
    resolve,
)
from pc_pipelines.errors import ConfigError

EXPECTED_PRESETS = ["bench", "bench-paper", "efficiency", "embedded", "paper", "paper-1.5b-n128", "paper-n16", "paper-qwen3-n64", "simulator"]

# The frozen `paper` preset resolved for method pc, seed 0. A change of this literal means the frozen preset (or
# the behaviour it resolves to, e.g. a new config field's default) changed -- which it must not: add a new preset.
PAPER_PC_SEED0_HASH = "26112b7609d8"


def test_available_presets_lists_the_nine_files():
    assert available_presets() == EXPECTED_PRESETS


@pytest.mark.parametrize("preset", EXPECTED_PRESETS)
@pytest.mark.parametrize("method", ["grpo", "dapo", "pc"])
def test_every_preset_resolves_for_every_method(preset, method):
    cfg = resolve(preset, method=method, seed=3)
    assert isinstance(cfg, RunConfig)
    assert cfg.method == method and cfg.allocator.method == method
    assert cfg.seed == cfg.allocator.seed == cfg.sim.seed == 3
    assert cfg.preset == preset
    assert cfg.family == load_preset(preset).get("family", preset)
    if method != "pc":
        assert cfg.allocator.n_pilot is None  # a PC-only setting is dropped for GRPO/DAPO
    again = resolve(preset, method=method, seed=3)
    assert again == cfg and again.config_hash == cfg.config_hash
    assert len(cfg.config_hash) == 12 and int(cfg.config_hash, 16) >= 0
    assert cfg.default_run_id() == f"{cfg.family}-{method}-s3-{cfg.config_hash[:8]}"


def test_methods_and_seeds_get_distinct_hashes():
    hashes = {resolve("simulator", method=m, seed=s).config_hash for m in ("grpo", "dapo", "pc") for s in (0, 1)}
    assert len(hashes) == 6


def test_override_key_order_does_not_matter():
    a = {"allocator.p_upper": 0.875, "training.lr": 1e-5, "sim.num_prompts": 1234}
    b = dict(reversed(list(a.items())))
    assert list(a) != list(b)
    ca, cb = resolve("simulator", a, method="pc"), resolve("simulator", b, method="pc")
    assert ca == cb and ca.config_hash == cb.config_hash
    assert ca.allocator.p_upper == 0.875 and ca.training.lr == 1e-5 and ca.sim.num_prompts == 1234


@pytest.mark.parametrize(
    "key,value",
    [
        ("allocator.p_upper", 0.875),
        ("allocator.max_age", 2),
        ("sim.difficulty_spread", 1.0),
        ("training.lr", 2e-6),
        ("training.eval_every", 7),
        ("seed", 1),
    ],
)
def test_changing_a_behaviour_field_changes_the_hash(key, value):
    base = resolve("paper", method="pc", seed=0)
    changed = resolve("paper", {key: value}, method="pc")
    assert changed.config_hash != base.config_hash


def test_labels_do_not_change_the_hash():
    base = resolve("paper", method="pc", seed=0)
    relabelled = resolve("paper", method="pc", seed=0, family="some-other-family")
    via_set = resolve("paper", {"family": "yet-another"}, method="pc", seed=0)
    assert relabelled.family == "some-other-family" and via_set.family == "yet-another"
    assert relabelled.config_hash == via_set.config_hash == base.config_hash
    assert relabelled.default_run_id() != base.default_run_id()  # the id's family part differs, its hash does not


def test_same_behaviour_through_two_presets_has_one_hash():
    # `paper-1.5b-n128` differs from the frozen `paper` only in defaults the latter spells out; make them equal.
    paper = resolve("paper", method="pc", seed=0)
    t = paper.training
    overrides = {f"training.{f.name}": getattr(t, f.name) for f in fields(TrainingConfig)}
    overrides.update({f"sim.{f.name}": getattr(paper.sim, f.name) for f in fields(SimConfig) if f.name != "seed"})
    other = resolve("paper-1.5b-n128", overrides, method="pc", seed=0)
    assert other.preset != paper.preset and other.family != paper.family
    assert other.config_hash == paper.config_hash


@pytest.mark.parametrize(
    "key,needle",
    [
        ("allocator.no_such_field", "no_such_field"),
        ("training.learning_rate", "learning_rate"),
        ("sim.pool", "pool"),
        ("optimizer.lr", "optimizer.lr"),
        ("bogus", "bogus"),
    ],
)
def test_unknown_override_raises_config_error_naming_it(key, needle):
    with pytest.raises(ConfigError, match=needle):
        resolve("simulator", {key: 1})


def test_parse_overrides_parses_yaml_values_and_rejects_non_pairs():
    assert parse_overrides(["allocator.p_upper=0.9375", "allocator.evict=false", "training.lr=1.0e-5", "family=x"]) == {
        "allocator.p_upper": 0.9375,
        "allocator.evict": False,
        "training.lr": 1e-5,
        "family": "x",
    }
    with pytest.raises(ConfigError, match="key=value"):
        parse_overrides(["allocator.p_upper"])
    with pytest.raises(ConfigError, match="unknown key"):
        resolve("simulator", parse_overrides(["nonsense.thing.deep=3"]))


def test_set_with_an_exponent_float_gives_a_number():
    """``yaml.safe_load`` (YAML 1.1) reads ``1e-5`` (no dot) as the *string* '1e-5'; a number was meant.
    Regression: it once reached TrainingConfig's validation as a string and died with a TypeError traceback."""
    assert parse_overrides(["training.lr=1e-5"]) == {"training.lr": 1e-5}
    assert resolve("simulator", parse_overrides(["training.lr=1e-5"])).training.lr == 1e-5


@pytest.mark.parametrize("key,value", [("sim.num_prompts", "abc"), ("training.lr", "fast"), ("sim.local_rate", "x")])
def test_a_wrongly_typed_value_is_a_config_error(key, value):
    """A string where a number belongs is a ConfigError naming the field (regression: it was a bare TypeError
    from a ``< 0`` comparison, i.e. a traceback from ``pilot-commit ... --set training.lr=fast``)."""
    with pytest.raises(ConfigError, match=key.split(".")[1]):
        resolve("simulator", {key: value})


def test_invalid_values_are_refused():
    with pytest.raises(ConfigError, match="unknown preset"):
        resolve("no-such-preset")
    with pytest.raises(ConfigError, match="seed"):
        resolve("simulator", {"allocator.seed": 5}, seed=0)
    with pytest.raises(ConfigError, match="p_lower"):
        resolve("simulator", {"allocator.p_lower": 0.9, "allocator.p_upper": 0.5})


def test_frozen_paper_preset_spells_out_every_field():
    data = load_preset("paper")
    for section, cls in SECTIONS.items():
        # The seed is the run's (`--seed`), never a preset's: resolve() refuses a section seed apart from it.
        expected = {f.name for f in fields(cls)} - {"seed"}
        assert set(data[section]) == expected, (section, expected ^ set(data[section]))
    # and every spelled-out value survives resolution unchanged
    cfg = resolve("paper", method="pc", seed=0)
    for section in SECTIONS:
        resolved = getattr(cfg, section)
        for key, value in data[section].items():
            assert getattr(resolved, key) == value, (section, key)


def test_frozen_paper_preset_hash_is_pinned():
    cfg = resolve("paper", method="pc", seed=0)
    assert cfg.config_hash == PAPER_PC_SEED0_HASH
    assert resolve("paper").config_hash == PAPER_PC_SEED0_HASH  # method pc and seed 0 are the paper's defaults


def test_resolved_config_round_trips_through_from_dict():
    for preset in EXPECTED_PRESETS:
        for method in ("grpo", "pc"):
            cfg = resolve(preset, {"allocator.p_upper": 0.8125}, method=method, seed=2)
            back = from_dict(cfg.to_dict())
            assert back == cfg and back.config_hash == cfg.config_hash
            assert isinstance(back.allocator, AllocatorConfig)
