"""terminal: the stages' human views fitted to the terminal's width; the JSON keeps every character.

`width()` is the terminal's width ($COLUMNS, else the terminal stdout is, else the one stderr
is, else 80); `cut` shortens a line that must stay one line (an id, a line of code) and marks
the cut; `wrap` breaks prose onto as many lines as it needs, each indented; `place` gives
`file:start-end` whole in the room there is (the path shortened from the left, relative to the
working directory when under it), and `footnote` a citation's line with it.
"""

from __future__ import annotations

NARROWEST = 20  # below this a view is wrapped as if this wide: a line per word is no view
MORE = "..."


def width() -> int:
    """The terminal's width in columns: $COLUMNS, else the terminal stdout is, else the one stderr
    is (`rag-answer --text ... | less` shows on it), else 80."""
    import contextlib
    import os
    import shutil  # here: rag-search's one-question start-up imports no more than it needs

    columns = shutil.get_terminal_size((0, 0)).columns
    if not columns:
        with contextlib.suppress(OSError):
            columns = os.get_terminal_size(2).columns
    return columns or 80


def shown_path(path: str) -> str:
    """`path` relative to the working directory when it lies under it (`corpus/x.md`), else as it is."""
    import os

    if not os.path.isabs(path):
        return path
    try:
        rel = os.path.relpath(path)
    except ValueError:  # another drive (Windows)
        return path
    return path if rel == ".." or rel.startswith(".." + os.sep) else rel


def place(path: str, start: object, end: object, columns: int) -> str:
    """`path:start-end` (the path as `shown_path` gives it) in at most `columns`: a path too long
    loses folders from the left (`.../standards/on-call.md:12-30`), then characters (`...all.md:12-30`);
    the lines are never cut."""
    path, lines = shown_path(path), f":{start}-{end}"
    room = max(columns, NARROWEST) - len(lines)
    if len(path) <= room:
        return path + lines
    parts = path.split("/")
    while len(parts) > 1 and len(MORE) + 1 + len("/".join(parts[1:])) > room:
        parts.pop(0)
    short = MORE + "/" + "/".join(parts[1:]) if len(parts) > 1 else MORE + parts[-1][-(room - len(MORE)) :]
    if len(short) > room:
        short = MORE + parts[-1][-max(room - len(MORE), 1) :]
    return short + lines


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


def footnote(head: str, path: str | None, start: object, end: object, columns: int, indent: str = "    ") -> list[str]:
    """A footnote (`[1] doc :: heading path`) and where it points, `(file:start-end)`, fitted to
    `columns`: the head wrapped, its further lines indented; the place (`place`) whole, on the
    head's last line where it fits, else on a line of its own."""
    lines = wrap(head, columns, indent=indent)
    if path:
        where = f"({place(path, start, end, max(columns, NARROWEST) - len(indent) - 2)})"
        if len(lines[-1]) + 1 + len(where) <= max(columns, NARROWEST):
            lines[-1] += " " + where
        else:
            lines.append(indent + where)
    return lines
