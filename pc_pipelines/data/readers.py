"""Reading a dataset's rows from local files: Parquet, JSON lines, Arrow and ``datasets`` directories, as one pyarrow
Table, with clear refusals (:class:`DatasetError`) for a missing path, missing columns or text that is not UTF-8.
Nothing is downloaded, ever. Public API::

    DatasetError(ValueError)            # names the file / row / field and the fix (raised by every data module)
    load_table(path, *, columns=None, required=(), what="dataset", setting="path", copy_example="") -> pa.Table
    require_columns(found, required, origin, what)      # DatasetError naming the missing columns
    read_json_rows(f, want, *, python=False) -> pa.Table
    as_text(v) -> str                   # a cell as text (27.0 -> "27", lists joined)

The formats and what is read from each: docs/DATA.md, "Loading".
"""
from __future__ import annotations

import json
import logging
import math
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

log = logging.getLogger(__name__)

__all__ = [
    "DatasetError",
    "as_text",
    "load_table",
    "read_json_rows",
    "require_columns",
]


class DatasetError(ValueError):
    """A dataset problem (missing file, wrong columns, bad rows); the message names the file/row/field and the fix."""


def _how_to_provide(what: str, setting: str, example: str = "") -> str:
    return (
        f"Set `{setting}` of the `data` resource (DataResource; in the Dagster launchpad: "
        f"resources: {{data: {{config: {{{setting}: /path/to/file.parquet}}}}}}) to a local Parquet file, a directory "
        f"of Parquet files, a JSONL file, or a `datasets.save_to_disk` / `datasets` cache directory holding {what}. "
        "Nothing is downloaded" + (f"; to make such a copy: {example}." if example else ".")
    )


def load_table(
    path: str | os.PathLike | None,
    *,
    columns: Sequence[str] | None = None,
    required: Sequence[str] = (),
    what: str = "dataset",
    setting: str = "path",
    copy_example: str = "",
) -> pa.Table:
    """The rows at ``path`` as a pyarrow Table (formats: docs/DATA.md, "Loading").

    ``columns``: read only these (those present; Parquet reads skip the others entirely). ``required``: columns that
    must be present, else DatasetError naming them and listing those found. ``what`` / ``setting`` only shape the
    error messages (e.g. ``"DeepMath-103K"`` / ``"deepmath_path"``); ``copy_example``, how to make a local copy of the
    dataset, ends the message of a missing or unreadable path.
    """
    how_to = _how_to_provide(what, setting, copy_example)
    if path is None or (isinstance(path, str) and not path.strip()):
        raise DatasetError(f"{what}: no local path is configured. " + how_to)
    p = Path(path).expanduser()
    if not p.exists():
        raise DatasetError(f"{what}: {setting}={str(path)!r} does not exist (resolved to {p.resolve()}). " + how_to)
    want = list(dict.fromkeys([*(columns or ()), *required])) if columns is not None else None
    t0 = time.perf_counter()
    if p.is_dir():
        table, origin = _read_dir(p, want, required, what, setting, how_to)
    else:
        table, origin = _read_file(p, want, required, what, how_to), str(p)
    require_columns(table.column_names, required, origin, what)
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

def require_columns(found: Sequence[str], required: Sequence[str], origin: str, what: str) -> None:
    """DatasetError if a column of ``required`` is not among ``found`` (``origin``: the file or table read)."""
    missing = [c for c in required if c not in found]
    if missing:
        raise DatasetError(
            f"{what}: {origin} lacks the required column(s) {missing}; columns found: {list(found)}. "
            f"Fix: point the path at a copy of {what} in its published schema (required: {list(required)})."
        )


def _read_file(p: Path, want: list[str] | None, required: Sequence[str], what: str, how_to: str) -> pa.Table:
    suffix = p.suffix.lower()
    if suffix == ".parquet":
        return _read_parquet([p], want, required, what)
    if suffix in (".jsonl", ".json", ".ndjson"):
        return read_json_rows(p, None)  # projected by load_table, after the required-column check
    if suffix == ".arrow":
        return _read_arrow(p)
    raise DatasetError(
        f"{what}: {p} is neither Parquet (.parquet), JSON lines (.jsonl/.json) nor Arrow (.arrow). " + how_to
    )


def _read_dir(
    p: Path, want: list[str] | None, required: Sequence[str], what: str, setting: str, how_to: str
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
        "directory (no state.json / dataset_dict.json). " + how_to
    )


def _read_parquet(files: list[Path], want: list[str] | None, required: Sequence[str], what: str) -> pa.Table:

    tables = []
    for f in files:
        names = pq.read_schema(f).names
        require_columns(names, required, str(f), what)  # before the projection hides the other columns
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
    require_columns(ds.column_names, required, f"the datasets directory {p}", what)
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
