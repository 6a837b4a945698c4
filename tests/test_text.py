"""ragline.text's site-generator rule: a template tag shows what the built page shows.

One test per syntax (Liquid/Jekyll, Hugo, ERB/Middleman), then the rule where users meet it
(retrieval text, the answer's quotes, --explain's sentences, heading paths and ids), then on the
GDS Way's real ERB sources.
"""

from __future__ import annotations

import pytest
from corpora import GDS_WAY

import rag_chunk
import rag_embed
import ragline.text
from ragline.answer import context as answer_context
from ragline.markdown import Doc, inline_text
from ragline.text import strip_templates

# --------------------------------------------------------------------------- Jekyll / Liquid


class TestLiquid:
    def test_a_channel_tag_shows_the_channel(self):
        assert strip_templates('Ask in {% slack_channel "team-x" %} and name your project.') == "Ask in #team-x and name your project."
        assert strip_templates("Ask in {% slack_channel '#payments' %}.") == "Ask in #payments."
        assert strip_templates("Ask in {% slack_channel team-x %}.") == "Ask in #team-x."  # a bare Liquid argument is a literal

    def test_a_page_tag_shows_its_path_and_a_link_tag_its_label(self):
        assert strip_templates('See {% page "/incidents/paging/" %} first.') == "See /incidents/paging/ first."
        assert strip_templates('See {% link "/incidents/" "Paging" %}.') == "See Paging."
        assert strip_templates("See {% link docs/oncall.md %}.") == "See docs/oncall.md."

    def test_an_include_renders_another_file_not_its_argument(self):
        assert strip_templates("{% include footer.html %}Done.") == "Done."
        assert strip_templates('{% include_relative "notes/x.md" %}Done.') == "Done."
        # ... but a text argument handed to it is what the included file shows
        assert strip_templates('{% include callout.html content="Rotate keys yearly" type="warning" %}') == "Rotate keys yearly"

    def test_an_output_tag_that_is_a_variable_vanishes_and_a_string_shows(self):
        assert strip_templates("Go to {{ site.baseurl }}/help.") == "Go to /help."
        assert strip_templates("{{ 'Escalate' | upcase }} now.") == "Escalate now."
        assert strip_templates('{{ site.data.teams["payments"] }}') == ""  # a key into a map is not text

    def test_a_block_tag_keeps_its_content_and_a_statement_shows_nothing(self):
        text = '{% alert %}\nNever page after 22:00.\n{% endalert %}\n{% if site.x == "y" %}Only here.{% endif %}'
        assert strip_templates(text) == "\nNever page after 22:00.\n\nOnly here."
        assert strip_templates('{%- alert "Warning" -%}Careful.{%- endalert -%}') == "WarningCareful."

    def test_a_comment_vanishes_with_its_content_and_raw_shows_as_written(self):
        assert strip_templates("{% comment %}\nTODO: fix\n\nlater{% endcomment %}Shown.") == "Shown."
        assert strip_templates("Write {% raw %}{{ name }}{% endraw %} in the template.") == "Write {{ name }} in the template."


# --------------------------------------------------------------------------- Hugo


class TestHugo:
    def test_a_ref_shows_the_page_it_links(self):
        assert strip_templates('Read {{< ref "oncall.md" >}} first.') == "Read oncall.md first."
        assert strip_templates('Read {{< relref "/docs/oncall" >}} first.') == "Read /docs/oncall first."
        # in a markdown link the tag is the target: the link keeps its label
        assert strip_templates('[the rota]({{< ref "oncall.md" >}})') == "[the rota](oncall.md)"

    def test_a_notice_keeps_its_content_and_shows_its_title(self):
        assert strip_templates("{{% notice %}}Keys expire after 90 days.{{% /notice %}}") == "Keys expire after 90 days."
        assert strip_templates('{{< notice warning "Read this" >}}\nBody.\n{{< /notice >}}') == "Read this\nBody.\n"

    def test_a_figure_shows_its_caption_not_its_source(self):
        assert strip_templates('{{< figure src="flow.png" caption="The release flow" >}}') == "The release flow"
        assert strip_templates('{{< youtube "w7Ft2ymGmfc" >}}{{/* a comment */}}') == ""


# --------------------------------------------------------------------------- ERB / Middleman


class TestErb:
    def test_link_to_shows_its_label(self):
        assert strip_templates('Read <%= link_to "Runbooks", "/runbooks/" %>.') == "Read Runbooks."
        assert strip_templates("Read <%= link_to('/runbooks/') %>.") == "Read /runbooks/."  # no label: the path
        assert strip_templates("<%= link_to url do %>the rota<% end %>") == "the rota"  # a block: its content

    def test_a_page_variable_and_a_partial_vanish(self):
        assert strip_templates("# <%= current_page.data.title %>") == "# "
        assert strip_templates("<%= partial 'partials/site-banner' %>\nText.") == "\nText."

    def test_a_helper_shows_its_text_without_its_html(self):
        text = "<%= warning_text('Make the repo <a href=\"https://x.example/v\">internal or private</a> first') %>"
        assert strip_templates(text) == "Make the repo internal or private first"
        assert strip_templates("<%= warning_text('Rotate') %>") == "Rotate"

    def test_statements_and_comments_show_nothing(self):
        assert strip_templates("<% if x %>\nShown.\n<% end %><%# note %>") == "\nShown.\n"

    def test_a_capture_shows_nothing_where_it_stands(self):
        """`content_for :sidebar` fills the layout's sidebar, not the page (the GDS Way's source-code/index)."""
        assert strip_templates("<% content_for :sidebar do %>\n<ul><li>Nav</li></ul>\n<% end %>\nBody.") == "\nBody."
        assert strip_templates("{% capture note %}Later{% endcapture %}Now {{ note }}") == "Now "
        assert strip_templates("{% set intro %}Hi{% endset %}{% set x = 1 %}Text") == "Text"


# --------------------------------------------------------------------------- code stays code


def test_tags_in_code_stay_as_written():
    fence = "```yaml\nrun: echo ${{ github.sha }} {% slack_channel 'x' %}\n```"
    assert strip_templates(f"Then:\n{fence}\n{{{{ site.x }}}}done") == f"Then:\n{fence}\ndone"
    span = "Interpolation `${{ github.event.title }}` runs, and ``{% raw %}`` too."
    assert strip_templates(span) is span
    plain = "No tags {here} at all."
    assert strip_templates(plain) is plain


# --------------------------------------------------------------------------- where users meet the rule


def test_retrieval_text_and_explain_sentences_show_the_channel():
    record = {"text": 'Ask in {% slack_channel "team-x" %} and name your project.', "headings": ["Help"]}
    assert ragline.text.retrieval_text(record) == "Help :: Ask in #team-x and name your project."
    assert "team-x" in ragline.text.tokenize(ragline.text.retrieval_text(record))
    assert rag_embed.chunk_sentences(record["text"]) == ["Ask in #team-x and name your project."]


def test_the_answer_quotes_the_channel():

    hit = {
        "chunk_id": "help#ask",
        "doc": "help",
        "headings": ["Help"],
        "text": 'Ask in {% slack_channel "team-x" %} and name your project.',
    }
    quoted = [c.text for c in answer_context.pieces(answer_context.ContextBlock(1, hit))]
    assert quoted == ["Ask in #team-x and name your project."]


def test_the_chunk_text_is_the_page_as_it_shows():
    """Issue 31: no markup in a chunk's text; the lines it covers are still the source's."""
    source = '# Help\n\nAsk in {% slack_channel "team-x" %}.\n\n<%= partial "x" %>\n\nRun `{{ cmd }}`.\n'
    (record,) = rag_chunk.chunk_document(Doc("help", "help.md", source))
    assert record["text"] == "# Help\n\nAsk in #team-x.\n\nRun `{{ cmd }}`."
    assert (record["start_line"], record["end_line"]) == (1, 7)


# --------------------------------------------------------------------------- headings


def test_inline_markdown_in_a_heading_is_its_text_in_the_path_slug_and_id():
    source = (
        "# Guide\n\n## Reporting [Incidents](https://intranet.example.org/a/long/path?with=query&and=more)\n\nText.\n\n"
        "## Use `git push --force-with-lease`, **not** _force_\n\nText.\n\n"
        '## ![logo](img/x.png) Ask in {% slack_channel "team-x" %}\n\nText.\n\n'
        "## [Snyk][]\n\nText.\n\n[Snyk]: https://snyk.io\n"
    )
    records = rag_chunk.chunk_document(Doc("guide", "guide.md", source))
    assert [r["headings"][-1] for r in records] == [
        "Reporting Incidents",
        "Use git push --force-with-lease, not force",
        "logo Ask in #team-x",
        "Snyk",
    ]
    assert [r["id"] for r in records] == [
        "guide#reporting-incidents",
        "guide#use-git-push-force-with-lease-not-force",
        "guide#logo-ask-in-team-x",
        "guide#snyk",
    ]


def test_inline_text():
    assert inline_text('[a (b)](http://x/a_(b) "t") and <https://x.example> in <kbd>Ctrl</kbd>') == "a (b) and https://x.example in Ctrl"
    assert inline_text("`a *b* [c](d)` and \\*e\\* and ~~f~~ and snake_case") == "a *b* [c](d) and *e* and f and snake_case"
    assert inline_text("Plain [brackets] stay") == "Plain [brackets] stay"


def test_a_long_id_is_cut_at_a_word_boundary_and_parts_share_the_cut():
    long_heading = "Decide on manual or automatic recovery in the event of a disaster or a lesser outage"
    body = " ".join(["Recover."] * 30)
    source = f"# {long_heading}\n\n{body}\n\n{body}\n\n## {long_heading} again\n\nText.\n"
    records = rag_chunk.chunk_document(Doc("standards/disaster-recovery", "x.md", source), window=40)
    ids = [r["id"] for r in records]
    assert all(len(i) < 80 for i in ids) and len(set(ids)) == len(ids)
    base = "standards/disaster-recovery#decide-on-manual-or-automatic-recovery-in-the"
    assert ids == [base, base + "-2", base + "~2"]  # the sub-heading cuts to the same slug: `~N` tells it apart
    assert rag_chunk.chunk_id("d", "word-" * 30 + "end") == "d#" + "-".join(["word"] * 15)  # deterministic, whole words
    assert rag_chunk.chunk_id("d", "short") == "d#short"


# --------------------------------------------------------------------------- the GDS Way (ERB / Middleman)


@pytest.mark.skipif(not GDS_WAY.is_dir(), reason=f"{GDS_WAY} is absent (it lies beside the repository, not in it)")
def test_gds_way_reads_as_its_pages_do():
    records = {r["id"]: r for r in rag_chunk.chunk_paths([str(GDS_WAY)])}
    texts = {cid: ragline.text.retrieval_text(r) for cid, r in records.items()}
    assert all(len(cid) < 80 for cid in records), max(records, key=len)
    assert not [cid for cid, t in texts.items() if "<%" in t or "partials/" in t]
    whole = "\n".join(texts.values())
    # a helper's text shows, without its HTML
    assert "Make sure you configure the repo as internal or ideally private to help prevent accidental disclosure" in whole
    assert "Do not comment on PRs outside working hours, even to acknowledge them." in whole
    # a workflow expression in inline code is code, and stays
    assert "interpolation `${{ github.something }}` of 'something'" in whole
    # headings read as the page shows them
    headings = {h for r in records.values() for h in r["headings"]}
    assert "Do not use git push -f, use --force-with-lease instead" in headings
    assert not [h for h in headings if "`" in h or "](" in h or "][" in h]
