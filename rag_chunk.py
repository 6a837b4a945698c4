"""rag-chunk: heading-aware markdown chunking; fences, tables and HTML blocks stay whole.

    rag-chunk corpus/ > chunks.jsonl
    rag-chunk --words 120 docs/runbook.md | rag-embed | rag-index --out idx
    cat notes.md | rag-chunk --doc notes

Reads markdown files and directories (walked recursively for *.md and *.markdown, in sorted
order), or markdown on stdin with --doc NAME, a document streamed section by section through a
window of its lines (`markdown.Doc`), so memory follows the longest section, not the file. Output
is spooled and written once every input has chunked: a bad file leaves stdout empty. Writes one
chunk record per line:

    {"schema": "chunk/1", "id": "05-settlement#batch-cutoff", "doc": "05-settlement",
     "path": "corpus/05-settlement.md", "headings": ["Settlement", "Batch cutoff"],
     "text": "## Batch cutoff\\n\\nThe sweep ...", "start_line": 40, "end_line": 52,
     "words": 131, "window": 180}

Splitting follows the heading tree (ATX and setext headings). A section longer
than the window (--words) is packed block by block into several chunks; a prose
paragraph longer than the window is split at sentence boundaries; a list is split
between items, never inside one. Fenced code, pipe tables, HTML blocks and
indented code are atomic: a block larger than the window becomes its own chunk.
A heading with no text of its own travels with the next chunk. `text` is the
chunk's own markdown, unchanged (hard wrapping kept).

Chunk ids: `DOC#SLUG`, where SLUG is the `{#anchor}` of the section's heading if
it has one, else the slug of the heading text (lowercase, letters and digits, runs
of anything else become `-`). Where two sections of one document would share a
slug, each is qualified by its parent's slug (`parent--child`), and so on up the
path until they differ. Text before the first heading is `DOC#top`. The second and
later parts of a split section get `-2`, `-3`, ... So an edit renames only the
chunks of the section it touches. An id stays under ID_MAX + 1 characters: a longer
slug is cut at a word boundary (`chunk_id`).

Pages from site generators: a top heading that is only a template expression
(`# <%= current_page.data.title %>`) takes the front-matter `title`; a page that
opens with text gets that title as the root of its heading paths. A heading is what a
reader sees in headings and slugs: template tags (ERB, Liquid/Jinja, Hugo) as they
render (`ragline.text.strip_templates`), inline markdown as its text (links, images,
code, emphasis: `markdown.inline_text`). `text` keeps the source as it is, and
`ragline.text.retrieval_text` renders its tags for what is embedded and indexed.
"""

from __future__ import annotations

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
from ragline import options
from ragline.markdown import Block, Doc, blocks, check, file_lines, inline_text
from ragline.records import StageError

STAGE = "rag-chunk"
DEFAULT_WORDS = options.default("window")
MARKDOWN = (".md", ".markdown")  # the suffixes a directory is walked for
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


def _words(text: str) -> int:
    return len(text.split())


def _sentence_units(doc: Doc, block: Block, window: int) -> list[Unit]:
    """An over-long paragraph as one unit per sentence, for packing to regroup.

    A single sentence longer than the window is cut at word boundaries.
    """
    text = doc.slice(block.start, block.end)
    units: list[Unit] = []
    for a, b in ragline.text.sentence_spans(text):
        words = list(re.finditer(r"\S+", text[a:b]))
        for k in range(0, len(words), window):
            group = words[k : k + window]
            units.append(Unit(block.start + a + group[0].start(), block.start + a + group[-1].end(), len(group), False))
    return units


def _units(doc: Doc, blocks: list[Block], window: int, lead_words: int = 0) -> list[Unit]:
    """Packing units; a paragraph that cannot fit an empty chunk becomes sentences."""
    units: list[Unit] = []
    for n, block in enumerate(blocks):
        words = _words(doc.slice(block.start, block.end))
        room = max(1, window - (lead_words if n == 0 else 0))
        if block.kind == "paragraph" and words > room:
            units.extend(_sentence_units(doc, block, room))
        else:
            units.append(Unit(block.start, block.end, words, block.kind != "paragraph"))
    return units


def pack(units: list[Unit], window: int, lead_words: int = 0) -> list[list[Unit]]:
    """Greedy packing of units into groups of at most `window` words.

    A unit that does not fit starts a new group; a unit larger than the window
    is a group of its own. `lead_words` are words already in the first group
    (the heading lines that travel with it).
    """
    groups: list[list[Unit]] = []
    current: list[Unit] = []
    size = lead_words
    for unit in units:
        if current and size + unit.words > window:
            groups.append(current)
            current, size = [], 0
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


def sections(doc: Doc, blocks: Iterable[Block], root: str | None = None) -> Iterator[Section]:
    """Sections in order: each with its heading path and its content blocks.

    `root` (a front-matter title, for a document that opens without a heading)
    heads every section's path, above the document's own headings.

    A parent heading with no text of its own (a title straight above its first
    subsection) travels with the next chunk (`lead`), so no chunk is a bare
    title. A section that is empty before a sibling or a shallower heading is a
    chunk of its own heading lines.
    """
    stack: list[tuple[int, str, str]] = [(0, root, slugify(root))] if root else []  # (level, title, slug)
    lead: int | None = None
    lead_end = 0
    content: list[Block] = []

    def current(blocks: list[Block]) -> Section:
        return Section([t for _, t, _ in stack], [s for _, _, s in stack], lead, lead_end, blocks)

    for block in blocks:
        if block.kind == "heading":
            if content:
                yield current(content)
                content, lead = [], None
            elif lead is not None and stack and block.level <= stack[-1][0]:
                yield current([])
                lead = None
            if lead is None:
                lead = block.start
            lead_end = block.end
            while stack and stack[-1][0] >= block.level:
                stack.pop()
            stack.append((block.level, block.title, block.anchor or slugify(block.title)))
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


def front_matter(doc: Doc) -> tuple[int, str | None]:
    """(first content line index, title) after a leading `---` YAML block, if any.

    Read from the document's start whatever its window holds: first to the closing line,
    then again for the block's lines, so an opening rule never closed holds nothing.
    """
    lines = doc.all_lines()
    if next(lines, "").strip() != "---":
        return 0, None
    for j, line in enumerate(lines, 1):
        if line.strip() in ("---", "..."):
            import yaml

            body = "\n".join(itertools.islice(doc.all_lines(), 1, j))
            title = None
            try:
                meta = yaml.safe_load(body)
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
    return 0, None  # an opening rule with no closing one: not front matter


def clean_headings(doc: Doc, blocks: Iterable[Block], title: str | None) -> Iterator[Block]:
    """The blocks, with heading titles as a reader sees them: template tags as they render
    (`ragline.text.strip_templates`), inline markdown as its text (`markdown.inline_text`:
    `## Reporting [Incidents](https://...)` is "Reporting Incidents").

    A heading that is nothing but a template expression (`# <%= current_page.data.title %>`)
    takes the front-matter `title` when it is the document's first block, and the
    document's file name otherwise.
    """
    for i, block in enumerate(blocks):
        if block.kind == "heading":
            clean = " ".join(inline_text(ragline.text.strip_templates(block.title)).split())
            if not clean:
                clean = title if (i == 0 and title) else doc.name.rsplit("/", 1)[-1].replace("-", " ")
            block.title = clean
        yield block


def _parts(doc: Doc, window: int, paths: list[list[str]]) -> Iterator[tuple[int, int, dict[str, Any]]]:
    """(section number, part, record) for each chunk, in order, its `id` still empty: the
    id needs the slugs of every section (`_section_slugs`), which `paths` collects.

    Section by section: once a section's records are out, the document's window lets
    go of its text. A document that opens with text rather than a heading gets the
    front-matter title as the root of every heading path.
    """
    start, title = front_matter(doc)
    doc.keep = start
    stream = blocks(doc, start)
    first = next(stream, None)
    if first is None:
        return
    root = title if title and first.kind != "heading" else None
    for k, sec in enumerate(sections(doc, clean_headings(doc, itertools.chain([first], stream), title), root)):
        paths.append(sec.slugs)
        lead_words = _words(doc.slice(sec.lead, sec.lead_end)) if sec.lead is not None else 0
        groups = pack(_units(doc, sec.blocks, window, lead_words), window, lead_words) or [[]]
        for part, group in enumerate(groups, 1):
            begin = sec.lead if (part == 1 and sec.lead is not None) else group[0].start
            end = group[-1].end if group else sec.lead_end
            text = doc.slice(begin, end).rstrip()
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


def chunk_file(name: str, file: Path, where: str, window: int = DEFAULT_WORDS) -> Iterator[dict[str, Any]]:
    """The chunk records of one markdown file, streamed: its memory is a window of its
    lines and its section slugs, however long the file. `where` names it in errors.

    The records wait in a spool file for their ids, which need every section's slug.
    """
    check(file, where)
    doc = Doc(name, where, source=lambda: file_lines(file, where))
    paths: list[list[str]] = []
    with tempfile.TemporaryFile(prefix="rag-chunk-") as spool:
        for part in _parts(doc, window, paths):
            spool.write(orjson.dumps(part) + b"\n")
        spool.seek(0)
        yield from _with_ids(name, paths, (orjson.loads(line) for line in spool))


def walk(root: Path, note: Callable[[str], None] = lambda message: None) -> list[Path]:
    """The MARKDOWN files under `root`, sorted. A folder that cannot be listed is a StageError naming
    it (a document silently missing from the index is worse than a stop); a symlink to nothing
    is named to `note` and skipped; symlinked folders are not followed (as Path.rglob)."""
    found: list[Path] = []

    def fail(err: OSError) -> None:
        raise StageError(f"cannot read this folder: {err.strerror or err}", err.filename or str(root))

    for folder, dirs, names in os.walk(root, onerror=fail):
        dirs.sort()
        for name in names:
            file = Path(folder) / name
            if file.suffix not in MARKDOWN:
                continue
            if file.is_file():
                found.append(file)
            elif file.is_symlink() and not file.exists():
                note(f"{STAGE}: {file}: skipped, a symlink to nothing ({os.readlink(file)})")
    return sorted(found)


def find_documents(paths: Iterable[str], note: Callable[[str], None] = lambda message: None) -> Iterator[tuple[str, Path]]:
    """(document id, file) for each input: files as given, directories walked for MARKDOWN
    files (*.md, *.markdown; `walk`). The id is the path without its markdown suffix; two files
    of one directory with one id (a.md and a.markdown) are a StageError."""
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            files = walk(path, note)
            if not files:
                raise StageError(f"no markdown ({', '.join('*' + s for s in MARKDOWN)}) files in this directory", raw)
            named: dict[str, Path] = {}
            for file in files:
                doc = file.relative_to(path).with_suffix("").as_posix()
                if doc in named:
                    raise StageError(f"{named[doc].name} and {file.name} would both be document '{doc}'", str(file))
                named[doc] = file
            yield from named.items()
        elif path.is_file():
            yield path.with_suffix("").name if path.suffix in MARKDOWN else path.name, path
        elif path.exists():
            raise StageError("not a file or a directory", raw)
        else:
            raise StageError("no such file or directory", raw)


def chunk_paths(
    paths: Iterable[str], window: int = DEFAULT_WORDS, note: Callable[[str], None] = lambda message: None
) -> Iterator[dict[str, Any]]:
    """Chunk records for files and directories, document by document (`note` hears of skipped dangling symlinks)."""
    seen: dict[str, Path] = {}
    for name, file in find_documents(paths, note):
        if name in seen:
            raise StageError(f"document id '{name}' is also the id of {seen[name]}", str(file))
        seen[name] = file
        yield from chunk_file(name, file, str(file), window)


# --------------------------------------------------------------------------- the command


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("inputs", nargs=-1, type=click.Path(allow_dash=True))
@options.get("window").click()
@click.option("--doc", "doc_name", default=None, help="Document id for markdown read from stdin.")
@click.option("--quiet", "-q", is_flag=True, help="No notices on stderr.")
@ragline.records.stage_main(STAGE)
def main(inputs: tuple[str, ...], window: int, doc_name: str | None, quiet: bool) -> None:
    """Chunk markdown files or directories (or stdin with --doc) into JSON Lines."""
    if not inputs or inputs == ("-",):
        if doc_name is None:
            raise click.UsageError("markdown on stdin needs --doc NAME (or name files and directories)")
        if sys.stdin.isatty():
            raise click.UsageError("no input: pipe markdown into rag-chunk --doc NAME, or name files and directories")
    elif "-" in inputs:
        raise click.UsageError("stdin ('-') cannot be mixed with files")
    with tempfile.TemporaryDirectory(prefix="rag-chunk-") as tmp:
        if not inputs or inputs == ("-",):
            copy = Path(tmp) / "stdin.md"
            with open(copy, "wb") as f:
                shutil.copyfileobj(sys.stdin.buffer, f)
            records = chunk_file(doc_name, copy, ragline.records.STDIN, window)  # type: ignore[arg-type]
        else:
            records = chunk_paths(inputs, window, note=ragline.records.note)  # a document left out is said even with --quiet
        with open(Path(tmp) / "chunks.jsonl", "w+b") as spool:  # all or nothing on stdout
            if not ragline.records.write_records(records, spool):
                raise StageError("no chunks: the input has no text")
            spool.seek(0)
            shutil.copyfileobj(spool, sys.stdout.buffer)


if __name__ == "__main__":
    main()
