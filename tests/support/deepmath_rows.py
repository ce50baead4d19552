"""Rows in DeepMath-103K's schema for the data tests: special cases (binary answers, empty fields, a duplicate, an
unparsable gold) and plain kept rows."""

import json

TEMPLATE = "{question} Let's think step by step and output the final answer within \\boxed{{}}."

# (question, final_answer, difficulty) and what should happen to the row.
SPECIAL = [
    ("What is $1+1$?", "2", 1.0),  # 0 kept
    ("Is 7 prime?", "Yes", 2.0),  # 1 binary yes
    ("Is 9 prime?", "$\\text{No}$", 2.0),  # 2 binary no
    ("Is $0 < 1$?", "\\boxed{True}", 3.0),  # 3 binary true
    ("Is $2 < 1$?", "false.", 3.0),  # 4 binary false
    ("", "3", 1.0),  # 5 empty problem
    ("   \n", "4", 1.0),  # 6 empty problem (blank)
    ("Compute $2 \\cdot 3$.", "", 4.0),  # 7 empty answer
    ("What is   $1+1$? ", "2", 1.0),  # 8 duplicate of row 0 (whitespace differs)
    ("Simplify $\\frac{1}{2}$.", "\\frac{", 5.0),  # 9 unparsable gold
    ("Is 4 even?", "\\text{Yes}", 1.5),  # 10 binary yes
    ("How much does it cost?", "\\$36", 2.5),  # 11 kept, gold wrapped in \boxed{}
]
GOOD = [(f"What is {i} + {i}?", str(2 * i), 1.0 + i / 4) for i in range(22)]  # rows 12..33, all kept
ROWS = SPECIAL + GOOD
KEPT_ROWS = [0, 11, *range(12, 34)]


def deepmath_records(rows=ROWS):
    return [
        {
            "question": q,
            "final_answer": a,
            "difficulty": d,
            "topic": "Mathematics -> Algebra",
            "r1_solution_1": f"... \\boxed{{{a}}}",
            "r1_solution_2": "...",
            "r1_solution_3": "...",
        }
        for q, a, d in rows
    ]


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path
