"""What the ``pilot-commit`` commands share: the run-config flags (preset, ``--set``, per-field flags) resolved into
a checked :class:`~pc_pipelines.config.RunConfig`, the ``--run-name`` type, and progress bars on stderr.

A flag that sets one config field (``--p-lower`` sets ``allocator.p_lower``) does not document the field again: its
help is the field's own documentation in ``pc_pipelines/config/`` (:func:`field_help`), so the two cannot drift."""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import inspect
import re
import sys
import textwrap
import typing

from ..allocation import METHODS, SELECTION_STRATEGIES, check_config, training_methods
from ..config import ALL_SECTIONS, PC_ONLY_FIELDS, RunConfig, parse_overrides, resolve
from ..errors import ConfigError, brief, brief_text, shell_command
from ..store.names import RunIdError, run_id_for, validate_run_id
from .exits import USER_ERROR


def progress_bar(total: int, desc: str, enabled: bool, leave: bool = False, initial: int = 0):
    """A bar on stderr; ``leave`` keeps it on screen once closed (``train``'s run bar), else it is erased;
    ``initial``: the steps already done (a resumed run's bar starts at ``initial/total``)."""
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="step", file=sys.stderr, disable=not enabled, leave=leave,
                initial=initial)


# ---- bounded numeric flags ------------------------------------------------------------------------------------
# argparse's own int/float types quote a bad value whole (a 5,000-digit --seed, a pasted file) and Python refuses
# to convert an integer of more than 4,300 digits: these refuse both in one short line naming the flag.
FLAG_NUMBER_MAX_CHARS = 40


class CliParser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` whose errors are one short line with the fix: a value the user typed is cut
    (:func:`~pc_pipelines.errors.brief_text`: a 100,000-character ``--run`` is not echoed whole), and the usage
    block gives way to a pointer to ``--help``. Exit status 2, as argparse's."""

    def parse_known_args(self, args=None, namespace=None):
        self._typed = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def _command_parser(self) -> argparse.ArgumentParser:
        """The subcommand's parser the typed words chose (this parser when none)."""
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                for word in getattr(self, "_typed", []):
                    if word in action.choices:
                        return action.choices[word]
        return self

    def error(self, message: str) -> typing.NoReturn:
        import difflib

        text = brief_text(message).rstrip(".")
        target = self._command_parser()
        words = target.prog.split()[1:]  # the subcommand, for its --help
        help_cmd = shell_command("pilot-commit", *words, "--help")
        fix = "" if "Fix:" in text else f". Fix: see `{help_cmd}`."
        if message.startswith("unrecognized arguments:"):  # a mistyped flag: the option it most looks like
            options = [o for a in target._actions for o in a.option_strings if o.startswith("--")]
            guesses = [g for w in message.split(":", 1)[1].split() if w.startswith("-")
                       for g in difflib.get_close_matches(w.split("=")[0], options, n=1, cutoff=0.6)]
            if guesses:
                fix = f". Fix: did you mean {' and '.join(dict.fromkeys(guesses))}? (`{help_cmd}` lists them)"
        self.exit(USER_ERROR, f"{self.prog}: error: {text}{fix}\n")


def int_arg(value: str) -> int:
    """argparse ``type`` of an integer flag: at most 19 digits (a signed 64-bit integer)."""
    text = value.strip()
    if len(text) > FLAG_NUMBER_MAX_CHARS or len(text.lstrip("+-")) > 19:
        raise argparse.ArgumentTypeError(f"{brief(value, 30)} is not an integer of at most 19 digits")
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{brief(value, 30)} is not an integer") from None


def check_steps(steps: int, default: int) -> None:
    """Refuse a run length below one step before anything is made or registered (a run of 0 steps would be
    recorded as ``finished`` with nothing in it, and a comparison of 0 steps has nothing to compare)."""
    if steps < 1:
        raise ConfigError(f"--steps {steps}: must be >= 1 (the run's total number of training steps). Fix: pass "
                          f"--steps 1 or more (default {default}).")


def float_arg(value: str) -> float:
    """argparse ``type`` of a float flag (the config refuses NaN and infinity, naming the field)."""
    if len(value) > FLAG_NUMBER_MAX_CHARS:
        raise argparse.ArgumentTypeError(f"{brief(value, 30)} is not a number of at most {FLAG_NUMBER_MAX_CHARS} "
                                         "characters")
    try:
        return float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{brief(value, 30)} is not a number") from None


# ---- config from arguments --------------------------------------------------------------------------------------
# Flags that override one config field: (flag dest, dotted config key). They default to None so a flag the user
# did not type leaves the preset's value alone.
FLAG_KEYS = (
    ("train_batch", "allocator.train_batch"),
    ("n", "allocator.n"),
    ("n_pilot", "allocator.n_pilot"),
    ("oversample", "allocator.oversample"),
    ("p_lower", "allocator.p_lower"),
    ("p_upper", "allocator.p_upper"),
    ("p_solve", "allocator.p_solve"),
    ("max_age", "allocator.max_age"),
    ("max_rounds", "allocator.max_rounds"),
    ("selection", "allocator.selection"),
    ("prompts", "sim.num_prompts"),
    ("spread", "sim.difficulty_spread"),
)

FIELD_FLAGS: dict[str, str] = {
    "--family": "family",
    "--method": "allocator.method",
    "--seed": "seed",
    **{"--" + dest.replace("_", "-"): key for dest, key in FLAG_KEYS},
    "--no-evict": "allocator.evict",
    "--no-binding": "allocator.binding",
}
"""Every flag of :func:`add_config_args` that sets one config field -> that field's key (as ``--set`` spells it).
Their help is generated from the field's own documentation (:func:`field_help`). ``--n-commit`` sets no field of
its own (n_commit = n - n_pilot), so its help is written here."""

SIMULATOR_FLAGS = tuple(flag for flag, key in FIELD_FLAGS.items() if key.startswith("sim."))
"""The flags that set a field of the scale simulator (``sim.*``): only ``simulate`` and its kin offer them."""

# Where a flag left out does not fall back to the preset's value: the run seed is 0 unless given (presets carry none).
FLAG_DEFAULTS = {"seed": "0"}


def config_field(key: str) -> tuple[type, str]:
    """The config dataclass and field name of a ``--set`` key: ``allocator.p_lower`` -> (AllocatorConfig,
    "p_lower"); a key without a section is a :class:`RunConfig` field (``seed``, ``family``)."""
    section, _, name = key.partition(".")
    return (ALL_SECTIONS[section], name) if name else (RunConfig, section)


@functools.cache
def field_docs(cls: type) -> dict[str, str]:
    """Each documented field of the config dataclass ``cls`` -> its documentation: the string literal under the
    field's declaration (how ``pc_pipelines/config/`` documents every field), as one line of plain text (see
    :func:`plain_text`). Empty when the source cannot be read (a bytecode-only install): the flags' help then still
    names the key and the default."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError):
        return {}
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    docs = {}
    for node, after in zip(body, body[1:]):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str)):
            docs[node.target.id] = plain_text(after.value.value)
    return docs


def plain_text(doc: str) -> str:
    """A field's docstring as one line of plain text: whitespace runs to one space, reST roles and literals unwrapped."""
    text = re.sub(r":[a-z]+:`~?([^`]*)`", r"\1", " ".join(doc.split()))
    return text.replace("``", "")


def _shown(value) -> str:
    """A default as ``--set`` takes it (values parse as YAML: true / false)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def field_help(flag: str) -> str:
    """The help of a flag of :data:`FIELD_FLAGS`: the field's documentation, the key it sets and its default when the
    flag is left out (the preset's value, else the field's own default). A switch (``--no-evict``) sets the field to
    false. ``%`` is escaped for argparse."""
    key = FIELD_FLAGS[flag]
    cls, name = config_field(key)
    doc = field_docs(cls).get(name, "")
    default = next(f.default for f in dataclasses.fields(cls) if f.name == name)
    if key in FLAG_DEFAULTS:
        when_unset = FLAG_DEFAULTS[key]
    elif default is dataclasses.MISSING or default is None:
        when_unset = "the preset's"
    else:
        when_unset = f"the preset's, else {_shown(default)}"
    if flag.startswith("--no-"):
        text = f"Sets {key} to false (default: {when_unset}). {key}: {doc}"
    else:
        text = f"{doc} Sets {key} (default: {when_unset})."
    return " ".join(text.split()).replace("%", "%%")


class _OfferedChoices(list):
    """argparse ``choices`` that offer (in ``--help`` and in argparse's "invalid choice" error) only the values of the
    list, but let the ``also`` values through, for the command to refuse with its own message (``train --method
    oracle``: "simulator-only", with the fix)."""

    def __init__(self, offered, also) -> None:
        super().__init__(offered)
        self.also = frozenset(also)

    def __contains__(self, value) -> bool:
        return list.__contains__(self, value) or value in self.also


def add_config_args(p: argparse.ArgumentParser, with_method: bool = True, preset: str = "simulator",
                    training: bool = False) -> None:
    """The run-config flags. ``training`` (``train``, ``base-policy``): ``--method`` offers the training methods
    only (a simulator-only one typed anyway reaches the command, which refuses it naming the fix) and the simulator's
    own flags (:data:`SIMULATOR_FLAGS`) are left out."""
    g = p.add_argument_group("run config (a preset, then --set, then these flags)")
    g.add_argument("--preset", default=preset, help=f"preset name (default {preset}; `pilot-commit presets` lists them)")
    g.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a field, e.g. allocator.p_upper=0.9375")
    g.add_argument("--family", default=None, help=field_help("--family"))
    if with_method:
        methods = _OfferedChoices(training_methods(), METHODS) if training else list(METHODS)
        g.add_argument("--method", default=None, choices=methods, help=field_help("--method"))
    g.add_argument("--seed", type=int_arg, default=None, help=field_help("--seed"))
    g.add_argument("--train-batch", type=int_arg, help=field_help("--train-batch"))
    g.add_argument("--n", type=int_arg, help=field_help("--n"))
    g.add_argument("--n-pilot", type=int_arg, help=field_help("--n-pilot"))
    g.add_argument("--n-commit", type=int_arg, help="PC commit rollouts per kept prompt (n = n_pilot + n_commit); with "
                   "allocator.commit_strategy=variance (the embedded preset) commits average allocator.commit_mean instead")
    g.add_argument("--oversample", type=float_arg, help=field_help("--oversample"))
    g.add_argument("--p-lower", type=float_arg, help=field_help("--p-lower"))
    g.add_argument("--p-upper", type=float_arg, help=field_help("--p-upper"))
    g.add_argument("--p-solve", type=float_arg, help=field_help("--p-solve"))
    g.add_argument("--no-evict", action="store_true", help=field_help("--no-evict"))
    g.add_argument("--max-age", type=int_arg, help=field_help("--max-age"))
    g.add_argument("--max-rounds", type=int_arg, help=field_help("--max-rounds"))
    g.add_argument("--no-binding", action="store_true", help=field_help("--no-binding"))
    g.add_argument("--selection", choices=sorted(SELECTION_STRATEGIES), help=field_help("--selection"))
    if not training:
        g.add_argument("--prompts", type=int_arg, help=field_help("--prompts"))
        g.add_argument("--spread", type=float_arg, help=field_help("--spread"))


def _flag_over(overrides: dict, key: str, value, flag: str) -> None:
    """Set ``key`` from a flag; a --set of the same key with another value is refused (one would be ignored)."""
    if key in overrides and overrides[key] != value:
        raise ConfigError(
            f"--set {key}={brief(overrides[key])} conflicts with {flag} (= {brief(value)}); one of them would be ignored. "
            f"Fix: give {key} once, either as {flag} or as --set {key}=..."
        )
    overrides[key] = value


def run_config(args: argparse.Namespace, method: str | None = None, pc_only_to_pc: bool = False,
               check: bool = True) -> RunConfig:
    """Resolve preset + --set + flags into a validated RunConfig; inconsistent n flags fail naming the flags.

    Every --set key is honoured or refused: ``--set seed=5`` and ``--set allocator.method=grpo`` are the same as
    ``--seed 5`` and ``--method grpo``; a --set key that a flag also sets to another value is refused.
    ``pc_only_to_pc`` (a comparison running every method): the PC-only settings (the split ``--n-pilot`` /
    ``--n-commit`` / ``allocator.n_pilot``, ``allocator.eviction_strategy``, ``allocator.return_share``) apply to the
    PC run only, the others train the same ``n`` per prompt. ``check`` False: the registries are not asked here;
    where the run starts checks it (``train``: :func:`~pc_pipelines.run.start.start_training_run`)."""
    method = method or getattr(args, "method", None)
    overrides = parse_overrides(args.set)
    for dest, key in FLAG_KEYS:
        if getattr(args, dest, None) is not None:
            _flag_over(overrides, key, getattr(args, dest), "--" + dest.replace("_", "-"))
    if args.no_evict:
        _flag_over(overrides, FIELD_FLAGS["--no-evict"], False, "--no-evict")
    if args.no_binding:
        _flag_over(overrides, FIELD_FLAGS["--no-binding"], False, "--no-binding")
    n, p, c = args.n, args.n_pilot, args.n_commit
    if c is not None:
        if p is not None:
            if n is not None and n != p + c:
                raise ConfigError(
                    f"--n {n} differs from --n-pilot {p} + --n-commit {c} = {p + c}. Fix: drop --n or make it "
                    f"{p + c} (training rollouts per prompt are matched across methods: n = n_pilot + n_commit)."
                )
            _flag_over(overrides, "allocator.n", p + c, f"--n-pilot {p} --n-commit {c}")
        else:
            base = {k: v for k, v in overrides.items() if k != "allocator.method"}
            base_n = n if n is not None else resolve(args.preset, base, method="pc").allocator.n
            _flag_over(overrides, "allocator.n_pilot", base_n - c, f"--n-commit {c}")
    elif n is not None and p is None and "allocator.n_pilot" not in overrides:
        overrides["allocator.n_pilot"] = None  # --n alone: PC splits it n//4 + rest
    if pc_only_to_pc and method != "pc":
        for name in PC_ONLY_FIELDS:
            overrides.pop(f"allocator.{name}", None)
    cfg = resolve(args.preset, overrides, method=method, seed=args.seed, family=args.family)
    if check:
        check_config(cfg.allocator)  # the method and strategy names against their registries, before any work
    return cfg


def run_id_of(cfg: RunConfig, run_name: str | None) -> str:
    """The run's id by the one rule (:func:`~pc_pipelines.store.names.run_id_for`): ``--run-name`` (already checked
    by :func:`run_name_arg`), else the default ``<family>-<method>-s<seed>-<hash>``, checked here so a family the id
    cannot carry (a space, a '/') is refused as a configuration error before any store or run directory is opened."""
    try:
        return run_id_for(cfg.default_run_id(), run_name or None)
    except RunIdError as exc:
        raise ConfigError(str(exc)) from None


def run_name_arg(value: str) -> str:
    """argparse ``type`` of ``--run-name``: a bad name is refused before anything runs, with the allowed set."""
    try:
        return validate_run_id(value, field="--run-name")
    except RunIdError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
