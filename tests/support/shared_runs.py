"""Trained runs that several test files read, built once per test session for every xdist worker (issue 53: train
once, assert many).

A run is built by the first worker that asks for it, under a file lock, into a cache folder named by a hash of what
shapes it: the package's sources and data files that training reads (``pc_pipelines/`` without ``reports/`` and
``simulator/``, which no trained run depends on; plus any other folder a recipe names, ``pc_pipelines_dagster/`` for a
Dagster-built store) and the recipe itself (the command's arguments). A change to any of those builds it anew; a change
elsewhere (tests, docs, research/) does not. The other workers wait on the lock and read the finished folder. It is
built in ``<name>-<key>.partial`` and renamed when its builder returned, so a build that failed or was interrupted is
never read: the next asker builds it again.

Where: the session's shared temporary folder (the parent of every xdist worker's own, so it is gone with the
session's other temporary files), or ``$PC_PIPELINES_TEST_CACHE/runs`` to keep the runs across sessions while
developing (the key still decides what is rebuilt).

The cached folder is read-only by contract: a test that changes a run (damages a checkpoint, resumes it) copies it
first (``copy_of``). ``assert_unchanged`` is checked at the end of the session (tests/conftest.py): a test that wrote
into a shared run fails the session's last test teardown, naming the files."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path

from filelock import FileLock

REPO = Path(__file__).resolve().parents[2]
SHAPING = ("pc_pipelines",)
"""What a trained run depends on, below the repository (or the installed package's folder)."""
NOT_SHAPING = ("reports", "simulator", "__pycache__")
"""Folders below ``SHAPING`` that no trained run reads: the report code and the committed study results it prints, the
simulator."""
DIGEST_FILE = ".shared-run-digest.json"


def code_digest(roots: Iterable[str] = SHAPING, repo: Path = REPO) -> str:
    """sha256 over every file below ``roots`` (relative to ``repo``), their paths included, ``NOT_SHAPING`` left
    out."""
    h = hashlib.sha256()
    for root in roots:
        base = repo / root
        for p in sorted(base.rglob("*")):
            rel = p.relative_to(base)
            if not p.is_file() or any(part in NOT_SHAPING for part in rel.parts) or p.suffix == ".pyc":
                continue
            h.update(f"{root}/{rel.as_posix()}\0".encode())
            h.update(hashlib.sha256(p.read_bytes()).digest())
    return h.hexdigest()


def tree_digest(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name != DIGEST_FILE}


class SharedRuns:
    """The session's shared runs, in ``root``."""

    def __init__(self, root: Path, repo: Path = REPO):
        self.root, self.repo = Path(root), repo
        self.root.mkdir(parents=True, exist_ok=True)
        self.built: list[Path] = []  # what this process built or read: checked unchanged at its end

    def key(self, recipe, roots: Iterable[str] = SHAPING) -> str:
        blob = json.dumps({"code": code_digest(roots, self.repo), "recipe": recipe}, sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def get(self, name: str, recipe, build: Callable[[Path], None], roots: Iterable[str] = SHAPING) -> Path:
        """The folder ``name`` built by ``build(folder)`` from ``recipe`` (JSON-able: every argument that shapes
        it), built here if no worker has built it yet. Returns the cached folder: copy it before changing it."""
        final = self.root / f"{name}-{self.key(recipe, roots)}"
        with FileLock(str(final) + ".lock"):
            if not (final / DIGEST_FILE).is_file():
                partial = final.with_name(final.name + ".partial")
                shutil.rmtree(partial, ignore_errors=True)
                partial.mkdir(parents=True)
                build(partial)
                (partial / DIGEST_FILE).write_text(json.dumps(tree_digest(partial), indent=0))
                os.replace(partial, final)
        self.built.append(final)
        return final

    def changed(self) -> dict[str, list[str]]:
        """Shared folders whose files differ from what their builder left: {folder: [files added, removed or
        changed]}."""
        out = {}
        for folder in dict.fromkeys(self.built):
            was = json.loads((folder / DIGEST_FILE).read_text())
            now = tree_digest(folder)
            diff = sorted(k for k in was.keys() | now.keys() if was.get(k) != now.get(k))
            if diff:
                out[str(folder)] = diff
        return out


def copy_of(shared: Path, dst: Path) -> Path:
    """A private copy of a shared folder at ``dst`` (without the cache's digest file), for a test that changes it."""
    shutil.copytree(shared, dst, ignore=shutil.ignore_patterns(DIGEST_FILE))
    return dst
