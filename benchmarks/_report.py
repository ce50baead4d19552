"""Shared helpers for the scripts that write docs sections: machine description and section-wise updates of a Markdown
file. ``benchmarks/*.py`` write speed and memory into docs/BENCHMARKS.md, ``research/*.py`` their studies into
docs/STUDIES.md (tests/unit/test_docs_sections.py checks which script's sections lie in which file)."""

from __future__ import annotations

import contextlib
import os
import platform
import re
from pathlib import Path

from pc_pipelines.durable import write_user_output

DOCS = (Path(__file__).resolve().parent.parent / "docs").resolve()
BENCHMARKS_MD = DOCS / "BENCHMARKS.md"  # speed and memory: benchmarks/*.py
STUDIES_MD = DOCS / "STUDIES.md"  # what the research/ scripts measured
BENCHMARKS_HEADER = "# Benchmarks\n\nEach section is written by the command it names.\n"
RELIABILITY_HEADER = "# Reliability: nothing lost, whatever the user or the machine does\n\nEach section is written by the command it names.\n"
STUDIES_HEADER = "# Studies: what the research/ scripts measured\n\nEach section is written by the command it names.\n"


def machine(load_average: bool = True) -> str:
    """The machine in one line; ``load_average``: the 1-minute load when called (a timing's start; a report that
    only reads a store passes False: the load while it reads says nothing of the runs)."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    try:
        kb = int(Path("/proc/meminfo").read_text().split()[1])
        mem = f", {kb / 1024**2:.0f} GiB RAM"
    except (OSError, ValueError, IndexError):
        pass
    load = ""
    if load_average:  # timings on a busy machine say so: the 1-minute load average at the start
        with contextlib.suppress(OSError):
            load = f", load average {os.getloadavg()[0]:.1f} at the start"
    return f"{cpu}, {os.cpu_count()} cores{mem}, Python {platform.python_version()}, {platform.system()}{load}"


def write_section(path: Path, name: str, body: str, header: str = BENCHMARKS_HEADER) -> None:
    """Replace (or append) the section between `<!-- name:begin -->` and `<!-- name:end -->`; a new file starts with
    ``header`` (research/ scripts pass :data:`STUDIES_HEADER`)."""
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    block = f"{begin}\n{body.rstrip()}\n{end}"
    text = path.read_text() if path.exists() else header
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.S)
    text = pattern.sub(lambda _: block, text) if pattern.search(text) else text.rstrip() + "\n\n" + block + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_user_output(path, text.encode())  # whole or not at all; a symlink written through, a device streamed into


def docs_link(p: Path) -> str:
    """``p`` as a link from a file in docs/: relative to docs/ when it lies under it, else as given."""
    try:
        return str(p.resolve().relative_to(DOCS))
    except ValueError:
        return str(p)
