"""rag-chunk: heading-aware markdown chunking; fences, tables and HTML blocks stay whole.

    rag-chunk corpus/ > chunks.jsonl
    rag-chunk --words 120 docs/runbook.md | rag-embed | rag-index --out idx
    cat notes.md | rag-chunk --doc notes

Reads markdown files and directories, or markdown on stdin with --doc NAME, a document streamed
section by section through a window of its lines (`markdown.Doc`), so memory follows the longest
section, not the file. A directory is walked (`walk`) for the pages of the common site generators
(PAGE_TYPES: *.md, *.markdown, *.mdx, *.md.erb, *.html.md.erb), in sorted order; every file and
folder it passes over is named on stderr with why, after the output (SKIPS_SHOWN lines, then a
count), and --include / --exclude (gitignore-style globs, `ragline.globs`) choose among them;
--list prints the files that would be read (and names on stderr the pages read as MDX by their
content: `markdown.mdx_evidence`, as Docusaurus reads `.md`). Output is spooled and written once every input has
chunked: a bad file leaves stdout empty. Writes one chunk record per line:

    {"schema": "chunk/1", "id": "05-settlement#batch-cutoff", "doc": "05-settlement",
     "path": "corpus/05-settlement.md", "headings": ["Settlement", "Batch cutoff"],
     "text": "## Batch cutoff\\n\\nThe sweep ...", "start_line": 40, "end_line": 52,
     "words": 131, "window": 180,
     "source": {"root": "corpus", "size": 6120, "mtime_ns": 1718000000000000000, "sha256": "9f2c..."}}

(`source`, the file's facts, is left out for markdown read from stdin.)

Splitting follows the heading tree (ATX and setext headings). A section longer
than the window (--words) is packed block by block into several chunks; a prose
paragraph longer than the window is split at sentence boundaries; a list is split
between items, never inside one. Fenced code, pipe tables, HTML blocks and
indented code are atomic: a block larger than the window becomes its own chunk.
A heading with no text of its own travels with the next chunk. `text` is the
chunk's markdown as its page shows it (`ragline.markup.shown`, block by block): template
tags rendered, inline and block HTML as their text, an MDX page's (a `.mdx` page, or one whose
content is MDX) imports, exports, JSX tags and expressions out; code, markdown and hard wrapping as written. `start_line` and
`end_line` are the source's lines.

Chunk ids: `DOC#SLUG`, where SLUG is the id of the section's heading if it has one
(`{#anchor}`, `{#anchor .class}`, MDX's `{/* #anchor */}` and `\\{#anchor\\}`: `markup.HEADING_ID`;
not in its heading path, nor in an MDX page's heading line), else the slug of the heading text
(lowercase, letters and digits, runs of anything else become `-`). Where two sections of one document would share a
slug, each is qualified by its parent's slug (`parent--child`), and so on up the
path until they differ. Text before the first heading is `DOC#top`. The second and
later parts of a split section get `-2`, `-3`, ... So an edit renames only the
chunks of the section it touches. An id stays under ID_MAX + 1 characters: a longer
slug is cut at a word boundary (`chunk_id`).

Pages from site generators: front matter (YAML `---`, TOML `+++`) is read, not chunked; a top
heading that is only a template expression (`# <%= current_page.data.title %>`) takes the
front-matter `title`, in its heading path and in its line of `text`; a page that opens with
text gets that title as the root of its heading paths; blocks that show nothing (MDX imports,
a partial, a sidebar's `content_for`) do not open a page. A heading is what a reader sees in
headings and slugs: template tags (ERB, Liquid/Jinja, Hugo) as they render
(`ragline.text.strip_templates`), inline markdown as its text (links, images, code, emphasis:
`markdown.inline_text`). Document ids drop the whole page type (`on-call.html.md.erb` is
document `on-call`).
"""

from __future__ import annotations

import bisect
import itertools
import os
import re
import shutil
import sys
import tempfile
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import orjson

import ragline
import ragline.records
import ragline.text
from ragline import markup, options, sources
from ragline.globs import Glob, PatternError, compile_all, first_match
from ragline.markdown import Block, Doc, atx, blocks, check, file_lines, inline_text, mdx_evidence
from ragline.records import StageError

STAGE = "rag-chunk"
DEFAULT_WORDS = options.default("window")
FRONT_MATTER_MAX = 64 * 1024  # characters; past it a page is read without its front matter
TITLE_MAX = 200  # characters of a front-matter title, on one line
ID_MAX = 79  # most characters of a chunk id (`chunk_id`), unless its document's name is itself that long
MIN_SLUG = 8  # fewest characters of a cut slug
SUFFIX_ROOM = 3  # characters a cut slug leaves for a part's suffix (`-99`)

# --------------------------------------------------------------------------- sections and packing


@dataclass
class Unit:
    """A piece that packing never splits: a block, a list item, or a run of sentences."""

    start: int
    end: int
    words: int
    atomic: bool
    kind: str = "paragraph"  # the block's kind: how its text is shown (`markup.shown`)
    leads: bool = False  # prose ending in a colon: it introduces what follows, and travels with it (`pack`)


def _words(text: str) -> int:
    return len(text.split())


def _sentence_units(doc: Doc, block: Block, window: int) -> list[Unit]:
    """An over-long paragraph as one unit per sentence, for packing to regroup.

    A single sentence longer than the window is cut at word boundaries. No cut falls inside a
    code span, a tag or a template tag (`markup.protected`): each part is shown on its own.
    """
    text = doc.slice(block.start, block.end)
    inside = markup.protected(text)
    starts, ends = [x for x, _ in inside], [y for _, y in inside]
    units: list[Unit] = []
    for a, b in _uncut(ragline.text.sentence_spans(text), inside):
        within = inside[bisect.bisect_right(ends, a) : bisect.bisect_left(starts, b)]  # the protected spans this sentence holds
        words = _uncut([m.span() for m in re.finditer(r"\S+", text[a:b])], [(x - a, y - a) for x, y in within])
        for k in range(0, len(words), window):
            group = words[k : k + window]
            units.append(Unit(block.start + a + group[0][0], block.start + a + group[-1][1], len(group), False))
    if units:
        units[-1].leads = ragline.text.leads_in(text)
    return units


def _uncut(spans: list[tuple[int, int]], inside: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """`spans` (in order), each joined to the next where the cut between them falls inside one of
    `inside` (in order, not overlapping): one pass over both, however many there are."""
    out: list[tuple[int, int]] = []
    k = 0
    for span in spans:
        if out:
            while k < len(inside) and inside[k][1] <= out[-1][1]:
                k += 1  # ends before the cut: it holds no later cut either
            if k < len(inside) and inside[k][0] < out[-1][1] and span[0] < inside[k][1]:
                out[-1] = (out[-1][0], span[1])
                continue
        out.append(span)
    return out


def _hidden(doc: Doc, block: Block) -> bool:
    """Whether a block is one that shows nothing: kramdown's `{::comment}`, or an HTML block of nothing a reader sees
    (`<!-- a comment -->`, `<script>`). It is no text of its section's own (`sections`) and no words of its chunk's
    (`_units`): a comment neither makes a title a chunk of its own nor splits prose that fits one window."""
    return block.kind in ("comment", "html") and not markup.shown(block.kind, doc.slice(block.start, block.end), doc.mdx).strip()


def _units(doc: Doc, blocks: list[Block], window: int, lead_words: int = 0) -> list[Unit]:
    """Packing units; a paragraph that cannot fit an empty chunk becomes sentences; a block that shows nothing
    (`_hidden`) counts no words."""
    units: list[Unit] = []
    for n, block in enumerate(blocks):
        text = doc.slice(block.start, block.end)
        words = 0 if _hidden(doc, block) else _words(text)
        room = max(1, window - (lead_words if n == 0 else 0))
        if block.kind == "paragraph" and words > room:
            units.extend(_sentence_units(doc, block, room))
        else:
            leads = block.kind == "paragraph" and ragline.text.leads_in(text)
            units.append(Unit(block.start, block.end, words, block.kind != "paragraph", block.kind, leads))
    return units


def pack(units: list[Unit], window: int, lead_words: int = 0) -> list[list[Unit]]:
    """Greedy packing of units into groups of at most `window` words.

    A unit that does not fit starts a new group; a unit larger than the window
    is a group of its own. A lead-in (prose ending in a colon: "...with the following
    guidelines:") that would end a group goes with the unit after it, which it
    introduces: a boundary fell between such a sentence and its list (issue 39.3).
    `lead_words` are words already in the first group (the heading lines that travel with it).
    """
    groups: list[list[Unit]] = []
    current: list[Unit] = []
    size = lead_words
    for unit in units:
        if current and size + unit.words > window:
            carried = [current.pop()] if len(current) > 1 and current[-1].leads else []
            groups.append(current)
            current, size = carried, sum(u.words for u in carried)
        current.append(unit)
        size += unit.words
    if current:
        groups.append(current)
    return groups


def slugify(text: str) -> str:
    """Lowercase letters and digits (any script); runs of anything else become `-`."""
    text = unicodedata.normalize("NFKC", text).lower()
    slug = re.sub(r"[^\w]+|_+", "-", text).strip("-")
    return slug or "section"


@dataclass
class Section:
    path: list[str]
    slugs: list[str]
    lead: int | None  # offset where the pending heading lines begin
    lead_end: int  # offset where they end
    blocks: list[Block]
    heads: list[Block]  # the heading blocks of the lead, and the blocks under them that show nothing (`_hidden`)


def sections(doc: Doc, blocks: Iterable[Block], root: str | None = None) -> Iterator[Section]:
    """Sections in order: each with its heading path and its content blocks.

    `root` (a front-matter title, for a document that opens without a heading)
    heads every section's path, above the document's own headings.

    A parent heading with no text of its own (a title straight above its first
    subsection) travels with the next chunk (`lead`), so no chunk is a bare
    title. A block under a heading that shows nothing (`_hidden`: a comment) is
    no text of its own: it joins the lead. A section that is empty before a
    sibling or a shallower heading is a chunk of its own heading lines.
    """
    stack: list[tuple[int, str, str]] = [(0, root, slugify(root))] if root else []  # (level, title, slug)
    lead: int | None = None
    lead_end = 0
    content: list[Block] = []
    heads: list[Block] = []

    def current(blocks: list[Block]) -> Section:
        return Section([t for _, t, _ in stack], [s for _, _, s in stack], lead, lead_end, blocks, heads)

    for block in blocks:
        if block.kind == "heading":
            if content:
                yield current(content)
                content, lead = [], None
            elif lead is not None and stack and block.level <= stack[-1][0]:
                yield current([])
                lead = None
            if lead is None:
                lead, heads = block.start, []
            heads.append(block)
            lead_end = block.end
            while stack and stack[-1][0] >= block.level:
                stack.pop()
            stack.append((block.level, block.title, block.anchor or slugify(block.title)))
        elif lead is not None and not content and _hidden(doc, block):
            heads.append(block)
            lead_end = block.end
        else:
            content.append(block)
    if content or lead is not None:
        yield current(content)


def _section_slugs(all_slugs: list[list[str]]) -> list[str]:
    """One slug per section: the last heading's, qualified by parents until unique."""
    # A tail clashes when a section with another path ends the same way: more sections
    # share the tail than share the whole path. Counted once per depth, so linear in sections.
    same_path = Counter(tuple(s) for s in all_slugs)
    tails: dict[int, Counter[tuple[str, ...]]] = {}
    out: list[str] = []
    for slugs in all_slugs:
        if not slugs:
            out.append("top")
            continue
        depth = 1
        while depth < len(slugs):
            if depth not in tails:
                tails[depth] = Counter(tuple(s[-depth:]) for s in all_slugs if s)
            if tails[depth][tuple(slugs[-depth:])] == same_path[tuple(slugs)]:
                break
            depth += 1
        out.append("--".join(slugs[-depth:]))
    return out


def front_matter(doc: Doc, told: Callable[[str], None] = lambda notice: None) -> tuple[int, str | None]:
    """(first content line index, title) after a leading `---` YAML block (Jekyll, Middleman,
    Docusaurus) or `+++` TOML block (Hugo), if any.

    Read from the document's start whatever its window holds: first to the closing line,
    then again for the block's lines, so an opening rule never closed holds nothing. A block
    over FRONT_MATTER_MAX characters is not parsed (YAML costs ~230 times its size: 3.2 MB took
    136 s and 745 MB): the page is read after it, without a title, and `told` hears of it.
    The title is one line of at most TITLE_MAX characters (`one_title`).
    """
    lines = doc.all_lines()
    opener = next(lines, "").strip()
    if opener not in ("---", "+++"):
        return 0, None
    closers = ("+++",) if opener == "+++" else ("---", "...")
    size = 0
    for j, line in enumerate(lines, 1):
        if line.strip() in closers:
            if size > FRONT_MATTER_MAX:
                told(f"{doc.path}: front matter of {size:,} characters is over {FRONT_MATTER_MAX:,}: read without it")
                return j + 1, None
            start, title = _toml_front_matter(doc, j) if opener == "+++" else _yaml_front_matter(doc, j)
            return start, one_title(title)
        size += len(line) + 1
    return 0, None  # an opening rule with no closing one: not front matter


def one_title(title: str | None) -> str | None:
    """A front-matter title as a heading path holds it: one line (whitespace runs made one space),
    cut at TITLE_MAX characters (a 2 MB title was copied into each of 50 chunks)."""
    if title is None:
        return None
    line = " ".join(title.split())
    return line if len(line) <= TITLE_MAX else line[: TITLE_MAX - 1].rstrip() + "…"


def _yaml_front_matter(doc: Doc, j: int) -> tuple[int, str | None]:
    """`front_matter` for a `---` block closed on line index `j`: YAML (the C loader where
    PyYAML has libyaml), its `title` the title."""
    import yaml

    body = "\n".join(itertools.islice(doc.all_lines(), 1, j))
    title = None
    try:
        libyaml = getattr(yaml, "__with_libyaml__", False)  # the C loader: many times faster
        meta = yaml.load(body, Loader=yaml.CSafeLoader) if libyaml else yaml.safe_load(body)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        at = mark.line + 2 if mark else 1
        if isinstance(err, yaml.reader.ReaderError):  # a control character: a position, no mark
            at = body[: err.position].count("\n") + 2
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise StageError(f"front matter is not valid YAML: {problem}", ragline.records.place(doc.path, at)) from None
    except Exception as err:  # PyYAML's safe constructors raise more than YAMLError: !!timestamp 2020-99-99, [[[[...
        raise StageError(
            f"front matter is not valid YAML: {ragline.records.one_line(str(err) or type(err).__name__, 200)}",
            ragline.records.place(doc.path, 1),
        ) from None
    if isinstance(meta, dict) and isinstance(meta.get("title"), str):
        title = meta["title"]
    return j + 1, title


def _toml_front_matter(doc: Doc, j: int) -> tuple[int, str | None]:
    """`front_matter` for a `+++` block closed on line index `j`: TOML, its `title` the title."""
    import tomllib

    body = "\n".join(itertools.islice(doc.all_lines(), 1, j))
    try:
        meta = tomllib.loads(body)
    except tomllib.TOMLDecodeError as err:
        at = re.search(r"line (\d+)", str(err))
        problem = ragline.records.one_line(re.sub(r" \(at .*", "", str(err)), 200)
        raise StageError(
            f"front matter is not valid TOML: {problem}", ragline.records.place(doc.path, int(at.group(1)) + 1 if at else 1)
        ) from None
    except RecursionError:  # tomllib recurses per level: `v = [[[...` 100,000 deep
        raise StageError(
            "front matter is not valid TOML: nested too deep (maximum recursion depth exceeded)",
            ragline.records.place(doc.path, 1),
        ) from None
    return j + 1, meta["title"] if isinstance(meta.get("title"), str) else None


def clean_headings(doc: Doc, blocks: Iterable[Block], title: str | None) -> Iterator[Block]:
    """The blocks, with heading titles as a reader sees them: template tags as they render
    (`ragline.text.strip_templates`), inline markdown as its text (`markdown.inline_text`:
    `## Reporting [Incidents](https://...)` is "Reporting Incidents"; in MDX, its JSX and expressions too).
    The heading's id (`{#id}`, `{/* #id */}`) is its anchor already, not its title.

    A heading that is nothing but a template expression (`# <%= current_page.data.title %>`)
    takes the front-matter `title` when it is the document's first block, and the
    document's file name otherwise.
    """
    for i, block in enumerate(blocks):
        if block.kind == "heading":
            clean = " ".join(inline_text(ragline.text.strip_templates(block.title), doc.mdx).split())
            if not clean:
                clean = title if (i == 0 and title) else doc.name.rsplit("/", 1)[-1].replace("-", " ")
            block.title = clean
        yield block


def _parts(
    doc: Doc, window: int, paths: list[list[str]], told: Callable[[str], None] = lambda notice: None
) -> Iterator[tuple[int, int, dict[str, Any]]]:
    """(section number, part, record) for each chunk, in order, its `id` still empty: the
    id needs the slugs of every section (`_section_slugs`), which `paths` collects.

    Section by section: once a section's records are out, the document's window lets
    go of its text. A document that opens with text rather than a heading gets the
    front-matter title as the root of every heading path; blocks that show nothing (MDX
    imports, a partial, a `content_for` capture) do not open it.
    """
    start, title = front_matter(doc, told)
    if not doc.mdx and mdx_evidence(doc.all_lines()) is not None:
        doc.mdx = True  # a page of another type that says it is MDX (Docusaurus parses `.md` as MDX)
    doc.keep = start
    stream = blocks(doc, start)
    first = next(stream, None)
    while first is not None and not markup.shown(first.kind, doc.slice(first.start, first.end), doc.mdx).strip():
        first = next(stream, None)  # what shows nothing (imports, a partial, a sidebar) opens no page
    if first is None:
        return
    root = title if title and first.kind != "heading" else None
    for k, sec in enumerate(sections(doc, clean_headings(doc, itertools.chain([first], stream), title), root)):
        paths.append(sec.slugs)
        lead_words = sum(_words(doc.slice(h.start, h.end)) for h in sec.heads if not _hidden(doc, h)) if sec.lead is not None else 0
        groups = pack(_units(doc, sec.blocks, window, lead_words), window, lead_words) or [[]]
        for part, group in enumerate(groups, 1):
            begin = sec.lead if (part == 1 and sec.lead is not None) else group[0].start
            end = group[-1].end if group else sec.lead_end
            text = _shown(doc, [*(sec.heads if part == 1 and sec.lead is not None else []), *group], begin)
            if not text.strip():
                continue
            record: dict[str, Any] = {
                "schema": "chunk/1",
                "id": "",
                "doc": doc.name,
                "path": doc.path,
                "headings": sec.path,
                "text": text,
                "start_line": doc.line_of(begin),
                "end_line": doc.line_of(end),
                "words": _words(text),
                "window": window,
            }
            if title is not None:
                record["title"] = title
            yield k, part, record
        doc.release(sec.blocks[-1].end if sec.blocks else sec.lead_end)


def _shown(doc: Doc, spans: list[Block | Unit], begin: int) -> str:
    """A chunk's text as its page shows it: each heading, block or run of sentences by `markup.shown`,
    the white space between them as it is, a part that shows nothing left out with one of the spaces
    beside it, the one of more line breaks (the one before it, where they tie): a paragraph or a line
    that follows it does not join the text before it; an admonition's title is a paragraph of its own. A heading that was nothing but a template
    expression shows the title it took (`clean_headings`)."""
    out: list[str] = []
    gap: str | None = None
    at = begin
    last = ""  # the kind of the last part shown
    for span in spans:
        space = doc.slice(at, span.start)
        if gap is None or space.count("\n") > gap.count("\n"):
            gap = space
        if "admonition" in (span.kind, last) and gap.count("\n") < 2:
            gap = "\n\n"  # an admonition's title is a paragraph of its own, not the first words of its body's
        at = span.end
        source = doc.slice(span.start, span.end)
        text = markup.shown(span.kind, source, doc.mdx)
        if isinstance(span, Block) and (heading := atx(text)) and not heading[1] and ragline.text.strip_templates(source) != source:
            text = f"{heading[0]} {span.title}"
        if text.strip():
            out += [gap, text] if out else [text]
            gap, last = None, span.kind
    return "".join(out).rstrip()


def chunk_id(name: str, slug: str, suffix: str = "") -> str:
    """`NAME#SLUG` + `suffix` (`-2`, `~2`), at most ID_MAX characters.

    A slug that does not fit is cut at the last `-` (a word boundary) that leaves room for
    SUFFIX_ROOM characters of suffix, so parts 1 to 99 of a cut section share their
    base (`...-recovery-in-the`, `...-recovery-in-the-2`); within a word only when that
    boundary would drop more than half the room, and never below MIN_SLUG characters (so only a document name near ID_MAX long
    gives a longer id). The cut depends on the name, slug and suffix alone; slugs that
    cut to one id are told apart by `_with_ids`' `~N`.
    """
    if len(name) + 1 + len(slug) + len(suffix) <= ID_MAX:
        return f"{name}#{slug}{suffix}"
    room = max(MIN_SLUG, ID_MAX - len(name) - 1 - max(len(suffix), SUFFIX_ROOM))
    cut = slug[: room + 1]
    boundary = cut.rfind("-")
    slug = (cut[:boundary] if boundary >= room // 2 else cut[:room]).rstrip("-")
    return f"{name}#{slug}{suffix}"


def cut_ids(cid: str) -> list[str]:
    """What an id written before ids were cut at ID_MAX (a golden label) may be called now, likelier
    first: where its slug ends in `-N`, `chunk_id` of the rest with `-N` as the part's suffix;
    then `chunk_id` of the whole slug. An id of at most ID_MAX characters is itself."""
    name, hash_, slug = cid.rpartition("#")
    if len(cid) <= ID_MAX or not hash_:
        return [cid]
    part = re.fullmatch(r"(.+)(-\d+)", slug)
    return ([chunk_id(name, part.group(1), part.group(2))] if part else []) + [chunk_id(name, slug)]


def _with_ids(name: str, paths: list[list[str]], parts: Iterable[tuple[int, int, dict[str, Any]]]) -> Iterator[dict[str, Any]]:
    """The records with their ids (`chunk_id`): `DOC#SLUG`, `-PART` after the first part, `~N`
    where ids would clash (two slugs cut to one, or a heading `Step 2` beside part 2 of `Step`).

    `~N` is the first N (from 2) whose id is free. The next N to try is kept per (slug, part
    suffix): every N below it was taken when it was tried, and ids once taken stay taken, so
    the search starts there with the same outcome, and 16,000 sections of one heading cost
    linear time, not quadratic (65 s before)."""
    slugs = _section_slugs(paths)
    used: set[str] = set()
    next_free: dict[tuple[str, str], int] = {}
    for k, part, record in parts:
        suffix = f"-{part}" if part > 1 else ""
        n = next_free.get((slugs[k], suffix), 1)
        cid = chunk_id(name, slugs[k], suffix if n == 1 else f"{suffix}~{n}")
        while cid in used:
            n += 1
            cid = chunk_id(name, slugs[k], f"{suffix}~{n}")
        next_free[(slugs[k], suffix)] = n + 1
        used.add(cid)
        record["id"] = cid
        yield record


def chunk_document(doc: Doc, window: int = DEFAULT_WORDS) -> list[dict[str, Any]]:
    """The chunk records of one document, in order, held in memory (`chunk_file` streams a file)."""
    paths: list[list[str]] = []
    parts = list(_parts(doc, window, paths))
    return list(_with_ids(doc.name, paths, parts))


def chunk_file(
    name: str,
    file: Path,
    where: str,
    window: int = DEFAULT_WORDS,
    mdx: bool = False,
    root: Path | None = None,
    told: Callable[[str], None] = lambda notice: None,
    selection: dict[str, list[str]] | None = None,
) -> Iterator[dict[str, Any]]:
    """The chunk records of one markdown file (`mdx`: an MDX page), streamed: its memory is a
    window of its lines and its section slugs, however long the file. `where` names it in errors.
    With `root` (the folder walked, or the file as named), each record carries the file's facts
    as `source` (`ragline.sources.facts`, with the globs of `selection` that chose it), for the
    index to tell when it changes and how to build it again. `told` hears
    the notices of a page read in part (front matter over its bound).

    The records wait in a spool file for their ids, which need every section's slug.
    """
    try:
        stat = os.stat(file)
    except OSError as err:
        raise StageError(err.strerror or str(err), where) from None
    digest = check(file, where)
    source = sources.facts(str(root), digest, stat, selection) if root is not None else None
    doc = Doc(name, where, source=lambda: file_lines(file, where), mdx=mdx)
    paths: list[list[str]] = []
    with tempfile.TemporaryFile(prefix="rag-chunk-") as spool:
        for part in _parts(doc, window, paths, told):
            spool.write(orjson.dumps(part) + b"\n")
        spool.seek(0)
        for record in _with_ids(name, paths, (orjson.loads(line) for line in spool)):
            if source is not None:
                record["source"] = source
            yield record


# --------------------------------------------------------------------------- the walk

# The page types a folder is walked for, longest first: the suffix a document id drops
# (`on-call.html.md.erb` is `on-call`). `.mdx` pages are read as MDX (`markdown.Doc`'s `mdx`), and so is a page
# of another type whose content is MDX (`markdown.mdx_evidence`, in `_parts`).
PAGE_TYPES = (".html.md.erb", ".html.markdown.erb", ".md.erb", ".markdown.erb", ".html.md", ".html.markdown", ".md", ".markdown", ".mdx")
SHOWN_TYPES = "*.md, *.markdown, *.mdx, *.md.erb"  # the page types, as an error names them
SKIPS_SHOWN = 20  # skipped files named one a line; the rest are counted in one more


def page_type(name: str) -> str | None:
    """The page type (a suffix of PAGE_TYPES) a file name ends with, any case; None for a file that is no page."""
    lower = name.lower()
    return next((t for t in PAGE_TYPES if lower.endswith(t) and len(name) > len(t)), None)


def doc_name(name: str) -> str:
    """A file name without its page type (`on-call.html.md.erb` -> `on-call`), or as it is."""
    kind = page_type(name)
    return name[: -len(kind)] if kind else name


@dataclass(frozen=True)
class Skip:
    """A file or folder a walk passed over, and why. `page`: a page left out that was not asked to be
    (a symlink to nothing or out of the tree), said even with --quiet."""

    path: Path
    why: str
    page: bool = False


@dataclass(frozen=True)
class Selection:
    """--include and --exclude: gitignore-style globs over paths relative to the folder walked."""

    include: tuple[Glob, ...] = ()
    exclude: tuple[Glob, ...] = ()

    @classmethod
    def of(cls, include: Iterable[str] = (), exclude: Iterable[str] = ()) -> Selection:
        return cls(compile_all(list(include)), compile_all(list(exclude)))

    def left_out(self, rel: str, folder: bool) -> str | None:
        """Why a path is left out by the globs, else None."""
        if (hit := first_match(self.exclude, rel, folder)) is not None or (folder and (hit := _covering(self.exclude, rel))):
            return f"excluded (--exclude '{hit.pattern}')"
        if not folder and self.include and first_match(self.include, rel) is None:
            return "not included (no --include matches it)"
        return None

    def given(self) -> dict[str, list[str]]:
        """The patterns as given, for each chunk's `source`: the index's rebuild command repeats them."""
        return {"include": [g.pattern for g in self.include], "exclude": [g.pattern for g in self.exclude]}


def _covering(globs: tuple[Glob, ...], folder: str) -> Glob | None:
    return next((g for g in globs if g.covers(folder)), None)


def walk(root: Path, skipped: Callable[[Skip], None] = lambda skip: None, select: Selection = Selection()) -> list[Path]:
    """The pages under `root` (PAGE_TYPES), sorted, and `skipped` told of every file and folder passed over.

    Passed over, each with why: a hidden name (`.git`, `.github`, as ripgrep; name it to read it), a
    file that is no page, a symlinked folder (not followed, as Path.rglob), a symlink to nothing or to
    a file outside `root` (the handbook is the folder given, not what its links reach), what is not a
    regular file, and what --exclude leaves out (a folder once, not each file in it) or no --include
    takes. A folder that cannot be listed is a StageError naming it: a document silently missing from
    the index is worse than a stop.
    """
    found: list[Path] = []
    tree = root.resolve()

    def fail(err: OSError) -> None:
        raise StageError(f"cannot read this folder: {err.strerror or err}", err.filename or str(root))

    for folder, dirs, names in os.walk(root, onerror=fail):
        here = Path(folder)
        rel = here.relative_to(root).as_posix()
        prefix = "" if rel == "." else rel + "/"
        kept = []
        for name in sorted(dirs):
            path = here / name
            why = "a hidden folder" if name.startswith(".") else None
            why = why or ("a symlinked folder, not followed" if path.is_symlink() else select.left_out(prefix + name, folder=True))
            if why:
                skipped(Skip(path, why))
            else:
                kept.append(name)
        dirs[:] = kept
        for name in sorted(names):
            file = here / name
            why, page = _passed_over(file, prefix + name, tree, select)
            if why:
                skipped(Skip(file, why, page))
            else:
                found.append(file)
    return sorted(found)


def _passed_over(file: Path, rel: str, tree: Path, select: Selection) -> tuple[str | None, bool]:
    """(why `walk` passes over a file, or None; whether it is a page left out unasked)."""
    if file.name.startswith("."):
        return "a hidden file", False
    if page_type(file.name) is None:
        return f"not a page ({Path(file.name).suffix or 'no suffix'})", False
    if CONTROL.search(rel):  # a chunk id may hold none (rag-index refused the whole build)
        return "its name holds a control character", True
    if why := select.left_out(rel, folder=False):
        return why, False
    if file.is_symlink():
        if not file.exists():
            return f"a symlink to nothing ({os.readlink(file)})", True
        if not file.resolve().is_relative_to(tree):
            return f"a symlink out of the tree ({file.resolve()})", True
    if not file.is_file():
        return "not a regular file", False
    return None, False


CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def skip_lines(skips: list[Skip], quiet: bool = False, shown: int = SKIPS_SHOWN) -> list[str]:
    """The notices for what walks passed over: one line each for the first `shown`, then one
    line counting the rest by why. With `quiet`, only pages left out unasked (`Skip.page`)."""
    told = [s for s in skips if s.page or not quiet]
    printable = ragline.records.printable  # a name cannot move the cursor or split the line (`x\x1b[2J.md`)
    lines = [f"{STAGE}: {printable(str(s.path))}: skipped, {printable(s.why)}" for s in told[:shown]]
    if rest := told[shown:]:
        kinds = Counter(re.sub(r" \(.*", "", s.why) for s in rest)
        lines.append(f"{STAGE}: and {len(rest)} more skipped ({', '.join(f'{n} {why}' for why, n in kinds.most_common())})")
    return lines


def find_documents(
    paths: Iterable[str], skipped: Callable[[Skip], None] = lambda skip: None, select: Selection = Selection()
) -> Iterator[tuple[str, Path, Path]]:
    """(document id, file, the input it came from) for each input: files as given (whatever their
    type), directories walked for pages (`walk`). The id is the path without its page type
    (`doc_name`); two files of one directory with one id (a.md and a.mdx) are a StageError."""
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            skips: list[Skip] = []
            files = walk(path, skips.append, select)
            for skip in skips:
                skipped(skip)
            if not files:
                passed = "; ".join(f"{s.path.relative_to(path)}: {s.why}" for s in skips[:3])
                more = f" and {len(skips) - 3} more" if len(skips) > 3 else ""
                raise StageError(f"no pages ({SHOWN_TYPES}) in this directory" + (f"; skipped {passed}{more}" if skips else ""), raw)
            named: dict[str, Path] = {}
            for file in files:
                rel = file.relative_to(path)
                doc = (rel.parent / doc_name(rel.name)).as_posix()
                if doc in named:
                    raise StageError(f"{named[doc].name} and {file.name} would both be document '{doc}'", str(file))
                named[doc] = file
            yield from ((doc, file, path) for doc, file in named.items())
        elif path.is_file():
            yield doc_name(path.name), path, path
        elif path.exists():
            raise StageError("not a file or a directory", raw)
        else:
            raise StageError("no such file or directory", raw)


def read_as_mdx(file: Path) -> tuple[int, str] | None:
    """(line, sign) where a page's content says it is MDX (`markdown.mdx_evidence`), as chunking
    reads it, or None. A page that does not read (not UTF-8, a NUL byte) says nothing here:
    chunking it says what is wrong."""
    try:
        check(file, str(file))
        return mdx_evidence(itertools.chain.from_iterable(file_lines(file, str(file))))
    except StageError:
        return None


def chunk_paths(
    paths: Iterable[str],
    window: int = DEFAULT_WORDS,
    skipped: Callable[[Skip], None] = lambda skip: None,
    select: Selection = Selection(),
    told: Callable[[str], None] = lambda notice: None,
) -> Iterator[dict[str, Any]]:
    """Chunk records for files and directories, document by document (`skipped` hears of what walks pass
    over, `told` of pages read in part)."""
    seen: dict[str, Path] = {}
    given = select.given()
    for name, file, root in find_documents(paths, skipped, select):
        if name in seen:
            raise StageError(f"document id '{name}' is also the id of {seen[name]}", str(file))
        seen[name] = file
        yield from chunk_file(name, file, str(file), window, mdx=page_type(file.name) == ".mdx", root=root, told=told, selection=given)


# --------------------------------------------------------------------------- the command


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("inputs", nargs=-1, type=click.Path(allow_dash=True))
@options.get("window").click()
@options.get("include").click()
@options.get("exclude").click()
@click.option(
    "--list",
    "listing",
    is_flag=True,
    help="Print the files that would be read, one a line, and chunk nothing; name on stderr the pages read as MDX by their content.",
)
@click.option("--doc", "doc_name", default=None, help="Document id for markdown read from stdin.")
@click.option(
    "--quiet", "-q", is_flag=True, help="No notices on stderr but of pages left out unasked (a broken symlink, one out of the tree)."
)
@ragline.records.stage_main(STAGE)
def main(
    inputs: tuple[str, ...],
    window: int,
    include: tuple[str, ...],
    exclude: tuple[str, ...],
    listing: bool,
    doc_name: str | None,
    quiet: bool,
) -> None:
    """Chunk markdown files or directories (or stdin with --doc) into JSON Lines.

    A directory is walked for pages (*.md, *.markdown, *.mdx, *.md.erb, *.html.md.erb); every file
    it passes over is named on stderr with why (up to 20, then a count).
    """
    stdin = not inputs or inputs == ("-",)
    if stdin:
        if listing:
            raise click.UsageError("--list lists the pages of files and directories: name some")
        if doc_name is None:
            raise click.UsageError("markdown on stdin needs --doc NAME (or name files and directories)")
        if sys.stdin.isatty():
            raise click.UsageError("no input: pipe markdown into rag-chunk --doc NAME, or name files and directories")
    elif "-" in inputs:
        raise click.UsageError("stdin ('-') cannot be mixed with files")
    skips: list[Skip] = []
    notices: list[str] = []
    try:
        select = Selection(compile_all(include, "--include"), compile_all(exclude, "--exclude"))
    except PatternError as err:  # bad usage, said in one line (click's usage block is three)
        click.echo(f"{STAGE}: {err}", err=True)
        raise SystemExit(2) from None
    with tempfile.TemporaryDirectory(prefix="rag-chunk-") as tmp:
        if listing:
            files = [file for _, file, _ in find_documents(inputs, skips.append, select)]
            sys.stdout.write("".join(f"{ragline.records.printable(str(file))}\n" for file in files))
            for file in files:
                if page_type(file.name) != ".mdx" and (sign := read_as_mdx(file)) is not None:
                    notices.append(f"{ragline.records.printable(str(file))}: read as MDX (line {sign[0]}: {sign[1]})")
        else:
            if stdin:
                copy = Path(tmp) / "stdin.md"
                with open(copy, "wb") as f:
                    shutil.copyfileobj(sys.stdin.buffer, f)
                records = chunk_file(doc_name, copy, ragline.records.STDIN, window, told=notices.append)  # type: ignore[arg-type]
            else:
                records = chunk_paths(inputs, window, skips.append, select, notices.append)
            with open(Path(tmp) / "chunks.jsonl", "w+b") as spool:  # all or nothing on stdout
                if not ragline.records.write_records(records, spool):
                    raise StageError("no chunks: the input has no text")
                spool.seek(0)
                shutil.copyfileobj(spool, sys.stdout.buffer)
    for line in [*(f"{STAGE}: {n}" for n in notices), *skip_lines(skips, quiet)]:  # after the output: a refusal is one line
        ragline.records.note(line)


if __name__ == "__main__":
    main()
