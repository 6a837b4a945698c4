"""Print the machine-faults table for docs/reliability.md, from the faults tests/test_faults.py injects.

    python tests/support/fault_table.py > /tmp/faults.md

One row per fault: how a user meets it, the stage, the exit code, what stderr says (`…` stands
for any text; paths are shortened to their names) and what is left on disk.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from faults import FAULTS, Fault


def cell(text: str) -> str:
    """Markdown table cell: a code span with pipes escaped."""
    return "`" + text.replace("|", "\\|") + "`" if text else "(nothing)"


def table(faults: list[Fault]) -> str:
    rows = ["| fault | stage | exit | stderr | afterwards |", "| --- | --- | ---: | --- | --- |"]
    for fault in faults:
        rows.append(f"| {fault.name} | `{fault.stage}` | {fault.code} | {cell(fault.expect)} | {fault.after} |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    sys.stdout.write(table(list(FAULTS.values())))
