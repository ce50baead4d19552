"""The preparation every dataset shares (training sets and benchmarks): a loaded table's problems and answers ->
kept rows in :data:`PREPARED_SCHEMA`, rejected rows in :data:`QUARANTINE_SCHEMA` with a reason each, counts, and a
seeded held-out split. (:mod:`.prepared_task` reads the written files back as a run's task.) Public API::

    prepare_rows(source, problems, answers, difficulties, parse_difficulty, *, drop_binary, heldout, seed, grader,
                 gold_workers, split=None, dedupe=True, id_of=None) -> PreparedDataset
    PreparedDataset(rows, quarantine, stats)                   # .write(out_dir) -> {"rows": path, "quarantine": path}
    normalize_final_answer(s) -> str ; binary_part(s) -> "yes" | "no" | "true" | "false" | None
    verifier_gold(s) -> str                                    # the gold string handed to the grader (docs/DATA.md)
    check_golds(golds, grader=None, *, workers=None) -> {gold: None | reason}
    problem_id(source, problem) -> str                         # the stable id (docs/DATA.md)
    parse_number(v) -> float | None                            # a difficulty as a finite float
    PREPARED_SCHEMA, QUARANTINE_SCHEMA, QUARANTINE_REASONS, BINARY_PARTS

The prepared schema and its ids, the filtering rules in order (with examples), gold strings, difficulty and the
held-out split: docs/DATA.md, "Training datasets".
"""
from __future__ import annotations

import hashlib
import inspect
import json
import logging
import math
import os
import re
import string
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from .readers import DatasetError, as_text

log = logging.getLogger(__name__)

__all__ = [
    "BINARY_PARTS",
    "PREPARED_SCHEMA",
    "QUARANTINE_REASONS",
    "QUARANTINE_SCHEMA",
    "PreparedDataset",
    "binary_part",
    "check_golds",
    "gold_cache_dir",
    "normalize_final_answer",
    "parse_number",
    "prepare_rows",
    "problem_id",
    "verifier_gold",
]


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


GOLD_CACHE_ENV = "PC_PIPELINES_CACHE"
"""A folder for :func:`check_golds`' cached verdicts (default ``$XDG_CACHE_HOME/pc-pipelines``, else
``~/.cache/pc-pipelines``); ``off`` turns the cache off."""
_GRADING_CODE = ("rewards/_verify.py", "rewards/math.py", "rewards/normalize.py", "data/prepare.py")
_GRADING_PACKAGES = ("math-verify", "latex2sympy2_extended", "sympy", "antlr4-python3-runtime")


def gold_cache_dir() -> Path | None:
    """Where :func:`check_golds` keeps verdicts it has computed (None: the cache is off, ``PC_PIPELINES_CACHE=off``)."""
    env = os.environ.get(GOLD_CACHE_ENV, "")
    if env.strip().lower() == "off":
        return None
    if env:
        return Path(env) / "golds"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pc-pipelines" / "golds"


def _grading_fingerprint(timeout_s: float) -> str:
    """What decides a gold's verdict: the grading code's bytes, the parsing packages' versions, the timeout. A change
    to any of them is another cache key, so a cached verdict is always the one a fresh check would give."""
    from importlib import metadata

    h = hashlib.sha256(f"timeout={timeout_s!r}".encode())
    root = Path(__file__).resolve().parent.parent
    for rel in _GRADING_CODE:
        h.update(rel.encode() + b"\0" + (root / rel).read_bytes())
    for pkg in _GRADING_PACKAGES:
        try:
            h.update(f"{pkg}=={metadata.version(pkg)}".encode())
        except metadata.PackageNotFoundError:
            h.update(f"{pkg} absent".encode())
    return h.hexdigest()


def _cached_golds(cache: Path, unique: list[str], timeout_s: float) -> tuple[Path, dict | None]:
    key = hashlib.sha256(json.dumps([_grading_fingerprint(timeout_s), unique]).encode()).hexdigest()
    path = cache / f"{key}.json"
    try:
        got = json.loads(path.read_text())
        if isinstance(got, dict) and set(got.get("verdicts", {})) == set(unique):
            return path, got
    except (OSError, ValueError):
        pass  # absent, unreadable or damaged: checked again and written anew
    return path, None


def _store_golds(path: Path, verdicts: dict[str, str | None], forms: dict[str, str]) -> None:
    """Write the verdicts whole or not at all (a temporary file renamed over); a cache that cannot be written is
    only slower next time."""
    from pc_pipelines.durable import write_file

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        write_file(tmp, json.dumps({"verdicts": verdicts, "forms": forms}).encode(), replace=True)
        os.replace(tmp, path)
    except OSError as exc:
        log.info("gold verdicts not cached at %s (%s)", path, exc)


def check_golds(
    golds: Iterable[str], grader=None, *, workers: int | None = None, forms: dict[str, str] | None = None,
    cache: Path | None = None,
) -> dict[str, str | None]:
    """For each distinct gold: None if the grader can parse it, else the grader's message (why, and the fix).
    ``forms``, if given, is filled with gold -> the string the grader grades against (``MathGrader.graded_gold``:
    the gold itself, or its normalized form when math-verify reads nothing from it as written).

    Uses ``MathGrader.check_gold`` (the grader caches each parse; duplicates are checked once). ``cache`` (a folder,
    :func:`gold_cache_dir`; with a plain ``MathGrader``, its timeout in the key): the verdicts and forms of the same golds, checked before
    by the same grading code and package versions, are read from it instead (the benchmarks' ~1,500 golds: ~20 s of
    LaTeX parsing, paid once per machine); a missing or damaged entry is checked and written anew. One grader in this
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
    timeout_s = grader.timeout_s if grader is not None else inspect.signature(MathGrader).parameters["timeout_s"].default
    cached_at = None
    if cache is not None and (grader is None or type(grader) is MathGrader):  # a grader of another class: not cached
        if forms is None:  # a cache entry holds the forms too, whoever asks for them next
            forms = {}
        cached_at, got = _cached_golds(cache, unique, timeout_s)
        if got is not None:
            if forms is not None:
                forms.update(got.get("forms") or {})
            log.info("%d distinct golds: verdicts from the cache %s", len(unique), cached_at)
            return {g: got["verdicts"][g] for g in unique}
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
    from pc_pipelines.rewards._verify import HUNG_NOTE

    if cached_at is not None and not any(v is not None and HUNG_NOTE in v for v in result.values()):
        _store_golds(cached_at, result, {g: f for g, f in (forms or {}).items() if g in result})
    return result


# ------------------------------------------------------------------------------------------------------------------
# Preparation
# ------------------------------------------------------------------------------------------------------------------


@dataclass
class PreparedDataset:
    """``rows``: kept rows in :data:`PREPARED_SCHEMA` (file order); ``quarantine``: rejected rows in
    :data:`QUARANTINE_SCHEMA` with the reason per row; ``stats``: JSON-able counts (docs/DATA.md)."""

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


def parse_number(v: Any) -> float | None:
    """``v`` as a finite float (a number or a numeric string); None for anything else (booleans, NaN, text)."""
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
    gold_cache: Path | None = None,
) -> PreparedDataset:
    """The shared pipeline for training sets and benchmarks. ``split`` set (benchmarks: "eval") replaces the
    held-out split; ``dedupe=False`` keeps duplicate problems; ``id_of(row_index, problem)`` overrides the id;
    ``gold_cache``: a folder of :func:`check_golds`' cached verdicts (None: every gold checked anew)."""
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
    verdicts = check_golds((c[3] for c in candidates), grader, workers=gold_workers, forms=forms, cache=gold_cache)
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
