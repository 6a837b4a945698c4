"""mdsource: a markdown document as lines, whole or as a window sliding over a file read in pieces.

`Doc(name, path, text)` holds a whole text (what tests and rag-answer's quoting hand
rag-chunk's scanner). `Doc(name, path, source=...)` holds a window onto a stream of lines:
the scanner calls `need()` where it reaches the window's end, `more()` slides the window
on, `release()` lets go of text already chunked. So rag-chunk's memory is a window and not
the file, and every block is the one a whole-document scan finds (tests/test_chunk.py
compares the two on generated markdown).

Files are read in pieces cut just after a newline: `check` raises `decode`'s errors (a
NUL byte anywhere first, then the first bytes that are not UTF-8) before a line is
chunked, and `file_lines` gives what `decode(data).split("\n")` would, a piece at a time.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ragline
from ragline import StageError

PIECE = 1 << 20  # bytes read from a file at a time; a window holds a few pieces' lines


@dataclass
class Block:
    """A span of the document: [start, end) in characters, lines first..last (1-based)."""

    kind: str  # heading, paragraph, fence, table, html, code, list_item, quote, rule
    start: int
    end: int
    first: int
    last: int
    level: int = 0
    title: str = ""
    anchor: str | None = None


class NeedMore(Exception):
    """The scan of a block reached the end of a streamed document's window: slide it and scan the block again."""


class Doc:
    """One markdown document as lines with their character offsets.

    `Doc(name, path, text)` holds the whole text. `Doc(name, path, source=...)` holds a
    window onto a stream: `source()` gives the document's lines in batches, `more`
    lets go of the lines before `keep` and reads further. `lines[0]` is the document's
    line `base` (0-based); offsets and blocks count from the document's start.
    """

    def __init__(self, name: str, path: str, text: str | None = None, source: Callable[[], Iterator[list[str]]] | None = None):
        self.name, self.path = name, path
        self.base = 0
        self.keep = 0
        self.lines: list[str] = []
        self.offsets: list[int] = []
        self._end = 0  # the offset just past the window's last line and its newline
        self._text: str | None = None
        self._source = source
        self._batches = source() if source is not None else None
        self.final = text is not None  # the window holds the document's last line
        if text is not None:
            self._append(text.split("\n"))

    def _append(self, lines: list[str]) -> None:
        self.offsets.extend(itertools.accumulate((len(line) + 1 for line in lines), initial=self._end))
        self._end = self.offsets.pop()
        self.lines.extend(lines)
        self._text = None

    @property
    def text(self) -> str:
        """The window's text (the whole document's, for a `Doc` made from text)."""
        if self._text is None:
            self._text = "\n".join(self.lines)
        return self._text

    def slice(self, start: int, end: int) -> str:
        """The document's characters [start, end), which must lie in the window."""
        origin = self.offsets[0] if self.offsets else self._end
        return self.text[start - origin : end - origin]

    def all_lines(self) -> Iterator[str]:
        """The document's lines from its first, whatever the window holds."""
        if self._source is None:
            return iter(self.lines)
        return itertools.chain.from_iterable(self._source())

    def need(self) -> None:
        """Called where the scan reaches the window's end: more lines, unless there are none."""
        if not self.final:
            raise NeedMore

    def more(self, resume: int) -> None:
        """Let go of the lines before `keep` (and `resume`, where the scan goes on), then read
        at least as many lines as are left, so a block longer than the window is read in a
        number of passes logarithmic in its length."""
        drop = min(self.keep, resume, self.base + len(self.lines)) - self.base
        if drop > 0:
            del self.lines[:drop], self.offsets[:drop]
            self.base += drop
            self._text = None
        want = max(len(self.lines), 1)
        while want > 0 and not self.final:
            batch = next(self._batches, None) if self._batches is not None else None
            if batch is None:
                self.final = True
            else:
                self._append(batch)
                want -= len(batch)

    def release(self, offset: int) -> None:
        """The text before `offset` (the end of a line) is no longer needed."""
        self.keep = self.line_of(offset)

    def line_of(self, offset: int) -> int:
        """The 1-based line holding character `offset` (a binary search, not a count from the start)."""
        return self.base + bisect.bisect_right(self.offsets, offset)

    def span(self, kind: str, first: int, last: int, **extra: Any) -> Block:
        """A block over window lines first..last (0-based indices)."""
        base = self.base
        return Block(kind, self.offsets[first], self.offsets[last] + len(self.lines[last]), base + first + 1, base + last + 1, **extra)


def decode(data: bytes, path: str) -> str:
    """Markdown bytes as text; binary or non-UTF-8 input is a StageError naming the line."""
    if b"\x00" in data:
        line = data.count(b"\n", 0, data.index(b"\x00")) + 1
        raise StageError("binary file (NUL byte), not markdown", ragline.place(path, line))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise StageError(f"not UTF-8 (byte 0x{data[err.start]:02x})", ragline.place(path, line)) from None
    return text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")


def pieces(file: Path, where: str) -> Iterator[bytes]:
    """The file's bytes in pieces of about PIECE bytes, each ending just after a newline
    (the last: at the file's end). A newline byte is never inside a UTF-8 character,
    nor between the CR and LF of a CRLF, so pieces decode as the whole would."""
    try:
        with open(file, "rb") as f:
            rest: list[bytes] = []
            while block := f.read(PIECE):
                cut = block.rfind(b"\n") + 1
                if not cut:
                    rest.append(block)  # a line longer than a piece
                    continue
                yield b"".join([*rest, block[:cut]])
                rest = [block[cut:]]
            if tail := b"".join(rest):
                yield tail
    except OSError as err:
        raise StageError(err.strerror or str(err), where) from None


def check(file: Path, where: str) -> None:
    """`decode`'s errors for a file read in pieces: a NUL byte anywhere comes first, then
    the first bytes that are not UTF-8."""
    line, bad = 1, None
    for piece in pieces(file, where):
        if (nul := piece.find(b"\x00")) >= 0:
            raise StageError("binary file (NUL byte), not markdown", ragline.place(where, line + piece.count(b"\n", 0, nul)))
        if bad is None:
            try:
                piece.decode("utf-8")
            except UnicodeDecodeError as err:
                bad = StageError(
                    f"not UTF-8 (byte 0x{piece[err.start]:02x})", ragline.place(where, line + piece.count(b"\n", 0, err.start))
                )
        line += piece.count(b"\n")
    if bad is not None:
        raise bad


def file_lines(file: Path, where: str) -> Iterator[list[str]]:
    """A checked file's lines (as `decode(data).split("\\n")`), a piece's worth at a time."""
    tail = ""  # after a newline, "": only the last piece can end without one
    for n, piece in enumerate(pieces(file, where)):
        text = piece.decode("utf-8")
        if n == 0:
            text = text.removeprefix("\ufeff")
        lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
        tail = lines.pop()
        yield lines
    yield [tail]
