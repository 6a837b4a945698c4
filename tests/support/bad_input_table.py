"""Print the bad-input table for docs/reliability.md, from the cases test_bad_input.py runs.

    python tests/support/bad_input_table.py > /tmp/table.md

One row per case: what the input is, the stage, the exit code, and what stderr says
(`…` stands for any text; exit 2 shows click's `Error:` line, under its `Usage:` lines).
A case that is a known bug (a strict xfail) says so in the last column.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bad_input_cases import Case
from bad_input_query_cases import CASES


def cell(text: str) -> str:
    """Markdown table cell: a code span with pipes escaped."""
    return "`" + text.replace("|", "\\|") + "`" if text else ""


def stderr(case: Case) -> str:
    if case.code == 0:
        return f"(a notice) {cell(case.expect)}" if case.expect else "(nothing)"
    return cell(case.expect)


def table(cases: list[Case] = CASES) -> str:
    rows = [
        "| input | stage | exit | stderr | |",
        "| --- | --- | ---: | --- | --- |",
    ]
    for case in cases:
        note = "known bug: exits with a traceback today" if case.bug else ""
        rows.append(f"| {case.name} | `{case.stage}` | {case.code} | {stderr(case)} | {note} |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    sys.stdout.write(table())
