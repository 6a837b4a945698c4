"""ragline.markup and the pages of site generators: a chunk's text is the page as it shows, no markup in it.

The page forms of issue 31: a GOV.UK tech-docs page (`.html.md.erb`: front matter, ERB tags, inline
HTML), a Docusaurus page (`.mdx`: imports, exports, JSX components, expressions), a Jekyll page
(`.markdown`, front matter), a Hugo page (TOML front matter), and HTML blocks that render text. And
issue 39's Docusaurus pages: `.md` files that are MDX by their content (tests/fixtures/docusaurus).
"""

from __future__ import annotations

import re
from pathlib import Path
from unittest import mock

import pytest
from jsonl import parse

import rag_chunk
from rag_chunk import Doc, chunk_document, main
from ragline import markdown, markup

TECH_DOCS = """---
title: On-call and escalation
review_in: 6 months
---

<%= partial 'partials/site-banner' %>

# <%= current_page.data.title %>

You are paged through <a href="https://pagerduty.example" data-proofer-ignore>PagerDuty</a> within 15 minutes.

<%= warning_text('Never silence an alert without a ticket.') %>

## Handover

Every Monday at 10:00 in `#ops-handover`.
"""

MDX = """---
title: Deploying
---
import Tabs from '@theme/Tabs';
import {
  TabItem,
} from '@theme/TabItem';
export const owner = {team: 'platform'};

# Deploying a service

{/* TODO: rollback screenshots */}

<Tabs groupId="env" values={[{label: 'Staging', value: 'staging'}]}>
  <TabItem value="staging" label="Staging">
    Staging deploys run on every merge to `main`.
  </TabItem>
  <TabItem value="prod">

Production deploys need **two approvals**, {'always'}.

  </TabItem>
</Tabs>

Ask <Highlight color="#25c2a0">the release captain</Highlight> first.<br/>

```jsx
import Tabs from '@theme/Tabs';
<Tabs groupId="x">{props.code}</Tabs>
```
"""

DOCUSAURUS = Path(__file__).parent / "fixtures" / "docusaurus"
MESSAGING = DOCUSAURUS / "docs" / "apis" / "messaging.md"  # a Moodle-style developer page: imports, components, ids, admonitions

MARKUP = ("<%", "%>", "import {", "import Tabs", "export const", "data-proofer-ignore", "<a ", "</", "{/*", "{'", "<Tabs", "<br")


def test_a_tech_docs_page_reads_as_its_site_shows_it() -> None:
    recs = chunk_document(Doc("standards/on-call", "on-call.html.md.erb", TECH_DOCS))
    assert [(r["id"], r["headings"]) for r in recs] == [
        ("standards/on-call#on-call-and-escalation", ["On-call and escalation"]),
        ("standards/on-call#handover", ["On-call and escalation", "Handover"]),
    ]
    assert recs[0]["text"] == (
        "# On-call and escalation\n\n"  # the front matter's title heads the page, in its heading line too
        "You are paged through PagerDuty within 15 minutes.\n\n"
        "Never silence an alert without a ticket."
    )
    assert (recs[0]["start_line"], recs[0]["end_line"]) == (8, 12)  # the banner partial shows nothing and opens nothing
    assert not [m for r in recs for m in MARKUP if m in r["text"]]


def test_an_mdx_page_keeps_the_text_of_its_components_and_drops_the_rest() -> None:
    recs = chunk_document(Doc("docs/deploys", "deploys.mdx", MDX, mdx=True))
    assert [r["id"] for r in recs] == ["docs/deploys#deploying-a-service"]
    text = recs[0]["text"]
    assert text.startswith("# Deploying a service\n\nStaging deploys run on every merge to `main`.\n\n")
    assert "Production deploys need **two approvals**, always." in text
    assert "Ask the release captain first." in text
    prose, code = text.split("```jsx")
    assert not [m for m in MARKUP if m in prose]
    assert code == "\nimport Tabs from '@theme/Tabs';\n<Tabs groupId=\"x\">{props.code}</Tabs>\n```"  # code is code
    assert recs[0]["start_line"] == 10  # the imports and exports open nothing


def test_import_lines_are_their_own_block_only_in_mdx() -> None:
    kinds = [b.kind for b in markdown.scan(Doc("d", "d.mdx", "import X from 'x'\nexport const y = 1\n\nText.\n", mdx=True))]
    assert kinds == ["esm", "paragraph"]
    assert [b.kind for b in markdown.scan(Doc("d", "d.md", "import the data from the CSV export\n"))] == ["paragraph"]
    md = chunk_document(Doc("d", "d.md", "# Data\n\nimport the file {first}.\n"))  # braces in markdown are text
    assert md[0]["text"] == "# Data\n\nimport the file {first}."


def test_inline_html_is_its_text() -> None:
    assert markup.inline_html('See <a href="x" data-proofer-ignore>PagerDuty</a>.') == "See PagerDuty."
    assert markup.inline_html('A <img src="f.png" alt="flow chart"> and <kbd>Ctrl</kbd>+<kbd>C</kbd>') == "A flow chart and Ctrl+C"
    assert markup.inline_html("one<br>two <!-- a note --> three &mdash; &amp; &#39;x&#39;") == "one two  three — & 'x'"
    assert markup.inline_html("<script>alert(1)</script>kept <style>p{}</style>") == "kept "
    for text in ("wait <5 minutes", "a < b > c", "<https://x.example>", "<ops@x.example>", "\\<b>", "&nosuch"):
        assert markup.inline_html(text) == text  # not raw HTML, or no known character reference
    assert markup.inline_html('<Foo bar={1} {...rest}>x</Foo> {"y"} {z}', mdx=True) == "x y "


def test_code_stays_code_in_prose_items_and_quotes() -> None:
    item = "- Run `<div>` and <b>this</b>\n\n  ```html\n  <div>kept</div>\n  ```\n- &amp;"
    assert markup.shown("list_item", item) == "- Run `<div>` and this\n\n  ```html\n  <div>kept</div>\n  ```\n- &"
    assert markup.shown("quote", "> ```\n> <b>code</b>\n> ```\n> <b>prose</b>") == "> ```\n> <b>code</b>\n> ```\n> prose"
    assert markup.shown("fence", "```\n<b>\n```") == "```\n<b>\n```" and markup.shown("code", "    <b>") == "    <b>"


def test_an_html_block_is_the_text_it_renders() -> None:
    table = "<table>\n  <tr>\n   <td>SLOs\n   </td>\n   <td>Action | next\n   </td>\n  </tr>\n  <tr><td>Met<td>Tighten</tr>\n</table>"
    assert markup.html_block(table) == "| SLOs | Action \\| next |\n| --- | --- |\n| Met | Tighten |"
    assert markup.html_block('<a id="first"></a> <!-- Keep previous permalink -->') == ""
    assert markup.html_block("<details>\n<summary>Why</summary>\nBecause &mdash; so.\n</details>") == "Why\n\nBecause — so."
    assert markup.html_block("<ul>\n  <li><a href='#a'>One</a></li>\n  <li>Two</li>\n</ul>") == "- One\n- Two"
    assert markup.html_block("<pre>\n  x = <b>1</b>\n</pre>") == "```\n  x = 1\n```"
    assert markup.html_block("<div>\n  <p>Hello</p><script>evil()</script>\n</div>") == "Hello"
    assert markup.html_block('<p><img src="f.png" alt="The flow"><br>Next</p>') == "The flow\nNext"
    # a table in a cell (a layout table): its words join the cell's; it raised an IndexError once
    nested = "<table><tr><td>A</td><td><table><tr><td>in</td><td>ner</td></tr></table> after</td></tr></table>"
    assert markup.html_block(nested) == "| A | in ner after |\n| --- | --- |"
    assert markup.html_block("<table><td>x<table></table>") == "| x |\n| --- |"  # one never closed
    assert markup.html_block("<table><table><td>a") == "| a |\n| --- |"  # outside a cell a table starts anew, as browsers read it


def test_an_html_block_of_many_tags_is_read_in_one_pass() -> None:
    """Each block tag ended what was written with its line breaks by joining all of it: a page of 50,000 tags took
    time quadratic in them. Checked by what comes out, not by a clock."""
    assert markup.html_block("<div>" + "<p>x</p>" * 50_000 + "</div>") == "\n\n".join(["x"] * 50_000)


def test_a_sentence_cut_never_falls_inside_a_tag() -> None:
    """An over-long paragraph is cut at sentences; a cut inside a template tag would leave its halves as markup."""
    tag = "<%= warning_text('Stop. Then ask. Then wait.') %>"
    text = "# T\n\n" + " ".join(["Words here."] * 6) + f" {tag} " + " ".join(["More words."] * 6) + "\n"
    recs = chunk_document(Doc("d", "d.md", text), window=10)
    assert not [r["text"] for r in recs if "<%" in r["text"] or "%>" in r["text"]]
    assert any("Stop. Then ask. Then wait." in r["text"] for r in recs)


def test_hugo_toml_front_matter_is_read_not_chunked(runner, tmp_path: Path) -> None:
    (tmp_path / "post.md").write_text('+++\ntitle = "Release train"\ndraft = false\n+++\n\nWe ship on Tuesdays.\n')
    result = runner.invoke(main, [str(tmp_path / "post.md")])
    assert result.exit_code == 0, result.stderr
    (rec,) = parse(result.stdout_bytes)
    assert (rec["id"], rec["headings"], rec["text"], rec["title"]) == (
        "post#release-train",
        ["Release train"],
        "We ship on Tuesdays.",
        "Release train",
    )
    (tmp_path / "bad.md").write_text('+++\ntitle = "unclosed\n+++\n\nText.\n')
    result = runner.invoke(main, [str(tmp_path / "bad.md")])
    assert (result.exit_code, result.stdout) == (1, "")
    assert result.stderr.startswith(f"rag-chunk: {tmp_path / 'bad.md'}:") and "front matter is not valid TOML" in result.stderr


def test_the_folder_of_issue_31_chunks_without_markup(runner, tmp_path: Path) -> None:
    (tmp_path / "standards").mkdir()
    (tmp_path / "docs").mkdir()
    (tmp_path / "standards" / "on-call.html.md.erb").write_text(TECH_DOCS)
    (tmp_path / "docs" / "deploys.mdx").write_text(MDX)
    (tmp_path / "docs" / "backups.markdown").write_text("---\ntitle: Backups\n---\n\nBackups run at 02:00 &mdash; kept 35 days.\n")
    result = runner.invoke(main, [str(tmp_path)])
    assert result.exit_code == 0, result.stderr
    recs = parse(result.stdout_bytes)
    assert [r["doc"] for r in recs] == ["docs/backups", "docs/deploys", "standards/on-call", "standards/on-call"]
    assert recs[0]["text"] == "Backups run at 02:00 — kept 35 days."
    prose = [r["text"].split("```")[0] for r in recs]
    assert not [m for t in prose for m in MARKUP if m in t]
    assert rag_chunk.page_type("deploys.mdx") == ".mdx"


def test_deep_toml_front_matter_is_one_line_like_yaml(runner, tmp_path: Path) -> None:
    """`v = [[[...]]]` 100,000 deep was a RecursionError traceback (issue 40, item 10). That is now
    past FRONT_MATTER_MAX (read without it); 30,000 deep is under it, and parsed."""
    depth = 30_000
    assert 2 * depth < rag_chunk.FRONT_MATTER_MAX
    (tmp_path / "deep.md").write_text("+++\nv = " + "[" * depth + "]" * depth + "\n+++\n\nText.\n")
    result = runner.invoke(main, [str(tmp_path / "deep.md")])
    assert isinstance(result.exception, SystemExit), result.exception
    assert (result.exit_code, result.stdout) == (1, "")
    assert result.stderr.splitlines() == [
        f"rag-chunk: {tmp_path / 'deep.md'}:1: front matter is not valid TOML: nested too deep (maximum recursion depth exceeded)"
    ]


def test_front_matter_past_its_bound_is_left_out_and_named(runner, tmp_path: Path) -> None:
    """YAML front matter cost ~230 times its size (3.2 MB: 136 s, 745 MB; issue 40, item 4): past
    FRONT_MATTER_MAX the page is read without it, and one line says so."""
    lines = [f"k{i}: v" for i in range(rag_chunk.FRONT_MATTER_MAX // 6)]
    page = tmp_path / "big.md"
    page.write_text("---\ntitle: Big\n" + "\n".join(lines) + "\n---\n\nThe body is read.\n")
    result = runner.invoke(main, [str(page)])
    assert result.exit_code == 0, result.stderr
    (rec,) = parse(result.stdout_bytes)
    assert rec["text"] == "The body is read." and "title" not in rec
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"rag-chunk: {page}: front matter of ") and line.endswith(
        f"is over {rag_chunk.FRONT_MATTER_MAX:,}: read without it"
    )
    page.write_text("---\ntitle: Small\n" + "\n".join(lines[:100]) + "\n---\n\nThe body is read.\n")  # under it: read as before
    result = runner.invoke(main, [str(page)])
    assert (result.exit_code, result.stderr) == (0, "")
    assert parse(result.stdout_bytes)[0]["title"] == "Small"


def test_a_front_matter_title_is_one_bounded_line(runner, tmp_path: Path) -> None:
    """A 2 MB title was copied into each of 50 chunks (issue 40, item 4)."""
    title = "\n".join(["word " * 20] * 50)  # 5,000 characters over 50 lines
    block = "title: |\n" + "".join(f"  {line}\n" for line in title.splitlines())
    (tmp_path / "t.md").write_text("---\n" + block + "---\n\n" + "\n\n".join(f"# H{i}\n\nText {i}." for i in range(5)) + "\n")
    result = runner.invoke(main, [str(tmp_path / "t.md")])
    assert result.exit_code == 0, result.stderr
    recs = parse(result.stdout_bytes)
    assert len(recs) == 5
    for rec in recs:
        assert "\n" not in rec["title"] and len(rec["title"]) == rag_chunk.TITLE_MAX
        assert rec["title"].startswith("word word") and rec["title"].endswith("…")
    assert rag_chunk.one_title("  Release\n  train  ") == "Release train"


def test_yaml_front_matter_is_read_with_the_c_loader_where_present(tmp_path: Path) -> None:
    yaml = pytest.importorskip("yaml")
    if not yaml.__with_libyaml__:
        pytest.skip("PyYAML built without libyaml: the pure-Python loader is the one there is")
    with mock.patch("yaml.load", wraps=yaml.load) as load:
        recs = chunk_document(Doc("d", "d.md", "---\ntitle: T\n---\n\nText.\n"))
    assert recs[0]["title"] == "T"
    assert [c.kwargs.get("Loader", c.args[1] if len(c.args) > 1 else None) for c in load.call_args_list] == [yaml.CSafeLoader]


# --------------------------------------------------------------------------- Docusaurus .md pages (issue 39)

MDX_MARKUP = ("import ", "export const", "<Since", "<ValidExample", "</ValidExample", "<Tabs", "<TabItem", "{/*", "{SendExample}", "={")


def _prose(text: str) -> str:
    """A chunk's text without its fences: code is code, whatever it holds."""
    return re.sub(r"(?ms)^```.*?^```$", "", text)


def test_a_docusaurus_md_page_is_read_as_mdx_by_its_content() -> None:
    recs = chunk_document(Doc("docs/apis/messaging", str(MESSAGING), MESSAGING.read_text()))
    texts = [r["text"] for r in recs]
    assert texts[0] == "The Message API lets a plugin send notifications to users through every output the site has enabled."
    assert not [(m, t) for t in texts for m in MDX_MARKUP if m in _prose(t)]
    assert texts[-1].endswith(  # the text inside the components stays
        "The popup output shows the message in the navigation bar.\n\n"
        "The email output sends it to the user's address, at most once an hour for a digest."
    )
    assert "// {/* not an MDX comment: this is PHP */}" in "".join(texts)  # code is code
    assert recs[0]["start_line"] == 18  # the imports, the exports and the component open nothing
    plain = chunk_document(Doc("d", "d.md", "# Data\n\nimport the file {first} and <br> the rest.\n"))
    assert plain[0]["text"] == "# Data\n\nimport the file {first} and   the rest."  # no sign: markdown, its braces text


def test_what_says_a_page_is_mdx() -> None:
    signs = {
        "import Tabs from '@theme/Tabs';": (1, "an import statement"),
        "import {\n  TabItem,\n} from '@theme/TabItem';": (1, "an import statement"),
        "import * as R from 'r'": (1, "an import statement"),
        "import './styles.css';": (1, "an import statement"),
        "Intro.\n\nexport const meta = {a: 1};": (3, "an export statement"),
        "Text {/* a comment */} here.": (1, "an MDX comment"),
        'Since <Since versions={["4.5"]} issueNumber="MDL-1" /> then': (1, "a JSX component"),
        "<Tabs>\n  <TabItem value='a'>x</TabItem>\n</Tabs>": (1, "a JSX component"),
        "A <Highlight color='red'>word</Highlight>.": (1, "a JSX component"),
        "A <div style={{color: 'red'}}>word</div>.": (1, "a JSX component"),
        "---\ntitle: <Foo />\n": (2, "a JSX component"),  # a rule never closed is no front matter: its lines count
    }
    for text, sign in signs.items():
        assert markdown.mdx_evidence(text.split("\n")) == sign, text
    for text in (
        "import the data from the CSV export\n\nimport hashlib",  # words, and Python
        "Set it:\n\nexport PATH=$HOME/bin:$PATH",  # a shell's export
        "Text\nimport X from 'x'",  # no statement inside a paragraph
        "```js\nimport X from 'x';\n<Foo a={1} />\n{/* c */}\n```",  # code
        "- item\n\n  ~~~\n  <Tabs>\n  ~~~",  # code in a list item
        "Run `<Foo bar={1} />` and `{/* x */}`.",  # code spans
        "## Heading {#id}\n\nUse {placeholder}, <br>, <details open>, <a href='x'>, <MR URL> and List<String>.",
        "---\ndescription: Use <Since a={1} />\n---\n\nText.",  # front matter says nothing
    ):
        assert markdown.mdx_evidence(text.split("\n")) is None, text


def test_list_names_the_pages_read_as_mdx(runner, tmp_path: Path) -> None:
    (tmp_path / "plain.md").write_text("# Plain\n\nimport the data {first}.\n")
    (tmp_path / "page.mdx").write_text("# Typed\n\nAn `.mdx` page is MDX by its type.\n")
    (tmp_path / "apis").mkdir()
    (tmp_path / "apis" / "messaging.md").write_text(MESSAGING.read_text())
    (tmp_path / "latin1.md").write_bytes(b"# Caf\xe9\n")  # does not read: chunking says so, --list lists it
    result = runner.invoke(main, ["--list", str(tmp_path)])
    assert result.exit_code == 0, result.stderr
    assert result.stdout.splitlines() == [str(tmp_path / p) for p in ("apis/messaging.md", "latin1.md", "page.mdx", "plain.md")]
    assert result.stderr.splitlines() == [f"rag-chunk: {tmp_path / 'apis' / 'messaging.md'}: read as MDX (line 9: an import statement)"]


def test_mdx_by_content_stays_linear_on_pathological_pages() -> None:
    """100,000 nested components, each with an attribute, and an MDX comment never closed, in a `.md` page:
    one pass each, checked by what comes out, not by a clock."""
    n = 100_000
    page = (
        "# Deep\n\n"
        + '<Box kind="a">' * n
        + "kept words{/* gone */}"
        + "</Box>" * n
        + "\n\n## Open\n\nText {/* never closed\n\nMore text.\n\n## Half\n\n"
        + '<Box kind="a ' * n
        + "\n"
    )
    assert markdown.mdx_evidence(page.split("\n")) == (3, "an MDX comment")
    recs = chunk_document(Doc("d", "d.md", page))
    assert [r["headings"] for r in recs[:2]] == [["Deep"], ["Deep", "Open"]]
    assert recs[0]["text"] == "# Deep\n\nkept words"
    assert recs[1]["text"] == "## Open\n\nText {/* never closed\n\nMore text."  # an expression never closed is text
    assert sum(r["text"].count("<Box") for r in recs) == n  # tags never closed are text
    # an admonition's title with 100,000 spaces in it, a title's bracket never closed, a heading id never closed
    page = ":::note Title" + " " * n + "end\n\nText.\n\n:::tip[" + "a" * n + "\n\n## H {#h" + " y" * n + "\n"
    recs = chunk_document(Doc("d", "d.md", page))
    assert recs[0]["text"].startswith("Note: Title" + " " * n + "end\n\nText.\n\n:::tip[aaa")
    assert recs[-1]["headings"][-1].startswith("H {#h y y") and recs[-1]["id"].startswith("d#h-h-y-y")


def test_a_docusaurus_folder_chunks_without_its_markup(runner) -> None:
    """Issue 39's done-when: a Docusaurus `.md` page with imports, expressions, self-closing components,
    `{/* */}` comments, heading ids and admonitions chunks with none of that markup in its text,
    heading path or id, keeping the text inside components and the admonition's title."""
    result = runner.invoke(main, [str(DOCUSAURUS)])
    assert (result.exit_code, result.stderr) == (0, ""), result.stderr
    recs = parse(result.stdout_bytes)
    assert [(r["id"], r["headings"]) for r in recs] == [
        ("docs/apis/messaging#message-api", ["Message API"]),
        ("docs/apis/messaging#sending", ["Message API", "Sending a message"]),
        ("docs/apis/messaging#providers", ["Message API", "Message providers"]),
        ("docs/apis/messaging#outputs", ["Message API", "Outputs"]),
    ]
    markup_left = [*MDX_MARKUP, ":::", "{#", "[E-mail", "{"]
    assert not [(m, r["id"]) for r in recs for m in markup_left if m in _prose(r["text"]) or m in " ".join(r["headings"])]
    text = "\n\n".join(r["text"] for r in recs)
    for kept in ("Info: E-mail on the QA site", "Tip: Capability checks", "The popup output shows", "The email output sends"):
        assert kept in text


def test_a_heading_id_of_every_form_is_out_of_the_text_the_path_and_the_id() -> None:
    """`## Rewards {/* #rewards */}` kept its id comment in 649 of 765 heading paths of a Docusaurus
    site, and its chunk id repeated the heading (`rewards-rewards`)."""
    recs = chunk_document(Doc("docs/apis/messaging", str(MESSAGING), MESSAGING.read_text()))
    assert [(r["id"], r["headings"], r["text"].split("\n")[0]) for r in recs[1:3]] == [
        ("docs/apis/messaging#sending", ["Message API", "Sending a message"], "## Sending a message"),
        ("docs/apis/messaging#providers", ["Message API", "Message providers"], "## Message providers"),
    ]
    for raw, anchor in (
        ("Rewards {/* #rewards */}", "rewards"),
        ("Rewards {/*#rewards*/}", "rewards"),
        ("Why? {#why}", "why"),
        ("Wide {#wide .full-width}", "wide"),
        ("Escaped \\{#escaped\\}", "escaped"),
    ):
        assert markdown._heading_text(raw) == (raw.split(" ")[0], anchor), raw
    assert markdown._heading_text("Braces {x}") == ("Braces {x}", None)
    page = '# T\n\n## Since 4.5 <Since versions={["4.5"]} /> {/* TODO */}\n\nText.\n\nSetext {#setext}\n---\n\nMore.\n\n## Closed {#closed} ##\n\nEnd.\n'
    recs = chunk_document(Doc("d", "d.mdx", page, mdx=True))
    assert [(r["id"], r["headings"][-1], r["text"]) for r in recs] == [
        ("d#since-4-5", "Since 4.5", "# T\n\n## Since 4.5\n\nText."),  # a JSX tag and a comment: out of its path and slug
        ("d#setext", "Setext", "Setext\n---\n\nMore."),
        ("d#closed", "Closed", "## Closed ##\n\nEnd."),
    ]


# --------------------------------------------------------------------------- kramdown and MkDocs attribute lists


def _seen(page: str, window: int = rag_chunk.DEFAULT_WORDS) -> list[tuple[str, list[str], str]]:
    return [(r["id"], r["headings"], r["text"]) for r in chunk_document(Doc("d", "d.md", page), window)]


def test_braces_that_are_text_or_code_stay_as_they_are() -> None:
    """A first reading of attribute lists (reverted) deleted these: Svelte's `{:else}` and `{#each items}`, format
    specs, an Elixir tuple, placeholders, an escaped brace; and a line of code in a list item or a quote, leaving a
    stray `>`. An attribute list is read narrowly, and code (fenced, indented, a span) is code wherever it stands."""
    page = (
        "# T\n\n{:else}\n\n{:.2f}\n\n{:>10}\n\n{:ok, pid}\n\n{x=1, y=2}\n\n{#each items}\n\n\\{.lead}\n\n{:toc-x}\n\n"
        'Use {name} here, f"{x}", {x=1, y=2}, a{: .x}, [a](b) {: .spaced}, [a](b){x}, [a](b){:else}, [a](b)\\{.lead}.\n\n'
        "```\n{: .a}\n[a](b){: .x}\n```\n\n    {: .b}\n    [a](b){: .x}\n\n"
        "- an item\n\n      {: .c}\n      [a](b){: .x}\n\n-     [a](b){: .code-after-its-marker}\n\n"
        "> A quote.\n>\n>     {: .d}\n>     [a](b){: .x}\n\n"
        "1. A step:\n\n   ~~~\n   {: .e}\n   ~~~\n\n> ~~~\n> {: .f}\n> ~~~\n\n"
        "Use `[a](b){: .x}` and `{: .y}`, and\n`a span\n{: .z}\nover lines`.\n"
    )
    (rec,) = chunk_document(Doc("d", "d.md", page))
    assert rec["text"] == page.strip()
    # escaped in a heading, as before: its text keeps the escape, its path and id read it
    assert _seen("## Escaped \\{.lead}\n\nText.\n") == [("d#escaped-lead", ["Escaped {.lead}"], "## Escaped \\{.lead}\n\nText.")]


def test_a_headings_attribute_list_leaves_its_title_and_its_id_names_the_chunk() -> None:
    """`## Install {: #install .important }` (kramdown, MkDocs) kept its braces in its heading path and its chunk id
    (`install-install-important`). Its id is the anchor wherever it stands in the list: `{: .x #id}` lost it once."""
    for raw, title, anchor in (
        ("Setup {: #setup .cls }", "Setup", "setup"),
        ("Setup {: .cls #setup}", "Setup", "setup"),  # the id after a class
        ("Setup {.cls #setup}", "Setup", "setup"),  # MkDocs' attr_list, no colon
        ("Setup { #setup }", "Setup", "setup"),
        ("Setup {: .cls}", "Setup", None),
        ("Setup {: #first .b #last}", "Setup", "last"),  # of two ids, the last, as kramdown and Python-Markdown read them
        ('Setup {: title="#x" .y}', "Setup", None),  # a hash in a value names no id
        ("Setup{.cls}", "Setup{.cls}", None),  # an attribute list follows a space
        ("Setup ## {#setup}", "Setup", "setup"),  # the closing hashes before it, as kramdown reads them
        ("Setup ## {: .cls}", "Setup", None),
        ("C# {#c-sharp}", "C#", "c-sharp"),  # a hash after no space is the title's
        ('See [Docs](x){:target="_blank"}', "See [Docs](x)", None),  # a span's attribute list
    ):
        assert markdown._heading_text(raw, atx=True) == (title, anchor), raw
    page = "# Guide\n\n## Setup {: .cls #setup}\n\nRun it.\n\n## Title ## {: .wide}\n\nMore.\n\nSetext {: .lead #setext-id}\n---\n\nEnd.\n"
    assert _seen(page) == [
        ("d#setup", ["Guide", "Setup"], "# Guide\n\n## Setup\n\nRun it."),
        ("d#title", ["Guide", "Title"], "## Title ##\n\nMore."),
        ("d#setext-id", ["Guide", "Setext"], "Setext\n---\n\nEnd."),
    ]


def test_a_blocks_attribute_line_shows_nothing() -> None:
    """kramdown and MkDocs put a block's attributes on a line of its own (`{: .lead }` under a paragraph,
    `{: .table-striped}` under a table) and define them (`{:refdef: .cls}`, `{::options ... /}`): the site shows
    none of it, nor a comment's body; `{::nomarkdown}`'s body shows as it is."""
    page = (
        "# T\n\nRun the installer.\n{: .lead }\nThen log in.\n\n{: .note}\nA note.\n\n"
        "| Rule | Why |\n|---|---|\n| Small | easy |\n{: .table-striped}\n\n"
        '- an item\n  {.item data-x="1"}\n- another\n\n    {: .in-the-item}\n\n  its second paragraph\n'
        "  {::comment}\n  a draft\n  {:/comment}\n\n"
        "> Quoted.\n> {: .aside}\n\n> Quoted again.\n>\n> {: .aside}\n\n"
        '{:refdef: .cls}\n\n{::options parse_block_html="true" /}\n\n'
        "{::comment}\nA draft.\n\n# Not a heading\n{:/}\n\n{::nomarkdown}\n<b>Raw</b> HTML.\n{:/nomarkdown}\n\nEnd.\n"
    )
    assert _seen(page) == [
        (
            "d#t",
            ["T"],
            "# T\n\nRun the installer.\nThen log in.\n\nA note.\n\n| Rule | Why |\n|---|---|\n| Small | easy |\n\n"
            "- an item\n- another\n\n  its second paragraph\n\n> Quoted.\n\n> Quoted again.\n\nRaw HTML.\n\nEnd.",
        )
    ]
    assert [b.kind for b in markdown.scan(Doc("d", "d.md", "{::comment}\n\n# No\n{:/comment}\n{::comment}\nNever closed.\n"))] == [
        "comment",
        "paragraph",  # a comment never closed is text (`test_a_kramdown_comment_closes_where_kramdown_closes_it`)
    ]


def test_a_kramdown_comment_closes_where_kramdown_closes_it() -> None:
    """kramdown's comment ends at the first line that is its closing tag indented three spaces at most: not `> {:/comment}`
    nor four spaces (those lines are the comment's). One never closed is text, its opening tag too (kramdown warns and
    shows it; it was dropped), in a list item too; and a closing tag that closes nothing is text."""
    page = (
        "# T\n\n{::comment}\nhidden\n> {:/comment}\n    {:/comment}\n   {:/comment}\n\nShown.\n\n{:/comment}\n\n"
        "- An item.\n  {::comment}\n  not closed in the item\n\n{::comment}\nnever closed\n"
    )
    assert _seen(page) == [
        ("d#t", ["T"], "# T\n\nShown.\n\n{:/comment}\n\n- An item.\n  {::comment}\n  not closed in the item\n\n{::comment}\nnever closed")
    ]


def test_an_id_straight_after_a_span_is_the_headings() -> None:
    """`## [API](/api){#api-ref}` was `d#api-ref` before attribute lists were read, then `d#api`: its id was read as the
    link's attribute list. A heading's id is read before its spans' lists (`markdown._heading_text`)."""
    page = (
        "## [API](/api){#api-ref}\n\nA.\n\n## `useState`{#use-state}\n\nB.\n\n## *Setup*{#install}\n\nC.\n\n"
        "## [Docs](x){: .ext} {: #docs-id}\n\nD.\n"
    )
    assert _seen(page) == [
        ("d#api-ref", ["API"], "## [API](/api)\n\nA."),
        ("d#use-state", ["useState"], "## `useState`\n\nB."),
        ("d#install", ["Setup"], "## *Setup*\n\nC."),
        ("d#docs-id", ["Docs"], "## [Docs](x)\n\nD."),
    ]


def test_a_format_spec_is_text_not_an_id() -> None:
    """`{:#x}` (Python's hex with its prefix), `{:#o}`, `{:#b}`, `{:#X}` read as attribute lists naming an id: the line was
    dropped, and `## Alternate form {:#o}` was `d#o`. An id of one character is none, and its list is text."""
    page = "# T\n\nHex with a prefix:\n\n{:#x}\n\nprints 0xff; and\n{:#o}\n{:#b}\n{:#X}\n\n## Alternate form {:#o}\n\nText [a](b){#x}.\n"
    assert _seen(page) == [
        ("d#t", ["T"], "# T\n\nHex with a prefix:\n\n{:#x}\n\nprints 0xff; and\n{:#o}\n{:#b}\n{:#X}"),
        ("d#alternate-form-o", ["T", "Alternate form {:#o}"], "## Alternate form {:#o}\n\nText [a](b){#x}."),
    ]
    assert markup.attribute_id("{: #ab .c}") == "ab" and markup.attribute_id("{: #a .c}") is None


def test_an_icons_list_and_an_id_with_a_colon_are_no_text() -> None:
    """MkDocs Material's `:material-clock-fast:{ .lg .middle }` (attr_list follows any inline element, an emoji
    shortcode too) and ids with a colon (kramdown's `#[A-Za-z][\\w:-]*`, pandoc-crossref's `#sec:intro`, `#fig:chart`)
    were left in: `## Intro { #sec:intro }` had the path `Intro { #sec:intro }`. A class or an id still begins with a
    letter (`{ .5em }` is text)."""
    page = (
        "# T\n\n:material-clock-fast:{ .lg .middle } Fast, ![Chart](c.png){ #fig:chart width=50% } and a:{ .5em }.\n\n"
        "## Intro { #sec:intro }\n\nText.\n\n## Method {: .x #sec:method}\n\nMore.\n"
    )
    assert _seen(page) == [
        ("d#t", ["T"], "# T\n\n:material-clock-fast: Fast, ![Chart](c.png) and a:{ .5em }."),
        ("d#sec:intro", ["T", "Intro"], "## Intro\n\nText."),
        ("d#sec:method", ["T", "Method"], "## Method\n\nMore."),
    ]


def test_a_list_without_its_colon_is_markup_only_at_a_blocks_end() -> None:
    """Python-Markdown reads `{.cls}` (no colon; kramdown needs `{:`) on a line of its own only as the last line of a
    block with text before it, and a list of keys alone names nothing a line stands for: `$$\\n{x=1}\\n$$` lost its
    middle line, `Set\\n{a=1 b=2}\\nfirst.` too. A list under a heading is a paragraph of its own there: text."""
    page = (
        "# T\n\n$$\n{x=1}\n$$\n\nSet\n{a=1 b=2}\nfirst.\n\nSet\n{.a}\nsecond.\n\n{.lead}\nThird.\n\n{#alone}\n\n"
        "A paragraph\n{.wide #para}\n\nKeys only\n{width=300}\n\n- an item\n  {.item}\n\n> Quoted.\n> {.aside}\n\n"
        "## Sub\n{.under-a-heading}\n\nText.\n"
    )
    assert _seen(page) == [
        (
            "d#t",
            ["T"],
            "# T\n\n$$\n{x=1}\n$$\n\nSet\n{a=1 b=2}\nfirst.\n\nSet\n{.a}\nsecond.\n\n{.lead}\nThird.\n\n{#alone}\n\n"
            "A paragraph\n\nKeys only\n{width=300}\n\n- an item\n\n> Quoted.",
        ),
        ("d#sub", ["T", "Sub"], "## Sub\n{.under-a-heading}\n\nText."),
    ]


def test_kramdowns_table_of_contents_is_no_text() -> None:
    """`* TOC` then `{:toc}` is the list kramdown replaces with the page's table of contents: neither line is text.
    A `TOC` item without it is an item."""
    page = "# T\n\n* TOC\n{:toc}\n\nIntro.\n\n- TOC\n{: toc}\n\n1. TOC\n{:toc}\n\n* TOC\n\n1. TOC\n{: .toc}\n\nEnd.\n"
    assert _seen(page) == [("d#t", ["T"], "# T\n\nIntro.\n\n* TOC\n\n1. TOC\n\nEnd.")]  # `.toc` is a class
    # under a quote's `>` it is the quote's, not the item's: `attribute_line` and `names_toc` read a line alike
    assert _seen("# T\n\n* TOC\n> {:toc}\n\nText.\n") == [("d#t", ["T"], "# T\n\n* TOC\n\nText.")]
    lines = ("{:toc}", "   {: toc}", "    {:toc}", "> {:toc}", "\t{:toc}", "{:toc: .x}", "{: .toc}")
    assert [line for line in lines if markup.names_toc(line)] == ["{:toc}", "   {: toc}"]


def test_a_spans_attribute_list_is_no_text() -> None:
    """`[Docs](https://x){:target="_blank"}`, `![a](b.png){ width="300" }`, `[Go](x){ .md-button }`: an attribute
    list straight after a link, an image, emphasis or code is markup; in a code span it is code."""
    page = (
        '# T\n\nSee [Docs](https://x){:target="_blank"}, ![a](b.png){ width="300" }, [Go](x){ .md-button }, '
        "*em*{: .x}, _u_{: .y}, `c`{: .z}, [r]{:.q} and [w](v){width=300}.\n\n"
        "| Link | Code |\n|---|---|\n| [x](y){: .k} | `[x](y){: .k}` |\n\n- [Go](x){ .md-button } now\n"
    )
    assert _seen(page) == [
        (
            "d#t",
            ["T"],
            "# T\n\nSee [Docs](https://x), ![a](b.png), [Go](x), *em*, _u_, `c`, [r] and [w](v).\n\n"
            "| Link | Code |\n|---|---|\n| [x](y) | `[x](y){: .k}` |\n\n- [Go](x) now",
        )
    ]
    assert _seen('# [Docs](x){:target="_blank"} and `c`{: .z}\n\nText.\n')[0][:2] == ("d#docs-and-c", ["Docs and c"])


def test_braces_after_a_span_that_are_math_or_code_stay() -> None:
    """A list without the colon after anything but a link or an image names a class or an id: a formula's subscript
    (`$\\sum_{i=1}$`) and `1:{x=2}` are text, in a heading too. Code written as HTML (`<code>`, a `<pre>` in a list item)
    is code: no attribute list is read in it."""
    page = (
        "# Loss $\\sum_{i=1}^n x_i$\n\nThe mean is $\\frac{1}{n}\\sum_{k=1}^{n} y_k$, ratio 1:{x=2}; *em*{.x} and `c`{ #cc }.\n\n"
        "Run <code>init(){debug=true}</code> or <kbd>g(){: .k}</kbd> first.\n\n- Example:\n\n  <pre>\n  f(){a=1}\n  {: .c}\n  </pre>\n"
    )
    (cid, path, text), *_ = _seen(page)
    assert (cid, path) == ("d#loss-sum--i-1-n-x-i", ["Loss $\\sum_{i=1}^n x_i$"])
    assert "$\\frac{1}{n}\\sum_{k=1}^{n} y_k$, ratio 1:{x=2}; *em* and `c`." in text
    assert "Run init(){debug=true} or g(){: .k} first." in text
    assert "  f(){a=1}\n  {: .c}" in text  # a <pre> element's lines, in a list item
    assert _seen("# Run <code>g(){: .k}</code> now\n\nText.\n")[0][:2] == ("d#run-g-k-now", ["Run g(){: .k} now"])
    assert markup.html_code("<code>a</CODE> <pre>b <kbd>c</kbd>") == [(0, 14), (22, 34)]  # an opening tag left open: text
    assert markup.html_code("<code>a <code>b</code>") == [(0, 22)]  # from the first opening tag


def test_attribute_lists_stay_linear_on_pathological_pages() -> None:
    """Lines no attribute list closes, or that hold fifty thousand: one pass each, checked by what comes out, not
    by a clock (the reverted reading took 14.4 s on the first: a pattern for closing hashes backtracked)."""
    n = 50_000
    assert _seen("Title" + " " * n + "end {.lead}\n=====\n\nText.\n") == [
        ("d#title-end", ["Title end"], "Title" + " " * n + "end\n=====\n\nText.")
    ]
    for line, shows in (
        ("{:" * n, "{:" * n),
        ("{: .a" * n, "{: .a" * n),
        ("){: .a" * n, "){: .a" * n),
        ('{: a="' * n, '{: a="' * n),
        ("{: .a}" * n, "{: .a}" * n),
        (":{ .a" * n, ":{ .a" * n),  # after a shortcode's colon, none closed
        ("{ #a" + "a:" * n, "{ #a" + "a:" * n),  # an id of colons, never closed
        ("`){: .a}" * n, "`){: .a}`)" * (n // 2)),  # every other one in a code span, the others after a `)`
    ):
        assert _seen(f"# T\n\n{line}\n\n- {line}\n\n> {line}\n", 10 * n)[0][2] == f"# T\n\n{shows}\n\n- {shows}\n\n> {shows}", line[:8]
    page = "# T\n\n" + "{::comment}\n\n" * n + "Text."  # none closed: each is text
    assert _seen(page + "\n", 10 * n) == [("d#t", ["T"], page)]


def test_an_admonition_loses_its_fences_and_keeps_its_title() -> None:
    """`:::info[E-mail on the QA site]` was quoted as an answer sentence (issue 39, item 2)."""
    recs = chunk_document(Doc("docs/apis/messaging", str(MESSAGING), MESSAGING.read_text()))
    assert recs[1]["text"].endswith(
        "`message_send()`.\n\nInfo: E-mail on the QA site\n\nThe QA site sends no e-mail: messages are written to the site's log instead."
    )
    assert "Tip: Capability checks\n\nA provider can name" in recs[2]["text"]
    assert "Note:\n\nProviders are cached." in recs[2]["text"]
    assert not [r["text"] for r in recs if ":::" in r["text"]]
    docusaurus = (
        "# D\n\nBefore.\n:::warning Do not skip\nThe body.\n:::\n\n"  # no blank lines: the fence lines still interrupt
        "::::danger[Outer *title*]\n\n:::caution\n\n- an item\n:::\n\n::::\n\n"  # nested, a list ended by its closing line
        "1. Step one.\n\n   :::tip[In a step]\n   Keep going.\n   :::\n\n   ```\n   :::\n   ```\n\n"  # inside a list item
        "> :::note\n> Quoted.\n> :::\n\n"  # inside a quote
        "```md\n:::note[In code]\n:::\n```\n"  # code is code
    )
    (rec,) = chunk_document(Doc("d", "d.md", docusaurus))
    assert rec["text"] == (
        "# D\n\nBefore.\n\nWarning: Do not skip\n\nThe body.\n\nDanger: Outer *title*\n\nCaution:\n\n- an item\n\n"
        "1. Step one.\n\n   Tip: In a step\n   Keep going.\n\n   ```\n   :::\n   ```\n\n> Note:\n> Quoted.\n\n```md\n:::note[In code]\n:::\n```"
    )
    kinds = [b.kind for b in markdown.scan(Doc("d", "d.md", ":::note\n> Quoted.\n:::\nText.\n:::\n"))]
    assert kinds == ["admonition", "quote", "admonition", "paragraph", "admonition"]
    mkdocs = (
        '# M\n\n!!! note "Rotate the keys"\n    Every 90 days.\n\n    - the signing key\n    - the API key\n\n'
        '    ```sh\n    rotate --all\n    ```\n\nAfter.\n\n!!! warning ""\n    No title.\n\n??? tip\n\tCollapsed.\n\n'
        '???+ danger inline end "Open"\n    Shown open.\n'
    )
    (rec,) = chunk_document(Doc("m", "m.md", mkdocs))
    assert rec["text"] == (
        "# M\n\nNote: Rotate the keys\n\nEvery 90 days.\n\n- the signing key\n- the API key\n\n```sh\nrotate --all\n```\n\n"
        "After.\n\nNo title.\n\nTip:\n\nCollapsed.\n\nDanger: Open\n\nShown open."
    )
    assert [b.kind for b in markdown.scan(Doc("m", "m.md", mkdocs))][1:3] == ["admonition", "paragraph"]  # not indented code
    tabs = '# L\n\n=== "Python"\n\n    ```python\n    ruff check .\n    ```\n\n===+ "Go"\n    Use this:\n\n    ```\n    go vet\n    ```\n'
    (rec,) = chunk_document(Doc("t", "t.md", tabs))  # pymdownx's content tabs: the title leads in to its body, code stays code
    assert rec["text"] == "# L\n\nPython:\n\n```python\nruff check .\n```\n\nGo:\n\nUse this:\n\n```\ngo vet\n```"
    assert [b.kind for b in markdown.scan(Doc("t", "t.md", tabs))] == ["heading", "admonition", "admonition"]
