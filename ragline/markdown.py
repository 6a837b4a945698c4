"""markdown: the block scanner, and a markdown document as lines, whole or as a window over a file.

`scan(doc)` / `blocks(doc)` cut a document into blocks (headings, paragraphs, fences,
tables, HTML blocks, indented code, list items, quotes, rules, admonitions' fence lines, kramdown comments); rag-chunk packs them
into chunks and rag-answer quotes them. `Doc(name, path, text)` holds a whole text
(what tests and rag-answer's quoting hand the scanner). `Doc(name, path, source=...)` holds a window onto a stream of lines:
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
import hashlib
import itertools
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ragline.records
from ragline import markup
from ragline.records import StageError

PIECE = 1 << 20  # bytes read from a file at a time; a window holds a few pieces' lines
MAX_LINE = 8 << 20  # bytes of one markdown line: a longer one (a 200 MB file on one line) is refused, not chunked


@dataclass
class Block:
    """A span of the document: [start, end) in characters, lines first..last (1-based)."""

    kind: str  # heading, paragraph, fence, table, html, code, list_item, quote, rule, admonition, comment; esm (MDX's import/export)
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

    def __init__(
        self, name: str, path: str, text: str | None = None, source: Callable[[], Iterator[list[str]]] | None = None, mdx: bool = False
    ):
        self.name, self.path = name, path
        self.mdx = mdx  # an MDX page: `import` / `export` lines at a line's start are a block of their own (`esm`)
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
        raise StageError("binary file (NUL byte), not markdown", ragline.records.place(path, line))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise StageError(f"not UTF-8 (byte 0x{data[err.start]:02x})", ragline.records.place(path, line)) from None
    return text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")


def pieces(file: Path, where: str) -> Iterator[bytes]:
    """The file's bytes in pieces of about PIECE bytes, each ending just after a newline
    (the last: at the file's end). A newline byte is never inside a UTF-8 character,
    nor between the CR and LF of a CRLF, so pieces decode as the whole would."""
    try:
        with open(file, "rb") as f:
            rest: list[bytes] = []
            line = 1
            while block := f.read(PIECE):
                cut = block.rfind(b"\n") + 1
                if not cut:
                    rest.append(block)  # a line longer than a piece
                    if sum(map(len, rest)) > MAX_LINE:
                        raise StageError(f"a line of over {MAX_LINE >> 20} MiB: not markdown to chunk", ragline.records.place(where, line))
                    continue
                line += block.count(b"\n")
                yield b"".join([*rest, block[:cut]])
                rest = [block[cut:]]
            if tail := b"".join(rest):
                yield tail
    except OSError as err:
        raise StageError(err.strerror or str(err), where) from None


def check(file: Path, where: str) -> str:
    """`decode`'s errors for a file read in pieces: a NUL byte anywhere comes first, then
    the first bytes that are not UTF-8. Returns the sha256 (hex) of the bytes read."""
    line, bad = 1, None
    digest = hashlib.sha256()
    for piece in pieces(file, where):
        digest.update(piece)
        if (nul := piece.find(b"\x00")) >= 0:
            raise StageError("binary file (NUL byte), not markdown", ragline.records.place(where, line + piece.count(b"\n", 0, nul)))
        if bad is None:
            try:
                piece.decode("utf-8")
            except UnicodeDecodeError as err:
                bad = StageError(
                    f"not UTF-8 (byte 0x{piece[err.start]:02x})", ragline.records.place(where, line + piece.count(b"\n", 0, err.start))
                )
        line += piece.count(b"\n")
    if bad is not None:
        raise bad
    return digest.hexdigest()


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


# --------------------------------------------------------------------------- the block scanner

_FENCE = re.compile(r"^( {0,3})(`{3,}|~{3,})(.*)$")
_ATX = re.compile(r"^ {0,3}#{1,6}(?:[ \t]|$)")  # an ATX heading's opening: its title is read by `atx`, in linear time
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_THEMATIC = re.compile(r"^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$")
_TABLE_DELIM = re.compile(r"^ {0,3}\|?[ \t]*:?-+:?[ \t]*(\|[ \t]*:?-+:?[ \t]*)*\|?[ \t]*$")
_LIST_ITEM = markup.LIST_ITEM
# CommonMark's HTML blocks (spec 4.6) by their start conditions. Kinds 1 (`<script`, `<pre`, `<style`, `<textarea`),
# 2 (a comment) and 6 (a tag of a block-level element, by name) interrupt a paragraph. Kind 7, one complete tag of any
# other name alone on its line, starts a block only where no paragraph goes on: `<b>.`, or `<b> Note` going on in words,
# is text, in a paragraph (inline HTML). In MDX, kind 7 is JSX's flow: a line of JSX tags alone (the last may go on to
# the next line), which does interrupt a paragraph (micromark's JSX flow). Kinds 3-5 (`<?`, `<!X`, `<![CDATA[`) are
# text here, as `markup` reads them.
_HTML_BLOCK_NAMES = """address article aside base basefont blockquote body caption center col colgroup dd details dialog dir div dl dt
    fieldset figcaption figure footer form frame frameset h1 h2 h3 h4 h5 h6 head header hr html iframe legend li link main menu
    menuitem nav noframes ol optgroup option p param search section summary table tbody td tfoot th thead title tr track ul""".split()
_HTML_RAW = re.compile(r"^ {0,3}<(script|pre|style|textarea)(?:[\s>]|$)", re.IGNORECASE)
_HTML_INTERRUPTS = re.compile(
    rf"^ {{0,3}}<(?:!--|(?:script|pre|style|textarea)(?:[\s>]|$)|/?(?:{'|'.join(_HTML_BLOCK_NAMES)})(?:[\s>]|/>|$))", re.IGNORECASE
)
_HTML_TAG_LINE = re.compile(rf"^ {{0,3}}(?!</?(?:script|pre|style|textarea)[\s/>])(?:{markup.OPEN_TAG}|{markup.CLOSING_TAG})[ \t]*$")
_JSX_TAGS = rf"{markup.JSX_OPEN_TAG}|{markup.JSX_CLOSING_TAG}"
_JSX_LINE = re.compile(rf"^ {{0,3}}(?:(?:{_JSX_TAGS})[ \t]*)*(?:{_JSX_TAGS}|{markup.JSX_OPEN_START}[ \t]*)$")
_ANCHOR = re.compile(rf"(?<!\s)\s*{markup.HEADING_ID}\s*$")  # from a run of spaces' start: one pass, however long
_ADMONITION = re.compile(rf"^ {{0,3}}{markup.ADMONITION_FENCE}")  # a Docusaurus admonition's opening or closing line
_MKDOCS_ADMONITION = re.compile(rf"^ {{0,3}}{markup.MKDOCS_ADMONITION}")  # an MkDocs admonition, its body indented after it
_ESM = re.compile(r"^(?:import|export)(?=[\s{*])")  # MDX: an ES module statement, up to the next blank line
# What says that a page of another type is MDX (`mdx_evidence`): an ES module statement as JavaScript writes it, at a
# line's start after a blank line (not "import the data from the CSV", not a shell's `export PATH=...`); ...
_ESM_SIGN = re.compile(
    r"""import\s+(?:['"]|[\w$]+\s+from\s+['"]|(?:[\w$]+\s*,\s*)?(?:\{[^}]*\}|\*\s*as\s+[\w$]+)\s*from\s+['"])|import\s*\{[^}]*$"""
    r"|export\s+(?:const|let|var|function|class|default|async)\b|export\s*\{|export\s+\*"
)
# ... outside code, an MDX comment `{/*`; or a JSX element HTML has none of: a capitalised component alone on its line,
# self-closing, or with an attribute, or any tag with an attribute value in braces. Each pattern's runs stop at the next
# `<` or `>`, so a line of unclosed tags is one pass. A lowercase HTML tag, braces in prose and `{#id}` say nothing.
_JSX_SIGN = re.compile(
    r"^[ \t]*</?[A-Z][\w.]*>[ \t]*$"
    r"|<[A-Z][\w.]*(?:\s[^<>]*)?/>"
    r"|<[A-Z][\w.]*\s+[A-Za-z_][\w-]*\s*=\s*[\"'{]"
    r"|<[A-Za-z][\w.]*\s[^<>]*=\s*\{"
)


# --------------------------------------------------------------------------- MDX by its content


def mdx_evidence(lines: Iterable[str]) -> tuple[int, str] | None:
    """(line number, what) of the first sign that a page is MDX, or None: what Docusaurus (which
    parses `.md` as MDX) would read as MDX and CommonMark as text. Outside fences and code spans, and
    outside a leading front-matter block (`---` or `+++` to its closing line; one never closed is
    no front matter, and its lines count): an `import` or `export` statement at a line's start after
    a blank line, an MDX comment `{/*`, or a JSX element (`_JSX_SIGN`). One pass over the lines,
    stopping at the first sign."""
    hit: tuple[int, str] | None = None
    fence: str | None = None
    after_blank = True
    closers: tuple[str, ...] | None = None  # while a leading block may be front matter: its closing lines
    for n, line in enumerate(lines, 1):
        mark = line.strip()
        if n == 1 and mark in ("---", "+++"):
            closers = ("+++",) if mark == "+++" else ("---", "...")
            continue
        if closers is not None and mark in closers:  # front matter: what it held says nothing
            closers, hit, fence, after_blank = None, None, None, True
            continue
        if hit is not None:
            if closers is None:
                return hit
            continue
        fence, code = markup.fence_step(fence, line)
        if not code:
            if after_blank and _ESM_SIGN.match(line):
                hit = (n, f"an {line.split(None, 1)[0].split('{', 1)[0]} statement")
            else:
                at, prose = 0, []
                for start, end in markup.code_spans(line):
                    prose.append(line[at:start])
                    at = end
                text = " ".join([*prose, line[at:]])
                if "{/*" in text:
                    hit = (n, "an MDX comment")
                elif _JSX_SIGN.search(text):
                    hit = (n, "a JSX component")
        after_blank = not mark
    return hit


# --------------------------------------------------------------------------- blocks


def _blank(line: str) -> bool:
    return not line.strip()


def _starts_block(doc: Doc, i: int) -> bool:
    """Does line i start a block that interrupts a paragraph?"""
    line = doc.lines[i]
    return bool(
        _FENCE.match(line)
        or _ATX.match(line)
        or _THEMATIC.match(line)
        or _LIST_ITEM.match(line)
        or _html_start(doc, line, interrupting=True)
        or line.lstrip().startswith(">")
        or _is_table_start(doc, i)
        or _ADMONITION.match(line)
        or _MKDOCS_ADMONITION.match(line)
    )


def _html_start(doc: Doc, line: str, interrupting: bool = False) -> bool:
    """Does `line` open an HTML block (CommonMark's kinds: see _HTML_INTERRUPTS), where it would
    `interrupt` a paragraph or where none goes on?"""
    if _HTML_INTERRUPTS.match(line):
        return True
    if doc.mdx:
        return bool(_JSX_LINE.match(line))
    return not interrupting and bool(_HTML_TAG_LINE.match(line))


def _is_table_start(doc: Doc, i: int) -> bool:
    lines = doc.lines
    if "|" not in lines[i]:
        return False
    if i + 1 >= len(lines):
        doc.need()  # each caller's own look past the window's end would also ask: kept so the rule has no exception
        return False
    return bool(_TABLE_DELIM.match(lines[i + 1])) and "-" in lines[i + 1]


def _fence_end(doc: Doc, i: int, opener: re.Match[str]) -> int:
    """The index of the line closing the fence opened at line i."""
    char, size = opener.group(2)[0], len(opener.group(2))
    closing = re.compile(r"^ {0,3}" + re.escape(char) + "{" + str(size) + r",}[ \t]*$")
    for j in range(i + 1, len(doc.lines)):
        if closing.match(doc.lines[j]):
            return j
    doc.need()
    raise StageError("code fence opened here is never closed", ragline.records.place(doc.path, doc.base + i + 1))


def is_heading(line: str) -> bool:
    """Whether a line is an ATX heading ("## Setup"), as the scanner reads one."""
    return _ATX.match(line) is not None


def heading_title(line: str) -> str | None:
    """An ATX heading line's title as written, its id, attribute list and closing hashes out (`_heading_text`); None for
    any other line."""
    heading = atx(line)
    return None if heading is None else _heading_text(heading[1], atx=True)[0]


def atx(line: str) -> tuple[str, str] | None:
    """An ATX heading line's opening (its indent and hashes) and its title, without the closing
    hashes ("## Setup ##": `("##", "Setup")`); None for any other line (or more than one line).
    Read with string operations: a regex with a lazy title before an optional closing sequence
    took time quadratic in a line of spaces (42 s for 50,000)."""
    opening = _ATX.match(line)
    if opening is None:
        return None
    rest = line[opening.end() :].removesuffix("\n")
    if "\n" in rest:
        return None
    rest = rest.strip(" \t")
    bare = rest.rstrip("#")
    if bare != rest and (not bare or bare[-1] in " \t"):  # a closing sequence: hashes after a space, or hashes alone
        rest = bare.rstrip(" \t")
    return opening.group().rstrip(" \t"), rest


def scan(doc: Doc, start: int = 0) -> list[Block]:
    """The blocks of a whole document (`Doc(name, path, text)`), in order, from line index `start`."""
    return list(_scan(doc, start))


def blocks(doc: Doc, start: int = 0) -> Iterator[Block]:
    """The document's blocks, in order, from its line index `start`, sliding a streamed
    document's window as the scan needs: a block that reaches the window's end is
    scanned again once more lines are in, so every block is the whole document's."""
    resume = start
    while True:
        try:
            for block in _scan(doc, resume - doc.base):
                resume = block.last  # the 1-based last line: the index of the line after it
                yield block
            if doc.final:
                return
        except NeedMore:
            pass
        doc.more(resume)


def _scan(doc: Doc, start: int) -> Iterator[Block]:
    """The blocks from window line `start` to the window's end.

    One loop over the lines with one branch per CommonMark block start (MDX's import/export
    in an MDX page, fence, ATX and setext heading, table, HTML, indented code, list item,
    quote, rule, paragraph): it
    runs past 80 lines because the branches share the cursor and must be tried in this
    order; each branch's own scanning lives in a helper (`_fence_end`, `_list_item_end`...).
    Where a block's scan reaches the window's end, `doc.need()` stops it (a streamed
    document not yet read to its end) or lets it end there (the document's end).
    """
    lines = doc.lines
    i = start
    n = len(lines)
    unclosed = False  # a kramdown comment was never closed
    while i < n:
        line = lines[i]
        if _blank(line):
            i += 1
            continue
        if doc.mdx and _ESM.match(line):
            j = _until_blank(doc, i)
            yield doc.span("esm", i, j)
            i = j + 1
            continue
        if fence := _FENCE.match(line):
            if fence.group(2)[0] == "`" and "`" in fence.group(3):
                pass  # not a fence: an inline code span at line start
            else:
                j = _fence_end(doc, i, fence)
                yield doc.span("fence", i, j)
                i = j + 1
                continue
        if _ADMONITION.match(line):  # a line of its own: the body between the fence lines is blocks as any other
            yield doc.span("admonition", i, i)
            i += 1
            continue
        if _MKDOCS_ADMONITION.match(line):  # one block with its indented body
            j = _indented_end(doc, i, i)
            yield doc.span("admonition", i, j)
            i = j + 1
            continue
        if heading := atx(line):
            title, anchor = _heading_text(heading[1], atx=True)
            j = _markup_under(doc, i)
            yield doc.span("heading", i, j, level=heading[0].count("#"), title=title, anchor=anchor)
            i = j + 1
            continue
        if _is_table_start(doc, i):
            j = i + 1
            while j + 1 < n and not _blank(lines[j + 1]) and "|" in lines[j + 1] and not _FENCE.match(lines[j + 1]):
                j += 1
            if j + 1 >= n:
                doc.need()
            yield doc.span("table", i, j)
            i = j + 1
            continue
        if _html_start(doc, line):
            j = _html_end(doc, i)
            yield doc.span("html", i, j)
            i = j + 1
            continue
        if _THEMATIC.match(line):
            yield doc.span("rule", i, i)
            i += 1
            continue
        if line.startswith("    ") or line.startswith("\t"):
            j = _indented_end(doc, i, i)
            yield doc.span("code", i, j)
            i = j + 1
            continue
        if item := _LIST_ITEM.match(line):
            j = _list_item_end(doc, i, item)
            yield doc.span("list_item", i, j)
            i = j + 1
            continue
        if not unclosed and markup.COMMENT_START.fullmatch(line):  # kramdown's comment: a block that shows nothing
            if (end := _comment_end(doc, i)) is not None:
                yield doc.span("comment", i, end)
                i = end + 1
                continue
            unclosed = True  # no closing tag from here to the end: none closes a later comment either (one pass)
        if line.lstrip().startswith(">"):
            j = i
            while j + 1 < n and not _blank(lines[j + 1]) and not any(p.match(lines[j + 1]) for p in (_FENCE, _ATX, _ADMONITION)):
                j += 1
            if j + 1 >= n:
                doc.need()
            yield doc.span("quote", i, j)
            i = j + 1
            continue
        # a paragraph, or a setext heading
        j = i
        setext = None
        while j + 1 < n and not _blank(lines[j + 1]):
            nxt = lines[j + 1]
            if _SETEXT.match(nxt) and not _LIST_ITEM.match(lines[j]):
                setext = 1 if nxt.strip().startswith("=") else 2
                break
            if _starts_block(doc, j + 1):
                break
            j += 1
        else:
            if j + 1 >= n:
                doc.need()
        if setext:
            title, anchor = _heading_text(" ".join(s.strip() for s in lines[i : j + 1]))
            k = _markup_under(doc, j + 1)
            yield doc.span("heading", i, k, level=setext, title=title, anchor=anchor)
            i = k + 1
        else:
            yield doc.span("paragraph", i, j)
            i = j + 1


# Inline markdown, for text that is shown without its markup (heading paths, slugs, ids).
_LINK_TARGET = r"\((?:<[^>\n]*>|(?:[^()\s]|\([^()\s]*\))*)(?:\s+(?:\"[^\"\n]*\"|'[^'\n]*'|\([^)\n]*\)))?\s*\)"
_INLINE_LINK = re.compile(rf"!?\[((?:[^\[\]\n]|\[[^\[\]\n]*\])*)\](?:{_LINK_TARGET}|\[[^\]\n]*\])")
_AUTOLINK = re.compile(r"<((?:[A-Za-z][\w+.-]{1,31}:|mailto:)[^<>\s]*|[^<>\s@]+@[^<>\s@]+)>")
_STRONG = re.compile(r"(\*\*|__)(?=\S)(.+?)(?<=\S)\1")
_EMPHASIS = re.compile(r"(?<![\w*\\])([*_])(?=[^\s*_])(.+?)(?<=[^\s*_])\1(?![\w*])")
_STRIKE = re.compile(r"(~~)(?=\S)(.+?)(?<=\S)\1")
_ESCAPED = re.compile(r"\\([!-/:-@\[-`{-~])")


def inline_text(text: str, mdx: bool = False) -> str:
    """Inline markdown as the text a reader sees: `[label](url)` and `[label][ref]` as label,
    `![alt](src)` as alt, `` `code` `` as code, `<https://x>` as the address, emphasis,
    strong and strike-through without their marks, inline HTML as `markup.inline_html` reads it,
    a backslash escape as its character; in MDX (`mdx`), JSX tags and expressions as `markup.inline_html`
    reads them. Inside a code span nothing else is touched. Template tags are
    `ragline.text.strip_templates`'s (run it first). Text without markup comes back as it is.
    """
    return markup.outside_code(text, lambda prose: _inline_prose(prose, mdx), _code_text)


def _code_text(span: str) -> str:
    """A code span's content: its backticks off, and one space of padding on each side (CommonMark)."""
    ticks = len(span) - len(span.lstrip("`"))
    code = span[ticks:-ticks]
    return code[1:-1] if len(code) > 2 and code[0] == code[-1] == " " and code.strip() else code


def _inline_prose(text: str, mdx: bool = False) -> str:
    if not any(ch in text for ch in "[]<>*_~\\`&" + ("{" if mdx else "")):
        return text
    previous = None
    while previous != text:  # a link inside an image's alt, emphasis inside a label
        previous = text
        text = _INLINE_LINK.sub(r"\1", text)
    text = _AUTOLINK.sub(r"\1", text)
    text = markup.inline_html(text, mdx)
    text = _STRONG.sub(r"\2", text)
    text = _EMPHASIS.sub(r"\2", text)
    text = _STRIKE.sub(r"\2", text)
    return _ESCAPED.sub(r"\1", text)


def _heading_text(raw: str, atx: bool = False) -> tuple[str, str | None]:
    """A heading's title and its explicit id (None: none). The id or attribute list at the title's end
    (`markup.HEADING_ID`, `{: .cls #id}`) is no text of it, nor are its spans' attribute lists, nor, in an
    `atx` heading, the closing hashes before its id: kramdown reads `## Setup ## {#setup}` as `Setup`
    (Python-Markdown as `Setup ##`). A hash after no space is text (`C# {#c-sharp}`). The id is read first, so that one
    straight after a span is the heading's (`## [API](/api){#api-ref}`, as before attribute lists were read)."""
    anchor = None
    if m := _ANCHOR.search(raw):
        anchor = m.group("id") or m.group("mdx_id") or markup.attribute_id(m.group("attributes"))
        raw = raw[: m.start()].rstrip()
        if atx and (bare := raw.rstrip("#")) != raw and bare[-1:] in (" ", "\t"):
            raw = bare
    if "{" in raw:
        raw = markup.span_attributes_out(raw)
    return raw.strip(), anchor


def _markup_under(doc: Doc, i: int) -> int:
    """The last line of what kramdown shows nothing of right under line i (a heading's last), else i: its
    attribute lines (`{: .no_toc }`), then, after blank lines, each run of lines that holds nothing else
    (`markup.attribute_line`, kramdown's: Python-Markdown reads `{.cls}` under a heading as a paragraph, of
    text) or kramdown's table of contents (`* TOC` then `{:toc}`). The heading's
    block takes them (`markup.shown` shows them as nothing), so a heading with nothing more under it is
    one with no text of its own, which travels with the next chunk (`rag_chunk.sections`), not a chunk
    of its title alone. A run that goes on in text is left to the block it begins."""
    lines = doc.lines
    taken = mark = i  # the last line taken; the last line of markup read
    under = True  # no blank line yet: the lines right under the heading
    k = i + 1
    while k < len(lines):
        line = lines[k]
        if _blank(line):
            taken, under = mark, False
        elif markup.attribute_line(line):
            mark = k
        elif markup.TOC_ITEM.fullmatch(line) and k + 1 < len(lines) and markup.names_toc(lines[k + 1]):
            mark = k = k + 1
        else:
            if markup.TOC_ITEM.fullmatch(line) and k + 1 == len(lines):
                doc.need()  # its `{:toc}` may be past the window's end
            return mark if under else taken
        k += 1
    doc.need()
    return mark


def _comment_end(doc: Doc, i: int) -> int | None:
    """The line closing the kramdown comment opened at line i (`{::comment}` to `{:/comment}` or `{:/}`, each indented
    three spaces at most: `markup.COMMENT_START`, `markup.COMMENT_END`), or None: kramdown shows a comment never closed
    as text (its opening tag too, after a warning), so the scan reads it as any other line."""
    lines = doc.lines
    for j in range(i + 1, len(lines)):
        if markup.COMMENT_END.fullmatch(lines[j]):
            return j
    doc.need()
    return None


def _html_end(doc: Doc, i: int) -> int:
    lines = doc.lines
    line = lines[i]
    if line.lstrip().startswith("<!--"):
        for j in range(i, len(lines)):
            if "-->" in lines[j]:
                return j
        doc.need()
        return len(lines) - 1
    if raw := _HTML_RAW.match(line):
        closing = f"</{raw.group(1).lower()}>"
        for j in range(i, len(lines)):
            if closing in lines[j].lower():
                return j
        doc.need()
        return len(lines) - 1
    return _until_blank(doc, i)


def _indented_end(doc: Doc, i: int, j: int) -> int:
    """The index of the last line, from line `j`, of the lines after line i that are indented four
    spaces or a tab, blank lines between them (indented code from line i; an MkDocs admonition's body)."""
    lines = doc.lines
    k = i + 1
    while k < len(lines) and (_blank(lines[k]) or lines[k].startswith("    ") or lines[k].startswith("\t")):
        if not _blank(lines[k]):
            j = k
        k += 1
    if k >= len(lines):
        doc.need()
    return j


def _until_blank(doc: Doc, i: int) -> int:
    """The index of the last line before the next blank line (an HTML block of the seventh kind, MDX's import/export)."""
    lines = doc.lines
    j = i
    while j + 1 < len(lines) and not _blank(lines[j + 1]):
        j += 1
    if j + 1 >= len(lines):
        doc.need()
    return j


def _list_item_end(doc: Doc, i: int, item: re.Match[str]) -> int:
    """The last line of the list item starting at line i (nested content included).

    Continuation: indented lines (blank lines allowed between them), lazy
    paragraph lines, and fences opened inside the item (kept whole, whatever
    the indentation of their lines).
    """
    lines = doc.lines
    indent = len(item.group(1)) + len(item.group(2)) + 1
    last = i
    j = i
    while j < len(lines):
        line = lines[j]
        if j > i:
            if _blank(line):
                j += 1
                continue
            lead = len(line) - len(line.lstrip(" "))
            nested = lead >= indent or (lead >= 2 and not _LIST_ITEM.match(line))
            lazy = j == last + 1 and not _starts_block(doc, j) and not _SETEXT.match(line)
            if not (nested or lazy):
                break
        body = line[indent:] if j == i else line.lstrip(" ")
        if (fence := _FENCE.match(body)) and not (fence.group(2)[0] == "`" and "`" in fence.group(3)):
            last = j = _nested_fence_end(doc, j, fence)
            j += 1
            continue
        last = j
        j += 1
    else:
        doc.need()
    return last


def _nested_fence_end(doc: Doc, i: int, opener: re.Match[str]) -> int:
    char, size = opener.group(2)[0], len(opener.group(2))
    for j in range(i + 1, len(doc.lines)):
        stripped = doc.lines[j].strip()
        if len(stripped) >= size and set(stripped) == {char}:
            return j
    doc.need()
    raise StageError("code fence opened here is never closed", ragline.records.place(doc.path, doc.base + i + 1))
