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
# Hugo shortcodes `{{< ... >}}` and `{{% ... %}}`. Markup, not words of the handbook.
TEMPLATE_TAG = re.compile(r"<%.*?%>|\{\{[<%].*?[%>]\}\}|\{%.*?%\}|\{\{.*?\}\}", re.S)
# A quoted string literal with a space in it, inside a tag: `<%= warning_text('Do not ...') %>` says
# something to the reader; `<%= partial 'partials/banner' %>` does not.
_PROSE_LITERAL = re.compile(r"'([^'\n]*\s[^'\n]*)'|\"([^\"\n]*\s[^\"\n]*)\"")
_FENCE_LINE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


def _untag(match: re.Match[str]) -> str:
    said = [a or b for a, b in _PROSE_LITERAL.findall(match.group())]
    return " ".join(said)


def strip_templates(text: str) -> str:
    """`text` with site-generator template tags taken out, outside fenced code.

    A tag whose arguments hold a quoted phrase (`<%= warning_text('Do not ...') %>`)
    leaves that phrase; any other tag leaves nothing. Inside a code fence a tag is
    code (`${{ github.sha }}` in a workflow file) and stays. Text without tags is
    returned unchanged (the same object).
    """
    if "{" not in text and "<%" not in text:
        return text
    out: list[str] = []
    fence: str | None = None
    for line in text.split("\n"):
        if m := _FENCE_LINE.match(line):
            marker = m.group(1)
            if fence is None:
                fence = marker
            elif marker[0] == fence[0] and len(marker) >= len(fence):
                fence = None
            out.append(line)
            continue
        out.append(line if fence is not None else TEMPLATE_TAG.sub(_untag, line))
    return "\n".join(out)


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


def _normalise(text: str) -> str:
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
    text = _normalise(text)
    terms = digit_group_terms(text)
    for word in split_words(text):
        terms.extend(word_terms(word, stopwords))
    return terms


def normalise(text: str) -> str:
    """NFKC, then casefold: the text `tokenize` splits."""
    return _normalise(text)


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
