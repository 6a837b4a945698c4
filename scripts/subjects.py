"""Commit subjects fit `git log --oneline`: at most 72 characters (STYLE.md), checked by `just check`.

    python3 scripts/subjects.py                 # the commits after START (222e682..HEAD)
    python3 scripts/subjects.py 7197f6a~5..HEAD # any range git log takes

The rule holds from START on: the history before it has subjects of up to a few hundred characters,
and a published history is not rewritten. Each subject over the limit is named on stderr with its
length; exit 0 when none is, 1 when one is, 2 when git cannot read the range (START is missing from
a shallow clone: `git fetch --unshallow`). Length is in characters (code points), not bytes.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIMIT = 72
START = "222e682"  # "justfile: one private recipe runs a plan; ...": the last commit before the rule was checked


def too_long(lines: Iterable[str], limit: int = LIMIT) -> list[tuple[str, str]]:
    """(commit, subject) for each `git log --format='%h %s'` line whose subject is over `limit` characters."""
    found = []
    for line in lines:
        commit, _, subject = line.partition(" ")
        if len(subject) > limit:
            found.append((commit, subject))
    return found


def main(argv: list[str] | None = None, repo: Path = ROOT) -> int:
    args = sys.argv[1:] if argv is None else argv
    span = args[0] if args else f"{START}..HEAD"
    done = subprocess.run(
        ["git", "-C", str(repo), "-c", "i18n.logOutputEncoding=UTF-8", "log", "--format=%h %s", span, "--"],
        capture_output=True,
        encoding="utf-8",
        errors="replace",
    )
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or ["git log failed"])[-1]
        sys.stderr.write(f"subjects: cannot read {span}: {why}\n")
        return 2
    lines = done.stdout.splitlines()
    found = too_long(lines)
    for commit, subject in found:
        sys.stderr.write(f"subjects: {commit}: {len(subject)} characters, over {LIMIT}: {subject[:LIMIT]}...\n")
    if found:
        sys.stderr.write(f"subjects: {len(found)} of {len(lines)} subjects in {span} are over {LIMIT} characters\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
