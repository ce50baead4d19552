"""``shell_command``: every command the tool prints for a person to paste (fix texts, hints, Dagster metadata) quotes
each argument, so pasted into bash it runs that one command with those arguments, whatever a path holds; and no
f-string in the code builds a printed command by pasting a value in unquoted."""

from __future__ import annotations

import ast
import os
import re
import subprocess
from pathlib import Path

import pytest

from pc_pipelines.errors import installed_command, shell_command, shell_word, sql_string

ROOT = Path(__file__).resolve().parents[2]

NASTY = [
    "plain", "", "/tmp/Bob's and Al's runs/s.duckdb", "a b", "$(touch pwned)", "`touch pwned`", "x\ny", "it's $(x)",
    "!x", "a'!b", "\x1b]0;title\x07", "caf\u00e9", "nb\u00a0sp", "\udcff", "\\", "'", '"', "~", "#c", "-rf", "a\tb",
    "$HOME", "a;b|c&d>e<f", "*", "[a]", "{a,b}", "\u202eevil", "'$(touch pwned)'", "\"; touch pwned; \"",
]


def bash_argv(command: str, cwd: Path) -> list[str]:
    """The arguments bash hands to ``printf`` when ``command`` (``printf ARGS...``) is pasted into it."""
    out = subprocess.run(["bash", "-c", command], cwd=cwd, capture_output=True, check=True, timeout=30).stdout
    return [os.fsdecode(a) for a in out.split(b"\0")[:-1]]


def test_every_argument_reaches_the_program_as_it_was(tmp_path):
    command = shell_command("printf", "%s\\0", *NASTY)
    assert bash_argv(command, tmp_path) == NASTY
    assert list(tmp_path.iterdir()) == []  # no `touch pwned` ran


@pytest.mark.parametrize("text", NASTY)
def test_a_word_stays_on_one_line_and_outside_any_code_span(text):
    word = shell_word(text)
    assert "`" not in word and word.isprintable(), word  # no newline, no escape sequence, no closing backtick


def test_words_read_plainly():
    assert shell_command("pilot-commit", "runs", "--store", "/tmp/runs/s.duckdb", "...") == \
        f"{installed_command('pilot-commit')} runs --store /tmp/runs/s.duckdb ..."
    # the program's name is this install's form of it (issue 55: a bare pilot-commit is not on PATH after a demo)
    assert shell_command("git", "status") == "git status"
    assert shell_command("rm", "-r", "/tmp/my runs/step-00000002") == "rm -r '/tmp/my runs/step-00000002'"
    assert shell_word("/tmp/Bob's and Al's runs") == '"/tmp/Bob\'s and Al\'s runs"'
    assert shell_word("SELECT * FROM runs WHERE run_id = 'r'") == "\"SELECT * FROM runs WHERE run_id = 'r'\""
    assert shell_word("Bob's $(x)") == "$'Bob\\'s $(x)'"
    assert shell_word("a`b\nc") == "$'a\\x60b\\nc'"
    assert shell_word(Path("/a b")) == "'/a b'" and shell_word(1234) == "1234"


def test_sql_string_doubles_quotes_and_a_query_with_it_pastes_whole(tmp_path):
    assert sql_string("Bob's") == "'Bob''s'"
    query = f"SELECT {sql_string(chr(10).join(NASTY[:8]))} AS v"
    assert bash_argv(shell_command("printf", "%s\\0", "sql", query), tmp_path) == ["sql", query]


# ---- no printed command is built by pasting a value in unquoted ---------------------------------------------------
COMMAND = re.compile(r"(?:^|[\s(`])(?:\.venv/bin/)?(pilot-commit|tensorboard|rm|mv|cp|kill|git|ray|python)\s[^`\n]*$")
QUOTERS = {"shell_command", "shell_word", "store_example"}


def unquoted_command_values(source: str) -> list[tuple[int, str]]:
    """(line, text) of each f-string value placed into a command (a backtick span, or a line that starts with a
    command's name) other than through :data:`QUOTERS`. A message's head (``pilot-commit sql: ...``) is no command."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.JoinedStr):
            continue
        whole = "".join(str(p.value) if isinstance(p, ast.Constant) else "\0" for p in node.values)
        at, values = 0, iter(p.value for p in node.values if not isinstance(p, ast.Constant))
        for _ in range(whole.count("\0")):
            at = whole.index("\0", at) + 1
            value = next(values)
            before = whole[:at - 1]
            in_span = before.count("`") % 2 == 1
            start = before.rfind("`" if in_span else "\n") + 1
            end = min(i for i in (whole.find("`", at), whole.find("\n", at), len(whole)) if i >= 0)
            command = COMMAND.search(("`" if in_span else "") + whole[start:at - 1])
            if command is None or ": " in whole[start + command.start():end]:
                continue
            if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in QUOTERS):
                found.append((node.lineno, whole[start:at - 1][-60:] + "{" + ast.unparse(value) + "}"))
    return found


def test_the_checker_finds_an_unquoted_path_in_a_printed_command():
    planted = ('fix = f"or give the step up: `rm -r \'{step_dir}\'` (or not)"\n'
               'hint = f"  pilot-commit sql --store {args.store} \\"SELECT 1\\"\\n"\n'
               'md = f"```\\ntensorboard --logdir {tr.tensorboard_dir}\\n```"\n'
               'ok = f"`{shell_command(\'rm\', \'-r\', d)}` and step {step} of `pilot-commit check`, run {run_id}"\n')
    assert [line for line, _ in unquoted_command_values(planted)] == [1, 2, 3]


def test_no_printed_command_pastes_a_value_in_unquoted():
    found = []
    for package in ("pc_pipelines", "pc_pipelines_dagster"):
        for path in sorted((ROOT / package).rglob("*.py")):
            found += [f"{path.relative_to(ROOT)}:{line}: {text}"
                      for line, text in unquoted_command_values(path.read_text())]
    assert found == []
