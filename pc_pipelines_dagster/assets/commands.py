"""Commands the assets' metadata shows for a person to paste (built by :func:`pc_pipelines.errors.shell_command`),
laid out for a Dagster page: short lines, so a code block does not widen the metadata table past the screen."""

import re

from pc_pipelines.errors import installed_command, shell_command

CLAUSE = re.compile(r"(?:SELECT|FROM|LEFT JOIN|JOIN|WHERE|GROUP BY|ORDER BY|UNION ALL|UNION) ")
WIDTH = 88


def sql_lines(query: str, width: int = WIDTH) -> str:
    """``query`` on short lines: each clause (SELECT, FROM, JOIN, WHERE, GROUP BY, ORDER BY, UNION) of the query
    itself on its own line (not one inside parentheses or a string literal), a long line broken after a comma, the
    next lines indented. The same query for DuckDB: only spaces become newlines."""
    chars, depth, quoted = list(query), 0, False
    for i, ch in enumerate(query):
        if ch == "'":
            quoted = not quoted
        elif not quoted and ch in "()":
            depth += 1 if ch == "(" else -1
        elif (ch == " " and not quoted and depth == 0 and CLAUSE.match(query, i + 1)
              and not query[:i].endswith("LEFT")):
            chars[i] = "\n"
    out: list[str] = []
    for line in "".join(chars).split("\n"):
        while len(line) > width:
            cut = line.rfind(", ", 0, width)
            if cut <= 2:
                cut = line.find(", ", width)  # a first item wider than the line: after it
            if cut <= 2 or line[:cut].count("'") % 2:  # no comma to break at, or inside a literal
                break
            out.append(line[:cut + 1])
            line = "  " + line[cut + 2:]
        out.append(line)
    return "\n".join(out)


def sql_command(store_path: object, query: str) -> str:
    """``pilot-commit sql --store <store> "<query>"`` with the query on short lines after the opening quote
    (:func:`sql_lines`), the script by its absolute path unless PATH finds it: pasted into any terminal, it runs the
    query as written."""
    return shell_command(installed_command("pilot-commit", from_cwd=False), "sql", "--store", store_path,
                         "\n" + sql_lines(query), multiline=True)
