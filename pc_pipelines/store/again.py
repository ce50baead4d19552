"""The command that continues a stopped run (``train --resume``) or records a simulation again (``simulate
--overwrite``), whole: the store, the run folder, the run and the config flags it was started with, so that pasted in
any directory it acts on that run and creates nothing elsewhere (issue 54 case 3: ``pilot-commit train --run-name t
--resume`` pasted beside ``exp/`` created ``./runs/pc.duckdb`` and started a new run there).

The config flags are rebuilt from the run's stored config (``runs.config_json``): ``--preset``, ``--method``,
``--seed``, ``--family`` where it is not the preset's, and one ``--set section.field=value`` for each field that differs
from what those give. They are checked before they are printed: resolved again, they must give the stored config
field for field. When they cannot (a value ``--set`` cannot spell), :func:`again_command` says so and the fix names
the query that shows the config instead.
"""

from __future__ import annotations

import json
import math
from typing import Any

from ..config.presets import parse_overrides, resolve
from ..config.run import from_dict
from ..errors import ConfigError, installed_command, shell_command, sql_string


def _set_value(value: Any) -> str | None:
    """``value`` as ``--set`` reads it back (:func:`~pc_pipelines.config.presets.parse_overrides`), None when it
    cannot be spelled (a list, a mapping, a NaN)."""
    import yaml

    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else None
    if isinstance(value, str):
        try:
            plain = yaml.safe_load(value) == value and value.strip() == value and value != ""
        except yaml.YAMLError:
            plain = False
        return value if plain else json.dumps(value)  # a JSON string is a double-quoted YAML scalar
    return None


def config_flags(config: dict[str, Any]) -> list[str] | None:
    """The flags that resolve to the stored ``config`` (``runs.config_json``, parsed) field for field; None when no
    such flags can be written (the config is not one a preset and ``--set`` reach)."""
    try:
        stored = from_dict(config)
        head = ["--preset", stored.preset, "--method", stored.method, "--seed", str(stored.seed)]
        base = resolve(stored.preset, method=stored.method, seed=stored.seed)
        family = None if base.family == stored.family else stored.family
        if family is not None:
            head += ["--family", family]
            base = resolve(stored.preset, method=stored.method, seed=stored.seed, family=family)
        want, have = stored.to_dict(), base.to_dict()
        sets: list[str] = []
        for section, fields in want.items():
            if not isinstance(fields, dict):
                continue
            if not isinstance(have.get(section), dict):
                return None  # an optional section the preset lacks: --set cannot add it
            for name, value in fields.items():
                if (section, name) in (("allocator", "method"), ("allocator", "seed"), ("sim", "seed")):
                    continue
                if name in have[section] and have[section][name] == value:
                    continue
                text = _set_value(value)
                if text is None:
                    return None
                sets.append(f"{section}.{name}={text}")
        again = resolve(stored.preset, parse_overrides(sets), method=stored.method, seed=stored.seed, family=family)
    except (ConfigError, KeyError, TypeError, ValueError):
        return None
    if again.to_dict() != stored.to_dict():
        return None
    return head + [a for s in sets for a in ("--set", s)]


def _json(text: Any) -> dict[str, Any]:
    try:
        value = json.loads(text) if text else {}
    except (TypeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def again_command(store_path: Any, run: dict[str, Any]) -> tuple[str, bool]:
    """The command (quoted by :func:`~pc_pipelines.errors.shell_command`) that continues ``run`` (a ``runs`` row with
    ``run_id``, ``kind``, ``config_json``, ``lineage_json``) in the store at ``store_path``: ``train --resume`` for a
    training run, ``simulate --overwrite`` (it records every step again) for a simulation; and whether it is whole
    (False: its config flags could not be rebuilt, and the fix must say where they are)."""
    run_id = run["run_id"]
    lineage = _json(run.get("lineage_json"))
    config = _json(run.get("config_json"))
    flags = config_flags(config) if config else None
    program = installed_command("pilot-commit", from_cwd=False)  # pasted in any directory
    if run.get("kind") == "simulate":
        argv = [program, "simulate", "--store", store_path, "--run-name", run_id, "--overwrite"]
        if lineage.get("steps") is not None:
            argv += ["--steps", int(lineage["steps"])]
        whole = lineage.get("steps") is not None and flags is not None
    else:
        argv = [program, "train", "--store", store_path]
        if lineage.get("run_dir"):
            from pathlib import Path

            argv += ["--out", Path(str(lineage["run_dir"])).parent]
        argv += ["--run-name", run_id, "--resume"]
        if lineage.get("planned_steps") is not None:
            argv += ["--steps", int(lineage["planned_steps"])]
        if lineage.get("policy") and not lineage.get("base_policy_recipe"):  # a --policy of the user's own
            argv += ["--policy", lineage["policy"]]
        whole = bool(lineage.get("run_dir")) and flags is not None
    return shell_command(*argv, *(flags or [])), whole


def again_fix(store_path: Any, run: dict[str, Any]) -> str:
    """The fix text naming :func:`again_command` in backticks; when it is not whole, where its flags are."""
    command, whole = again_command(store_path, run)
    text = f"`{command}`"
    if not whole:
        query = f"SELECT config_json, lineage_json FROM runs WHERE run_id = {sql_string(run['run_id'])}"
        text += (" with the flags it was started with (its config: "
                 f"`{shell_command(installed_command('pilot-commit', from_cwd=False), 'sql', '--store', store_path, query)}`)")
    return text
