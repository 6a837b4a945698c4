"""terminal: the stages' human views fitted to the terminal's width; the JSON keeps every character.

`width()` is the terminal's width (`shutil.get_terminal_size`: $COLUMNS, else the terminal
stdout is, else 80); `cut` shortens a line that must stay one line (an id, a path, a line of
code) and marks the cut; `wrap` breaks prose onto as many lines as it needs, each indented.
"""

from __future__ import annotations

NARROWEST = 20  # below this a view is wrapped as if this wide: a line per word is no view
MORE = "..."


def width() -> int:
    """The terminal's width in columns."""
    import shutil  # here: rag-search's one-question start-up imports no more than it needs

    return shutil.get_terminal_size((80, 24)).columns


def cut(line: str, columns: int) -> str:
    """`line`, or as much of it as fits in `columns` ending in MORE."""
    columns = max(columns, NARROWEST)
    return line if len(line) <= columns else line[: columns - len(MORE)].rstrip() + MORE


def wrap(text: str, columns: int, indent: str = "", first: str | None = None) -> list[str]:
    """`text` broken at spaces (or inside a word longer than a line) into lines of at most
    `columns`, the first starting with `first` (default `indent`), the others with `indent`."""
    import textwrap

    columns = max(columns, NARROWEST)
    lead = indent if first is None else first
    return textwrap.wrap(text, columns, initial_indent=lead, subsequent_indent=indent, break_on_hyphens=False, drop_whitespace=True) or [
        lead.rstrip()
    ]
