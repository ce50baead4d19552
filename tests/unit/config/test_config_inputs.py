"""Input hygiene of ``--set`` values and the run family (issue 31, point 6): one plain YAML scalar per setting, of
bounded size, never null where a value is needed, and every refusal a short ConfigError naming the field."""

from __future__ import annotations

import time

import pytest

from pc_pipelines.config import parse_overrides, resolve
from pc_pipelines.config.presets import FAMILY_MAX_CHARS, INT_MAX, SET_VALUE_MAX_CHARS, check_family, load_preset
from pc_pipelines.errors import ConfigError, brief

ALIAS_BOMB = ("[&a [x,x,x,x,x,x,x,x,x], &b [*a,*a,*a,*a,*a,*a,*a,*a,*a], &c [*b,*b,*b,*b,*b,*b,*b,*b,*b], "
              "&d [*c,*c,*c,*c,*c,*c,*c,*c,*c], &e [*d,*d,*d,*d,*d,*d,*d,*d,*d], &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]]")


def refused(items: list[str], *needles: str, preset: str = "simulator") -> str:
    with pytest.raises(ConfigError) as exc:
        resolve(preset, parse_overrides(items))
    msg = str(exc.value)
    assert "Fix:" in msg and len(msg) < 600, msg
    for n in needles:
        assert n in msg, (n, msg)
    return msg


# ---- brief: the one way a message quotes a value ----------------------------------------------------------------
def test_brief_shortens_long_strings_with_their_length():
    assert brief("abc") == "'abc'"
    shown = brief("x" * 120_000)
    assert shown.startswith("'" + "x" * 80 + "'...") and "(120,000 characters)" in shown and len(shown) < 120


def test_brief_describes_huge_integers_instead_of_converting_them():
    assert brief(12345) == "12345"
    assert brief(10**5000) == "<an integer of about 5,001 digits>"  # str() of it raises past 4,300 digits
    assert "negative" in brief(-(10**400))


def test_brief_of_a_shared_nested_list_is_fast_and_short():
    value: list = ["x"] * 9
    for _ in range(40):  # 9**40 leaves if printed in full
        value = [value] * 9
    t0 = time.monotonic()
    shown = brief(value)
    assert time.monotonic() - t0 < 1 and len(shown) < 120


# ---- parse_overrides: a single scalar of bounded size -----------------------------------------------------------
@pytest.mark.parametrize("value", ['!!python/object/apply:os.system ["touch MARKER"]', "!!python/name:os.system",
                                   "!!str 5", "!custom x", "!<tag:yaml.org,2002:python/none> x"])
def test_yaml_tags_are_refused_naming_the_key(value, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as exc:
        parse_overrides([f"training.temperature={value}"])
    msg = str(exc.value)
    assert msg.startswith("--set training.temperature:") and "YAML tag" in msg and "Fix:" in msg
    assert not (tmp_path / "MARKER").exists()


@pytest.mark.parametrize("value", ["&a 5", "*a", ALIAS_BOMB])
def test_anchors_aliases_and_an_alias_bomb_are_refused_before_anything_is_built(value):
    t0 = time.monotonic()
    with pytest.raises(ConfigError) as exc:
        parse_overrides([f"family={value}"])
    assert time.monotonic() - t0 < 1
    msg = str(exc.value)
    assert msg.startswith("--set family:") and len(msg) < 400, msg


@pytest.mark.parametrize("value,kind", [("[1, 2]", "a list"), ("- 1", "a list"), ("{a: 1}", "a mapping"),
                                        ("a: b", "a mapping"), ("1\n---\n2", "more than one YAML value")])
def test_lists_and_mappings_are_refused_naming_the_key(value, kind):
    with pytest.raises(ConfigError) as exc:
        parse_overrides([f"allocator.method={value}"])
    msg = str(exc.value)
    assert msg.startswith("--set allocator.method:") and kind in msg and "Fix:" in msg


def test_a_value_past_the_size_limit_is_refused_shortened():
    msg = str(pytest.raises(ConfigError, parse_overrides, ["training.prompt_template=" + "x" * 120_000]).value)
    assert "--set training.prompt_template" in msg and "(120,000 characters)" in msg and "at most 1,024" in msg
    assert len(msg) < 400
    ok = "Q: {question} " + "y" * (SET_VALUE_MAX_CHARS - 16)
    assert len(f"'{ok}'") == SET_VALUE_MAX_CHARS
    assert parse_overrides([f"training.prompt_template='{ok}'"]) == {"training.prompt_template": ok}


@pytest.mark.parametrize("digits", [20, 4301, 5000])
def test_integers_past_64_bits_are_refused_naming_the_key(digits):
    msg = str(pytest.raises(ConfigError, parse_overrides, ["allocator.n=" + "9" * digits]).value)
    assert msg.startswith("--set allocator.n:") and f"{digits:,} digits" in msg and "Fix:" in msg
    assert len(msg) < 300
    assert parse_overrides([f"allocator.max_rounds={INT_MAX}"]) == {"allocator.max_rounds": INT_MAX}


def test_yaml_that_does_not_parse_is_a_config_error():
    msg = str(pytest.raises(ConfigError, parse_overrides, ["training.lr='unterminated"]).value)
    assert msg.startswith("--set training.lr:") and "not a valid YAML value" in msg


def test_a_key_of_120k_characters_is_shown_shortened():
    msg = str(pytest.raises(ConfigError, parse_overrides, ["k" * 120_000 + "=1"]).value)
    assert "(120,000 characters)" in msg and len(msg) < 400


def test_plain_values_still_parse_as_before():
    assert parse_overrides(["a.b=0.5", "a.c=true", "a.d=1e-5", "a.e=text", "a.f='[quoted]'", "a.g=", "a.h=~",
                            "family=2024-01-01"]) == {
        "a.b": 0.5, "a.c": True, "a.d": 1e-5, "a.e": "text", "a.f": "[quoted]", "a.g": None, "a.h": None,
        "family": "2024-01-01"}  # a YAML date is kept as the text typed: no setting is a date


# ---- null where a value is needed, non-scalars for scalar fields --------------------------------------------------
@pytest.mark.parametrize("item", ["training.temperature=~", "training.temperature=null", "training.temperature=",
                                  "allocator.method=~", "sim.num_prompts=~"])
def test_null_is_refused_for_a_field_that_needs_a_value(item):
    key = item.split("=")[0]
    refused([item], f"{key} is null", "Fix:")


def test_null_is_accepted_where_the_field_may_be_none():
    cfg = resolve("simulator", parse_overrides(["allocator.n_pilot=~"]), method="pc")  # PC's default split
    assert cfg.allocator.n_pilot is None and cfg.allocator.pilot_n + cfg.allocator.commit_n == cfg.allocator.n


@pytest.mark.parametrize("value,kind", [([1, 2], "list"), ({"a": 1}, "mapping")])
def test_a_non_scalar_given_directly_is_refused_naming_the_field(value, kind):
    with pytest.raises(ConfigError) as exc:
        resolve("simulator", {"training.temperature": value})
    assert f"training.temperature={brief(value)} is a {kind}, not a float" in str(exc.value)


def test_an_out_of_range_integer_given_directly_is_refused_naming_the_field():
    msg = str(pytest.raises(ConfigError, resolve, "simulator", {"allocator.n": 10**5000}).value)
    assert "allocator.n=<an integer of about 5,001 digits> is out of range" in msg and len(msg) < 400


# ---- the family -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("item,needle", [
    ("family=~", "family is null"), ("family=", "family is null"), ("family=yes", "as a boolean"),
    ("family=" + "f" * (FAMILY_MAX_CHARS + 1), f"at most {FAMILY_MAX_CHARS} characters"),
    ("family='a\tb'", "control characters"), ("family=' '", "is empty"),
])
def test_bad_families_are_refused_naming_family(item, needle):
    refused([item], needle)


def test_family_as_a_list_is_refused():
    refused(["family=[a, b]"], "--set family:", "a list")
    with pytest.raises(ConfigError, match="is a list, not a name"):
        check_family(["a", "b"])


def test_family_flag_is_checked_too():
    with pytest.raises(ConfigError, match="--family="):
        resolve("simulator", family="x" * 120_000)


def test_good_families_resolve():
    assert resolve("simulator", parse_overrides(["family=my-study"])).family == "my-study"
    assert resolve("simulator", parse_overrides(["family=2024"])).family == "2024"
    assert resolve("simulator").family == "sim"


def test_a_conflict_quotes_long_values_shortened():
    msg = str(pytest.raises(ConfigError, resolve, "simulator", {"family": "a" * 5000}, family="b").value)
    assert "(5,000 characters)" in msg and len(msg) < 600


def test_a_preset_name_is_never_a_path():
    for name in ("../presets/simulator", "x" * 300, "simulator/../simulator"):
        msg = str(pytest.raises(ConfigError, load_preset, name).value)
        assert "unknown preset" in msg and len(msg) < 400
