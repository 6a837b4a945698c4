"""rag-chunk: the block scanner, packing, ids, and the properties that must hold."""

from __future__ import annotations

import html
import re
import tempfile
from pathlib import Path
from unittest import mock

import pytest
from corpora import GDS_WAY, SHARED
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonl import parse
from properties import examples

import rag_chunk
from rag_chunk import Doc, chunk_document, main, slugify
from ragline import markdown
from ragline.records import StageError


def chunks(text: str, window: int = 180, name: str = "doc") -> list[dict]:
    return chunk_document(Doc(name, f"{name}.md", text), window)


def prose(n: int, word: str = "word") -> str:
    """n words in sentences of ten, wrapped at ten words a line."""
    words = [f"{word}{i}" for i in range(n)]
    lines = []
    for i in range(0, n, 10):
        lines.append((" ".join(words[i : i + 10]) + ".").capitalize())
    return "\n".join(lines)


RUNBOOK = """# Runbook: Settlement stall

Settlement has not moved for an hour.

## Recovery steps

Retry twice, then page the on-call.

## Escalation

Page the payments lead.
"""


class TestSections:
    def test_heading_path_and_ids(self):
        got = chunks(RUNBOOK, name="07-runbooks")
        assert [c["id"] for c in got] == [
            "07-runbooks#runbook-settlement-stall",
            "07-runbooks#recovery-steps",
            "07-runbooks#escalation",
        ]
        assert got[1]["headings"] == ["Runbook: Settlement stall", "Recovery steps"]
        assert got[1]["text"] == "## Recovery steps\n\nRetry twice, then page the on-call."
        assert (got[1]["start_line"], got[1]["end_line"]) == (5, 7)
        assert got[1]["words"] == 9

    def test_setext_headings(self):
        got = chunks("Title\n=====\n\nIntro text.\n\nPart\n----\n\nBody text.\n")
        assert [c["headings"] for c in got] == [["Title"], ["Title", "Part"]]

    def test_anchor_becomes_slug_and_leaves_title(self):
        got = chunks("# Small CLs\n\n## Why Write Small CLs? {#why}\n\nBecause.\n", name="small")
        assert got[-1]["id"] == "small#why"
        assert got[-1]["headings"] == ["Small CLs", "Why Write Small CLs?"]
        assert got[-1]["text"] == "# Small CLs\n\n## Why Write Small CLs?\n\nBecause."  # the id is no word of the text, on a plain page too

    def test_an_atx_heading_is_read_as_commonmark_reads_it_in_linear_time(self):
        assert markdown.atx("## Setup ##") == ("##", "Setup")  # the closing sequence is no part of the title
        assert markdown.atx("  ### C# #") == ("  ###", "C#")  # hashes after a letter are the title's
        assert markdown.atx("## foo#") == ("##", "foo#") and markdown.atx("# #\tx") == ("#", "#\tx")
        assert markdown.atx("## ##") == ("##", "") and markdown.atx("#") == ("#", "")  # an empty heading
        assert markdown.atx("#5 bolt") is None and markdown.atx("    # code") is None and markdown.atx("# a\nb") is None
        # a title after 50,000 spaces: a lazy title before an optional closing sequence took 42 s here
        got = chunks("# x" + " " * 50_000 + "end ##\n\nBody text.\n", name="p")
        assert [(c["id"], c["headings"]) for c in got] == [("p#x-end", ["x end"])]

    def test_a_github_alert_reads_as_its_kind(self):
        got = chunks("# Releases\n\n> [!NOTE] Ownership has changed.\n> Read on.\n\n> [!WARNING]\n> Never on Fridays.\n")
        assert got[0]["text"] == "# Releases\n\n> Note: Ownership has changed.\n> Read on.\n\n> Warning:\n> Never on Fridays."

    def test_empty_heading_travels_with_next_chunk(self):
        got = chunks("# Guide\n\n## Part\n\nBody.\n")
        assert len(got) == 1
        assert got[0]["text"].startswith("# Guide\n\n## Part")
        assert got[0]["headings"] == ["Guide", "Part"]

    def test_markup_under_a_heading_is_no_text_of_its_own(self):
        """`# Title` then `{: .no_toc }` (Jekyll's just-the-docs) was a chunk of the title alone: a line of attributes
        or kramdown's table of contents under a heading shows nothing, so the page chunks as it would without them."""
        for page, without in (
            ("# Title\n{: .no_toc }\n\n## Sub\n\nText.\n", "# Title\n\n## Sub\n\nText.\n"),
            ("# Title\n{: .no_toc }\n## Sub\nText.\n", "# Title\n## Sub\nText.\n"),
            ("Title\n=====\n{: .no_toc }\n\n## Sub\n\nText.\n", "Title\n=====\n\n## Sub\n\nText.\n"),
            (
                '# Title\n\n{::options parse_block_html="true" /}\n\n{: .lead}\n\n## Contents\n{: .no_toc .text-delta }\n\n'
                "1. TOC\n{:toc}\n\n## Sub\n\nText.\n",
                "# Title\n\n## Contents\n\n## Sub\n\nText.\n",
            ),
            ("# Title\n\n* TOC\n{:toc}\n\n## Sub\n\nText.\n", "# Title\n\n## Sub\n\nText.\n"),
            ("# Title\n{: .no_toc }\n", "# Title\n"),
        ):
            got = [(c["id"], c["headings"], c["text"]) for c in chunks(page, name="d")]
            assert got == [(c["id"], c["headings"], c["text"]) for c in chunks(without, name="d")], page
        got = chunks("# Title\n\n{: .lead}\nIntro.\n", name="d")  # before a paragraph, it is the paragraph's
        assert [(c["text"], c["start_line"], c["end_line"]) for c in got] == [("# Title\n\nIntro.", 1, 4)]

    def test_a_comment_is_no_text_of_its_own_and_no_words(self):
        """`# Title` then a kramdown `{::comment}` (or an HTML comment) was a chunk of the title alone, and a comment of
        300 words split prose that fits one window: a block that shows nothing is no text of a section's own and no
        words of its chunk's, so the page chunks as it would without it (its lines still in the chunk's)."""
        draft = " ".join(["draft"] * 300)
        for comment in (f"{{::comment}}\n{draft}\n{{:/comment}}", f"<!--\n{draft}\n-->"):
            for page, without in (
                (f"# Title\n\n{comment}\n\n## Sub\n\nText.\n", "# Title\n\n## Sub\n\nText.\n"),
                (f"# Title\n\n{comment}\n\n{prose(100)}\n", f"# Title\n\n{prose(100)}\n"),  # under the heading
                (f"# Title\n\n{prose(100)}\n\n{comment}\n\n{prose(50, 'more')}\n", f"# Title\n\n{prose(100)}\n\n{prose(50, 'more')}\n"),
            ):
                got = chunks(page, name="d")
                assert [(c["id"], c["headings"], c["text"]) for c in got] == [
                    (c["id"], c["headings"], c["text"]) for c in chunks(without, name="d")
                ], page[:40]
                assert (got[0]["start_line"], got[-1]["end_line"]) == (1, page.count("\n"))
            page = f"# Title\n\n## Empty\n\n{comment}\n\n## Next\n\nText.\n"  # a section of its heading lines: they hold it
            got = chunks(page, name="d")
            assert [(c["id"], c["text"], c["end_line"]) for c in got] == [
                ("d#empty", "# Title\n\n## Empty", page.split("\n").index("## Next") - 1),
                ("d#next", "## Next\n\nText.", page.count("\n")),
            ]

    def test_duplicate_heading_names_are_qualified_by_parent(self):
        text = "# A\n\n## Alpha\n\n### Limits\n\nx.\n\n## Beta\n\n### Limits\n\ny.\n"
        ids = [c["id"] for c in chunks(text, name="d")]
        assert ids == ["d#alpha--limits", "d#beta--limits"]

    def test_empty_sibling_section_is_its_own_chunk(self):
        got = chunks("# Guide\n\n## Empty\n\n## Full\n\nBody.\n", name="d")
        assert [c["id"] for c in got] == ["d#empty", "d#full"]
        assert got[0]["text"] == "# Guide\n\n## Empty"
        assert got[1]["text"] == "## Full\n\nBody."

    def test_text_before_first_heading_is_top(self):
        assert chunks("Just text.\n\n# H\n\nMore.\n", name="d")[0]["id"] == "d#top"

    def test_front_matter_title_kept_not_chunked(self):
        got = chunks("---\ntitle: Payouts\nowner: x\n---\n# Payouts\n\nMoney out.\n")
        assert got[0]["title"] == "Payouts"
        assert "owner" not in got[0]["text"]
        assert got[0]["start_line"] == 5

    def test_second_part_gets_suffix(self):
        text = "# S\n\n" + prose(100) + "\n\n" + prose(100, "other") + "\n"
        got = chunks(text, window=120, name="d")
        assert [c["id"] for c in got] == ["d#s", "d#s-2"]

    def test_edit_in_one_section_does_not_rename_others(self):
        before = [c["id"] for c in chunks(RUNBOOK)]
        after = [c["id"] for c in chunks(RUNBOOK.replace("Retry twice", "Retry twice more, slowly"))]
        assert before == after


class TestAtomicBlocks:
    def test_fence_and_table_survive_a_window_small_enough_to_force_the_split(self):
        fence = "```json\n" + "\n".join(f'  "field{i}": "value {i} value",' for i in range(30)) + "\n```"
        table = "| code | meaning |\n|---|---|\n" + "\n".join(f"| NW-40{i:02d} | meaning number {i} here |" for i in range(30))
        text = f"# Doc\n\n{prose(30)}\n\n{fence}\n\n{prose(30)}\n\n{table}\n\n{prose(30)}\n"
        got = chunks(text, window=40)
        assert any(fence in c["text"] for c in got)
        assert any(table in c["text"] for c in got)
        for c in got:
            assert c["text"].count("```") % 2 == 0

    def test_longer_fence_contains_shorter(self):
        inner = "````markdown\n```python\nprint(1)\n```\n\n# not a heading\n````"
        got = chunks(f"# Doc\n\nIntro.\n\n{inner}\n\nAfter.\n", window=10)
        assert any(inner in c["text"] for c in got)
        assert all(c["headings"] == ["Doc"] for c in got)

    def test_tilde_fence_with_info_string(self):
        block = "~~~yaml title=config\nkey: value\n# comment, not a heading\n~~~"
        got = chunks(f"# Doc\n\n{block}\n")
        assert block in got[0]["text"]
        assert len(got) == 1

    def test_list_split_between_items_never_inside(self):
        items = [f"- item {i} " + " ".join(["word"] * 20) + "\n  continued line of the item" for i in range(10)]
        got = chunks("# L\n\n" + "\n".join(items) + "\n", window=60)
        assert len(got) > 1
        for item in items:
            assert sum(item in c["text"] for c in got) == 1

    def test_fence_inside_list_item_stays_whole(self):
        text = "# L\n\n1. Run this:\n\n   ```bash\n   curl -X POST x\n\n   echo done\n   ```\n\n2. Then that.\n"
        got = chunks(text, window=10)
        assert all(c["text"].count("```") % 2 == 0 for c in got)

    def test_long_paragraph_split_at_sentences(self):
        got = chunks("# P\n\n" + prose(400) + "\n", window=100)
        assert len(got) >= 4
        for c in got:
            assert c["words"] <= 100
            assert c["text"].rstrip().endswith(".")

    def test_unclosed_fence_is_an_error_naming_the_line(self):
        with pytest.raises(StageError, match=r"^doc\.md:3: code fence opened here is never closed$"):
            chunks("# D\n\n```\ncode\n")

    def test_html_block(self):
        html = "<table>\n<tr><td>a</td></tr>\n<tr><td>b</td></tr>\n</table>"
        got = chunks(f"# D\n\n{html}\n\nText.\n", window=10)
        assert any("| a |\n| --- |\n| b |" in c["text"] for c in got)  # whole, and shown as the table it renders


# --------------------------------------------------------------------------- properties

WORDS = st.one_of(
    st.text(alphabet="abcdefghijéüß日本ABC", min_size=1, max_size=8),
    st.sampled_from(["NW-4021", "ap-south-1", "4000 0000 0000 0002", "`code`", "**bold**", "<b>", "#tag"]),
)


@st.composite
def markdown_text(draw) -> str:
    parts = []
    for _ in range(draw(st.integers(1, 12))):
        kind = draw(st.sampled_from(["heading", "para", "para", "fence", "table", "list", "setext"]))
        if kind == "heading":
            parts.append("#" * draw(st.integers(1, 4)) + " " + " ".join(draw(st.lists(WORDS, min_size=1, max_size=4))))
        elif kind == "setext":
            parts.append(" ".join(draw(st.lists(WORDS, min_size=1, max_size=3))) + "\n" + draw(st.sampled_from(["===", "---"])))
        elif kind == "para":
            n = draw(st.integers(1, 120))
            words = draw(st.lists(WORDS, min_size=n, max_size=n))
            lines = [" ".join(words[i : i + 9]) + draw(st.sampled_from([".", "", "!", ","])) for i in range(0, n, 9)]
            parts.append("\n".join(lines))
        elif kind == "fence":
            mark = draw(st.sampled_from(["```", "~~~", "````"]))
            body = draw(st.lists(st.sampled_from(["# not heading", "", "x = 1", "| a | b |", "- item"]), max_size=6))
            parts.append("\n".join([mark + draw(st.sampled_from(["", "json", "bash"])), *body, mark]))
        elif kind == "table":
            rows = draw(st.integers(1, 8))
            parts.append("| a | b |\n|---|---|\n" + "\n".join(f"| {draw(WORDS)} | {draw(WORDS)} |" for _ in range(rows)))
        else:
            n = draw(st.integers(1, 6))
            parts.append("\n".join(f"- {' '.join(draw(st.lists(WORDS, min_size=1, max_size=12)))}" for _ in range(n)))
    return "\n\n".join(parts) + "\n"


def nonblank(text: str) -> list[str]:
    return [line for line in text.split("\n") if line.strip()]


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(markdown_text(), st.sampled_from([15, 40, 180]))
def test_properties(text, window):
    got = chunks(text, window=window)
    # the same input gives the same output
    assert got == chunks(text, window=window)
    # ids are unique
    assert len({c["id"] for c in got}) == len(got)
    # every word of the page as it shows, in order, exactly once: the generator's one piece of
    # markup, the HTML tag <b>, shows nothing
    page = text.replace("<b>", "")
    assert " ".join(" ".join(c["text"].split()) for c in got) == " ".join(page.split())
    # every non-blank line exactly once, in order (white space folded: an HTML block's lines are
    # dedented): a line cut between two chunks (an over-long paragraph split at a sentence)
    # ends one chunk and opens the next
    src = [" ".join(line.split()) for line in nonblank(page)]
    rebuilt: list[str] = []
    for c in got:
        lines = [" ".join(line.split()) for line in nonblank(c["text"])]
        if rebuilt and lines and len(rebuilt) <= len(src) and rebuilt[-1] != src[len(rebuilt) - 1]:
            rebuilt[-1] += " " + lines.pop(0)
        rebuilt.extend(lines)
    assert rebuilt == src
    for c in got:
        # fences balanced
        fences = [m for m in re.finditer(r"^ {0,3}(`{3,}|~{3,})", c["text"], re.M)]
        assert len(fences) % 2 == 0, c["text"]
        # the window holds unless the chunk is one block after its heading lines: an atomic one, or
        # one that fits the window by itself (the headings that travel with their first text are
        # what pass it: a run of long headings before one short paragraph)
        # (the blocks of its source lines: an HTML block shows as text)
        if c["words"] > window:
            source = "\n".join(text.split("\n")[c["start_line"] - 1 : c["end_line"]])
            body = [b for b in markdown.scan(Doc("x", "x", source)) if b.kind != "heading"]
            assert len(body) <= 1, c["text"]  # no body: a run of nested headings alone
            if body and body[0].kind not in ("fence", "table", "list_item", "html", "code"):
                assert len(source[body[0].start : body[0].end].split()) <= window, c["text"]


# --------------------------------------------------------------------------- streaming a file

# What a window's end can cut: blocks that span headings, lookahead past a block's end,
# slugs that a later section qualifies, front matter, CR line ends.
AWKWARD = [
    "---\ntitle: Paged\n---",
    "# <%= current_page.data.title %>",
    "<!--\n# a heading in a comment\n\n## another\n-->",
    "<div>\n# absorbed by the HTML block\n</div>",
    "```\n# not a heading\n\n## nor this\n```",
    "    indented code, " + " ".join(["one block"] * 5) + "\n\n\n    more of it, " + " ".join(["the same block"] * 4),
    "- item\n\n\n\n      indented after blanks, " + " ".join(["still the item"] * 8) + "\n\n  ```\n  # fenced in the item\n  ```",
    "> a quote, " + " ".join(["one block"] * 5) + "\n> # a heading in the quote, " + " ".join(["the same block"] * 4),
    "<pre>\n# not a heading\n\n## nor this\n</pre>",
    "| a | b |\n|---|---|\n| 1 | 2 |\n# h | in the table",
    "cell | cell\n--- | ---",
    "## Limits",
    "### Limits",
    "Title\n=====",
    "# Attributed\n{: .no_toc }\n\n* TOC\n{:toc}\n\n## Under it\n\n{: .lead}\nText.",  # a heading's look past its line
    "{::comment}\n# hidden\n\n## hidden too\n{:/comment}",
    "# Commented\n\n{::comment}\ndraft\n{:/comment}\n\n<!-- a note -->\n\n## Below it",  # no text of the heading's own
    "```\nnever closed",
]


@st.composite
def awkward_markdown(draw) -> bytes:
    parts = draw(st.lists(st.one_of(markdown_text(), st.sampled_from(AWKWARD)), min_size=1, max_size=8))
    text = "\n\n".join(parts) + draw(st.sampled_from(["\n", "", "\n\n\n"]))
    text = text.replace("\n", draw(st.sampled_from(["\n", "\r\n", "\r"])))
    return draw(st.sampled_from(["", "\ufeff"])).encode() + text.encode()


def outcome(run) -> list[dict] | str:
    try:
        return run()
    except StageError as err:
        return str(err)


def streamed(data: bytes, window: int, piece: int) -> list[dict] | str:
    """chunk_file over `data` in pieces of `piece` bytes: the window slides every few lines."""
    with tempfile.TemporaryDirectory() as tmp, mock.patch.object(markdown, "PIECE", piece):
        path = Path(tmp) / "d.md"
        path.write_bytes(data)
        return outcome(lambda: list(rag_chunk.chunk_file("d", path, "d.md", window)))


def whole(data: bytes, window: int) -> list[dict] | str:
    return outcome(lambda: chunk_document(Doc("d", "d.md", markdown.decode(data, "d.md")), window))


@pytest.mark.slow  # 300 documents streamed in pieces: 10 s at load 3 on two cores
@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(awkward_markdown(), st.sampled_from([15, 40, 180]), st.integers(1, 96))
def test_streaming_a_file_gives_the_whole_document_s_chunks(data, window, piece):
    assert streamed(data, window, piece) == whole(data, window)


BYTES = st.lists(
    st.sampled_from([b"\n", b"\r", b"\x00", b"\xff", b"\xc3", b"\xa9", b"\xef\xbb\xbf", b"# a", b"```"]) | st.binary(max_size=6),
    max_size=60,
)


@settings(max_examples=examples(200), deadline=None)
@given(BYTES.map(b"".join), st.integers(1, 64))
def test_streaming_arbitrary_bytes_gives_the_whole_document_s_chunks_or_error(data, piece):
    assert streamed(data, 20, piece) == whole(data, 20)


def test_streaming_holds_a_window_not_the_document():
    sections = [f"## Part {n}\n\n{prose(30)}\n" for n in range(400)]
    source = "# Book\n\n" + "\n".join(sections)
    batches = [source.split("\n")[i : i + 20] for i in range(0, source.count("\n") + 1, 20)]
    doc = Doc("book", "book.md", source=lambda: iter(batches))
    held = []
    parts = []
    for part in rag_chunk._parts(doc, 180, []):
        held.append(len(doc.lines))
        parts.append(part)
    assert len(parts) == 400 and doc.base > 2000
    assert max(held) <= 80, max(held)  # a section is 5 lines; the document is 2,402


def test_streaming_cut_at_every_line_gives_the_whole_document_s_chunks():
    data = "\n\n".join(["# A", "## Limits", prose(40), *AWKWARD[1:-1], "# B", "## Limits", prose(20)]).encode()
    want = whole(data, 15)
    assert isinstance(want, list) and "d#b--limits" in [c["id"] for c in want]
    for piece in range(1, 400, 3):
        assert streamed(data, 15, piece) == want, piece


def test_a_later_section_qualifies_an_earlier_one_s_id():
    data = b"# A\n\n## Limits\n\nx.\n\n# B\n\n## Limits\n\ny.\n"
    assert [c["id"] for c in streamed(data, 180, 1)] == ["d#a--limits", "d#b--limits"]


def test_a_nul_byte_is_named_before_bytes_that_are_not_utf8_in_an_earlier_piece():
    assert streamed(b"ok\n\xff\n\n\x00\n", 20, 2) == "d.md:4: binary file (NUL byte), not markdown"


def test_a_block_longer_than_the_window_is_read_whole():
    fence = "```\n" + "\n".join(f"# line {n}" for n in range(5000)) + "\n```"
    data = f"# Top\n\n{fence}\n\n## After\n\nText.\n".encode()
    got = streamed(data, 180, 64)
    assert got == whole(data, 180)
    assert [c["id"] for c in got] == ["d#top", "d#after"] and got[0]["end_line"] == 5004


def test_an_error_late_in_a_streamed_file_writes_nothing(runner, tmp_path):
    big = tmp_path / "big.md"
    big.write_text("".join(f"## S{n}\n\n{prose(20)}\n\n" for n in range(300)) + "```\nopen\n")
    with mock.patch.object(markdown, "PIECE", 256):
        result = runner.invoke(main, [str(big)])
    assert (result.exit_code, result.stdout_bytes) == (1, b"")
    assert result.stderr == f"rag-chunk: {big}:{300 * 5 + 1}: code fence opened here is never closed\n"


# --------------------------------------------------------------------------- the real handbook


@pytest.mark.skipif(not SHARED.is_dir(), reason=f"{SHARED} is absent (it lies beside the repository, not in it)")
def test_runs_clean_on_eng_practices():
    records = list(rag_chunk.chunk_paths([str(SHARED)]))
    assert len(records) > 50
    assert len({r["id"] for r in records}) == len(records)
    by_path: dict[str, list[dict]] = {}
    for r in records:
        by_path.setdefault(r["path"], []).append(r)
    for path, recs in by_path.items():
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
        page = re.sub(r'<img alt="([^"]*)"[^>]*>', r"\1", text)  # the page as it shows: an image's alt text, its few tags
        page = html.unescape(re.sub(r"<!--.*?-->|<(?![a-z]+://)[^<>`]+>", " ", page))  # and comments out, its entities decoded
        page = re.sub(r"(?m)^(#+ .*?) \{#[^{}]+\}$", r"\1", page)  # and a heading's {#id}, a link's target only
        assert " ".join(" ".join(r["text"].split()) for r in recs) == " ".join(page.split())
    assert max(r["words"] for r in records) <= 180


# --------------------------------------------------------------------------- site-generator pages

ERB_PAGE = """---
title: How to store and query logs
review_in: 6 months
---

# <%= current_page.data.title %>

Use Splunk to store logs. <%= warning_text('Do not log secrets') %>

## Short-term storage {#short}

Keep them for 14 days.
"""


def test_template_heading_takes_the_front_matter_title():
    recs = chunks(ERB_PAGE, name="standards/logging")
    assert [r["id"] for r in recs] == ["standards/logging#how-to-store-and-query-logs", "standards/logging#short"]
    assert recs[0]["headings"] == ["How to store and query logs"]
    assert recs[1]["headings"] == ["How to store and query logs", "Short-term storage"]
    assert recs[0]["text"] == "# How to store and query logs\n\nUse Splunk to store logs. Do not log secrets"  # the page as it shows


def test_front_matter_title_heads_a_page_without_a_heading():
    recs = chunks("---\ntitle: Pair programming\n---\n\nTwo people, one screen.\n\n## When\n\nOften.\n", name="pair")
    assert [(r["id"], r["headings"]) for r in recs] == [
        ("pair#pair-programming", ["Pair programming"]),
        ("pair#when", ["Pair programming", "When"]),
    ]
    # without front matter the old ids stand
    assert [r["id"] for r in chunks("Two people.\n\n## When\n\nOften.\n", name="pair")] == ["pair#top", "pair#when"]


def test_a_page_with_its_own_title_keeps_it():
    recs = chunks("---\ntitle: Other\n---\n# Real title\n\nText.\n")
    assert recs[0]["headings"] == ["Real title"] and recs[0]["title"] == "Other"


def test_template_tags_leave_headings_and_a_bare_template_heading_is_named_by_the_file():
    recs = chunks("# {{ page.title }}\n\nText.\n\n## Setup {% raw %}\n\nMore.\n", name="guides/dns-hosting")
    assert [r["headings"] for r in recs] == [["dns hosting"], ["dns hosting", "Setup"]]
    assert [r["id"] for r in recs] == ["guides/dns-hosting#dns-hosting", "guides/dns-hosting#setup"]


@pytest.mark.skipif(not GDS_WAY.is_dir(), reason=f"{GDS_WAY} is absent (it lies beside the repository, not in it)")
def test_gds_way_ids_and_headings_read_like_the_pages():
    records = list(rag_chunk.chunk_paths([str(GDS_WAY)]))
    assert len(records) > 200 and len({r["id"] for r in records}) == len(records)
    for r in records:
        assert not any(mark in r["id"] for mark in ("current-page", "data-title")), r["id"]
        assert all("<%" not in h and "{{" not in h for h in r["headings"]), r["headings"]
        if r.get("title"):
            assert r["headings"][0] == r["title"], r["id"]


# --------------------------------------------------------------------------- the command


class TestCli:
    def test_directory(self, runner, tmp_path):
        (tmp_path / "sub").mkdir()
        (tmp_path / "sub" / "b.md").write_text("# B\n\nbee.\n")
        (tmp_path / "a.md").write_text(RUNBOOK)
        (tmp_path / "skip.txt").write_text("not markdown")
        result = runner.invoke(main, [str(tmp_path)])
        assert result.exit_code == 0, result.output
        got = parse(result.stdout_bytes)
        assert [r["doc"] for r in got] == ["a", "a", "a", "sub/b"]
        assert got[0]["schema"] == "chunk/1"

    def test_stdin_with_doc(self, runner):
        result = runner.invoke(main, ["--doc", "notes"], input=RUNBOOK)
        assert result.exit_code == 0
        assert parse(result.stdout_bytes)[0]["id"] == "notes#runbook-settlement-stall"

    def test_stdin_without_doc_is_usage_error(self, runner):
        result = runner.invoke(main, [], input=RUNBOOK)
        assert result.exit_code == 2
        assert "--doc" in result.stderr

    def test_not_utf8_names_file_and_line(self, runner, tmp_path):
        bad = tmp_path / "bad.md"
        bad.write_bytes(b"# T\n\nok\n\xff\xfe\n")
        result = runner.invoke(main, [str(bad)])
        assert result.exit_code == 1
        assert result.stderr == f"rag-chunk: {bad}:4: not UTF-8 (byte 0xff)\n"
        assert result.stdout_bytes == b""

    def test_binary(self, runner, tmp_path):
        bad = tmp_path / "bin.md"
        bad.write_bytes(b"\x89PNG\r\n\x00\x00")
        result = runner.invoke(main, [str(bad)])
        assert result.exit_code == 1
        assert result.stderr == f"rag-chunk: {bad}:2: binary file (NUL byte), not markdown\n"

    def test_missing_path(self, runner, tmp_path):
        result = runner.invoke(main, [str(tmp_path / "nope")])
        assert result.exit_code == 1
        assert result.stderr == f"rag-chunk: {tmp_path / 'nope'}: no such file or directory\n"

    def test_directory_without_markdown(self, runner, tmp_path):
        (tmp_path / "x.txt").write_text("x")
        result = runner.invoke(main, [str(tmp_path)])
        assert result.exit_code == 1
        assert (
            result.stderr
            == f"rag-chunk: {tmp_path}: no pages (*.md, *.markdown, *.mdx, *.md.erb) in this directory; skipped x.txt: not a page (.txt)\n"
        )

    def test_markdown_suffixes(self, runner, tmp_path):
        (tmp_path / "a.markdown").write_text("# A\n\nAlpha.\n")
        (tmp_path / "b.md").write_text("# B\n\nBeta.\n")
        (tmp_path / "c.txt").write_text("# C\n\nNot markdown.\n")
        result = runner.invoke(main, [str(tmp_path)])
        assert result.exit_code == 0, result.stderr
        assert [(r["doc"], r["path"]) for r in parse(result.stdout_bytes)] == [
            ("a", str(tmp_path / "a.markdown")),
            ("b", str(tmp_path / "b.md")),
        ]
        (tmp_path / "a.md").write_text("# A again\n")
        result = runner.invoke(main, [str(tmp_path)])
        assert (result.exit_code, result.stdout) == (1, "")
        assert result.stderr == f"rag-chunk: {tmp_path / 'a.md'}: a.markdown and a.md would both be document 'a'\n"

    def test_error_in_second_file_writes_nothing(self, runner, tmp_path):
        (tmp_path / "a.md").write_text(RUNBOOK)
        (tmp_path / "b.md").write_text("# B\n\n```\nopen\n")
        result = runner.invoke(main, [str(tmp_path)])
        assert result.exit_code == 1
        assert result.stdout_bytes == b""
        assert result.stderr == f"rag-chunk: {tmp_path / 'b.md'}:3: code fence opened here is never closed\n"

    def test_empty_document_gives_no_chunks(self, runner, tmp_path):
        (tmp_path / "e.md").write_text("\n\n")
        result = runner.invoke(main, [str(tmp_path / "e.md")])
        assert result.exit_code == 1
        assert result.stderr == "rag-chunk: no chunks: the input has no text\n"

    def test_bad_window_is_usage_error(self, runner):
        assert runner.invoke(main, ["--words", "0", "--doc", "x"], input="# a\n").exit_code == 2


def test_slugify():
    assert slugify("Platform errors, 500 range") == "platform-errors-500-range"
    assert slugify("Über Größe") == "über-größe"
    assert slugify("!!!") == "section"


@pytest.mark.parametrize("lead", ["Follow the following guidelines:", "**How long to wait:**"])
def test_a_lead_in_ending_in_a_colon_stays_with_its_list(lead):
    """Issue 39.3: a chunk boundary fell between "...with the following guidelines:" and the list that
    answers it. A lead-in that would end a chunk goes to the next one, with what it introduces; one in
    emphasis ("**How long to wait:**") as well (`ragline.text.leads_in`, the answer's test too)."""
    filler = " ".join(["Reviews keep the code healthy over time."] * 6)  # 42 words
    text = f"# Guide\n\n## Reviews\n\n{filler}\n\n{lead}\n\n- one step\n- two steps\n- three steps\n"
    parts = chunks(text, window=50)
    assert len(parts) == 2, [p["text"] for p in parts]
    assert lead in parts[1]["text"] and "- one step" in parts[1]["text"]
    assert lead not in parts[0]["text"]
