"""progress: the progress line long stages draw on a terminal, and the line count that gives it a total.

A library, not a stage: rag-embed, rag-index, rag-search and rag-answer use it. Nothing
is drawn unless stderr is a terminal and stdout is not a pipe (`Progress`).
"""

from __future__ import annotations

import os
import stat
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any


class Progress:
    """A progress line on stderr for a long stage: the count, and with a known total the
    share done and the time left; the rate since the first item. Redrawn at most every
    REDRAW seconds; `done` ends the line. The clock is injectable.

    Shown only when stderr is a terminal, not --quiet, and stdout is not a pipe: in a
    pipeline of stages on one terminal, only the last one (whose output goes to a file
    or the screen) draws, so two lines never fight over the same row. `total` may be a
    function (`count_lines` of the inputs), called only when the line is shown.
    """

    REDRAW = 0.2

    def __init__(
        self, label: str, unit: str = "records", total: int | Callable[[], int | None] | None = None, quiet: bool = False,
        stream: IO[str] | None = None, clock: Callable[[], float] = time.monotonic, piped: bool | None = None,
    ):  # fmt: skip
        self.stream = stream or sys.stderr
        self.label, self.unit, self.clock = label, unit, clock
        self.enabled = not quiet and self.stream.isatty() and not (stdout_is_pipe() if piped is None else piped)
        self.total = (total() if callable(total) else total) if self.enabled else None
        self.count = 0
        self.start: float | None = None
        self.drawn = clock()
        self.open = False  # a line is on the screen, not yet ended

    def update(self, n: int = 1) -> None:
        if self.start is None:
            self.start = self.clock()
        self.count += n
        if self.enabled and self.clock() - self.drawn >= self.REDRAW:
            self.draw()

    def track(self, items: Iterable[Any]) -> Iterator[Any]:
        """The items, counted as they pass; the line ended after the last, or when reading them fails."""
        try:
            for item in items:
                yield item
                self.update()
        finally:
            self.done()

    def line(self) -> str:
        """What the progress line says now."""
        elapsed = max(self.clock() - (self.start if self.start is not None else self.clock()), 1e-9)
        rate = self.count / elapsed
        if self.total:
            done = min(self.count / self.total, 1.0)
            left = (self.total - self.count) / rate if rate > 0 else None
            eta = "" if left is None else f", {_clock(left)} left"
            return f"{self.label}: {self.count:,}/{self.total:,} {self.unit} {done:4.0%} ({rate:,.0f}/s{eta})"
        return f"{self.label}: {self.count:,} {self.unit} ({rate:,.0f}/s)"

    def draw(self) -> None:
        self.drawn = self.clock()
        self.stream.write("\r\x1b[K" + self.line())
        self.stream.flush()
        self.open = True

    def done(self) -> None:
        """End the line (drawn once more, so it shows the final count); nothing if none was drawn."""
        if self.enabled and self.open:
            self.draw()
            self.stream.write("\n")
            self.stream.flush()
            self.open = False


def stdout_is_pipe() -> bool:
    """Whether standard output is a pipe (the next stage reads it)."""
    try:
        return stat.S_ISFIFO(os.fstat(sys.stdout.fileno()).st_mode)
    except (OSError, ValueError, AttributeError):
        return False


def _clock(seconds: float) -> str:
    whole = round(seconds)
    return f"{whole // 3600}:{whole // 60 % 60:02d}:{whole % 60:02d}" if whole >= 3600 else f"{whole // 60}:{whole % 60:02d}"


def count_lines(paths: Iterable[str]) -> int | None:
    """Non-blank lines in the named files (a progress total); None when one is stdin or not
    a regular file (a pipe, `<(...)`: reading it would consume what the stage must read)."""
    total = 0
    for path in list(paths) or ["-"]:
        try:
            if path == "-" or not stat.S_ISREG(os.stat(path).st_mode):
                return None
            with open(path, "rb") as handle:
                total += sum(1 for raw in handle if raw.strip())
        except OSError:
            return None  # the stage reports it when it reads the file
    return total
