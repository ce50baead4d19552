"""Real training datasets (DeepMath-103K, Polaris-53K): loading from local files, filtering, quarantine, held-out split.

The library half of the Dagster data assets (docs/DESIGN.md sections 2 and 6): importable and testable without Dagster.
Nothing is downloaded, ever. Public API::

    DatasetError(ValueError)                                   # names the file / row / field and the fix
    load_table(path, *, columns=None, required=(), what="dataset", setting="path") -> pa.Table
    load_deepmath(path) / load_polaris(path) -> pa.Table       # load_table with the right columns and messages
    normalize_final_answer(s) -> str ; binary_part(s) -> "yes" | "no" | "true" | "false" | None
    verifier_gold(s) -> str                                    # the gold string handed to the grader (docs/DATA.md)
    check_golds(golds, grader=None, *, workers=None) -> {gold: None | reason}
    prepare_deepmath(table, heldout=500, seed=0, grader=None, *, gold_workers=None) -> PreparedDataset
    prepare_polaris(table, heldout=0, seed=0, grader=None, *, gold_workers=None) -> PreparedDataset
    problem_id(source, problem) -> str                         # the stable id (docs/DATA.md)
    PreparedDataset(rows, quarantine, stats)                   # .write(out_dir) -> {"rows": path, "quarantine": path}
    PREPARED_SCHEMA, QUARANTINE_SCHEMA, QUARANTINE_REASONS, BINARY_PARTS

The loading formats, the prepared schema and its ids, the filtering rules in order (with examples), gold
strings, difficulty and the held-out split: docs/DATA.md, "Training datasets".
"""
from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
import string
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from .spec import DatasetSpec

log = logging.getLogger(__name__)

__all__ = [
    "BINARY_PARTS",
    "DEEPMATH_COLUMNS",
    "DEEPMATH_DATASET",
    "POLARIS_COLUMNS",
    "POLARIS_DATASET",
    "PREPARED_SCHEMA",
    "QUARANTINE_REASONS",
    "QUARANTINE_SCHEMA",
    "DatasetError",
    "PreparedDataset",
    "binary_part",
    "check_golds",
    "load_deepmath",
    "load_polaris",
    "load_table",
    "normalize_final_answer",
    "prepare_deepmath",
    "prepare_polaris",
    "problem_id",
    "verifier_gold",
]


class DatasetError(ValueError):
    """A dataset problem (missing file, wrong columns, bad rows); the message names the file/row/field and the fix."""


PREPARED_SCHEMA = pa.schema(
    [
        pa.field("id", pa.string(), nullable=False),
        pa.field("problem", pa.string(), nullable=False),
        pa.field("answer", pa.string(), nullable=False),
        pa.field("difficulty", pa.float64()),
        pa.field("source", pa.string(), nullable=False),
        pa.field("split", pa.string(), nullable=False),
        pa.field("row_index", pa.int64(), nullable=False),
    ]
)

QUARANTINE_SCHEMA = pa.schema(
    [
        pa.field("row_index", pa.int64(), nullable=False),
        pa.field("id", pa.string()),
        pa.field("problem", pa.string()),
        pa.field("answer", pa.string()),
        pa.field("reason", pa.string(), nullable=False),
        pa.field("detail", pa.string()),
    ]
)

EMPTY_PROBLEM = "empty_problem"
EMPTY_ANSWER = "empty_answer"
DUPLICATE_PROBLEM = "duplicate_problem"
UNPARSABLE_ANSWER = "unparsable_answer"
QUARANTINE_REASONS = (EMPTY_PROBLEM, EMPTY_ANSWER, DUPLICATE_PROBLEM, UNPARSABLE_ANSWER)

BINARY_PARTS = ("yes", "no", "true", "false")

DEEPMATH_COLUMNS = ("question", "final_answer", "difficulty")
"""Read from a DeepMath-103K file (it also has ``topic`` and ``r1_solution_1..3``, which are not needed)."""
POLARIS_COLUMNS = ("problem", "answer", "difficulty")

_HOW_TO = {
    "deepmath_path": (
        "DeepMath-103K",
        (
            "e.g. `python -c \"import datasets; datasets.load_dataset('zwhe99/DeepMath-103K', split='train')"
            ".save_to_disk('/data/deepmath')\"` on a machine with network access"
        ),
    ),
    "polaris_path": (
        "Polaris-53K",
        (
            "e.g. `python -c \"import datasets; datasets.load_dataset('POLARIS-Project/Polaris-Dataset-53K', "
            "split='train').save_to_disk('/data/polaris')\"` on a machine with network access"
        ),
    ),
}


def _how_to_provide(what: str, setting: str) -> str:
    example = _HOW_TO.get(setting, (what, ""))[1]
    return (
        f"Set `{setting}` of the `data` resource (DataResource; in the Dagster launchpad: "
        f"resources: {{data: {{config: {{{setting}: /path/to/file.parquet}}}}}}) to a local Parquet file, a directory "
        f"of Parquet files, a JSONL file, or a `datasets.save_to_disk` / `datasets` cache directory holding {what}. "
        "Nothing is downloaded" + (f"; to make such a copy: {example}." if example else ".")
    )


# ------------------------------------------------------------------------------------------------------------------
# Loading
# ------------------------------------------------------------------------------------------------------------------


def load_table(
    path: str | os.PathLike | None,
    *,
    columns: Sequence[str] | None = None,
    required: Sequence[str] = (),
    what: str = "dataset",
    setting: str = "path",
) -> pa.Table:
    """The rows at ``path`` as a pyarrow Table (formats: see the module docstring).

    ``columns``: read only these (those present; Parquet reads skip the others entirely). ``required``: columns that
    must be present, else DatasetError naming them and listing those found. ``what`` / ``setting`` only shape the
    error messages (e.g. ``"DeepMath-103K"`` / ``"deepmath_path"``).
    """
    if path is None or (isinstance(path, str) and not path.strip()):
        raise DatasetError(f"{what}: no local path is configured. " + _how_to_provide(what, setting))
    p = Path(path).expanduser()
    if not p.exists():
        raise DatasetError(
            f"{what}: {setting}={str(path)!r} does not exist (resolved to {p.resolve()}). "
            + _how_to_provide(what, setting)
        )
    want = list(dict.fromkeys([*(columns or ()), *required])) if columns is not None else None
    t0 = time.perf_counter()
    if p.is_dir():
        table, origin = _read_dir(p, want, required, what, setting)
    else:
        table, origin = _read_file(p, want, required, what, setting), str(p)
    _require_columns(table.column_names, required, origin, what)
    if want is not None:
        table = table.select([c for c in want if c in table.column_names])
    table = _decode_binary(table, origin, what)
    log.info("%s: loaded %d rows x %d columns from %s in %.2f s", what, table.num_rows, table.num_columns, origin,
             time.perf_counter() - t0)
    return table


def _decode_binary(table: pa.Table, origin: str, what: str) -> pa.Table:
    """BINARY / LARGE_BINARY columns (a Parquet writer that stored text without the UTF8 annotation) decoded as
    UTF-8 strings. Without this a cell reads as ``bytes`` and becomes the text ``"b'...'"`` (a problem or gold
    nobody can answer). A column that is not valid UTF-8 is refused, naming the file, column and row."""
    for i, f in enumerate(table.schema):
        if not (pa.types.is_binary(f.type) or pa.types.is_large_binary(f.type)):
            continue
        target = pa.large_string() if pa.types.is_large_binary(f.type) else pa.string()
        col = table.column(i)
        try:
            text = col.cast(target)
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            for row, v in enumerate(col.to_pylist()):
                if v is None:
                    continue
                try:
                    v.decode("utf-8")
                except UnicodeDecodeError as e:
                    raise DatasetError(
                        f"{what}: {origin}: column {f.name!r} is BINARY and row {row} is not UTF-8 text "
                        f"({e.reason} at byte {e.start}: {v[max(0, e.start - 10):e.start + 10]!r}). Fix: write "
                        f"{f.name!r} as a UTF-8 string column (e.g. re-encode the text to UTF-8 and write it with "
                        "pyarrow type pa.string()); nothing was loaded."
                    ) from None
            raise  # pragma: no cover - the cast failed for another reason
        table = table.set_column(i, pa.field(f.name, target, f.nullable), text)
        log.info("%s: column %r of %s is BINARY; decoded it as UTF-8 text", what, f.name, origin)
    return table


def load_deepmath(path: str | os.PathLike | None) -> pa.Table:
    """DeepMath-103K's ``question``, ``final_answer`` and ``difficulty`` columns from a local copy."""
    return load_table(path, columns=DEEPMATH_COLUMNS, required=DEEPMATH_COLUMNS, what="DeepMath-103K",
                      setting="deepmath_path")


def load_polaris(path: str | os.PathLike | None) -> pa.Table:
    """Polaris-53K's ``problem``, ``answer`` and ``difficulty`` columns from a local copy."""
    return load_table(path, columns=POLARIS_COLUMNS, required=POLARIS_COLUMNS, what="Polaris-53K",
                      setting="polaris_path")


def _require_columns(found: Sequence[str], required: Sequence[str], origin: str, what: str) -> None:
    missing = [c for c in required if c not in found]
    if missing:
        raise DatasetError(
            f"{what}: {origin} lacks the required column(s) {missing}; columns found: {list(found)}. "
            f"Fix: point the path at a copy of {what} in its published schema (required: {list(required)})."
        )


def _read_file(p: Path, want: list[str] | None, required: Sequence[str], what: str, setting: str) -> pa.Table:
    suffix = p.suffix.lower()
    if suffix == ".parquet":
        return _read_parquet([p], want, required, what)
    if suffix in (".jsonl", ".json", ".ndjson"):
        return read_json_rows(p, None)  # projected by load_table, after the required-column check
    if suffix == ".arrow":
        return _read_arrow(p)
    raise DatasetError(
        f"{what}: {p} is neither Parquet (.parquet), JSON lines (.jsonl/.json) nor Arrow (.arrow). "
        + _how_to_provide(what, setting)
    )


def _read_dir(
    p: Path, want: list[str] | None, required: Sequence[str], what: str, setting: str
) -> tuple[pa.Table, str]:
    if (p / "state.json").exists() or (p / "dataset_dict.json").exists():
        return _read_saved_dataset(p, want, required, what), f"the datasets directory {p}"
    parquet = sorted(f for f in p.rglob("*.parquet") if f.is_file())
    if parquet:
        return _read_parquet(parquet, want, required, what), f"{len(parquet)} Parquet file(s) under {p}"
    jsonl = sorted(f for f in p.rglob("*.jsonl") if f.is_file())
    if jsonl:
        return _concat([read_json_rows(f, None) for f in jsonl]), f"{len(jsonl)} JSONL file(s) under {p}"
    arrow = sorted(f for f in p.rglob("*.arrow") if f.is_file() and not f.name.startswith("cache-"))
    if arrow:
        parents = sorted({f.parent for f in arrow})
        if len(parents) > 1:
            raise DatasetError(
                f"{what}: {p} holds .arrow files in {len(parents)} directories ({[str(d) for d in parents[:5]]}); "
                f"set {setting} to the one directory of the dataset version to use."
            )
        train = [f for f in arrow if "-train" in f.name]
        files = train or arrow
        return _concat([_read_arrow(f) for f in files]), f"{len(files)} .arrow file(s) in {parents[0]}"
    raise DatasetError(
        f"{what}: the directory {p} holds no Parquet, JSONL or .arrow files and is not a `datasets.save_to_disk` "
        "directory (no state.json / dataset_dict.json). " + _how_to_provide(what, setting)
    )


def _read_parquet(files: list[Path], want: list[str] | None, required: Sequence[str], what: str) -> pa.Table:

    tables = []
    for f in files:
        names = pq.read_schema(f).names
        _require_columns(names, required, str(f), what)  # before the projection hides the other columns
        cols = None if want is None else [c for c in want if c in names]
        tables.append(pq.read_table(f, columns=cols))
    return _concat(tables)


def _read_arrow(f: Path) -> pa.Table:
    with pa.memory_map(str(f)) as source:
        try:
            return pa.ipc.open_stream(source).read_all()  # what `datasets` writes
        except pa.ArrowInvalid:
            source.seek(0)
            return pa.ipc.open_file(source).read_all()


def _read_saved_dataset(p: Path, want: list[str] | None, required: Sequence[str], what: str) -> pa.Table:
    import datasets

    ds = datasets.load_from_disk(str(p))
    if isinstance(ds, datasets.DatasetDict):
        splits = list(ds)
        if "train" in ds:
            ds = ds["train"]
        elif len(splits) == 1:
            ds = ds[splits[0]]
        else:
            raise DatasetError(
                f"{what}: {p} is a DatasetDict with splits {splits} and no 'train' split; set the path to one "
                f"split's directory (e.g. {p / splits[0]})."
            )
    _require_columns(ds.column_names, required, f"the datasets directory {p}", what)
    if want is not None:
        ds = ds.select_columns([c for c in want if c in ds.column_names])
    return ds.with_format("arrow")[:]


def read_json_rows(f: Path, want: list[str] | None, *, python: bool = False) -> pa.Table:
    """JSON lines (or one JSON array). pyarrow's reader first (unless ``python``); on a type conflict between rows
    (e.g. an answer that is a number in one row and a string in another), or if pyarrow turned strings into
    dates/times (an answer such as "2021-01-01" must stay text), a per-line Python reader that turns a mixed
    column into strings. A line that is not JSON raises DatasetError naming the file and line."""
    with open(f, "rb") as fh:
        head = fh.read(4096).lstrip()
    _check_utf8(f)  # pyarrow's reader takes invalid UTF-8 silently: refuse it here, naming the line
    if not head.startswith(b"[") and not python:
        import pyarrow.json as pj

        try:
            table = pj.read_json(str(f), read_options=pj.ReadOptions(block_size=1 << 26))
            if want is not None:
                table = table.select([c for c in want if c in table.column_names])
            if not any(pa.types.is_temporal(t) for t in table.schema.types):
                return table
            log.info("pyarrow read dates/times in %s; reading it line by line to keep them as text", f)
        except pa.ArrowInvalid as e:
            log.info("pyarrow could not read %s (%s); reading it line by line", f, e)
    rows: list[dict] = []
    with open(f, "rb") as fh:
        if head.startswith(b"["):
            data = fh.read()
            try:
                rows = json.loads(_utf8(data, f, data[: _bad_utf8_at(data)].count(b"\n") + 1))
            except json.JSONDecodeError as e:
                raise DatasetError(f"{f}: not valid JSON ({e}). Fix: one JSON object per line (JSONL).") from None
        else:
            for n, raw in enumerate(fh, start=1):
                line = _utf8(raw, f, n)
                if not line.strip():
                    continue
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise DatasetError(
                        f"{f}, line {n}: not valid JSON ({e}). Fix: one JSON object per line (JSONL)."
                    ) from None
    if not all(isinstance(r, dict) for r in rows):
        raise DatasetError(f"{f}: every row must be a JSON object with named fields.")
    names = list(dict.fromkeys(k for r in rows for k in r))
    if want is not None:
        names = [c for c in names if c in want]
    arrays = {}
    for c in names:
        values = [r.get(c) for r in rows]
        try:
            arrays[c] = pa.array(values)
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            arrays[c] = pa.array([None if v is None else as_text(v) for v in values], pa.string())
    return pa.table(arrays) if arrays else pa.table({})


def _check_utf8(f: Path, chunk: int = 1 << 22) -> None:
    """Raise DatasetError naming the file and line of the first byte of ``f`` that is not UTF-8 (streamed in 4 MB
    chunks: a big JSONL file is never held twice in memory)."""
    import codecs

    decoder = codecs.getincrementaldecoder("utf-8")()
    lines_before = 0
    with open(f, "rb") as fh:
        while True:
            data = fh.read(chunk)
            try:
                decoder.decode(data, final=not data)
            except UnicodeDecodeError:
                at = _bad_utf8_at(data)
                start = data.rfind(b"\n", 0, at) + 1
                end = data.find(b"\n", at)
                _utf8(data[start:end if end >= 0 else len(data)], f, lines_before + data.count(b"\n", 0, at) + 1)
                raise DatasetError(  # pragma: no cover - a bad sequence straddling a 4 MB chunk boundary
                    f"{f}, near line {lines_before + 1}: not UTF-8 text. Fix: re-encode the file as UTF-8."
                ) from None
            if not data:
                return
            lines_before += data.count(b"\n")


def _bad_utf8_at(data: bytes) -> int:
    """Offset of the first byte that is not valid UTF-8 (``len(data)`` if all of it is)."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as e:
        return e.start
    return len(data)


def _utf8(data: bytes, f: Path, line: int) -> str:
    """``data`` (line ``line`` of file ``f``, or the whole file) as text; not UTF-8 -> DatasetError naming the
    file, line and byte, and the fix (JSON is UTF-8 by definition, RFC 8259; nothing is guessed or replaced)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DatasetError(
            f"{f}, line {line}: not UTF-8 text ({e.reason} at byte {e.start}: "
            f"{data[max(0, e.start - 20):e.start + 10]!r}). Fix: re-encode the file as UTF-8 (e.g. `iconv -f latin1 "
            f"-t utf-8 {f.name} > fixed.jsonl` if it is Latin-1) and point the path at the fixed copy; nothing was "
            "loaded from it."
        ) from None


def _concat(tables: list[pa.Table]) -> pa.Table:
    if len(tables) == 1:
        return tables[0]
    return pa.concat_tables(tables, promote_options="permissive")


# ------------------------------------------------------------------------------------------------------------------
# Answers
# ------------------------------------------------------------------------------------------------------------------

_UNWRAP = re.compile(r"\\(?:boxed|text)\s*\{([^{}]*)\}")
_PUNCT = re.compile("[" + re.escape(string.punctuation) + "]")
_WS = re.compile(r"\s+")


def normalize_final_answer(s: Any) -> str:
    """The answer as the binary filter sees it: ``\\boxed{}`` / ``\\text{}`` unwrapped, ``$`` and ASCII punctuation
    dropped, whitespace collapsed, lowercased. ``normalize_final_answer("$\\\\text{No}$") == "no"``."""
    if s is None:
        return ""
    s = as_text(s)
    while True:
        unwrapped = _UNWRAP.sub(r"\1", s)
        if unwrapped == s:
            break
        s = unwrapped
    s = _PUNCT.sub("", s.replace("$", ""))
    return _WS.sub(" ", s).strip().lower()


def binary_part(s: Any) -> str | None:
    """``"yes"``, ``"no"``, ``"true"`` or ``"false"`` if the normalized answer is exactly that, else None."""
    n = normalize_final_answer(s)
    return n if n in BINARY_PARTS else None


def verifier_gold(s: str) -> str:
    """The gold string handed to the grader: stripped; wrapped in ``\\boxed{}`` when it holds an escaped ``\\$``
    but no ``$`` delimiter and no box (the grader would otherwise take ``\\$`` for a delimiter and find nothing)."""
    g = s.strip()
    if "\\$" in g and "$" not in g.replace("\\$", "") and "\\boxed" not in g and "\\fbox" not in g:
        return "\\boxed{" + g + "}"
    return g


def as_text(v: Any) -> str:
    """A cell as text: strings as is, integral floats without ``.0`` (AMC's 27.0 -> "27"), lists joined by ", "."""
    if isinstance(v, str):
        return v
    if isinstance(v, (bytes, bytearray)):  # a BINARY cell that reached here undecoded: text, never "b'...'"
        try:
            return bytes(v).decode("utf-8")
        except UnicodeDecodeError as e:
            raise DatasetError(f"a BINARY value is not UTF-8 text ({e.reason} at byte {e.start}): {bytes(v)[:40]!r}. "
                               "Fix: store text columns as UTF-8 strings.") from None
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, float) and math.isfinite(v) and v.is_integer():
        return str(int(v))
    if isinstance(v, (list, tuple)):
        return ", ".join(as_text(x) for x in v if x is not None)
    return str(v)


_MISSING_TEXT = ("nan",)
"""Answer texts that are a missing value written out (``str(float("nan"))``, pandas' ``astype(str)``), never a
math answer: math-verify parses ``nan`` and ``\\boxed{nan}`` would then be graded correct against it."""


def _blank_why(v: Any, *, answer: bool = False) -> str | None:
    """Why a cell counts as missing (None: it does not). NaN floats are missing values (pandas writes a null
    string cell as NaN), never the text "nan"; for an answer, the text "nan" itself is a missing value too."""
    if v is None:
        return "null"
    if isinstance(v, float) and math.isnan(v):
        return "NaN (a missing value in the file, e.g. a pandas null)"
    if isinstance(v, str) and not v.strip():
        return "blank"
    if isinstance(v, (list, tuple)) and not v:
        return "an empty list"
    if answer and isinstance(v, str) and v.strip().lower() in _MISSING_TEXT:
        return f"the text {v.strip()!r} (a missing value written as text, not a math answer)"
    return None


def _problem_key(problem: str) -> str:
    return _WS.sub(" ", problem).strip()


def problem_id(source: str, problem: str) -> str:
    """``<source>-<first 16 hex digits of sha256 of the whitespace-collapsed problem>``."""
    return f"{source}-{hashlib.sha256(_problem_key(problem).encode('utf-8')).hexdigest()[:16]}"


# ------------------------------------------------------------------------------------------------------------------
# Gold checks
# ------------------------------------------------------------------------------------------------------------------

_PARALLEL_FROM = 4000
"""Below this many distinct golds ``check_golds`` uses one grader in this process (starting worker processes
costs ~1-2 s each)."""


def _usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def check_golds(
    golds: Iterable[str], grader=None, *, workers: int | None = None, forms: dict[str, str] | None = None
) -> dict[str, str | None]:
    """For each distinct gold: None if the grader can parse it, else the grader's message (why, and the fix).
    ``forms``, if given, is filled with gold -> the string the grader grades against (``MathGrader.graded_gold``:
    the gold itself, or its normalized form when math-verify reads nothing from it as written).

    Uses ``MathGrader.check_gold`` (the grader caches each parse; duplicates are checked once). One grader in this
    process (``grader``, or a new ``MathGrader()``) when ``workers`` is 1, or by default for fewer than 4,000
    distinct golds; otherwise the golds are split over ``workers`` (default: the usable CPUs minus one, at most 8)
    graders with ``isolation="process"``, each driven from its own thread (each has its own worker process and
    lock, and the threads wait on sockets, so the parses run in parallel).

    Measured on a 2-core VM shared with other jobs (so the default there is 1 worker): parsing costs what
    math-verify's LaTeX parser costs, ~2 ms per simple gold (10,000 distinct integers, fractions, roots, powers:
    19.7 s in-process), ~4.5 ms per benchmark gold (1,547 golds: ~7 s), 13-21 ms for a tuple or an interval such as
    ``(3, 7)``; the grader adds nothing measurable in-process and ~5-10 % per gold through a worker process. So
    100K distinct golds take a few minutes on one core. Two worker processes on that busy 2-core VM were slower
    (25.6 s vs 19.7 s for the 10,000): parallelism only pays with idle cores.
    """
    from pc_pipelines.rewards import MathGrader

    unique = list(dict.fromkeys(g if isinstance(g, str) else as_text(g) for g in golds))
    if workers is None:
        workers = 1 if len(unique) < _PARALLEL_FROM else max(1, min(_usable_cpus() - 1, 8))
    if workers < 1:
        raise ValueError(f"check_golds workers={workers!r}: must be >= 1 (or None for automatic)")
    t0 = time.perf_counter()

    def run(g: Any, part: list[str]) -> dict[str, str | None]:
        out: dict[str, str | None] = {}
        for i, gold in enumerate(part, start=1):
            try:
                graded = g.graded_gold(gold)
                out[gold] = None
                if forms is not None and graded != gold.strip():
                    forms[gold] = graded
            except ValueError as e:
                out[gold] = str(e)
            if i % 10000 == 0:
                log.info("checked %d/%d golds", i, len(part))
        return out

    if workers == 1 or len(unique) < 2:
        result = run(grader if grader is not None else MathGrader(), unique)
    else:
        timeout_s = grader.timeout_s if grader is not None else 2.0
        parts = [unique[i::workers] for i in range(workers)]
        graders = [MathGrader(timeout_s=timeout_s, isolation="process") for _ in parts]
        try:
            with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="check-golds") as ex:
                results = list(ex.map(run, graders, parts))
        finally:
            for g in graders:
                g.close()
        merged = {k: v for r in results for k, v in r.items()}
        result = {gold: merged[gold] for gold in unique}
    dt = time.perf_counter() - t0
    bad = sum(v is not None for v in result.values())
    log.info("checked %d distinct golds with %d worker(s) in %.2f s: %d unparsable", len(unique), workers, dt, bad)
    return result


# ------------------------------------------------------------------------------------------------------------------
# Preparation
# ------------------------------------------------------------------------------------------------------------------


@dataclass
class PreparedDataset:
    """``rows``: kept rows in :data:`PREPARED_SCHEMA` (file order); ``quarantine``: rejected rows in
    :data:`QUARANTINE_SCHEMA` with the reason per row; ``stats``: JSON-able counts (see the module docstring)."""

    rows: pa.Table
    quarantine: pa.Table
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def source(self) -> str:
        return str(self.stats.get("source", "dataset"))

    def write(self, out_dir: str | os.PathLike) -> dict[str, Path]:
        """Writes ``<source>.parquet`` and ``<source>.quarantine.parquet`` (+ ``<source>.stats.json``) under
        ``out_dir``, each via a temporary file and an atomic rename; returns their paths."""

        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        paths = {
            "rows": out / f"{self.source}.parquet",
            "quarantine": out / f"{self.source}.quarantine.parquet",
            "stats": out / f"{self.source}.stats.json",
        }
        for key, path in paths.items():
            tmp = path.with_name(path.name + ".tmp")
            if key == "stats":
                tmp.write_text(json.dumps(self.stats, indent=2, sort_keys=True))
            else:
                pq.write_table(self.rows if key == "rows" else self.quarantine, tmp)
            os.replace(tmp, path)
        return paths


def prepare_deepmath(
    table: pa.Table,
    heldout: int = 500,
    seed: int = 0,
    grader=None,
    *,
    gold_workers: int | None = None,
) -> PreparedDataset:
    """DeepMath-103K (``question``, ``final_answer``, ``difficulty``) -> prepared rows, with the binary-answer
    filter, quarantine and a ``heldout``-row held-out split (rules: module docstring)."""
    _require_columns(table.column_names, DEEPMATH_COLUMNS, "the DeepMath table", "DeepMath-103K")
    return prepare_rows(
        "deepmath",
        table.column("question").to_pylist(),
        table.column("final_answer").to_pylist(),
        table.column("difficulty").to_pylist(),
        parse_number,
        drop_binary=True,
        heldout=heldout,
        seed=seed,
        grader=grader,
        gold_workers=gold_workers,
    )


def prepare_polaris(
    table: pa.Table,
    heldout: int = 0,
    seed: int = 0,
    grader=None,
    *,
    gold_workers: int | None = None,
) -> PreparedDataset:
    """Polaris-53K (``problem``, ``answer``, ``difficulty`` like ``"7/8"``) -> prepared rows with quarantine and an
    optional held-out split (no binary filter: the paper applies it to DeepMath only)."""
    _require_columns(table.column_names, POLARIS_COLUMNS, "the Polaris table", "Polaris-53K")
    return prepare_rows(
        "polaris",
        table.column("problem").to_pylist(),
        table.column("answer").to_pylist(),
        table.column("difficulty").to_pylist(),
        _parse_fraction,
        drop_binary=False,
        heldout=heldout,
        seed=seed,
        grader=grader,
        gold_workers=gold_workers,
    )


_FRACTION = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*/\s*(\d+(?:\.\d+)?)\s*$")


def _parse_fraction(v: Any) -> float | None:
    """Polaris difficulty: ``"a/b"`` (b > 0) -> a/b; a number (or numeric string) -> itself; else None."""
    if isinstance(v, str):
        m = _FRACTION.match(v)
        if m:
            den = float(m.group(2))
            return float(m.group(1)) / den if den > 0 else None
    return parse_number(v)


def parse_number(v: Any) -> float | None:
    if v is None or isinstance(v, bool):
        return None
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def prepare_rows(
    source: str,
    problems: list,
    answers: list,
    difficulties: list,
    parse_difficulty,
    *,
    drop_binary: bool,
    heldout: int,
    seed: int,
    grader,
    gold_workers: int | None,
    split: str | None = None,
    dedupe: bool = True,
    id_of=None,
) -> PreparedDataset:
    """The shared pipeline for training sets and benchmarks. ``split`` set (benchmarks: "eval") replaces the
    held-out split; ``dedupe=False`` keeps duplicate problems; ``id_of(row_index, problem)`` overrides the id."""
    t0 = time.perf_counter()
    n = len(problems)
    if not isinstance(heldout, int) or heldout < 0:
        raise DatasetError(f"{source}: heldout={heldout!r} must be an int >= 0 (rows for the held-out split).")
    quarantine: list[dict] = []
    by_reason = dict.fromkeys(QUARANTINE_REASONS, 0)
    binary = dict.fromkeys(BINARY_PARTS, 0)
    rewrapped = 0
    first_of: dict[str, int] = {}
    candidates: list[tuple[int, str, str, str]] = []  # row, id, problem, gold

    def reject(i: int, rid: str | None, problem: Any, answer: Any, reason: str, detail: str) -> None:
        by_reason[reason] += 1
        quarantine.append(
            {
                "row_index": i,
                "id": rid,
                "problem": None if problem is None else as_text(problem),
                "answer": None if answer is None else as_text(answer),
                "reason": reason,
                "detail": detail,
            }
        )

    for i in range(n):
        problem, answer = problems[i], answers[i]
        why = _blank_why(problem)
        if why is not None:
            reject(i, None, None if why != "blank" else problem, answer, EMPTY_PROBLEM, f"the problem is {why}")
            continue
        problem = as_text(problem).strip()
        rid = id_of(i, problem) if id_of is not None else problem_id(source, problem)
        why = _blank_why(answer, answer=True)
        if why is not None:
            reject(i, rid, problem, None if isinstance(answer, float) else answer, EMPTY_ANSWER,
                   f"the answer is {why}")
            continue
        answer_text = as_text(answer)
        if drop_binary:
            part = binary_part(answer_text)
            if part is not None:
                binary[part] += 1
                continue
        if dedupe:
            first = first_of.get(rid)
            if first is not None:
                same = as_text(answers[first]).strip() == answer_text.strip()
                reject(i, rid, problem, answer_text, DUPLICATE_PROBLEM,
                       f"same problem as row {first} (kept), {'same answer' if same else 'different answer'}: "
                       f"{as_text(answers[first]).strip()[:80]!r}")
                continue
            first_of[rid] = i
        gold = verifier_gold(answer_text)
        if gold != answer_text.strip():
            rewrapped += 1
        candidates.append((i, rid, problem, gold))

    t_gold = time.perf_counter()
    # A gold math-verify reads nothing from as written is graded normalized as standard graders do (62.5% -> 62.5,
    # np.arcsin -> \arcsin, ...; rewards/normalize.py): kept with the normalized gold as its answer, quarantined only
    # when that does not parse either.
    forms: dict[str, str] = {}
    verdicts = check_golds((c[3] for c in candidates), grader, workers=gold_workers, forms=forms)
    gold_seconds = time.perf_counter() - t_gold
    from pc_pipelines.rewards.normalize import normalize

    kept = []
    normalized: list[dict[str, Any]] = []
    for i, rid, problem, gold in candidates:
        why = verdicts[gold]
        if why is not None:
            reject(i, rid, problem, gold, UNPARSABLE_ANSWER, why)
        elif gold in forms:
            normalized.append({"row_index": i, "gold": gold, "normalized": forms[gold],
                               "rules": list(normalize(gold)[1])})
            kept.append((i, rid, problem, forms[gold]))
        else:
            kept.append((i, rid, problem, gold))
    if normalized:
        log.info("%s: %d golds normalized so math-verify can grade them, e.g. %s", source, len(normalized),
                 ", ".join(f"{d['gold']!r} -> {d['normalized']!r}" for d in normalized[:5]))

    diffs, unparsed = [], []
    for i, *_ in kept:
        raw = difficulties[i]
        d = parse_difficulty(raw)
        if d is None and raw is not None:
            unparsed.append((i, raw))
        diffs.append(d)
    if unparsed:
        log.warning("%s: %d difficulty values do not parse (kept with difficulty null), e.g. %s", source,
                    len(unparsed), ", ".join(f"row {i}: {v!r}" for i, v in unparsed[:5]))

    if split is not None:
        splits = [split] * len(kept)
        n_held = 0
    else:
        if heldout and heldout >= len(kept):
            raise DatasetError(
                f"{source}: heldout={heldout} but only {len(kept)} rows are kept (of {n}); the held-out split must "
                f"leave training rows. Fix: lower heldout (e.g. {max(0, len(kept) // 10)}) or load the full dataset."
            )
        held = set(sorted((hashlib.sha256(f"{seed}:{k[1]}".encode()).hexdigest(), k[1]) for k in kept)[:heldout])
        held_ids = {rid for _, rid in held}
        splits = ["heldout" if k[1] in held_ids else "train" for k in kept]
        n_held = len(held_ids)

    rows = pa.table(
        {
            "id": [k[1] for k in kept],
            "problem": [k[2] for k in kept],
            "answer": [k[3] for k in kept],
            "difficulty": pa.array(diffs, pa.float64()),
            "source": [source] * len(kept),
            "split": splits,
            "row_index": pa.array([k[0] for k in kept], pa.int64()),
        },
        schema=PREPARED_SCHEMA,
    )
    quarantine.sort(key=lambda q: q["row_index"])
    qtable = pa.Table.from_pylist(quarantine, schema=QUARANTINE_SCHEMA)
    stats: dict[str, Any] = {
        "source": source,
        "rows_in": n,
        "kept": rows.num_rows,
        "quarantined": qtable.num_rows,
        "quarantined_by_reason": by_reason,
        "answers_rewrapped": rewrapped,
        "answers_normalized": len(normalized),
        "normalized_golds": normalized,
        "difficulty_unparsed": len(unparsed),
        "distinct_golds_checked": len(verdicts),
        "gold_check_seconds": round(gold_seconds, 3),
        "seconds": round(time.perf_counter() - t0, 3),
    }
    if drop_binary:
        stats["binary_removed"] = sum(binary.values())
        stats["binary_removed_by_part"] = binary
    if split is None:
        stats.update(train=rows.num_rows - n_held, heldout=n_held, heldout_seed=seed)
    assert stats["rows_in"] == stats["kept"] + stats["quarantined"] + stats.get("binary_removed", 0)
    log.info("%s: %d rows in, %d kept, %d quarantined %s%s in %.1f s", source, n, rows.num_rows, qtable.num_rows,
             {k: v for k, v in by_reason.items() if v},
             f", {stats['binary_removed']} binary removed {binary}" if drop_binary else "", stats["seconds"])
    return PreparedDataset(rows=rows, quarantine=qtable, stats=stats)


# ------------------------------------------------------------------------------------------------------------------
# Their registry entries (pc_pipelines/data/registry.py lists them)
# ------------------------------------------------------------------------------------------------------------------

DEEPMATH_DATASET = DatasetSpec(
    "deepmath", "DeepMath-103K",
    "DeepMath-103K without binary (yes/no/true/false) answers, with a seeded held-out split; bad rows quarantined\n"
    "into their own Parquet with a reason per row.",
    load=load_deepmath, prepare=prepare_deepmath, heldout=500, forbid_binary=True, min_kept_fraction=0.75,
    config_help={
        "config": "How the DeepMath-103K training set is split (the filter and quarantine rules are fixed: see "
                  "``pc_pipelines/data/datasets.py``).",
        "heldout": "Rows of the held-out evaluation split (docs/DESIGN.md section 6: 500). Must leave training rows.",
        "checks": "Row-count bounds of ``deepmath``'s ``row_count_in_range`` check. By default relative to the rows "
                  "read from the file: the full 103,110 rows keep about 85K (the paper), a fraction of 0.82, so 0.75 "
                  "catches a broken load or an over-eager filter while any small or partial copy passes. Pin the "
                  "paper's numbers with min_rows=80000, max_rows=90000.",
    },
)
POLARIS_DATASET = DatasetSpec(
    "polaris", "Polaris-53K",
    'Polaris-53K (difficulty "7/8" -> 0.875), bad rows quarantined into their own Parquet with a reason per row.',
    load=load_polaris, prepare=prepare_polaris, heldout=0, forbid_binary=False, min_kept_fraction=0.9,
    config_help={
        "config": "How the Polaris-53K training set is split (quarantine rules: ``pc_pipelines/data/datasets.py``).",
        "heldout": "Rows of the held-out evaluation split (0: none; the paper evaluates Polaris runs on the "
                   "benchmarks). Must leave training rows.",
        "seed": "Seed of the held-out split (as for DeepMath).",
        "gold_workers": "Grader worker processes for the gold check (default: automatic).",
        "checks": "Row-count bounds of ``polaris``'s ``row_count_in_range`` check: relative to the rows read from the "
                  "file unless pinned (no binary filter, so nearly every row should survive the quarantine).",
    },
)
