"""Which file holds which results. docs/BENCHMARKS.md holds speed and memory, each section written by a script under
benchmarks/; docs/STUDIES.md holds what the research/ scripts measured, each section written by one of them (both
through ``write_section`` of benchmarks/_report.py, read here from the scripts' source). The study's headline is a
results file beside its reader, never under presets/, and the Markdown links between the docs resolve."""

import ast
import fnmatch
import re
import sys
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS_MD, STUDIES_MD = ROOT / "docs" / "BENCHMARKS.md", ROOT / "docs" / "STUDIES.md"
MARKER = re.compile(r"<!-- ([\w-]+):(begin|end) -->")


def doc_sections(path: Path) -> list[str]:
    """The section names of ``path``, each checked to open once and close once after it opens."""
    marks = MARKER.findall(path.read_text())
    names = [n for n, kind in marks if kind == "begin"]
    assert len(names) == len(set(names)), f"{path.name}: a section opens twice: {names}"
    for n in names:
        assert marks.index((n, "end")) == marks.index((n, "begin")) + 1, f"{path.name}: section {n} is not closed"
    assert len(marks) == 2 * len(names), f"{path.name}: an end marker without its begin: {marks}"
    return names


def _strings(tree: ast.AST, pred) -> list[str]:
    return [n.value.value for n in ast.walk(tree) if pred(n) and isinstance(n.value, ast.Constant)
            and isinstance(n.value.value, str)]


def _pattern(arg: ast.expr, tree: ast.Module, script: Path) -> list[str]:
    """The section names a ``write_section`` name argument can take, as regular expressions."""
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return [re.escape(arg.value)]
    if isinstance(arg, ast.JoinedStr):  # f"efficiency-ablate-{name}-{engine}": each field one or more name characters
        return ["".join(re.escape(v.value) if isinstance(v, ast.Constant) else r"[\w-]+" for v in arg.values)]
    if isinstance(arg, ast.Name):  # MARKER = "noise-regime"
        found = _strings(tree, lambda n: isinstance(n, ast.Assign)
                         and any(isinstance(t, ast.Name) and t.id == arg.id for t in n.targets))
    elif isinstance(arg, ast.Attribute):  # regime.marker, set by Regime(..., marker="bench-study")
        found = _strings(tree, lambda n: isinstance(n, ast.keyword) and n.arg == arg.attr)
    else:
        found = []
    assert found, (f"{script.relative_to(ROOT)}:{arg.lineno}: write_section's section name is not a literal, an "
                   "f-string, a module constant or a keyword given as a literal: this test cannot tell where it goes")
    return [re.escape(v) for v in found]


def written_sections(folder: str) -> dict[str, list[str]]:
    """Per script of ``folder``, the patterns of the sections its ``write_section`` calls write."""
    out = {}
    for script in sorted((ROOT / folder).glob("*.py")):
        tree = ast.parse(script.read_text())
        calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
                 and n.func.id == "write_section"]
        pats = [p for c in calls for p in _pattern(c.args[1], tree, script)]
        if pats:
            out[f"{folder}/{script.name}"] = pats
    return out


def writers(name: str, scripts: dict[str, list[str]]) -> list[str]:
    return [s for s, pats in scripts.items() if any(re.fullmatch(p, name) for p in pats)]


def test_each_section_lies_in_the_file_its_writers_folder_names():
    bench, research = written_sections("benchmarks"), written_sections("research")
    assert set(bench) >= {"benchmarks/store.py", "benchmarks/allocator.py", "benchmarks/engine.py"}
    assert set(research) >= {"research/bench_study.py", "research/calibrate.py", "research/efficiency.py"}
    in_bench, in_studies = doc_sections(BENCHMARKS_MD), doc_sections(STUDIES_MD)
    assert {"store", "allocator", "rewards", "engine"} <= set(in_bench)
    assert {"bench-study", "calibration", "warm-start", "efficiency-ablate-band-sim"} <= set(in_studies)
    assert not set(in_bench) & set(in_studies)
    for doc, names, own, other in ((BENCHMARKS_MD, in_bench, bench, research),
                                   (STUDIES_MD, in_studies, research, bench)):
        for name in names:
            assert writers(name, own), f"docs/{doc.name}: section {name} is written by no script of its folder"
            assert not writers(name, other), (
                f"docs/{doc.name}: section {name} is written by {writers(name, other)}, whose results go to the "
                "other file (benchmarks/: docs/BENCHMARKS.md, speed and memory; research/: docs/STUDIES.md)")


def test_the_section_finder_tells_the_folders_apart(tmp_path):
    """The patterns this file checks with: a literal, an f-string, a constant, a keyword, and a refusal otherwise."""
    script = tmp_path / "s.py"
    script.write_text('MARKER = "noise-regime"\nR = Regime(marker="bench-study")\n'
                      'write_section(p, "calibration", b)\nwrite_section(p, f"eff-{a}-{b}", b)\n'
                      'write_section(p, MARKER, b)\nwrite_section(p, r.marker, b)\n')
    tree = ast.parse(script.read_text())
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "write_section"]
    pats = {"s.py": [p for c in calls for p in _pattern(c.args[1], tree, script)]}
    assert [n for n in ("calibration", "eff-band-sim", "noise-regime", "bench-study", "store", "eff-band")
            if writers(n, pats)] == ["calibration", "eff-band-sim", "noise-regime", "bench-study"]
    dynamic = ast.parse("write_section(p, name(), b)").body[0].value
    with pytest.raises(AssertionError, match="cannot tell where it goes"):
        _pattern(dynamic.args[1], tree, ROOT / "research" / "x.py")


def test_each_folders_scripts_name_their_own_file():
    """Defaults, the commands they print and their docstrings: research/ never names docs/BENCHMARKS.md, benchmarks/
    never docs/STUDIES.md, and a research/ (reliability/) script starting a new file gives it the studies' (the
    reliability document's) title."""
    for folder, title in (("research", "STUDIES_HEADER"), ("reliability", "RELIABILITY_HEADER")):
        for script in sorted((ROOT / folder).glob("*.py")):
            text = script.read_text()
            assert "BENCHMARKS.md" not in text, f"{folder}/{script.name} names docs/BENCHMARKS.md"
            for call in ast.walk(ast.parse(text)):
                if isinstance(call, ast.Call) and getattr(call.func, "id", "") == "write_section":
                    header = (call.args[3] if len(call.args) > 3
                              else {k.arg: k.value for k in call.keywords}.get("header"))
                    assert getattr(header, "id", "") == title, f"{folder}/{script.name}:{call.lineno}"
    for script in sorted((ROOT / "benchmarks").glob("*.py")):
        if script.name != "_report.py":
            assert "STUDIES.md" not in script.read_text(), f"benchmarks/{script.name} names docs/STUDIES.md"


def test_write_section_starts_a_new_file_with_its_title_and_replaces_only_its_section(tmp_path):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from _report import BENCHMARKS_MD as bench_md
        from _report import STUDIES_HEADER, STUDIES_MD, write_section
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    assert (bench_md, STUDIES_MD) == (BENCHMARKS_MD, STUDIES_MD)
    studies, bench = tmp_path / "S.md", tmp_path / "B.md"
    write_section(studies, "calibration", "old", STUDIES_HEADER)
    write_section(studies, "precision", "p", STUDIES_HEADER)
    write_section(studies, "calibration", "new", STUDIES_HEADER)
    write_section(bench, "store", "s")
    assert studies.read_text() == (STUDIES_HEADER + "\n<!-- calibration:begin -->\nnew\n<!-- calibration:end -->\n"
                                   "\n<!-- precision:begin -->\np\n<!-- precision:end -->\n")
    assert studies.read_text().startswith("# Studies: what the research/ scripts measured\n")
    assert bench.read_text().startswith("# Benchmarks\n")
    assert "<!-- store:begin -->\ns\n<!-- store:end -->" in bench.read_text()


def test_presets_hold_presets_and_the_headline_ships_beside_its_reader():
    from pc_pipelines.reports import STUDY_RESULTS

    presets = ROOT / "pc_pipelines" / "presets"
    others = sorted(p.name for p in presets.iterdir() if p.suffix != ".yaml" and p.name not in ("__init__.py",
                                                                                                 "__pycache__"))
    assert others == [], f"pc_pipelines/presets/ holds presets only (YAML), not {others}"
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert data["pc_pipelines.presets"] == ["*.yaml"]
    rel = STUDY_RESULTS.relative_to(ROOT)
    assert STUDY_RESULTS.is_file() and rel.parts[:2] == ("pc_pipelines", "reports"), rel
    assert any(fnmatch.fnmatch(STUDY_RESULTS.name, g) for g in data["pc_pipelines.reports"]), "not in package-data"


def _slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_links_between_the_docs_resolve():
    """Relative links of README.md, docs/*.md and research/README.md point at files that exist, and their
    ``#anchor`` at a heading of that file (a section moved between BENCHMARKS.md and STUDIES.md takes its links)."""
    bad = []
    for md in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "research" / "README.md"]:
        for link in re.findall(r"\]\(([^)\s]+)\)", md.read_text()):
            if re.match(r"[a-z]+:", link):
                continue
            path, _, anchor = link.partition("#")
            target = (md.parent / path) if path else md
            if not target.exists():
                bad.append(f"{md.relative_to(ROOT)}: {link} (no such file)")
            elif anchor and target.suffix == ".md" and anchor not in {
                    _slug(h) for h in re.findall(r"^#+ (.*)$", target.read_text(), re.M)}:
                bad.append(f"{md.relative_to(ROOT)}: {link} (no such heading)")
    assert bad == []
