"""``pilot-commit presets``: list the presets, or print one resolved (with ``--set``) and its config hash."""

from __future__ import annotations

import argparse
import json
import sys

from ..config import available_presets, load_preset, parse_overrides, resolve
from .exits import OK


def cmd_presets(args: argparse.Namespace) -> int:
    if args.show:
        cfg = resolve(args.show, parse_overrides(args.set))
        sys.stdout.write(json.dumps({**cfg.to_dict(), "config_hash": cfg.config_hash}, indent=1) + "\n")
        return OK
    for name in available_presets():
        sys.stdout.write(f"{name:<18} {load_preset(name).get('description', '')}\n")
    return OK


def add_parsers(sub) -> None:
    """``presets``."""
    p = sub.add_parser("presets", help="list presets, or --show NAME to print one resolved with its hash")
    p.add_argument("--show", metavar="NAME")
    p.add_argument("--set", action="append", metavar="KEY=VALUE")
    p.set_defaults(func=cmd_presets)
