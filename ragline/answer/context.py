"""context: the numbered context blocks an answer is made from, and the pieces cut from them.

The top hits become blocks [1]..[n] (`context`). A block's quotable pieces (`Piece`,
`pieces`) are what the extractive reader scores and quotes and what a model judges:
sentences of unwrapped paragraphs, list items, table rows (each with its header row) and
code blocks whole. A block's text is quoted as the page shows it (`ContextBlock.shown`:
template tags rendered).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Any

import ragline.text
from ragline import markdown, markup
from ragline.answer.citations import sentences
from ragline.answer.cues import FOOTNOTE, LINK_DEFINITION, SNIPPETS
from ragline.records import StageError
from ragline.text import leads_in


@dataclass(frozen=True)
class Piece:
    """One quotable piece of a context block."""

    block: int  # context block number
    position: int  # order within the block
    text: str  # what would be quoted
    kind: str  # sentence, item, row, code
    group: int  # the list, table or paragraph it belongs to (-1: none)
    header: str = ""  # a table row's header row, its cells joined by " | "
    lead: int = -1  # the position of the piece that introduces it: a nested item's top-level item, a list's lead-in sentence


@dataclass
class ContextBlock:
    """One numbered context block."""

    n: int
    hit: dict[str, Any]
    _pieces: dict[bool, list[Piece]] = field(default_factory=dict, repr=False, compare=False)

    @functools.cached_property
    def shown(self) -> str:
        """The block's text as the page shows it (template tags rendered): what is quoted, checked and sent."""
        return ragline.text.strip_templates(self.hit["text"])

    @functools.cached_property
    def _first_line(self) -> str:
        return self.shown.lstrip("\n").split("\n", 1)[0]

    @property
    def headings(self) -> list[str]:
        return self.hit.get("headings") or []

    @property
    def opens_section(self) -> bool:
        """Whether the block is its section's first chunk: its text opens with a heading line (a later chunk of a long
        section goes on from the one before, without it)."""
        return markdown.is_heading(self._first_line)

    @property
    def title(self) -> str:
        """The title of the heading line the block opens with, as written (its code spans, links and emphasis; not its
        id), the markup a quote reads through (`cues.plain`); "" for a block that opens with none (`opens_section`)."""
        return markdown.heading_title(self._first_line) or ""

    def quotes(self, unwrap: bool = True) -> list[Piece]:
        """`pieces` of this block, made once: the refusal checks and the generator read the same."""
        if unwrap not in self._pieces:
            self._pieces[unwrap] = pieces(self, unwrap)
        return self._pieces[unwrap]

    def citation(self) -> dict[str, Any]:
        h = self.hit
        return {
            "n": self.n,
            "chunk_id": h["chunk_id"],
            "doc": h.get("doc"),
            "path": h.get("path"),
            "start_line": h.get("start_line"),
            "end_line": h.get("end_line"),
            "headings": h.get("headings") or [],
        }


def context(hits: list[dict[str, Any]], size: int) -> list[ContextBlock]:
    """The first `size` hits as blocks numbered from 1."""
    return [ContextBlock(n, hit) for n, hit in enumerate(hits[:size], 1)]


def pieces(block: ContextBlock, unwrap: bool = True) -> list[Piece]:
    """The quotable pieces of a block: sentences (of unwrapped paragraphs), list items (a
    nested list's items each a piece of the same list), table rows (each with its header
    row; the rule excluded), and each code block whole. A fragment that says nothing on
    its own ("(See below.)", a lone word) is not a piece."""
    text = block.shown
    doc = markdown.Doc("ctx", "ctx", text)
    try:
        parts = markdown.scan(doc)
    except StageError:  # a chunk cut inside a fence: quote its lines as they are
        parts = [markdown.Block("paragraph", 0, len(text), 1, text.count("\n") + 1)]
    out: list[Piece] = []
    g = 0
    intro = -1  # the lead-in of the list that starts here: the sentence ending in ":" just before it
    for i, part in enumerate(parts):
        body = text[part.start : part.end]
        if not (part.kind == "list_item" and i and parts[i - 1].kind == "list_item"):
            g += 1  # consecutive list items are one list
        if part.kind != "list_item":
            intro = -1
        if part.kind in ("heading", "html", "rule"):
            continue
        if part.kind in ("fence", "code"):
            out.append(Piece(block.n, len(out), body, "code", g))
        elif part.kind == "table":
            lines = body.split("\n")
            header = " | ".join(c.strip() for c in lines[0].strip().strip("|").split("|"))
            for row in lines[2:]:
                cells = [c.strip() for c in row.strip().strip("|").split("|")]
                out.append(Piece(block.n, len(out), " | ".join(cells), "row", g, header=header))
        elif part.kind == "list_item":
            top = len(out)
            for k, item in enumerate(_list_items(body, unwrap)):
                out.append(Piece(block.n, len(out), item, "item", g, lead=intro if k == 0 else top))
        else:
            body = "\n".join(_prose_lines(body.split("\n")))
            cut = sentences(" ".join(body.split())) if unwrap else [line.strip() for line in body.split("\n")]
            out.extend(Piece(block.n, len(out), p.lstrip("> ").strip(), "sentence", g) for p in cut if _says_something(p))
            intro = len(out) - 1 if out and out[-1].group == g and leads_in(out[-1].text) else -1
    return out


_NESTED_ITEM = re.compile(rf"^\s+(?:{markup.MARKER})\s")
_FRAGMENT = re.compile(
    r"^\W*(?:see (?:below|above|here|there|also)\b[^.]*|e\.g|i\.e|etc|note|tip)\W*$"
    r"|^(?:next|previous|prev|back|up|back to top)\s*:",  # a page's navigation line: "Next: Speed of Code Reviews"
    re.I,
)


def _list_items(body: str, unwrap: bool) -> list[str]:
    """A list item as quotable pieces: the item, then each item of a list nested in it,
    each on its own (so an announced list reads one item a line, never "Including: - a, - b");
    without `unwrap`, each of its lines."""
    items: list[list[str]] = [[]]
    for line in _prose_lines(body.split("\n")):
        if _NESTED_ITEM.match(line) and items[-1]:
            items.append([])
        items[-1].append(line.strip())
    if unwrap:
        return [" ".join(" ".join(lines).split()) for lines in items if any(lines)]
    return [line for lines in items for line in lines if line]


def _prose_lines(lines: list[str]) -> list[str]:
    """`lines` without those that are markup (`LINK_DEFINITION`: a link's or an abbreviation's definition, a snippet
    include; and the files between two bare `--8<--`, `SNIPPETS`), each footnote's text without its `[^1]: ` marker.
    A list item's lines are read past their indent."""
    out: list[str] = []
    snippets = False
    for line in lines:
        bare = line.lstrip(" \t")
        if SNIPPETS.match(bare):
            snippets = not snippets
        elif not snippets and not LINK_DEFINITION.match(bare):
            out.append(line[: len(line) - len(bare)] + FOOTNOTE.sub("", bare))
    return out


def _says_something(piece: str) -> bool:
    """Not an orphan fragment: "(See below.)", "Note:", a lone word or two."""
    bare = piece.strip().strip("()[]> ")
    return len(bare.split()) >= 2 and not _FRAGMENT.match(bare)
