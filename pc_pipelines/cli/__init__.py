"""``pilot-commit``: the command line for everything the pipeline does without the UI.

Subcommands, by module:

* ``simulate``: drive the real allocator against the scale simulator; one JSON object per step with ``--json``,
  otherwise a progress bar and a readable table. ``simulate-demo``: GRPO, DAPO, PC (and the oracle bound) side by
  side in the simulator, in seconds (``make demo`` is the other demo: the whole Dagster graph on a real model,
  :mod:`pc_pipelines_dagster.demo`). Both in :mod:`.simulate_commands`.
* ``sql`` / ``runs`` / ``report`` / ``timeline``: read a store (read-only; works while runs write); ``check``: every
  damaged or missing step of a store, with how to repair it (exit 1 when there is any). :mod:`.store_commands`.
* ``presets``: list or show (:mod:`.preset_commands`).
* ``train`` / ``base-policy``: real training on the embedded default (:mod:`.train`).
* ``train-segment`` / ``eval-segment``: the in-pod entrypoint the Dagster assets launch through Pipes
  (:mod:`.segment`).

What the commands share (the run-config flags, whose help is the config fields' own documentation, ``--run-name``,
progress bars) is :mod:`.args`; :func:`build_parser` assembles every command's parser, in one place.

Output a user asked for goes to stdout; progress bars and logs go to stderr, so ``--json`` output pipes cleanly.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from ..errors import ConfigError, shell_command
from ..run.stopping import StopRequested
from ..store import RunBusyError, StoreError
from ..store.names import RunIdError
from . import preset_commands, segment, simulate_commands, store_commands, train
from .args import CliParser
from .exits import OK, exit_status

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    parser = CliParser(prog="pilot-commit", description=__doc__.split("\n")[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging on stderr")
    sub = parser.add_subparsers(dest="command", required=True)
    simulate_commands.add_parsers(sub)  # simulate, simulate-demo, demo
    store_commands.add_parsers(sub)  # sql, runs, check, report, timeline, compare
    preset_commands.add_parsers(sub)  # presets
    train.add_parsers(sub)  # train, base-policy (torch is imported only when they run)
    segment.add_parsers(sub)  # train-segment, eval-segment
    return parser


def _with_store(argv: list[str], nearby: list[str] | None) -> str | None:
    """The command typed, with its --store replaced by the nearest existing store (a missing store's likely
    meaning), as a command to paste; None when there is none or the command gave no --store."""
    if not nearby:
        return None
    for i, a in enumerate(argv):
        if a == "--store" and i + 1 < len(argv):
            return shell_command("pilot-commit", *argv[:i + 1], nearby[0], *argv[i + 2:])
        if a.startswith("--store="):
            return shell_command("pilot-commit", *argv[:i], f"--store={nearby[0]}", *argv[i + 1:])
    return None


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        return int(args.func(args) or OK)
    except ConfigError as exc:
        sys.stderr.write(f"pilot-commit: configuration error: {exc}\n")
        return exit_status(exc)
    except RunBusyError as exc:  # another process writes the run: the message names it and the fix
        sys.stderr.write(f"pilot-commit: {exc}\n")
        return exit_status(exc)
    except (StoreError, RunIdError) as exc:
        again = _with_store(list(sys.argv[1:] if argv is None else argv), getattr(exc, "nearby", None))
        sys.stderr.write(f"pilot-commit: store error: {exc}" + (f" Did you mean `{again}`?" if again else "") + "\n")
        return exit_status(exc)
    except StopRequested as exc:  # a stop before any run was opened (still deciding what to do)
        sys.stderr.write(f"pilot-commit: {exc.reason}\n")
        return exit_status(exc)
    except KeyboardInterrupt as exc:
        sys.stderr.write("pilot-commit: interrupted (Ctrl-C)\n")
        return exit_status(exc)
    except BrokenPipeError as exc:  # `pilot-commit simulate --json | head`
        return exit_status(exc)
    except FileNotFoundError as exc:  # e.g. --policy pointing at no model directory; the message says the fix
        sys.stderr.write(f"pilot-commit: {exc}\n")
        return exit_status(exc)
