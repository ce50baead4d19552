"""Count calls of a function as the code under test sees it (tests that say "each check once")."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable


def count_calls(monkeypatch, seen: Counter, key: str, targets: Iterable[object], attr: str) -> None:
    """Count every call of ``attr`` under ``seen[key]``, through one wrapper patched into each of ``targets`` (the
    modules that imported the name, since ``from x import f`` binds a copy, or a class for a method). Refuses targets
    that do not all hold the same object, so a test cannot count a different function than it names."""
    targets = list(targets)
    original = getattr(targets[0], attr)
    other = [t for t in targets if getattr(t, attr) is not original]
    assert not other, f"{attr} in {[getattr(t, '__name__', t) for t in other]} is not the same object as in {targets[0]}"

    def counted(*args, **kwargs):
        seen[key] += 1
        return original(*args, **kwargs)

    for t in targets:
        monkeypatch.setattr(t, attr, counted)


def count_everywhere(seen: Counter, key: str, owner: object, attr: str, patch=setattr) -> None:
    """Count every call of ``owner.attr`` under ``seen[key]``, wherever the code sees it: the wrapper replaces the
    function in ``owner`` and in every loaded module that bound the same object (``from x import f``). ``patch``:
    ``monkeypatch.setattr`` in a test (undone after it), plain ``setattr`` in a process of its own."""
    import sys

    original = getattr(owner, attr)

    def counted(*args, **kwargs):
        seen[key] += 1
        return original(*args, **kwargs)

    patch(owner, attr, counted)
    if isinstance(owner, type):
        return
    for module in list(sys.modules.values()):
        if module is not None and module is not owner and vars(module).get(attr) is original:  # no lazy loads
            patch(module, attr, counted)


WALK_COUNTS = (  # (key, module, attribute): a segment's opens of the store, takes of the run's lock, run-id checks
    ("Store()", "pc_pipelines.store.catalog", "Store.__init__"),
    ("store.init", "pc_pipelines.store.catalog", "Store.init"),
    ("hold_run", "pc_pipelines.store.runlock", "hold_run"),
    ("run-id check", "pc_pipelines.store.names", "run_id_problem"),
    ("Store.run_dir check", "pc_pipelines.store.run_tables", "_one_directory"),
    ("vacuum", "pc_pipelines.store.catalog", "Store.vacuum"),
)


def count_walk(seen: Counter, patch=setattr) -> None:
    """Count :data:`WALK_COUNTS` in this process (everything the walk imports is imported first)."""
    import importlib

    importlib.import_module("pc_pipelines.cli")
    importlib.import_module("pc_pipelines.cli.segment")
    importlib.import_module("pc_pipelines.run.driver")
    for key, module, attr in WALK_COUNTS:
        owner = importlib.import_module(module)
        if "." in attr:
            cls, attr = attr.split(".")
            owner = getattr(owner, cls)
        count_everywhere(seen, key, owner, attr, patch)


COUNTING_MAIN = '''"""python -m pc_pipelines.cli, counting the walk's calls (call_counts.count_walk) into {out}."""
import atexit, json, runpy, sys
from collections import Counter
sys.path.insert(0, {support!r})
from call_counts import count_walk
seen = Counter()
count_walk(seen)
atexit.register(lambda: open({out!r}, "a").write(json.dumps(seen) + "\\n"))
assert sys.argv[1:3] == ["-m", "pc_pipelines.cli"], sys.argv
sys.argv = [sys.argv[0], *sys.argv[3:]]
runpy.run_module("pc_pipelines.cli", run_name="__main__", alter_sys=True)
'''


def counting_python(directory, out) -> str:
    """An interpreter for ``SubprocessComputeResource(python=...)`` that runs ``-m pc_pipelines.cli ...`` with
    :func:`count_walk` installed, appending each process's counts as one JSON line to ``out``."""
    import stat
    import sys
    from pathlib import Path

    directory = Path(directory)
    script = directory / "counting_main.py"
    script.write_text(COUNTING_MAIN.format(out=str(out), support=str(Path(__file__).resolve().parent)))
    launcher = directory / "counting-python"
    launcher.write_text(f'#!/bin/sh\nexec {sys.executable} {script} "$@"\n')
    launcher.chmod(launcher.stat().st_mode | stat.S_IXUSR)
    return str(launcher)
