"""The bad-input battery's cases for the stages that build an index (rag-chunk, rag-embed,
rag-index), with the Case record and the input makers both halves use; tests/test_bad_input.py runs them."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import orjson
import pytest
from stagecli import command, lines, live_generation, stage_env

import rag_index

TTY = b"<a terminal>"  # stdin marker: the stage gets a pseudo-terminal as stdin


@dataclass(frozen=True)
class Case:
    """One bad (or acceptable) input for one stage.

    `expect` is the stderr line with `…` standing for any text (orjson's wording, a
    generation's name); for exit 2 it is click's `Error:` line; for exit 0 stderr is empty.
    `prepare(d)` writes the case's files into its directory and returns stdin (None: /dev/null).
    """

    name: str
    stage: str
    args: tuple[str, ...]
    code: int
    expect: str
    prepare: Callable[[Path], bytes | None] = lambda d: None
    outputs: tuple[str, ...] = ()  # files a successful run may write (relative to the case dir)
    verify: Callable[[Path, bytes], None] | None = None  # more checks on a success: (case dir, stdout)
    bug: str | None = None  # a known bug in a stage this suite may not edit: strict xfail with this reason

    def regex(self) -> re.Pattern[str]:
        return re.compile(".*".join(re.escape(part) for part in self.expect.split("…")), re.DOTALL)


# --------------------------------------------------------------------------- input makers


def _same_records(out: bytes, given: bytes) -> None:
    assert [orjson.loads(x) for x in out.splitlines()] == [orjson.loads(x) for x in given.splitlines()]


def jl(*records: dict) -> bytes:
    return b"".join(orjson.dumps(r) + b"\n" for r in records)


def stdin(data: bytes) -> Callable[[Path], bytes]:
    return lambda d: data


def write(name: str, data: bytes | str, feed: bytes | None = None) -> Callable[[Path], bytes | None]:
    def prepare(d: Path) -> bytes | None:
        (d / name).parent.mkdir(parents=True, exist_ok=True)
        (d / name).write_bytes(data.encode() if isinstance(data, str) else data)
        return feed

    return prepare


def embedded(d: Path, n: int = 0) -> dict:
    return orjson.loads((d / "embedded.jsonl").read_bytes().splitlines()[n])


def first_embedded(change: Callable[[list[dict]], list[dict] | bytes]) -> Callable[[Path], bytes]:
    """stdin: the first two embedded chunk records after `change` (records -> records or raw bytes)."""

    def prepare(d: Path) -> bytes:
        got = change([embedded(d, 0), embedded(d, 1)])
        return got if isinstance(got, bytes) else jl(*got)

    return prepare


def with_vector_text(text: bytes) -> Callable[[list[dict]], bytes]:
    """The first record with its vector's first value replaced by raw JSON text (NaN, 1e999)."""

    def change(recs: list[dict]) -> bytes:
        raw = orjson.dumps(recs[0])
        start = raw.index(b'"vector":[') + len(b'"vector":[')
        end = raw.index(b",", start)
        return raw[:start] + text + raw[end:] + b"\n"

    return change


def edit(recs: list[dict], n: int, **fields) -> list[dict]:
    recs[n] = recs[n] | fields
    return recs


def gen_file(d: Path, name: str) -> Path:
    return live_generation(d / "idx") / name


def damage(name: str, how: Callable[[bytes], bytes]) -> Callable[[Path], bytes]:
    """A file of the live index generation rewritten by `how`; stdin: one query."""

    def prepare(d: Path) -> bytes:
        path = gen_file(d, name)
        path.write_bytes(how(path.read_bytes()))
        return QUERY

    return prepare


def flip_payload(data: bytes) -> bytes:
    """Same size, a valid header, other bytes: four float32 values become NaN."""
    body = bytearray(data)
    body[-16:] = b"\xff\xff\xff\x7f" * 4
    return bytes(body)


def manifest_edit(change: Callable[[dict], dict | bytes]) -> Callable[[Path], bytes]:
    def how(data: bytes) -> bytes:
        got = change(json.loads(data))
        return got if isinstance(got, bytes) else json.dumps(got).encode()

    return damage("manifest.json", how)


def foreign_manifest(d: Path) -> bytes:
    """The live manifest replaced by the one of an index of the same corpus, same dimension,
    built with another model ("other", random vectors): every size agrees, the bytes do not."""
    rng = np.random.default_rng(7)
    recs = [orjson.loads(line) for line in (d / "embedded.jsonl").read_bytes().splitlines()]
    for r in recs:
        r["model"] = "other"
        r["vector"] = rng.standard_normal(len(r["vector"])).tolist()
    (d / "other.jsonl").write_bytes(jl(*recs))
    subprocess.run([*command("rag-index"), "--out", "other", "other.jsonl"], cwd=d, env=stage_env(), check=True, capture_output=True)
    gen_file(d, "manifest.json").write_bytes((live_generation(d / "other") / "manifest.json").read_bytes())
    shutil.rmtree(d / "other")
    (d / "other.jsonl").unlink()
    return QUERY


def hits_record(d: Path, **fields) -> bytes:
    rec = orjson.loads((d / "hits.jsonl").read_bytes().splitlines()[0]) | fields
    return jl(rec)


def answers(d: Path) -> list[dict]:
    return lines((d / "answers.jsonl").read_bytes())


def golden_edit(old: str, new: str, name: str) -> Callable[[Path], None]:
    return golden_bytes(old.encode(), new.encode(), name)


def golden_bytes(old: bytes, new: bytes, name: str) -> Callable[[Path], None]:
    """A copy of the workspace's golden file with one edit, as `name`."""

    def prepare(d: Path) -> None:
        data = (d / "golden.yaml").read_bytes()
        assert old in data
        (d / name).write_bytes(data.replace(old, new, 1))

    return prepare


QUERY = jl({"id": "q1", "question": "When does the nightly sweep run?"})
TEN_MB = 10 * 1024 * 1024
UNKNOWN_GOLD = ('gold: ["settlement#the-nightly-sweep"]', 'gold: ["settlement#no-such-section"]')


def stays(name: str, value) -> Callable[[Path, bytes], None]:
    """verify: every output record still carries field `name` with `value` (passed through)."""

    def verify(d: Path, out: bytes) -> None:
        recs = lines(out)
        assert recs and all(r[name] == value for r in recs)

    return verify


def count(n: int) -> Callable[[Path, bytes], None]:
    def verify(d: Path, out: bytes) -> None:
        assert len(lines(out)) == n

    return verify


def index_loads(d: Path, out: bytes) -> None:
    assert rag_index.load(d / "idx").manifest["counts"]["chunks"] >= 2


def result_written(d: Path, out: bytes) -> None:
    result = json.loads((d / "result.json").read_bytes())
    assert result["schema"] == "eval-result/1" and result["counts"]["questions"] == 3


TECH_DOCS = """---
title: On-call
---

<%= partial 'partials/banner' %>

# <%= current_page.data.title %>

Paged through <a href="https://x.example" data-proofer-ignore>PagerDuty</a> within 15 minutes.

<%= warning_text('Never silence an alert.') %>

## Handover

Mondays.
"""
MDX_PAGE = """import Tabs from '@theme/Tabs';
export const meta = {owner: 'platform'};

# Deploying

{/* a comment */}

<Tabs>
  <TabItem value="staging" label="Staging">
    Staging deploys run on merge.
  </TabItem>
</Tabs>

Ask <Highlight color="red">the captain</Highlight>, {'always'}.
"""
MARKUP = ("<%", "%>", "import ", "export ", "data-proofer-ignore", "<a ", "</", "{/*", "{'", "<Tabs", "&mdash;", "+++")


def shows(doc: str, headings: list[list[str]], *texts: str) -> Callable[[Path, bytes], None]:
    """verify: the chunks of `doc` have these heading paths, hold these texts, and no markup."""

    def verify(d: Path, out: bytes) -> None:
        recs = [r for r in lines(out) if r["doc"] == doc]
        assert [r["headings"] for r in recs] == headings, [r["headings"] for r in recs]
        whole = "\n".join(r["text"] for r in recs)
        assert all(t in whole for t in texts), whole
        assert not [m for m in MARKUP if m in whole], whole

    return verify


def symlinked_out(d: Path) -> None:
    (d / "h").mkdir()
    (d / "h" / "a.md").write_text("# A\n\nAlpha.\n")
    (d / "secret.txt").write_text("# Keys\n\nThe signing key.\n")
    (d / "h" / "key.md").symlink_to(d / "secret.txt")


# --------------------------------------------------------------------------- the cases

SCORE = ("score", "--golden", "golden.yaml", "--label", "hash", "--corpus-chunks", "chunks.jsonl", "--out", "result.json")
BUILD_CASES: list[Case] = [
    # ------------------------------------------------------------------ rag-chunk
    Case(
        "markdown: binary (NUL byte)",
        "rag-chunk",
        ("bin.md",),
        1,
        "rag-chunk: bin.md:3: binary file (NUL byte), not markdown",
        write("bin.md", b"# Title\n\nsome\x00text\n"),
    ),
    Case(
        "markdown: an executable renamed .md",
        "rag-chunk",
        ("elf.md",),
        1,
        "rag-chunk: elf.md:1: binary file (NUL byte), not markdown",
        write("elf.md", b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 8),
    ),
    Case("markdown: empty file", "rag-chunk", ("empty.md",), 1, "rag-chunk: no chunks: the input has no text", write("empty.md", b"")),
    Case(
        "markdown: blank lines only",
        "rag-chunk",
        ("blank.md",),
        1,
        "rag-chunk: no chunks: the input has no text",
        write("blank.md", "\n \n\t\n"),
    ),
    Case(
        "markdown: unclosed code fence",
        "rag-chunk",
        ("fence.md",),
        1,
        "rag-chunk: fence.md:5: code fence opened here is never closed",
        write("fence.md", "# T\n\nText.\n\n```bash\ncurl x\n"),
    ),
    Case(
        "markdown: not UTF-8 (Latin-1)",
        "rag-chunk",
        ("latin1.md",),
        1,
        "rag-chunk: latin1.md:3: not UTF-8 (byte 0xe9)",
        write("latin1.md", b"# T\n\nCaf\xe9 au lait.\n"),
    ),
    Case(
        "markdown: UTF-8 byte-order mark",
        "rag-chunk",
        ("bom.md",),
        0,
        "",
        write("bom.md", b"\xef\xbb\xbf# Title\n\nText.\n"),
        verify=lambda d, out: [r["headings"] for r in lines(out)] == [["Title"]] or pytest.fail("BOM kept in the heading"),
    ),
    Case("markdown: no newline at the end", "rag-chunk", ("trunc.md",), 0, "", write("trunc.md", "# T\n\nLast line"), verify=count(1)),
    Case(
        "markdown: front matter with a YAML python tag",
        "rag-chunk",
        ("fm.md",),
        1,
        "rag-chunk: fm.md:2: front matter is not valid YAML: could not determine a constructor for the tag …python/object/apply:os.system'",
        write("fm.md", '---\ntitle: !!python/object/apply:os.system ["echo pwned"]\n---\n# T\n\nx\n'),
    ),
    Case(
        "markdown: front matter with an impossible date",
        "rag-chunk",
        ("date.md",),
        1,
        "rag-chunk: date.md:1: front matter is not valid YAML: month must be in 1..12",
        write("date.md", "---\ndate: 2024-13-45\n---\n# T\n\nx\n"),
    ),
    Case(
        "markdown: front matter nested 1000 deep",
        "rag-chunk",
        ("deep.md",),
        1,
        "rag-chunk: deep.md:…: front matter is not valid YAML: …depth…",
        write("deep.md", "---\ntags: " + "[" * 1000 + "\n---\n# T\n\nx\n"),
    ),
    Case("markdown: no such file", "rag-chunk", ("nope.md",), 1, "rag-chunk: nope.md: no such file or directory"),
    Case(
        "markdown: a directory without a page",
        "rag-chunk",
        ("notes",),
        1,
        "rag-chunk: notes: no pages (*.md, *.markdown, *.mdx, *.md.erb) in this directory; skipped a.txt: not a page (.txt)",
        write("notes/a.txt", "not markdown"),
    ),
    Case(
        "markdown on stdin without --doc",
        "rag-chunk",
        (),
        2,
        "Error: markdown on stdin needs --doc NAME (or name files and directories)",
        stdin(b"# T\n\nx\n"),
    ),
    Case(
        "markdown: stdin on a terminal",
        "rag-chunk",
        ("--doc", "x"),
        2,
        "Error: no input: pipe markdown into rag-chunk --doc NAME, or name files and directories",
        stdin(TTY),
    ),
    # ------------------------------------------------------------------ rag-chunk: the pages of site generators (issue 31)
    Case(
        "page: a tech-docs .html.md.erb (front matter, ERB, inline HTML)",
        "rag-chunk",
        ("h",),
        0,
        "",
        write("h/on-call.html.md.erb", TECH_DOCS),
        verify=shows("on-call", [["On-call"], ["On-call", "Handover"]], "PagerDuty within 15 minutes", "Never silence an alert."),
    ),
    Case(
        "page: an MDX page (imports, exports, a component, expressions)",
        "rag-chunk",
        ("h",),
        0,
        "",
        write("h/deploys.mdx", MDX_PAGE),
        verify=shows("deploys", [["Deploying"]], "Staging deploys run on merge.", "Ask the captain, always."),
    ),
    Case(
        "page: a .markdown page with front matter and an entity",
        "rag-chunk",
        ("h",),
        0,
        "",
        write("h/backups.markdown", "---\nlayout: page\ntitle: Backups\n---\n\nNightly at 02:00 &mdash; kept 35 days.\n"),
        verify=shows("backups", [["Backups"]], "Nightly at 02:00 — kept 35 days."),
    ),
    Case(
        "page: Hugo TOML front matter",
        "rag-chunk",
        ("h",),
        0,
        "",
        write("h/post.md", '+++\ntitle = "Release train"\n+++\n\nWe ship on Tuesdays.\n'),
        verify=shows("post", [["Release train"]], "We ship on Tuesdays."),
    ),
    Case(
        "page: TOML front matter that does not parse",
        "rag-chunk",
        ("post.md",),
        1,
        "rag-chunk: post.md:3: front matter is not valid TOML: …",
        write("post.md", '+++\ntitle = "Release train"\ndate = = 1\n+++\n\nText.\n'),
    ),
    Case(
        "page: an MDX page of imports alone",
        "rag-chunk",
        ("only.mdx",),
        1,
        "rag-chunk: no chunks: the input has no text",
        write("only.mdx", "import A from 'a'\nexport const b = {c: 1}\n\n{/* nothing to read */}\n"),
    ),
    Case(
        "page: an MDX import and an expression never closed",
        "rag-chunk",
        ("open.mdx",),
        0,
        "",
        write("open.mdx", "# Open\n\nText {still open.\n\nimport {\n  A,\n"),
        verify=shows("open", [["Open"]], "Text {still open."),
    ),
    Case(
        "page: an HTML table and a comment never closed",
        "rag-chunk",
        ("open.md",),
        0,
        "",
        write("open.md", "# Open\n\n<table><tr><td>Met<td>Tighten\n\n<!-- a comment to the end\n\nnever closed\n"),
        verify=shows("open", [["Open"]], "| Met | Tighten |"),
    ),
    Case(
        "page: one paragraph of 40,000 sentences and code spans",  # a sentence cut kept out of 40,000 spans: one pass, not 40,000 (minutes)
        "rag-chunk",
        ("spans.md",),
        0,
        "",
        write("spans.md", "# Spans\n\n" + " ".join("Word `c` here. Next `d` one." for _ in range(20_000)) + "\n"),
        verify=count(667),
    ),
    Case(
        "page: 800 runs of backticks, 100,000 unclosed comments and half tags",  # html.parser and a lazy regex took minutes on these
        "rag-chunk",
        ("runs.md",),
        0,
        "",
        write(
            "runs.md",
            "# Runs\n\n"
            + " ".join("w" + "`" * n for n in range(1, 800))
            + "\n\n# Comments\n\n<div>\n"
            + " ".join("a <!-- b" for _ in range(100_000))
            + "\n\n# Closers\n\n<div>\n"
            + " ".join("a </b" for _ in range(100_000))
            + "\n",
        ),
        verify=count(7),
    ),
    Case(
        "page: a file symlinked out of the tree (issue 32, D6)",
        "rag-chunk",
        ("h",),
        0,
        "rag-chunk: h/key.md: skipped, a symlink out of the tree (…secret.txt)",
        symlinked_out,
        verify=count(1),
    ),
    # ------------------------------------------------------------------ rag-expand
    Case(
        "expand: invalid JSON",
        "rag-expand",
        (),
        1,
        "rag-expand: <stdin>:2: not valid JSON: unexpected character… (column 21)",
        stdin(b'{"id": "a", "text": "x"}\n{"id": "b", "text": }\n'),
    ),
    Case(
        "expand: not a chunk record",
        "rag-expand",
        (),
        1,
        "rag-expand: <stdin>:1: missing field 'text' (got a hits/1 record)",
        lambda d: (d / "hits.jsonl").read_bytes(),
    ),
    Case(
        "expand: headings not strings",
        "rag-expand",
        (),
        1,
        "rag-expand: <stdin>:2: field 'headings' must be an array of strings",
        stdin(jl({"id": "a", "text": "x"}, {"id": "b", "text": "y", "headings": [1]})),
    ),
    Case(
        "expand: the local model not fetched",
        "rag-expand",
        (),
        1,
        "rag-expand: /nonexistent/ragline-models/qwen2.5-coder-0.5b-instruct: the local model qwen2.5-coder-0.5b-instruct is not in the model cache: …",
        lambda d: (d / "chunks.jsonl").read_bytes(),
    ),
    Case(
        "expand: a model path that is not a file",
        "rag-expand",
        ("--local-model", "nothere.gguf"),
        1,
        "rag-expand: nothere.gguf: no local model 'nothere.gguf': give a known name (…) or the path of a GGUF file",
        lambda d: (d / "chunks.jsonl").read_bytes(),
    ),
    Case(
        "expand: a model file that is not GGUF",
        "rag-expand",
        ("--local-model", "chunks.jsonl"),
        1,
        "rag-expand: chunks.jsonl: …",
        lambda d: (d / "chunks.jsonl").read_bytes(),
    ),
    Case(
        "expand: too many questions",
        "rag-expand",
        ("--questions", "21"),
        2,
        "Error: Invalid value for '--questions': 21 is not in the range 0<=x<=20.",
        stdin(b""),
    ),
    Case(
        "expand: --questions 0 passes the records through",
        "rag-expand",
        ("--questions", "0"),
        0,
        "",
        lambda d: (d / "chunks.jsonl").read_bytes(),
        verify=lambda d, out: _same_records(out, (d / "chunks.jsonl").read_bytes()),
    ),
    Case(
        "expand: no input",
        "rag-expand",
        (),
        2,
        "Error: no input: pipe rag-chunk's records into rag-expand or name a file (see --help)",
        lambda d: TTY,
    ),
    # ------------------------------------------------------------------ rag-embed
    Case(
        "records: invalid JSON",
        "rag-embed",
        ("--model", "hash"),
        1,
        "rag-embed: <stdin>:2: not valid JSON: unexpected character… (column 21)",
        stdin(b'{"id": "a", "text": "x"}\n{"id": "b", "text": }\n'),
    ),
    Case(
        "records: a JSON array",
        "rag-embed",
        ("--model", "hash"),
        1,
        "rag-embed: <stdin>:1: expected a JSON object, got an array",
        stdin(b'["a", "x"]\n'),
    ),
    Case(
        "records: a JSON number",
        "rag-embed",
        ("--model", "hash"),
        1,
        "rag-embed: <stdin>:1: expected a JSON object, got a number",
        stdin(b"42\n"),
    ),
    Case(
        "records: a JSON string",
        "rag-embed",
        ("--model", "hash"),
        1,
        "rag-embed: <stdin>:1: expected a JSON object, got a string",
        stdin(b'"text"\n'),
    ),
    Case(
        "records: missing required field",
        "rag-embed",
        ("--model", "hash"),
        1,
        "rag-embed: <stdin>:1: missing field 'text'",
        stdin(jl({"id": "a"})),
    ),
    Case(
        "records: mistyped required field",
        "rag-embed",
        ("--model", "hash"),
        1,
        "rag-embed: <stdin>:1: field 'text' must be a string, got a number",
        stdin(jl({"id": "a", "text": 7})),
    ),
    Case(
        "records: the wrong kind of record",
        "rag-embed",
        ("--model", "hash"),
        1,
        "rag-embed: <stdin>:1: missing field 'text' (got a hits/1 record)",
        lambda d: (d / "hits.jsonl").read_bytes(),
    ),
    Case("records: empty stream", "rag-embed", ("--model", "hash"), 0, "", stdin(b""), verify=count(0)),
    Case("records: blank lines only", "rag-embed", ("--model", "hash"), 0, "", stdin(b"\n  \n\t\n"), verify=count(0)),
    Case(
        "records: UTF-8 byte-order mark",
        "rag-embed",
        ("--model", "hash"),
        0,
        "",
        stdin(b"\xef\xbb\xbf" + jl({"id": "a", "text": "x"})),
        verify=stays("id", "a"),
    ),
    Case(
        "records: bytes that are not UTF-8",
        "rag-embed",
        ("--model", "hash"),
        1,
        "rag-embed: <stdin>:1: not valid JSON: not UTF-8 (byte 0xff at column 22)",
        stdin(b'{"id": "a", "text": "\xff"}\n'),
    ),
    Case(
        "records: last line without a newline",
        "rag-embed",
        ("--model", "hash"),
        0,
        "",
        stdin(b'{"id": "a", "text": "x"}\n{"id": "b", "text": "y"}'),
        verify=count(2),
    ),
    Case(
        "records: a 10 MB line",
        "rag-embed",
        ("--model", "hash"),
        0,
        "",
        stdin(jl({"id": "a", "text": "short", "note": "x" * TEN_MB})),
        verify=lambda d, out: len(lines(out)[0]["note"]) == TEN_MB or pytest.fail("the 10 MB field did not survive"),
    ),
    Case(
        "records: a 10 MB line that is not JSON",
        "rag-embed",
        ("--model", "hash"),
        1,
        "rag-embed: <stdin>:1: not valid JSON: … (column …)",
        stdin(b'{"id": "a", "text": "' + b"x" * TEN_MB + b"\n"),
    ),
    Case(
        "records: unknown extra fields",
        "rag-embed",
        ("--model", "hash"),
        0,
        "",
        stdin(jl({"id": "a", "text": "x", "meta": {"owner": "ops", "tags": [1, None]}})),
        verify=stays("meta", {"owner": "ops", "tags": [1, None]}),
    ),
    Case(
        "records: unknown model",
        "rag-embed",
        ("--model", "nope"),
        1,
        "rag-embed: no model 'nope': not a folder and not a known name (hash, …)",
        stdin(jl({"id": "a", "text": "x"})),
    ),
    Case(
        "records: a known model not fetched",
        "rag-embed",
        ("--model", "all-MiniLM-L6-v2"),
        1,
        "rag-embed: model folder /nonexistent/ragline-models/all-MiniLM-L6-v2 does not exist (run 'just model' or 'rag-embed --fetch-model')",
        stdin(jl({"id": "a", "text": "x"})),
    ),
    Case(
        "records: no such input file", "rag-embed", ("--model", "hash", "nope.jsonl"), 1, "rag-embed: nope.jsonl: No such file or directory"
    ),
    Case(
        "records: stdin on a terminal",
        "rag-embed",
        ("--model", "hash"),
        2,
        "Error: no input: pipe JSON Lines into rag-embed or name a file (see --help)",
        stdin(TTY),
    ),
    # ------------------------------------------------------------------ rag-index (every case rebuilds an existing index: it must stay as it was)
    Case(
        "vectors: NaN literal",
        "rag-index",
        ("--out", "idx"),
        1,
        "rag-index: <stdin>:1: not valid JSON: unexpected character… (column …)",
        first_embedded(with_vector_text(b"NaN")),
    ),
    Case(
        "vectors: null (how orjson writes NaN)",
        "rag-index",
        ("--out", "idx"),
        1,
        "rag-index: <stdin>:1: vector has a non-finite value (NaN or infinity)",
        first_embedded(with_vector_text(b"null")),
    ),
    Case(
        "vectors: infinity (1e999)",
        "rag-index",
        ("--out", "idx"),
        1,
        "rag-index: <stdin>:1: not valid JSON: number is infinity when parsed as double (column …)",
        first_embedded(with_vector_text(b"1e999")),
    ),
    Case(
        "vectors: beyond float32 (1e39)",
        "rag-index",
        ("--out", "idx"),
        1,
        "rag-index: <stdin>:1: vector has a non-finite value (NaN or infinity)",
        first_embedded(with_vector_text(b"1e39")),
    ),
    Case(
        "chunks: a source that is not a file's facts",
        "rag-index",
        ("--out", "idx"),
        1,
        "rag-index: <stdin>:1: field 'source' must be {root, size, mtime_ns, sha256} (and lists of globs), as rag-chunk writes it",
        first_embedded(lambda r: edit(r, 0, source="corpus/settlement.md")),
    ),
    Case(
        "chunks: one file's chunks from two versions of it",
        "rag-index",
        ("--out", "idx"),
        1,
        "rag-index: <stdin>:2: the chunks of corpus/… come from two versions of it (chunked at two times): chunk it once",
        first_embedded(lambda r: edit(r, 1, path=r[0]["path"], source=r[0]["source"] | {"size": 1})),
    ),
    Case(
        "vectors: wrong dimension",
        "rag-index",
        ("--out", "idx"),
        1,
        "rag-index: <stdin>:2: vector has 383 values, the stream's first has 384",
        first_embedded(lambda r: edit(r, 1, vector=r[1]["vector"][:-1])),
    ),
    Case(
        "vectors: two models in one stream",
        "rag-index",
        ("--out", "idx"),
        1,
        "rag-index: <stdin>:2: model 'other' differs from 'hash' at <stdin>:1: one index, one model",
        first_embedded(lambda r: edit(r, 1, model="other")),
    ),
    Case(
        "vectors: duplicate chunk ids",
        "rag-index",
        ("--out", "idx"),
        1,
        "rag-index: <stdin>:2: duplicate chunk id 'errors#platform-errors' (first at <stdin>:1)",
        first_embedded(lambda r: edit(r, 1, id=r[0]["id"])),
    ),
    Case(
        "vectors: missing vector",
        "rag-index",
        ("--out", "idx", "chunks.jsonl"),
        1,
        "rag-index: chunks.jsonl:1: missing field 'vector' (got a chunk/1 record)",
    ),
    Case(
        "vectors: vector is a string",
        "rag-index",
        ("--out", "idx"),
        1,
        "rag-index: <stdin>:1: field 'vector' must be an array, got a string",
        first_embedded(lambda r: edit(r, 0, vector="0.1 0.2")),
    ),
    Case(
        "vectors: vector of booleans",
        "rag-index",
        ("--out", "idx"),
        1,
        "rag-index: <stdin>:1: field 'vector' must be a list of numbers",
        first_embedded(lambda r: edit(r, 0, vector=[True] * 384)),
    ),
    Case(
        "vectors: vector of numeric strings",
        "rag-index",
        ("--out", "idx"),
        1,
        "rag-index: <stdin>:1: field 'vector' must be a list of numbers",
        first_embedded(lambda r: edit(r, 0, vector=[str(v) for v in r[0]["vector"]])),
    ),
    Case(
        "vectors: headings of numbers",
        "rag-index",
        ("--out", "idx"),
        1,
        "rag-index: <stdin>:1: field 'headings' must be an array of strings",
        first_embedded(lambda r: edit(r, 0, headings=[1, 2])),
    ),
    Case(
        "vectors: headings a string",
        "rag-index",
        ("--out", "idx"),
        1,
        "rag-index: <stdin>:1: field 'headings' must be an array of strings",
        first_embedded(lambda r: edit(r, 0, headings="Settlement")),
    ),
    Case("vectors: empty stream", "rag-index", ("--out", "idx"), 1, "rag-index: no records: nothing to index", stdin(b"")),
    Case(
        "vectors: UTF-8 byte-order mark",
        "rag-index",
        ("--out", "idx"),
        0,
        "",
        first_embedded(lambda r: b"\xef\xbb\xbf" + jl(*r)),
        outputs=("idx",),
        verify=index_loads,
    ),
    Case(
        "vectors: last line without a newline",
        "rag-index",
        ("--out", "idx"),
        0,
        "",
        first_embedded(lambda r: jl(*r).rstrip(b"\n")),
        outputs=("idx",),
        verify=index_loads,
    ),
    Case(
        "vectors: unknown extra fields",
        "rag-index",
        ("--out", "idx"),
        0,
        "",
        first_embedded(lambda r: [x | {"owner": {"team": "ops"}} for x in r]),
        outputs=("idx",),
        verify=index_loads,
    ),
    Case(
        "vectors: --out is a directory of other files",
        "rag-index",
        ("--out", "corpus", "embedded.jsonl"),
        1,
        "rag-index: corpus: exists and is not a ragline index (refusing to write into it)",
    ),
    Case(
        "vectors: --out is a file",
        "rag-index",
        ("--out", "chunks.jsonl", "embedded.jsonl"),
        2,
        "Error: Invalid value for '--out' / '-o': Directory 'chunks.jsonl' is a file.",
    ),
    Case("vectors: no --out", "rag-index", ("embedded.jsonl",), 2, "Error: Missing option '--out' / '-o'."),
]
