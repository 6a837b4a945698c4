"""markup: a page's markdown as its site shows it: template tags, HTML and MDX read as their text.

rag-chunk writes each block of a chunk as `shown(kind, text, mdx)` gives it, so a chunk's text,
what is embedded and indexed, and what an answer quotes hold the words a reader of the built
page sees, and no markup:

- template tags (ERB, Liquid/Jinja, Hugo) as they render: `ragline.text.strip_templates`;
- inline HTML as its text (`inline_html`): `<a href="..." data-proofer-ignore>PagerDuty</a>` is
  `PagerDuty`, `<img alt="The flow">` its alt text, `<br>` a space, comments, `<script>` and
  `<style>` nothing, `&mdash;` and the other character references their character. A tag is
  what CommonMark calls raw HTML (`<5 minutes`, `a < b`, `<https://x>` are not);
- an HTML block as the text it renders (`html_block`): paragraphs, list items (`- `), table
  rows (a pipe table, its first row the header) and `<pre>` (a fence) on lines of their own;
- in an MDX page (`.mdx`, or a page whose content is MDX: `markdown.mdx_evidence`), JSX components as HTML is (the tags go, the text inside stays),
  expressions `{...}` as their string literals or nothing (`{/* a comment */}`), and its
  `import` / `export` lines (a block of their own, `markdown.Doc`'s `mdx`) as nothing.

Admonitions (Docusaurus `:::note`, MkDocs `!!! note`) lose their fence lines and keep their title
as text, `Note: E-mail on the QA site` (`admonition`). The attribute lists of kramdown (Jekyll) and
Python-Markdown (MkDocs) are no text (`ATTRIBUTE_LIST`, `attributes_out`): a block's on a line of its own
(`{: .no_toc }`), a span's after it (`[Docs](x){:target="_blank"}`), a heading's id and classes at its end,
kramdown's table of contents (`* TOC` then `{:toc}`) and its comments (`{::comment}` to `{:/comment}`).

Code stays as it is written: fences, indented code and code spans (`<div>` in backticks),
inside a list item or a quote too. Markdown itself stays: a chunk is still markdown.
"""

from __future__ import annotations

import bisect
import html
import itertools
import re
from collections.abc import Callable
from html.parser import HTMLParser

from ragline.text import strip_templates

# CommonMark's raw HTML (spec 6.6), and JSX's wider tags for MDX: names with `.` and `:`,
# attribute values in braces (one level of nesting), spread attributes, fragments.
_ATTRIBUTE = r"""\s+[A-Za-z_:][\w.:-]*(?:\s*=\s*(?:[^\s"'=<>`]+|'[^']*'|"[^"]*"))?"""
_BRACES = r"\{(?:[^{}]|\{[^{}]*\})*\}"
_JSX_ATTRIBUTE = rf"""\s+[A-Za-z_:][\w.:-]*(?:\s*=\s*(?:{_BRACES}|[^\s"'=<>`{{}}]+|'[^']*'|"[^"]*"))?|\s*{_BRACES}"""
# Each construct that may run on (a comment, a raw element) stops at the next opener of its kind, so an
# unclosed one costs a scan to the next, not to the text's end: a page of 50,000 of them is one pass.
_COMMENT = r"<!--(?:-?>|(?:(?!<!--).)*?-->)"
_RAW = r"<(script|style)\b[^>]*>(?:(?!<(?:script|style)\b).)*?</\1\s*>"
# One open or closing tag, whole (patterns, for `markdown`'s HTML block starts too); JSX_OPEN_START: an open tag's
# name and attributes with no `>` yet, as a JSX tag that goes on to the next line begins.
OPEN_TAG = rf"<[A-Za-z][A-Za-z0-9-]*(?:{_ATTRIBUTE})*\s*/?>"
CLOSING_TAG = r"</[A-Za-z][A-Za-z0-9-]*\s*>"
JSX_OPEN_START = rf"<[A-Za-z][\w.:-]*(?:{_JSX_ATTRIBUTE})*"
JSX_OPEN_TAG = rf"{JSX_OPEN_START}\s*/?>"
JSX_CLOSING_TAG = r"</[A-Za-z][\w.:-]*\s*>|</?>"  # </?>: a fragment
_TAG = re.compile(rf"(?<!\\)(?:{_RAW}|{_COMMENT}|{OPEN_TAG}|{CLOSING_TAG})", re.S | re.I)
_JSX_TAG = re.compile(rf"(?<!\\)(?:{_RAW}|{_COMMENT}|{JSX_OPEN_TAG}|{JSX_CLOSING_TAG})", re.S | re.I)
_ALT = re.compile(r"""\salt\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'=<>`]+))""", re.I)
_REFERENCE = re.compile(r"&(?:#[0-9]{1,7}|#[xX][0-9A-Fa-f]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});")
_EXPRESSION = re.compile(rf"(?<!\\){_BRACES}", re.S)
_STRING = re.compile(r"""\s*(?:"((?:[^"\\]|\\.)*)"|'((?:[^'\\]|\\.)*)'|`([^`$]*)`)\s*""", re.S)
_JSX_VALUE = re.compile(rf"=\s*{_BRACES}")  # an attribute's value in braces, for the HTML parser
_TICKS = re.compile(r"`+")
_BLANK_LINE = re.compile(r"\n[ \t]*\n")
# Lines within a paragraph that show nothing (a tag alone; a paragraph has no blank line of its own). Not its first or
# last line: a run of a paragraph's sentences may begin or end inside a line that goes on in the next run.
_SHOWS_NOTHING = re.compile(r"\n(?:[ \t]*\n)+")
_FENCE = re.compile(r"^[ \t>]*(`{3,}|~{3,})(.*)$")
# kramdown's and Python-Markdown's (MkDocs' attr_list) attribute list: `{: #id .class key="value"}`, `{:toc}`, attr_list's
# `{ .class }`; where it may stand (after a space in a heading, alone on a line, after a span) an escaped `\{` is none. Read
# narrowly, so that braces which are text stay text (`{:else}`, `{:.2f}`, `{:>10}`, `{:#x}`, `{:ok, pid}`, `{#each items}`,
# `{x}`): each item is a class or an id whose name begins with a letter (`.a.b#c` runs them together; an id, as kramdown's,
# may hold `:`, `#sec:intro`, and has two characters at least, so that a format spec's `#x`, `#o`, `#b` is none), or
# `key=value` with the value quoted or a run of word characters; after `{:` also kramdown's `toc` and `no_toc` (its other
# bare names refer to definitions, which a block does not see). Possessive quantifiers, and no item holds a brace: an
# attempt ends at the next brace and never backtracks, so a line of fifty thousand `{: .a` is one pass.
_CLASS = r"\.[A-Za-z][\w-]*+"
_ID = r"#[A-Za-z][\w:-]++"
_KEY_VALUE = r"""[A-Za-z][\w:-]*+=(?:"[^"\n{}]*+"|'[^'\n{}]*+'|[\w.%/:#+-]++)"""
_ITEM = rf"(?:{_CLASS}|{_ID})++|{_KEY_VALUE}"
_KRAMDOWN_ITEM = rf"{_ITEM}|(?:no_)?toc"
_KRAMDOWN_LIST = rf"\{{:[ \t]*+(?:{_KRAMDOWN_ITEM})(?:[ \t]++(?:{_KRAMDOWN_ITEM}))*+[ \t]*+\}}"
_BARE_LIST = rf"\{{[ \t]*+(?:{_ITEM})(?:[ \t]++(?:{_ITEM}))*+[ \t]*+\}}"  # Python-Markdown's alone: no colon
ATTRIBUTE_LIST = rf"(?:{_KRAMDOWN_LIST}|{_BARE_LIST})"
# A heading's explicit id, at its title's end: `{#id}` (kramdown, pandoc, Docusaurus; with attributes, `{#id .wide}`), MDX's
# `{/* #id */}` and `\{#id\}` (Docusaurus 3); or an attribute list after a space (`{: .cls #id}`, `attribute_id` reads its id).
# Group `id`, `mdx_id` or `attributes` holds it.
HEADING_ID = (
    r"(?:\\?\{#(?P<id>[^\s{}\\]+)(?:[ \t][^{}\n\\]*)?\\?\}|\{/\*[ \t]*#(?P<mdx_id>[^\s*]+)[ \t]*\*/\}"
    rf"|(?<=[ \t])(?P<attributes>{ATTRIBUTE_LIST}))"
)
_HEADING_ID = re.compile(rf"(?<![ \t])[ \t]*{HEADING_ID}(?=[ \t]*(?:#+[ \t]*)?$)", re.M)  # from a run's start: one pass
# Admonitions, each line after its indentation (patterns, for `markdown`'s block starts too). Docusaurus's (remark-directive):
# `:::note`, `:::info[Title]`, `:::tip Title`, closed by a line of colons alone (nested ones take more colons); MkDocs'
# (Python-Markdown): `!!! note "Title"`, and pymdownx's collapsible `??? note` and `???+ note`, their body indented 4 spaces;
# and pymdownx's content tabs, `=== "Python"` (`===!`, `===+`), their body indented the same.
ADMONITION_FENCE = r":{3,}[ \t]*(?:(?P<kind>[A-Za-z][\w-]*)(?:\[(?P<bracket>[^\]\n]*)\])?(?P<title>[ \t].*)?)?[ \t]*$"
MKDOCS_ADMONITION = (
    r'(?:(?:!!!|\?\?\?\+?)[ \t]+(?P<kind>[A-Za-z][\w-]*)(?:[ \t]+[A-Za-z][\w-]*)*(?:[ \t]+"(?P<title>[^"]*)")?'
    r'|===[!+]{0,2}[ \t]+"(?P<tab>[^"\n]*)")[ \t]*$'
)
_ADMONITION_LINE = re.compile(rf"^(?P<lead>[ \t>]*){ADMONITION_FENCE}")
_MKDOCS_LINE = re.compile(rf"^ {{0,3}}{MKDOCS_ADMONITION}")
# A GitHub alert's marker, `> [!NOTE]` at a quote's first line (the text after it on that line or the next): shown as
# GitHub shows it, its kind as a word, `> Note: ...`.
_ALERT = re.compile(r"^(?P<lead>[ \t]*(?:>[ \t]*)+)\[!(?P<kind>NOTE|TIP|IMPORTANT|WARNING|CAUTION)\][ \t]*(?P<rest>.*)$", re.M | re.I)


def _tag_text(match: re.Match[str]) -> str:
    """What a reader sees of one inline tag: an image's alt text, a space for `<br>`, else nothing."""
    tag = match.group()
    name = re.match(r"</?([A-Za-z][\w.:-]*)", tag)
    if name is None:
        return ""
    low = name.group(1).lower()
    if low == "img" and (alt := _ALT.search(tag)):
        return next(g for g in alt.groups() if g is not None)
    return " " if low == "br" else ""


def _expression(match: re.Match[str]) -> str:
    """An MDX expression as it renders: a string literal as its text, anything else (a comment, a variable) as nothing."""
    literal = _STRING.fullmatch(match.group()[1:-1])
    if literal is None:
        return ""
    return next(g for g in literal.groups() if g is not None)


def inline_html(text: str, mdx: bool = False) -> str:
    """Prose with its inline HTML (and in MDX its JSX and expressions) as the text a reader sees.
    No code in `text`: `outside_code` hands over the prose alone."""
    if "<" in text:
        text = (_JSX_TAG if mdx else _TAG).sub(_tag_text, text)
    if mdx and "{" in text:
        text = _EXPRESSION.sub(_expression, text)
    if "&" in text:
        text = _REFERENCE.sub(lambda m: html.unescape(m.group()), text)
    return text


def code_spans(text: str) -> list[tuple[int, int]]:
    """[start, end) of each code span of `text`, in order: a run of backticks up to the next run of as
    many, within a paragraph (a blank line ends it); a run that no such run closes is text (CommonMark
    6.1). One pass over the runs, however many there are and however long."""
    spans: list[tuple[int, int]] = []
    at = 0
    for part in [*_BLANK_LINE.finditer(text), None]:
        end = part.start() if part is not None else len(text)
        runs = [m.span() for m in _TICKS.finditer(text, at, end)]
        closer: list[int | None] = [None] * len(runs)
        last: dict[int, int] = {}
        for i in range(len(runs) - 1, -1, -1):  # each run's next run of the same length
            size = runs[i][1] - runs[i][0]
            closer[i], last[size] = last.get(size), i
        i = 0
        while i < len(runs):
            j = closer[i]
            if j is None:
                i += 1
            else:
                spans.append((runs[i][0], runs[j][1]))
                i = j + 1
        at = part.end() if part is not None else end
    return spans


def outside_code(text: str, prose: Callable[[str], str], code: Callable[[str], str] = lambda span: span) -> str:
    """`text` with `prose` applied to what is not code and `code` to each code span (its backticks
    included); fenced lines (a fence at any indentation, as inside a list item or a quote) are kept
    as they are."""
    out: list[str] = []
    run: list[str] = []
    fence: str | None = None

    def flush() -> None:
        if run:
            joined, at, parts = "\n".join(run), 0, []
            for start, end in code_spans(joined):
                parts += [prose(joined[at:start]), code(joined[start:end])]
                at = end
            out.append("".join([*parts, prose(joined[at:])]))
            run.clear()

    for line in text.split("\n"):
        fence, fenced = fence_step(fence, line)
        if not fenced:
            run.append(line)
            continue
        flush()
        out.append(line)
    flush()
    return "\n".join(out)


def fence_step(fence: str | None, line: str) -> tuple[str | None, bool]:
    """(the fence open after `line`, whether `line` is code: a fence's line or one inside it), given the
    fence open before it (None: none). A fence at any indentation, as inside a list item or a quote."""
    m = _FENCE.match(line)
    if fence is None:
        if m is None or (m.group(1)[0] == "`" and "`" in m.group(2)):
            return None, False
        return m.group(1), True
    if m is not None and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) and not m.group(2).strip():
        return None, True
    return fence, True


# --------------------------------------------------------------------------- HTML blocks

_HIDDEN = frozenset("script style template head title noscript".split())
_BLOCK = frozenset(
    """p div section article header footer main nav aside h1 h2 h3 h4 h5 h6 ul ol dl dt dd blockquote
    details summary figure figcaption form fieldset address hr center""".split()
)


class _Text(HTMLParser):
    """The text an HTML block renders, as markdown lines (see `html_block`)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.out: list[str] = []
        self.texted = False  # whether anything but white space is written
        self.hidden = 0
        self.pre = 0
        self.rows: list[list[str]] | None = None
        self.nested = 0  # tables open inside the table being read
        self.cell: list[str] | None = None

    def _lines(self, n: int) -> None:
        """End what is written with at least `n` line breaks (none at the very start). Read from the end, back to the
        last piece with more than line breaks in it: each tag costs a few pieces, not all that is written (joining it
        all took time quadratic in a page of many tags)."""
        have = 0
        for piece in reversed(self.out):
            kept = piece.rstrip("\n")
            have += len(piece) - len(kept)
            if kept:
                break
        if self.texted and n > have:
            self.out.append("\n" * (n - have))

    def _put(self, text: str) -> None:
        self.out.append(text)
        self.texted = self.texted or bool(text.strip())

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _HIDDEN:
            self.hidden += 1
        elif tag == "table" and self.cell is not None:
            self.nested += 1  # a table in a table's cell: its words join the cell's (a layout table's content)
            self._emit(" ")
        elif tag == "table":
            self.rows = []
        elif tag in ("tr", "td", "th") and self.nested:
            self._emit(" ")
        elif tag == "tr" and self.rows is not None:
            self._end_cell()
            self.rows.append([])
        elif tag in ("td", "th") and self.rows is not None:
            self._end_cell()  # HTML lets a cell end where the next begins
            if not self.rows:
                self.rows.append([])
            self.cell = []
        elif tag == "br":
            self._emit(" " if self.cell is not None else "\n")
        elif tag == "img":
            self._emit(next((v for k, v in attrs if k == "alt" and v), ""))
        elif tag == "li":
            self._lines(1)
            self._emit("- ")
        elif tag == "pre":
            self._lines(2)
            self._put("```\n")
            self.pre += 1
        elif tag in _BLOCK:
            self._lines(2)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in _HIDDEN:
            self.handle_starttag(tag, attrs)
            if tag not in ("br", "img", "hr"):
                self.handle_endtag(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag in _HIDDEN:
            self.hidden = max(0, self.hidden - 1)
        elif tag in ("td", "th", "tr", "table") and self.nested:
            self.nested -= tag == "table"
            self._emit(" ")
        elif tag in ("td", "th", "tr"):
            self._end_cell()
        elif tag == "table" and self.rows is not None:
            self._end_cell()
            rows, self.rows = [r for r in self.rows if r], None
            if rows:
                width = max(map(len, rows))
                rows = [r + [""] * (width - len(r)) for r in rows]
                self._lines(2)
                table = [rows[0], ["---"] * width, *rows[1:]]
                self._put("\n".join("| " + " | ".join(r) + " |" for r in table))
                self._lines(2)
        elif tag == "pre" and self.pre:
            self.pre -= 1
            self._lines(1)
            self._put("```")
            self._lines(2)
        elif tag in _BLOCK or tag == "li":
            self._lines(2 if tag in _BLOCK else 1)

    def _end_cell(self) -> None:
        if self.cell is not None and self.rows is not None:
            self.rows[-1].append(" ".join("".join(self.cell).split()).replace("|", "\\|"))
        self.cell = None

    def handle_data(self, data: str) -> None:
        if self.pre and self.out and self.out[-1] == "```\n":
            data = data.removeprefix("\n")  # HTML drops the line break that opens a <pre>
        if self.pre or data.strip():
            self._emit(data)
        elif self.out and not self.out[-1][-1:].isspace():
            self._emit(" ")  # white space between elements: a space at most, the tags decide the lines

    def _emit(self, text: str) -> None:
        if self.hidden or not text:
            return
        if self.cell is not None:
            self.cell.append(text)
        elif self.rows is None or self.pre:
            self._put(text)

    def text(self) -> str:
        self.close()
        if self.rows is not None:  # a table never closed: its rows as they are
            self.handle_endtag("table")
        return "".join(self.out)


def _tags_only(text: str, tags: re.Pattern[str]) -> str:
    """`text` with each `<` that opens no whole tag or comment escaped (`&lt;`, which reads as `<`),
    and cut at a comment never closed (a browser shows nothing after it): what is left is whole
    tags between text, which html.parser reads in one pass (fed half-open ones, `<!--` or `</b`
    fifty thousand times, it takes minutes)."""
    out: list[str] = []
    at = 0
    for m in [*tags.finditer(text), None]:
        stray = text[at : m.start() if m is not None else len(text)]
        if (cut := stray.find("<!--")) >= 0:
            out.append(stray[:cut].replace("<", "&lt;"))
            break
        out.append(stray.replace("<", "&lt;"))
        if m is None:
            break
        out.append(m.group())
        at = m.end()
    return "".join(out)


def html_block(text: str, mdx: bool = False) -> str:
    """An HTML block as the text it renders, as markdown: each paragraph, heading or list item its
    own line or lines, a table a pipe table, `<pre>` a fence, hidden elements (`<script>`,
    `<style>`, comments) left out; each line flush left (but in `<pre>`), runs of blank lines one. In MDX, JSX
    attribute values in braces are dropped first and expressions read as `inline_html` reads them."""
    if mdx:
        text = re.sub(r"</?>", "", _JSX_VALUE.sub('=""', text))
    parser = _Text()
    parser.feed(_tags_only(text, _JSX_TAG if mdx else _TAG))
    shown = parser.text()
    if mdx:
        shown = _EXPRESSION.sub(_expression, shown)
    lines, fence = [], False
    for line in shown.split("\n"):  # HTML's indentation is no markdown's: each line flush left, but in <pre>
        fence ^= line == "```"
        lines.append(line.rstrip() if fence and line != "```" else line.strip())
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip("\n")


# --------------------------------------------------------------------------- admonitions


def _label(kind: str, title: str | None) -> str:
    """An admonition's title as its text: `Note: E-mail on the QA site`, `Tip:` without one."""
    return f"{kind.capitalize()}: {title.strip()}" if title and title.strip() else f"{kind.capitalize()}:"


def admonition(text: str) -> str:
    """An admonition block (`markdown`'s kind `admonition`) as the markdown its site shows, its
    fence lines gone and its title kept as text: a Docusaurus opening line (`:::info[E-mail on
    the QA site]`) as `Info: E-mail on the QA site` (`Note:` without a title), its closing line as
    nothing; an MkDocs block's first line (`!!! warning "Do not"`) as `Warning: Do not` (nothing for
    the empty title `""`), a content tab's (`=== "Python"`) as `Python:`, then, after a blank line,
    its body four spaces less indented."""
    first, _, body = text.partition("\n")
    if m := _MKDOCS_LINE.match(first):
        if m.group("tab") is not None:  # a content tab: its title leads in to its body
            label = f"{m.group('tab').strip()}:" if m.group("tab").strip() else ""
        else:
            label = "" if m.group("title") == "" else _label(m.group("kind"), m.group("title"))
        lines = [line[4:] if line.startswith("    ") else line[1:] if line.startswith("\t") else line.lstrip() for line in body.split("\n")]
        return "\n\n".join(part for part in (label, "\n".join(lines).strip("\n")) if part)
    return _admonition_lines(text)


def _admonition_lines(text: str) -> str:
    """`text` with each Docusaurus admonition line outside code (after any indentation or quote marks,
    as inside a list item or a quote) as `admonition` shows it: an opening line its title, a closing
    line nothing (a block that is one closing line: "")."""
    out, fence = [], None
    for line in text.split("\n"):
        fence, fenced = fence_step(fence, line)
        if not fenced and (m := _ADMONITION_LINE.match(line)):
            if not m.group("kind"):
                continue
            line = m.group("lead") + _label(m.group("kind"), m.group("bracket") or m.group("title"))
        out.append(line)
    return "\n".join(out)


# --------------------------------------------------------------------------- attribute lists

# What kramdown reads as markup on a line of its own (after at most three spaces; in a list item or a quote, after its
# indentation or quote marks): an attribute list (`_KRAMDOWN_LIST`), an attribute list definition (`{:refdef: .cls}`), and its
# extensions' tags that stand alone: self-closing (`{::options parse_block_html="true" /}`), `{::nomarkdown}` (its body stays)
# and its closing tag (`{:/nomarkdown}`, `{:/}`). Python-Markdown's list without the colon stands alone only as the last line
# of a block that has text before it (`_BARE_LINE`, `_markup_lines`).
_ATTRIBUTE_LINE = re.compile(
    rf"(?:{_KRAMDOWN_LIST}|\{{:[A-Za-z][\w-]*+:[ \t]*+(?:{_ITEM})(?:[ \t]++(?:{_ITEM}))*+[ \t]*+\}}"
    rf"|\{{::(?:options|comment|nomarkdown)(?:[ \t]++(?:{_ITEM}))*+[ \t]*+/\}}|\{{::nomarkdown(?:[ \t]++(?:{_ITEM}))*+[ \t]*+\}}"
    r"|\{:/(?:nomarkdown)?\})[ \t]*+"
)
_KRAMDOWN_LINE = re.compile(rf"{_KRAMDOWN_LIST}[ \t]*+")
_BARE_LINE = re.compile(rf"{_BARE_LIST}[ \t]*+")
# kramdown's comment: its opening tag on a line of its own hides the lines after it, to a line that is its closing tag, each
# indented three spaces at most (kramdown's EXT_BLOCK_START and EXT_BLOCK_STOP_STR). One never closed is text: kramdown warns
# and shows its opening tag. Matched from a line's start, or in a list item or a quote from past its lead (`_lead`).
COMMENT_START = re.compile(r" {0,3}\{::comment[ \t]*+\}[ \t]*+")
COMMENT_END = re.compile(r" {0,3}\{:/(?:comment)?\}[ \t]*+")
MARKER = r"[-*+]|\d{1,9}[.)]"  # a list item's marker: a bullet, or an ordinal and its dot or parenthesis
LIST_ITEM = re.compile(rf"^( {{0,3}})({MARKER})([ \t]+|$)")  # a list item's first line: its indent, marker, and the space after
# The list item that kramdown's table of contents replaces, when the next line is an attribute list naming `toc` (`names_toc`).
TOC_ITEM = re.compile(rf" {{0,3}}(?:{MARKER})[ \t]+TOC[ \t]*+")
# An attribute list's items, each on its own: a value whole (`title="#x"` names no id), each class and id of a run (`.a#bc`).
_ATTRIBUTE_ITEM = re.compile(rf"{_KEY_VALUE}|#(?P<id>[A-Za-z][\w:-]++)|(?P<cls>{_CLASS})|(?P<ref>(?:no_)?toc)")
# After a span: a link or an image (`[Docs](x){ target=_blank }`), emphasis, code, an emoji shortcode
# (`:material-clock-fast:{ .lg }`: Python-Markdown's attr_list follows any inline element). After any but a link or an
# image, a list without the colon names a class or an id: `$\sum_{i=1}$`, `1:{x=2}` and `f(){a=1}`-like text stay.
_NAMED_LIST = rf"\{{[ \t]*+(?:{_KEY_VALUE}[ \t]++)*+(?:{_CLASS}|{_ID})++(?:[ \t]++(?:{_ITEM}))*+[ \t]*+\}}"
_SPAN_ATTRIBUTE = re.compile(rf"(?<=[)\]]){ATTRIBUTE_LIST}|(?<=[*_`:])(?:{_KRAMDOWN_LIST}|{_NAMED_LIST})")
# Code written as HTML (`<code>`, `<kbd>`, `<samp>`, `<pre>`): an element from its opening tag to the next closing one.
_HTML_CODE_TAG = re.compile(r"<(/?)(code|kbd|samp|pre)\b[^<>]*+>", re.I)


def html_code(text: str) -> list[tuple[int, int]]:
    """[start, end) of each element of `text` that is code written as HTML (`_HTML_CODE_TAG`), in order; an opening tag no
    closing one follows is text. One pass over the tags."""
    spans: list[tuple[int, int]] = []
    opened: dict[str, int] = {}
    for m in _HTML_CODE_TAG.finditer(text):
        name = m[2].lower()
        if not m[1]:
            opened.setdefault(name, m.start())
        elif name in opened:
            spans.append((opened.pop(name), m.end()))
    return sorted(spans)


def code_ranges(text: str) -> list[tuple[int, int]]:
    """[start, end) of what in `text` is code no markup is read in: its code spans (`code_spans`) and its HTML code
    elements (`html_code`), by start."""
    return sorted(code_spans(text) + html_code(text))


def attribute_id(attributes: str) -> str | None:
    """The id an attribute list gives (`{: .cls #id}`: `id`, wherever it stands; of two, the last, as kramdown and
    Python-Markdown read it), or None."""
    ids = [m["id"] for m in _ATTRIBUTE_ITEM.finditer(attributes) if m["id"]]
    return ids[-1] if ids else None


def _markup_start(line: str) -> int | None:
    """Where markup alone on a line of a page, outside any list or quote, begins: past three spaces at most (four: indented
    code); None: it may not."""
    at = _lead(line, " \t")
    return at if at <= 3 and "\t" not in line[:at] else None


def attribute_line(line: str) -> bool:
    """Whether a line of a page, outside any list or quote, is kramdown's markup alone (`_ATTRIBUTE_LINE`)."""
    return (at := _markup_start(line)) is not None and _ATTRIBUTE_LINE.fullmatch(line, at) is not None


def names_toc(line: str) -> bool:
    """Whether a line, read as `attribute_line` reads it, is kramdown's attribute list naming `toc` (`{:toc}`, `{: toc}`):
    under a `TOC_ITEM`, kramdown's table of contents."""
    at = _markup_start(line)
    return (
        at is not None
        and _KRAMDOWN_LINE.fullmatch(line, at) is not None
        and any(m["ref"] == "toc" for m in _ATTRIBUTE_ITEM.finditer(line, at))
    )


def span_attributes_out(line: str, code: list[tuple[int, int]] | None = None) -> str:
    """`line` (or a heading's title) without its spans' attribute lists (`_SPAN_ATTRIBUTE`) but those that begin inside
    code (`code`: `code_ranges` of the line, given or found): one pass over both."""
    if code is None:
        code = code_ranges(line)
    out, at, k = [], 0, 0
    for m in _SPAN_ATTRIBUTE.finditer(line):
        while k < len(code) and code[k][1] <= m.start():
            k += 1
        if k < len(code) and code[k][0] <= m.start():
            continue
        out.append(line[at : m.start()])
        at = m.end()
    return "".join(out) + line[at:] if out else line


def _lead(line: str, chars: str = " \t>") -> int:
    """The length of `line`'s lead: white space, and quote marks unless `chars` leaves them out."""
    return len(line) - len(line.lstrip(chars))


def _indented(line: str, column: int) -> bool:
    """Whether `line` may be indented code: white space of four columns or more past `column` (where a list item's text
    begins; 0 elsewhere), or past a quote's `>` and the space after it. A tab counts four columns, the reading that takes
    more lines for code: a line this calls text is text."""
    for n, white in enumerate(line[: _lead(line)].split(">")):
        white = white.removeprefix(" ") if n else white
        if len(white) + 3 * white.count("\t") > (3 if n else column + 3):
            return True
    return False


def _item_column(first: str) -> tuple[int, bool]:
    """(the column where a list item's text begins, whether its first line is code: five columns or more after the
    marker), reading a tab as one column for the first and as four for the second, so that neither takes code for text."""
    marker = LIST_ITEM.match(first)
    if marker is None:
        return 0, False
    space, end = marker.group(3), marker.end()
    if end == len(first) or len(space) + 3 * space.count("\t") > 4:  # no text on the line, or code after the marker
        return marker.end(2) + 1, end < len(first)
    return end, False


def _code_in_lines(lines: list[str], item: bool) -> list[list[tuple[int, int]] | None]:
    """For each line: None where it is code (a fence's line, or one that may be indented code: `_indented`), else the
    [start, end) of its code spans and HTML code elements (`code_ranges`; either may run over lines)."""
    column, first_is_code = _item_column(lines[0]) if item else (0, False)
    code: list[list[tuple[int, int]] | None] = [None] * len(lines)
    fence: str | None = None
    run: list[int] = []

    def flush() -> None:
        starts = list(itertools.accumulate((len(lines[k]) + 1 for k in run), initial=0))
        spans: list[list[tuple[int, int]]] = [[] for _ in run]
        joined = "\n".join(lines[k] for k in run)
        for start, end in code_ranges(joined):
            for n in range(bisect.bisect_right(starts, start) - 1, bisect.bisect_right(starts, end - 1)):  # the lines it touches
                spans[n].append((max(start, starts[n]) - starts[n], min(end, starts[n + 1] - 1) - starts[n]))
        for k, in_line in zip(run, spans, strict=True):
            code[k] = in_line
        run.clear()

    for k, line in enumerate(lines):
        if (k == 0 and first_is_code) or _indented(line, column):
            fenced = True  # indented code, or a fence's body: neither opens nor closes a fence
        else:
            fence, fenced = fence_step(fence, line)
        if fenced:
            flush()
        else:
            run.append(k)
    flush()
    return code


def _markup_lines(lines: list[str], code: list[list[tuple[int, int]] | None]) -> set[int]:
    """The lines (indices) of a block that are kramdown's or MkDocs' markup alone, outside code (`code`: `_code_in_lines`):
    kramdown's attribute lists and tags (`_ATTRIBUTE_LINE`), a comment from its opening tag to its closing one (one never
    closed in `lines` is text), a table of contents' two lines, and Python-Markdown's list without the colon (`_BARE_LINE`)
    where attr_list reads one: naming a class or an id, as the last line of a paragraph that has text before it (`Set\n{x=1}`,
    `{.lead}\nText.` and a list alone are text)."""
    plain = [c == [] for c in code]  # outside code, and holding no code span
    leads = [_lead(line) for line in lines]
    ends = [k for k, line in enumerate(lines) if plain[k] and COMMENT_END.fullmatch(line, leads[k])]
    out: set[int] = set()
    k = 0
    while k < len(lines):
        line = lines[k]
        if not plain[k]:
            pass
        elif COMMENT_START.fullmatch(line, leads[k]) and (n := bisect.bisect_right(ends, k)) < len(ends):
            out.update(range(k, ends[n] + 1))
            k = ends[n]
        elif k + 1 < len(lines) and plain[k + 1] and TOC_ITEM.fullmatch(line) and names_toc(lines[k + 1]):
            out.update((k, k + 1))
            k += 1
        elif _ATTRIBUTE_LINE.fullmatch(line, leads[k]) or (
            _BARE_LINE.fullmatch(line, leads[k])
            and k > 0
            and k - 1 not in out
            and code[k - 1] is not None
            and lines[k - 1].strip(" \t>")  # text before it
            and (k + 1 == len(lines) or not lines[k + 1].strip(" \t>"))  # and none after
            and any(m["id"] or m["cls"] for m in _ATTRIBUTE_ITEM.finditer(line, leads[k]))
        ):
            out.add(k)
        k += 1
    return out


def attributes_out(text: str, item: bool = False) -> str:
    """A block's text (`item`: a list item's) without its kramdown and MkDocs attribute lists, outside code: its lines
    of markup alone (`_markup_lines`) and its spans' attribute lists (`_SPAN_ATTRIBUTE`). Code is fenced lines, code spans,
    and every line that may be indented code (`_indented`), in a list item or a quote too. A blank line (or a quote's `>`
    alone) that a line left out leaves beside another, or at the block's start or end, goes too: no paragraph break where
    there was none."""
    lines = text.split("\n")
    code = _code_in_lines(lines, item)
    gone = _markup_lines(lines, code)
    out: list[str] = []
    left_out = False  # a line left out since the last line kept that shows something
    for k, line in enumerate(lines):
        if k in gone:
            left_out = True
            continue
        empty = not line.strip(" \t>")
        if left_out and empty and (not out or not out[-1].strip(" \t>")):
            continue
        left_out = left_out and empty
        spans = code[k]
        out.append(span_attributes_out(line, spans) if spans is not None else line)
    while left_out and out and not out[-1].strip(" \t>"):
        out.pop()
    return "\n".join(out)


# --------------------------------------------------------------------------- blocks

# Spans a sentence cut must not fall inside (`protected`): a code span, a tag or comment, a template tag.
_PROTECTED = re.compile(r"<!--(?:(?!<!--).)*?-->|</?[A-Za-z][^<>]*>|<%(?:(?!<%).)*?%>|\{[{%](?:(?!\{[{%]).)*?[%}]\}", re.S)


def protected(text: str) -> list[tuple[int, int]]:
    """[start, end) of each span of `text` that a cut would break, in order, none inside another:
    code spans (`code_spans`), and outside them tags, comments and template tags."""
    spans, at = [], 0
    for start, end in [*code_spans(text), (len(text), len(text))]:
        spans += [m.span() for m in _PROTECTED.finditer(text, at, start)]
        if start < end:
            spans.append((start, end))
        at = end
    return spans


def shown(kind: str, text: str, mdx: bool = False) -> str:
    """One block of a page (a `markdown.Block` kind, or a run of a paragraph's sentences) as its
    site shows it: code as it is, MDX's `esm` lines and a kramdown comment as nothing, a heading
    without its id (`HEADING_ID`), an admonition its title and body without its fences (`admonition`,
    in a list item or a quote too), a GitHub alert's `[!NOTE]` as `Note:`, an HTML block by `html_block`,
    anything else (prose, headings, items, quotes, tables) without its attribute lists (`attributes_out`)
    and by `inline_html` outside its code, template tags rendered first (`strip_templates`) in both. A
    line within a paragraph that shows nothing is left out, so it makes no paragraph break."""
    if kind in ("fence", "code"):
        return text
    if kind in ("esm", "comment"):
        return ""
    if kind == "admonition":
        text = admonition(text)
    elif kind in ("list_item", "quote") and ":::" in text:
        text = _admonition_lines(text)
    if kind != "html" and "{" in text:
        text = attributes_out(text, item=kind == "list_item")
    if kind == "heading":
        text = _HEADING_ID.sub("", text)  # the id is no text of the heading (`markdown.Block.anchor` has it)
    if kind in ("list_item", "quote") and "[!" in text:
        text = _ALERT.sub(lambda m: f"{m['lead']}{m['kind'].capitalize()}:{m['rest'] and ' '}{m['rest']}", text)
    text = strip_templates(text)
    if kind == "html":
        return html_block(text, mdx)
    if "<" in text or "&" in text or (mdx and "{" in text):
        text = outside_code(text, lambda prose: inline_html(prose, mdx))
    if kind == "paragraph":
        text = _SHOWS_NOTHING.sub("\n", text)
    elif kind == "heading" and mdx:
        text = "\n".join(line.rstrip() for line in text.split("\n"))  # no white space where a tag or comment stood
    return text
