"""text: the words of a handbook as ragline reads them.

Site-generator template tags and markup turned into what a reader sees, the retrieval text
of a chunk (heading path and body), sentence spans, and the tokeniser that BM25, the
reranker, the abstain signal and the answer stage all share.

Nothing here runs at import time.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from typing import Any

# --------------------------------------------------------------------------- site-generator markup

# Template tags of site generators: ERB `<%= ... %>`, Liquid/Jinja `{% ... %}` and `{{ ... }}`,
# Hugo shortcodes `{{< ... >}}` and `{{% ... %}}`. One tag; a tag may run over lines, not over a
# blank line, and holds no opener of its own kind (so an unclosed `{{` costs a scan to the next
# one, not to the paragraph's end).
_IN_PARAGRAPH = r"(?:[^\n]|\n(?![ \t]*\n))"


def _body(opener: str) -> str:
    return rf"(?:(?!{opener}){_IN_PARAGRAPH})*?"


_ERB_BODY, _LIQUID_BODY, _OUTPUT_BODY = _body("<%"), _body(r"\{%"), _body(r"\{\{")
TEMPLATE_TAG = re.compile(rf"<%{_ERB_BODY}%>|\{{\{{[<%]{_OUTPUT_BODY}[%>]\}}\}}|\{{%{_LIQUID_BODY}%\}}|\{{\{{{_OUTPUT_BODY}\}}\}}")
# What `strip_templates` scans prose for: an inline code span (code: kept as it is), a Liquid
# comment block or a capture (renders nothing where it stands), a raw block (renders its content
# as written), or a tag. A capture keeps its content for elsewhere: ERB's `content_for :sidebar do`
# for the layout, Liquid's `capture`, Jinja's `macro` and block `set` for a later tag.
_COMMENT, _END_COMMENT = r"\{%-?\s*comment\s*-?%\}", r"\{%-?\s*endcomment\s*-?%\}"
_CAPTURE = (
    r"<%-?\s*content_for\b(?:(?!%>).)*?\bdo\s*-?%>.*?<%-?\s*end\s*-?%>"
    r"|\{%-?\s*(?P<block>capture|macro)\b(?:(?!%\}).)*%\}.*?\{%-?\s*end(?P=block)\s*-?%\}"
    r"|\{%-?\s*set\s+[\w.]+\s*-?%\}.*?\{%-?\s*endset\s*-?%\}"
)
_RAW, _END_RAW = r"\{%-?\s*raw\s*-?%\}", r"\{%-?\s*endraw\s*-?%\}"
_TEMPLATE_SCAN = re.compile(
    rf"(?P<code>(?P<ticks>`(?<!``)`*)(?!`){_IN_PARAGRAPH}*?(?<!`)(?P=ticks)(?!`))"  # each branch opens with a literal: re skips ahead
    rf"|(?P<comment>{_COMMENT}(?:(?!{_COMMENT}).)*?{_END_COMMENT}|{_CAPTURE})"
    rf"|{_RAW}(?P<raw>(?:(?!{_RAW}).)*?){_END_RAW}"
    rf"|(?P<tag>{TEMPLATE_TAG.pattern})",
    re.S,
)
_FENCE_LINE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_QUOTED = re.compile(r"'((?:[^'\\\n]|\\.)*)'|\"((?:[^\"\\\n]|\\.)*)\"")
_TAG_NAME = re.compile(r"\s*(/)?\s*([A-Za-z_][\w.]*[?!]?)?")
_KEYWORD = re.compile(r"([A-Za-z_]\w*)\s*(?::|=)\s*$")  # `caption="`, `alt: '`: the string is that argument's value
_HTML_TAG = re.compile(r"</?[A-Za-z][^>]*>")
# Tags by what a reader sees of them. Statements and control flow render nothing of their own
# (`{% if %}`, `<% end %>`, a block's closing tag); includes, partials and embeds render other
# content, never their argument; a link tag renders its label, or its path; a channel tag the
# channel's name. Any other tag shows its quoted strings.
_STATEMENT_TAGS = frozenset(
    """if elsif elif else endif unless endunless case when endcase for endfor while endwhile break
    continue assign capture endcapture increment decrement cycle tablerow endtablerow set endset
    macro endmacro call endcall filter endfilter block endblock extends import from with endwith
    liquid do end yield content_for provide layout""".split()
)
_RENDER_TAGS = frozenset(
    """include include_relative include_cached render partial readfile param template embed image
    image_tag img figure svg icon youtube vimeo gist tweet instagram javascript_include_tag
    stylesheet_link_tag asset_path image_path""".split()
)
_LINK_TAG = re.compile(r"link|link_to|\w+_link|link_\w+|page|ref|relref|post_url|url_for")
_CHANNEL_TAG = re.compile(r"\w*(?:slack|channel)\w*")
# Keyword arguments whose value a reader sees (`{{< figure src="a.png" caption="The flow" >}}`).
_TEXT_KEYS = frozenset("title caption alt text label content message heading summary description".split())


def _path_like(value: str) -> bool:
    """A file path, URL or anchor (`partials/banner`, `x.md`, `https://...`, `#top`), not words."""
    return " " not in value.strip() and ("/" in value or value.startswith("#") or re.search(r"\.[A-Za-z]\w{0,4}$", value) is not None)


def _untag(match: re.Match[str]) -> str:
    """What a reader sees of one template tag (see `strip_templates`)."""
    tag = match.group()
    if tag.startswith("<%"):  # ERB: only `<%= ... %>` outputs; `<% ... %>` is a statement, `<%# ... %>` a comment
        if not tag.startswith("<%="):
            return ""
        inner = tag[3:-2].strip("=-")
    elif tag.startswith(("{{<", "{{%")):
        inner = tag[3:-3]
    else:
        inner = tag[2:-2].strip("-")
    closing, name = _TAG_NAME.match(inner).groups()  # type: ignore[union-attr]
    if closing or inner.lstrip().startswith("#"):  # `{{< /notice >}}`, `{{/* comment */}}`, `{%# comment %}`
        return ""
    name = (name or "").rstrip("?!")
    if name in _STATEMENT_TAGS:
        return ""
    positional: list[str] = []
    keyed: list[str] = []
    for m in _QUOTED.finditer(inner):
        value = _HTML_TAG.sub("", re.sub(r"\\(.)", r"\1", m.group(1) if m.group(1) is not None else m.group(2))).strip()
        before = inner[: m.start()].rstrip()
        if not value or before.endswith("["):  # a key into a map, `site.data["x"]`
            continue
        if key := _KEYWORD.search(before):
            if key.group(1).lower() in _TEXT_KEYS:
                keyed.append(value)
        elif not before.endswith(("==", "!=")):
            positional.append(value)
    # A Liquid tag's bare first argument is a literal (`{% link docs/x.md %}`); an ERB one a variable.
    words = inner[_TAG_NAME.match(inner).end() :].split()  # type: ignore[union-attr]
    bare = words[0] if words and tag.startswith("{%") and not positional and not keyed else ""
    if name in _RENDER_TAGS:
        return " ".join(keyed)
    if _CHANNEL_TAG.fullmatch(name) and (positional or bare):
        channel = positional[0] if positional else bare
        return channel if channel.startswith("#") else "#" + channel
    if _LINK_TAG.fullmatch(name):
        label = [v for v in keyed + positional if not _path_like(v)]
        if label or positional:
            return label[0] if label else positional[0]
        return bare if _path_like(bare) else ""
    return " ".join(keyed + [v for v in positional if not _path_like(v)])


def _render(match: re.Match[str]) -> str:
    if match.group("code") is not None:
        return match.group()
    if match.group("comment") is not None:
        return ""
    if match.group("raw") is not None:
        return match.group("raw")
    return _untag(match)


def strip_templates(text: str) -> str:
    """`text` as a reader of the built site sees it: template tags replaced by what they render,
    outside code.

    For every syntax (ERB `<%= %>`, Liquid/Jinja `{% %}` and `{{ }}`, Hugo `{{< >}}` and
    `{{% %}}`): a tag whose arguments include a quoted string shows that string
    (`<%= warning_text('Do not ...') %>`); a channel tag shows the channel,
    `{% slack_channel "team-x" %}` as `#team-x`; a link tag its label, or its path when it
    has none (`<%= link_to "the guide", url %>`, `{{< ref "x.md" >}}`); a block tag keeps
    its content (`{% alert %}...{% endalert %}`); a tag with nothing a reader would see
    vanishes: a variable (`{{ site.baseurl }}`, `<%= current_page.data.title %>`), a
    statement (`<% end %>`, `{% if %}`), a closing tag, an include, partial or embed (they
    render other content, not their argument: `{% include x.html %}`, `<%= partial
    'partials/banner' %>`), a comment (`{% comment %}...{% endcomment %}` with its
    content), a capture with its content, which shows elsewhere if anywhere (`<% content_for
    :sidebar do %>...<% end %>` in the layout's sidebar, `{% capture x %}...{% endcapture %}`). Quoted file paths and URLs show only from a link tag; a keyword argument
    only when it is text (`caption="..."`, `alt: '...'`, `content="..."`), even from an
    include. `{% raw %}...{% endraw %}` shows its content as written. Inside a code fence
    or an inline code span a tag is code (`${{ github.sha }}` in a workflow file) and
    stays. Text without tags is returned unchanged (the same object).
    """
    if "{{" not in text and "{%" not in text and "<%" not in text:
        return text
    out: list[str] = []
    prose: list[str] = []
    fence: str | None = None

    def flush() -> None:
        if prose:
            out.append(_TEMPLATE_SCAN.sub(_render, "\n".join(prose)))
            prose.clear()

    for line in text.split("\n"):
        m = _FENCE_LINE.match(line)
        if fence is None and m is None:
            prose.append(line)
            continue
        if fence is None:
            flush()
            fence = m.group(1)  # type: ignore[union-attr]
        elif m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence):
            fence = None
        out.append(line)
    flush()
    result = "\n".join(out)
    return text if result == text else result


def retrieval_text(record: dict[str, Any], headings: bool = True, text_field: str = "text") -> str:
    """The text that is embedded and BM25-indexed for a chunk: heading path, then text.

    `Heading > Sub :: text`, template tags left out of both. The one definition, so
    the dense and the sparse side of an index cannot see different text.
    """
    return heading_lead(record, headings) + strip_templates(record[text_field])


def heading_lead(record: dict[str, Any], headings: bool = True) -> str:
    """`Heading > Sub :: `, the prefix a chunk's text (and each of its passages) is embedded
    and indexed with; "" without a heading path or with `headings` off."""
    path = record.get("headings") if headings else None
    if isinstance(path, list) and path and all(isinstance(h, str) for h in path):
        return " > ".join(path) + " :: "
    return ""


# --------------------------------------------------------------------------- sentences

# A sentence ends at . ! or ? (closing quotes and brackets included) before white space and a
# capital, a digit or an opening mark; not after an abbreviation or an initial.
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=[\"'(\[]?[A-Z0-9`*_])")
_ABBREVIATION = re.compile(r"(?:\b(?:vs|e\.g|i\.e|etc|cf|approx|incl|Mr|Ms|Dr|No|Fig)|\b[A-Z])\.$")


def leads_in(text: str) -> bool:
    """Whether a text ends in a colon, as a lead-in to what follows it does ("Our core languages are:",
    "then run:"), emphasis marks after the colon allowed ("**Process overview:**", "***Note:***"; not a form's blank,
    "Name:______"): the chunker keeps it with what it introduces, the answer quotes that after it."""
    end = text.rstrip()
    bare = end.rstrip("*_")
    return bare.endswith(":") and len(end) - len(bare) <= 3


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """[start, end) of each sentence of a run of prose, white space between them left out.

    The one sentence splitter: rag-chunk cuts over-long paragraphs with it and
    rag-answer quotes and checks sentences with it. `e.g. Gerrit` and `J. Smith`
    do not end a sentence.
    """
    spans: list[tuple[int, int]] = []
    start = 0
    for m in _SENTENCE_END.finditer(text):
        stop = m.start() + len(m.group().rstrip())  # after the closing marks
        if _ABBREVIATION.search(text, max(0, m.start() - 8), m.start()):
            continue
        spans.append((start, stop))
        start = m.end()
    if start < len(text) or not spans:
        spans.append((start, len(text)))
    return spans


# --------------------------------------------------------------------------- tokeniser

STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before
    being below between both but by can could did do does doing down during each few for from
    further had has have having he her here hers herself him himself his how i if in into is it
    its itself just me more most my myself no nor not of off on once only or other our ours
    ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we were
    what when where which while who whom why will with would you your yours yourself yourselves
    s t i'm it's don't does doesn't isn't can't won't let get got also via per may might must
    shall""".split()
)

# A word: letters/digits, with internal joiners (- _ . / : ') between alphanumeric runs,
# so that NW-4021, ap-south-1, 23:40 and v1.2 are one token.
_WORD = re.compile(r"[^\W_]+(?:[-_./:'][^\W_]+)*")
# Card-like digit groups separated by single spaces: "4000 0000 0000 0002".
_DIGIT_GROUPS = re.compile(r"(?<![\w-])\d{4}(?: \d{4}){2,4}(?![\w-])")
_PART = re.compile(r"[^\W_]+")


def words(text: str) -> Iterator[re.Match[str]]:
    """The words `tokenize` sees, as matches on `text` itself (original case and offsets)."""
    return _WORD.finditer(text)


def identifier_like(word: str, hyphen: bool = True) -> bool:
    """Does a word look like an identifier rather than a word of prose: a digit (NW-4021, S3),
    a capital after a small letter (defaultBranch), or a joiner between word characters
    (dependabot.yml, init.defaultBranch, snake_case, and with `hyphen` force-with-lease)?"""
    joiners = r"[-_./:]" if hyphen else r"[_./:]"
    return any(ch.isdigit() for ch in word) or re.search(rf"\w{joiners}\w|[a-z][A-Z]", word) is not None


def stem(word: str) -> str:
    """A small plural rule: "runs" and "run", "retries" and "retry" are one term.

    Only alphabetic words longer than three letters are touched; words ending in
    -ss, -us, -is are left alone (status, process, analysis).
    """
    if len(word) <= 3 or not word.isalpha():
        return word
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith("sses"):
        return word[:-2]
    if word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


def normalise(text: str) -> str:
    """NFKC, then casefold: the text `tokenize` splits."""
    return unicodedata.normalize("NFKC", text).casefold()


def tokenize(text: str, *, stopwords: bool = True) -> list[str]:
    """Terms of `text` in order: lowercased (NFKC + casefold), unicode-aware.

    Identifiers are kept whole *and* split into parts: `NW-4021` gives
    `nw-4021`, `nw`, `4021`. Digit groups such as `4000 0000 0000 0002` (or
    `4000-0000-0000-0002`) give the joined `4000000000000002` plus each group.
    Plurals fold by `stem`. Stopwords are dropped unless `stopwords=False`.
    The same as `digit_group_terms` of the normalised text, then `word_terms` of
    each of its `split_words` (rag_index memoises the second, word by word).
    """
    text = normalise(text)
    terms = digit_group_terms(text)
    for word in split_words(text):
        terms.extend(word_terms(word, stopwords))
    return terms


def split_words(normalised: str) -> list[str]:
    """The words of a normalised text, in order (as `words`, as strings)."""
    return _WORD.findall(normalised)


def digit_group_terms(normalised: str) -> list[str]:
    """The joined card-like digit groups of a normalised text: `4000 0000 0000 0002` gives `4000000000000002`."""
    return [match.group().replace(" ", "") for match in _DIGIT_GROUPS.finditer(normalised)]


MAX_TERM = 64  # characters of a term: a longer token (a hex dump, a base64 blob) is cut to its first MAX_TERM


def word_terms(word: str, stopwords: bool = True) -> list[str]:
    """The terms one word of a normalised text gives (see `tokenize`); depends on the word alone.

    A term longer than MAX_TERM characters is cut to its first MAX_TERM: a query holding the
    same long token is cut the same way, so it still matches, and no token makes a term (or
    the index's vocabulary) bigger than that.
    """
    if len(word) <= MAX_TERM:
        return _word_terms(word, stopwords)
    return [term[:MAX_TERM] for term in _word_terms(word, stopwords)]


def _word_terms(word: str, stopwords: bool) -> list[str]:
    parts = _PART.findall(word)
    if len(parts) == 1:
        if word.isalpha() and "'" not in word and stopwords and word in STOPWORDS:
            return []
        return [stem(word)]
    if "'" in word and all(p.isalpha() for p in parts):  # contractions: don't, it's
        if stopwords and word in STOPWORDS:
            return []
        return [stem(p) for p in parts if len(p) > 1 and not (stopwords and p in STOPWORDS)]
    whole = "".join(parts) if re.fullmatch(r"\d+(?:-\d+)+", word) else word  # 4000-0000-... as 40000...
    return [whole, *(stem(p) for p in parts if not (stopwords and p in STOPWORDS))]


def term_set(text: str) -> set[str]:
    """The distinct terms of `text` (stopwords dropped)."""
    return set(tokenize(text))
