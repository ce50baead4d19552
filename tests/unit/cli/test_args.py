"""The run-config flags do not document config fields by hand: a flag that sets one field (``--p-lower`` sets
``allocator.p_lower``) shows that field's own documentation (the docstring under it in pc_pipelines/config/), the
key it sets and its default, so the two cannot drift; and every such flag is known as one."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from pc_pipelines.cli import build_parser
from pc_pipelines.cli.args import FIELD_FLAGS, FLAG_KEYS, config_field, field_docs, field_help, plain_text
from pc_pipelines.config import AllocatorConfig, RunConfig, SimConfig

# The run-config group's flags that set no single config field.
NOT_FIELDS = {"--preset", "--set", "--n-commit"}


def config_groups() -> dict[str, argparse._ArgumentGroup]:
    """Each command with run-config flags -> its "run config" argument group."""
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    groups = {}
    for name, parser in sub.choices.items():
        for group in parser._action_groups:
            if group.title and group.title.startswith("run config"):
                groups[name] = group
    return groups


def test_the_17_field_flags_name_real_fields_with_documentation():
    assert len(FIELD_FLAGS) == 17
    for flag, key in FIELD_FLAGS.items():
        cls, name = config_field(key)
        assert name in {f.name for f in dataclasses.fields(cls)}, (flag, key)
        assert field_docs(cls).get(name), f"{cls.__name__}.{name} has no docstring for {flag}'s help"
    # run_config's --set overrides are the same flags with the same keys
    assert {"--" + dest.replace("_", "-"): key for dest, key in FLAG_KEYS}.items() <= FIELD_FLAGS.items()


def test_every_run_config_flag_shows_its_fields_documentation():
    groups = config_groups()
    assert {"simulate", "simulate-demo", "demo", "train", "base-policy"} <= set(groups)
    for command, group in groups.items():
        for action in group._group_actions:
            flag = action.option_strings[-1]
            if flag in NOT_FIELDS:
                continue
            assert flag in FIELD_FLAGS, f"{command} {flag}: a config flag whose help is not generated (FIELD_FLAGS)"
            key = FIELD_FLAGS[flag]
            cls, name = config_field(key)
            assert action.help == field_help(flag)
            assert field_docs(cls)[name] in action.help and f"Sets {key}" in action.help, (command, flag)


def test_field_docs_are_the_docstrings_under_the_fields_as_plain_text():
    assert field_docs(AllocatorConfig)["p_lower"] == (
        "PC keep band, lower edge (inclusive): pilots with p_hat below it are deferred as too hard.")
    # two lines joined, reST literals unwrapped
    assert field_docs(AllocatorConfig)["binding"].startswith("PC: one engine call per round holding the commits of "
                                                             "buffered prompts and the next pilots (paper's binding). False")
    assert field_docs(AllocatorConfig)["method"] == (
        "Allocation method: grpo, dapo or pc (Pilot-Commit), or any registered method.")
    assert field_docs(SimConfig)["difficulty_spread"].startswith("Std of the difficulty logits")
    assert field_docs(RunConfig)["seed"].startswith("Fixes data order")
    assert plain_text("see :class:`~pc_pipelines.config.RunConfig` and ``x``\n    next") == "see pc_pipelines.config.RunConfig and x next"


@pytest.mark.parametrize(("flag", "expected"), [
    ("--p-lower", "PC keep band, lower edge (inclusive): pilots with p_hat below it are deferred as too hard. Sets "
                  "allocator.p_lower (default: the preset's, else 0.125)."),
    ("--n-pilot", "PC: pilot rollouts per screened prompt. None means n // 4 (the paper's 16+48 and 32+96 splits). "
                  "Sets allocator.n_pilot (default: the preset's)."),
    ("--seed", "Fixes data order, sampling and init; copied into allocator.seed and sim.seed. Sets seed (default: 0)."),
    ("--no-evict", "Sets allocator.evict to false (default: the preset's, else true). allocator.evict: PC: evict "
                   "solved prompts (set False for the eviction-off ablation)."),
])
def test_field_help_reads(flag, expected):
    assert field_help(flag) == expected


def test_a_percent_sign_in_a_docstring_cannot_break_argparse(monkeypatch):
    import pc_pipelines.cli.args as args

    monkeypatch.setitem(args.FIELD_FLAGS, "--x", "allocator.p_lower")
    monkeypatch.setattr(args, "field_docs", lambda cls: {"p_lower": "a 100% pass rate"})
    p = argparse.ArgumentParser()
    p.add_argument("--x", help=args.field_help("--x"))
    assert "a 100% pass rate" in p.format_help()
