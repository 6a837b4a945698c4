"""citations: the answer's citation contract: `[n]` markers, sentences, and the check every answer passes.

A library, not a stage (rag_answer uses it, and any generator's text goes through
`check_citations`): every sentence must cite a block that was sent, and that block must
support it: the numbers, times, identifiers and names the sentence states are in the
block, and so are enough of its words. A sentence that only repeats a block's heading
path or a piece of the prompt is no answer. Quoted handbook text has its `[n]` made
inert (`escape_markers`) so it can never read as a citation.
"""

from __future__ import annotations

import html
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

import ragline.text
from ragline import markdown
from ragline.answer.cues import CODE_SPAN, plain

CITATION = re.compile(r"(?<!\\)\[(\d{1,3})\]")


def escape_markers(text: str) -> str:
    """Make `[7]` in quoted handbook text inert (`\\[7]`), so it can never read as a citation."""
    return CITATION.sub(lambda m: "\\[" + m.group(1) + "]", text)


ESCAPED = re.compile(r"\\\[(\d{1,3})\]")


def shown_markers(text: str, cited: Collection[int] = ()) -> str:
    """An answer as a person reads it in a terminal: the handbook's own `[7]`, made inert in the
    record (`escape_markers`), shown as the handbook has it, without the backslash; but where 7 is
    also the number of a source the answer cites (`cited`), left escaped, so it never reads as that
    source's footnote (the page shows it plain, its citations being links)."""
    return ESCAPED.sub(lambda m: m.group(0) if int(m.group(1)) in cited else f"[{m.group(1)}]", text)


def sentences(text: str) -> list[str]:
    """Sentences of one line of prose. A list ordinal (`1.`) or a bare run of markers
    (`[1]`) is not a sentence: it joins its neighbour; so does a piece ending in an
    abbreviation (`vs.`, `e.g.`, an initial)."""
    out: list[str] = []
    text = text.strip()
    for a, b in ragline.text.sentence_spans(text):
        piece = text[a:b]
        lead = re.match(r"^((?:\[\d{1,3}\]\s*)+)(.*)$", piece)
        if out and lead:  # markers opening a piece close the sentence before it
            out[-1] = out[-1] + " " + lead.group(1).strip()
            piece = lead.group(2).strip()
            if not piece:
                continue
        if out and re.fullmatch(r"\d{1,3}[.)]", out[-1]):
            out[-1] = out[-1] + " " + piece
        else:
            out.append(piece)
    return out


def split_sentences(text: str) -> list[str]:
    """An answer's sentences: per line, then at sentence ends. A fenced code block is
    one unit together with the marker line after it; a line holding " | " (a table row)
    is one unit; a run of bare markers (`[1][2]`) joins the sentence before it."""
    return [unit for _, unit in _units(text)]


def _units(text: str) -> list[tuple[int, str]]:
    """`split_sentences`' units, each with the line it starts on (its paragraph)."""
    out: list[tuple[int, str]] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        fence = re.match(r"^\s*(`{3,}|~{3,})", line)
        if fence:
            j = i + 1
            while j < len(lines) and not lines[j].strip().startswith(fence.group(1)):
                j += 1
            out.append((i, "\n".join(lines[i : j + 1])))
            i = j + 1
            continue
        if out and re.fullmatch(r"\s*(?:\[\d{1,3}\]\s*)+[.!?]?\s*", line):
            at, last = out[-1]
            out[-1] = (at, last + ("\n" if last.rstrip().endswith(("```", "~~~")) else " ") + line.strip())
        elif " | " in line:  # a table row, quoted whole (`cite`): one unit, whatever full stops its cells hold
            out.append((i, line.strip()))
        elif line.strip():
            out.extend((i, sentence) for sentence in sentences(line))
        i += 1
    return out


# The share of a sentence's terms (`ragline.text.tokenize`: stopwords out, plurals folded) that the
# blocks it cites must hold. A quote holds all of them; a paraphrase keeps most of its words from
# the block; a sentence made up around one borrowed word does not.
SUPPORT = 0.5
_OPENS = re.compile(r"(?:^|[.!?:|>*+-])[\s\"'(\[*_`]*$")  # before a word that opens a sentence, a cell or an item
_NOT_NAMES = frozenset({"i", "ok", "okay"})
_ATX = re.compile(r"^ {0,3}#{1,6}(?:[ \t].*)?$", re.M)  # a markdown heading line: the heading path, not the block's prose


@dataclass(frozen=True)
class Source:
    """What one context block gave the generator: its text and its heading path."""

    text: str
    headings: tuple[str, ...] = ()

    def terms(self) -> set[str]:
        return ragline.text.term_set(self.text) | ragline.text.term_set(" ".join(self.headings))


@dataclass
class Checked:
    """The check's verdict on one answer: the sentences kept, the blocks they cite (in
    order of first use), and each sentence dropped with why."""

    kept: list[str] = field(default_factory=list)
    cited: list[int] = field(default_factory=list)
    dropped: list[tuple[str, str]] = field(default_factory=list)
    recited: list[tuple[str, list[int], int]] = field(default_factory=list)  # (sentence, the blocks it cited, the one that supports it)


def stated(sentence: str) -> list[str]:
    """The facts a sentence states, as terms: numbers and times (`23:40`, `T+1`'s `1`),
    identifiers (`NW-5001`, `dependabot.yml`) and names (a capitalised word that does not
    open the sentence, a table cell or a list item: `Sundays`, `Gerrit`)."""
    out: list[str] = []
    for match in ragline.text.words(sentence):
        word = match.group()
        name = word[0].isupper() and word.casefold() not in _NOT_NAMES and not _OPENS.search(sentence[: match.start()])
        if name or ragline.text.identifier_like(word, hyphen=False):
            terms = ragline.text.tokenize(word)  # a stopword ("The" after a comma) gives none
            if terms and terms[0] not in out:
                out.append(terms[0])
    return out


def _words(text: str) -> list[str]:
    return ragline.text.split_words(ragline.text.normalise(text))


def _within(part: list[str], whole: list[str]) -> bool:
    """Is `part` a contiguous run of `whole`?"""
    n = len(part)
    return n > 0 and any(whole[i : i + n] == part for i in range(len(whole) - n + 1))


_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})[^\n]*\n(.*?)^ {0,3}\1[ \t]*$", re.M | re.S)
_NEGATION = re.compile(r"\b(?:not|never|no|none|nothing|nobody|neither|nor|cannot|without|lacking)\b|n['’]t\b", re.I)
# negating words that negate nothing: a bound ("no more than 3"), an exception ("nobody but on-call")
_NOT_NEGATING = re.compile(
    r"\b(?:no|not) (?:more|less|later|earlier|longer|fewer|sooner|greater|higher|lower) than\b|\bnot only\b"
    r"|\b(?:nothing|nobody|no one|none) (?:but|except|other than)\b|\bno matter\b",
    re.I,
)
_CLAUSE_END = re.compile(r"[,.;:!?()]|\b(?:when|if|because|unless|but|so|while|since|although|though|whereas)\b", re.I)
NEGATION_SCOPE = 3  # content terms after a negating word that it is taken to negate (up to its clause's end)
_UNITS = {
    "%": "%|percent|per cent",
    "ms": "ms|milliseconds?",
    "second": "s|secs?|seconds?",
    "minute": "mins?|minutes?",
    "hour": "hrs?|hours?",
    "day": "days?",
    "week": "weeks?",
    "month": "months?",
    "year": "years?",
    **{u: u for u in ("am", "pm", "utc", "gmt", "ist", "bst", "cet", "cest", "pst", "pdt", "est", "edt", "sgt", "jst", "aest")},
    **{u: u for u in ("kb", "mb", "gb", "tb", "kib", "mib", "gib")},
}
_QUANTITY_UNIT = re.compile(
    r"(?<![\w.:])(\d[\d,.:]*)\s*(?:(?:business|working|calendar)\s+)?(" + "|".join(_UNITS.values()) + r")(?!\w)", re.I
)
_UNIT_OF = [(canonical, re.compile(f"(?:{pattern})$", re.I)) for canonical, pattern in _UNITS.items()]


def _unit(word: str) -> str:
    """A unit as the check compares it: 30 min and 30 minutes alike, 5% and 5 percent alike."""
    return next((canonical for canonical, pattern in _UNIT_OF if pattern.match(word)), word.casefold())


def _quantities(shown: str) -> set[tuple[str, str]]:
    """The (number, unit) pairs of a text as a reader sees it (`plain`)."""
    return {(n.rstrip(".,"), _unit(u)) for n, u in _QUANTITY_UNIT.findall(" ".join(shown.split()))}


def _negated(text: str) -> list[set[str]]:
    """What each negating word of `text` negates: the first NEGATION_SCOPE content terms after it, within its
    clause (a bound like "no more than" and an exception like "nobody but" negate nothing)."""
    text = _NOT_NEGATING.sub(" ", text)
    scopes = []
    for m in _NEGATION.finditer(text):
        rest = text[m.end() :]
        end = _CLAUSE_END.search(rest)
        scopes.append(set(ragline.text.tokenize(rest[: end.start()] if end else rest)[:NEGATION_SCOPE]))
    return [scope for scope in scopes if scope]


def _negation_differs(sentence: str, terms: set[str], candidate: str) -> str | None:
    """Whether `sentence` negates what `candidate` states, or leaves out a negation of something it states."""
    mine, theirs = _negated(sentence), _negated(candidate)
    held = set(ragline.text.tokenize(candidate))
    if any(scope & held and not any(scope & other for other in theirs) for scope in mine):
        return "negates what the cited block says"
    if any(scope & terms and not any(scope & other for other in mine) for scope in theirs):
        return "drops a negation the cited block has"
    return None


def _code_held(code: str, held: Sequence[str]) -> bool:
    """Whether `code` (white space folded, case aside) is in one of `held`, the blocks' texts so folded."""
    code = " ".join(code.split()).casefold()
    return not code or any(code in text for text in held)


def _contradicts(sentence: str, blocks: Sequence[str]) -> str | None:
    """Why `sentence` says what its cited blocks (their texts) contradict, or None: term overlap
    alone keeps "The sweep never runs at 23:40 IST" citing "The sweep runs at 23:40 IST". In order:
    code it quotes (a span `rm -rf /`, or a fenced block's lines) that no cited block holds; a
    quantity whose unit differs from the block's for the same number (18:10 IST where the block
    says 18:10 UTC, 3 days where it says 3 hours; 30 min and 30 minutes are one unit); a negation
    of something the closest sentence of the blocks (most terms in common) states without one, or
    one of its negations (of something the sentence states) left out. `unsupported` asks this of
    written sentences only (a quoting reader's sentences are the block's own)."""
    shown = [plain(b) for b in blocks]  # each block as a reader sees it, made once for the three checks
    held = [" ".join(text.split()).casefold() for text in (*blocks, *shown)]
    for fence in _FENCE.finditer(sentence):
        for line in fence.group(2).splitlines():
            if not _code_held(line, held):
                return f"quotes code `{line.strip()}` that the cited block does not hold"
    prose = _FENCE.sub(" ", sentence)
    for m in CODE_SPAN.finditer(prose):
        if not _code_held(m.group(2), held):
            return f"quotes code `{m.group(2).strip()}` that the cited block does not hold"
    given = set().union(*(_quantities(text) for text in shown))
    numbers = {n for n, _ in given}
    for n, u in sorted(_quantities(plain(prose))):
        if n in numbers and (n, u) not in given:
            return f"states {n} {u}, where the cited block gives {n} another unit"
    terms = set(ragline.text.tokenize(prose))
    if not terms:
        return None
    candidates = [c for text in shown for line in text.splitlines() for c in {line, *sentences(line)} if c.strip()]
    overlap = {c: len(terms & set(ragline.text.tokenize(c))) for c in candidates}
    best = max(overlap.values(), default=0)
    if best == 0:
        return None
    verdicts = [_negation_differs(prose, terms, c) for c in candidates if overlap[c] == best]
    return None if None in verdicts else verdicts[0]  # ties: the benefit of the doubt


def unsupported(
    sentence: str, sources: Sequence[Source], cited: Sequence[int], prompt: Sequence[str] = (), written: bool = False
) -> str | None:
    """Why the blocks `cited` (numbers into `sources`) do not support `sentence`, or None when they do.

    In order: the sentence's words are a run of a block's heading path (an echoed heading,
    "[1] Error codes > Why NW-5001 is different"; a reader's lead-in that is a cited block's own heading
    line, "Recovery steps:", is a quote of it) or of a prompt text (the instructions, the
    question), and not of a cited block's prose (a list item that is also another block's
    heading is a quote); a fact it states (`stated`) is in none of the cited blocks; a `written`
    sentence (a model's, even one whose words are a run of the block's: "Deploy on Fridays" out of
    "Do not deploy on Fridays") says what they contradict (`_contradicts`); fewer than SUPPORT of
    its terms are in them.
    """
    body = CITATION.sub(" ", sentence)
    words = _words(body)
    proses = [_ATX.sub("", sources[n - 1].text) for n in cited]  # the cited blocks' prose, their heading lines out
    # a quote of the block's own prose, as it stands or as a reader sees it (links as their label)
    quoted = any(_within(words, _words(form)) for prose in proses for form in {prose, plain(prose)})
    # or, quoted by a reader (not `written`), a cited block's own heading line as the lead-in of the list its section opens
    # with ("Procedure for requesting escalated permission:", then its items: `choice.with_antecedent`)
    if not (quoted or written) and body.rstrip().endswith(":"):
        titles = [markdown.heading_title(line) or "" for n in cited for line in _ATX.findall(sources[n - 1].text)]
        quoted = any(words == _words(form) for title in titles for form in (title, plain(title)))
    if not quoted and any(_within(words, _words(" > ".join(s.headings))) for s in sources):
        return "repeats a heading path"
    if not quoted and any(_within(words, _words(p)) for p in prompt):
        return "repeats the prompt"
    held: set[str] = set().union(*(sources[n - 1].terms() for n in cited))
    missing = [t for t in stated(body) if t not in held]
    if missing:
        return f"states {', '.join(missing)}, which the cited block does not"
    if written and (why := _contradicts(body, [sources[n - 1].text for n in cited])) is not None:
        return why
    terms = set(ragline.text.tokenize(body))
    share = len(terms & held) / len(terms) if terms else 0.0
    if share < SUPPORT:
        return f"the cited block holds {len(terms & held)} of its {len(terms)} terms"
    return None


def check_citations(answer: str, sources: Sequence[Source], prompt: Sequence[str] = (), written: bool = False) -> Checked:
    """Check every sentence of `answer` against the context blocks `sources` ([1] is sources[0]).

    A sentence is kept when it cites at least one block that was really sent
    (1..len(sources)) and those blocks support it (`unsupported`: its facts are in them,
    enough of its terms are, and it is not a heading path or a piece of `prompt`, the texts
    the generator was given besides the blocks). Anything else is dropped, with why. In a
    sentence citing blocks sent and not sent, the markers of those not sent are removed.
    Escaped markers (`\\[7]`, quoted handbook text) are not citations. The extractive
    generator quotes the blocks, so its sentences pass by construction.

    A `written` answer (a model's) is attributed before anything is dropped: a sentence with
    no marker takes the markers of its paragraph (the next marked sentence on its line, else
    the last one before it), a sentence still without a marker of a block sent is cited to the
    first block sent that supports it, and a sentence its blocks do not support but another block
    sent does is cited to that block instead (both in `Checked.recited`); a fragment (fewer than
    MIN_WORDS words, or a heading-like run of capitalised words) is dropped as such. An
    invented fact is still dropped: no block sent supports it.
    """
    out = Checked()
    n_blocks = len(sources)
    units = _attributed(_units(answer)) if written else [u for _, u in _units(answer)]
    for sentence in units:
        if not CITATION.sub("", sentence).strip(" .!?"):
            continue  # a bare marker with nothing to cite for
        numbers = [int(m) for m in CITATION.findall(sentence)]
        valid = list(dict.fromkeys(n for n in numbers if 1 <= n <= n_blocks))
        if written and (why := _fragment(sentence)) is not None:
            out.dropped.append((sentence, why))
            continue
        if not valid and written and (other := _supporter(sentence, sources, prompt)) is not None:
            out.recited.append((sentence, [], other))  # a written sentence with no marker of a block sent, which one supports
            sentence, valid = _cite_to(sentence, other), [other]
        if not valid:
            out.dropped.append((sentence, "cites no block that was sent" if numbers else "cites nothing"))
            continue
        if any(not 1 <= n <= n_blocks for n in numbers):
            sentence = CITATION.sub(lambda m: m.group(0) if 1 <= int(m.group(1)) <= n_blocks else "", sentence)
            sentence = re.sub(r"\s{2,}", " ", sentence).strip()
        why = unsupported(sentence, sources, valid, prompt, written)
        if why is not None and written:
            other = _supporter(sentence, sources, prompt, valid)
            if other is not None:
                out.recited.append((sentence, valid, other))
                sentence, valid, why = _cite_to(sentence, other), [other], None
        if why is not None:
            out.dropped.append((sentence, why))
            continue
        out.kept.append(sentence)
        out.cited.extend(n for n in valid if n not in out.cited)
    return out


def _supporter(sentence: str, sources: Sequence[Source], prompt: Sequence[str], besides: Sequence[int] = ()) -> int | None:
    """The first block sent (in rank order), other than `besides`, that supports `sentence` alone; None if none does."""
    return next(
        (n for n in range(1, len(sources) + 1) if n not in besides and unsupported(sentence, sources, [n], prompt, True) is None), None
    )


MIN_WORDS = 3  # a written sentence of fewer words is a fragment ("[3] Sandbox Accounts"), not an answer
_MARKERS = re.compile(r"(?:\s*(?<!\\)\[\d{1,3}\])+")


def _attributed(units: list[tuple[int, str]]) -> list[str]:
    """Each unit, a marker-less one given its paragraph's markers (the next marked unit on its line,
    else the last marked one before it on the line); a paragraph with no marker stays as it is."""
    out = [u for _, u in units]
    for i, (line, unit) in enumerate(units):
        if CITATION.search(unit) or not unit.strip():
            continue
        after = [u for at, u in units[i + 1 :] if at == line and CITATION.search(u)]
        before = [u for at, u in units[:i] if at == line and CITATION.search(u)]
        donor = after[0] if after else before[-1] if before else None
        if donor is not None:
            markers = "".join(f"[{n}]" for n in dict.fromkeys(CITATION.findall(donor)))
            out[i] = _with_markers(unit, markers)
    return out


def _with_markers(sentence: str, markers: str) -> str:
    body = sentence.rstrip()
    if body.endswith((".", "!", "?")):
        return f"{body[:-1]} {markers}{body[-1]}"
    return f"{body} {markers}"


def _cite_to(sentence: str, n: int) -> str:
    """The sentence with its markers replaced by [n]."""
    return _with_markers(_MARKERS.sub("", sentence).rstrip(), f"[{n}]")


def _fragment(sentence: str) -> str | None:
    """Why a written sentence is a fragment, not an answer: too few words, or a heading-like run of capitalised words."""
    words = [w for w in CITATION.sub(" ", sentence).replace("`", " ").split() if any(c.isalnum() for c in w)]
    if len(words) < MIN_WORDS:
        return f"a fragment of {len(words)} word{'s' if len(words) != 1 else ''}, not a sentence"
    if len(words) <= 6 and all(w[0].isupper() or not w[0].isalpha() for w in words) and not sentence.rstrip().endswith((".", "!", "?")):
        return "a heading, not a sentence"
    return None


def quoted(text: str, kind: str, header: str = "") -> str:
    """A piece as an answer quotes it, before its markers: prose without its markup (`plain`),
    code as it is, a table row with its header row (each cell after its column's name,
    `Priority: P1 | Response: 20 minutes`, where the two have as many cells); any `[n]` in it
    made inert, HTML entities read as their characters (`&mdash;` as a dash). What a reader of
    the answer, and a model judging or writing from the piece, sees."""
    if kind == "row" and header:
        names, cells = header.split(" | "), text.strip().split(" | ")
        if len(names) == len(cells) and all(names):
            text = " | ".join(f"{name}: {cell}" for name, cell in zip(names, cells, strict=True) if cell)
    return escape_markers(text.strip() if kind == "code" else html.unescape(plain(text.strip())))


def cite(text: str, n: int, kind: str, header: str = "") -> str:
    """The quoted text (`quoted`) with its marker on every sentence (before a closing full
    stop), once at the end of a table row, or on its own line after a code block."""
    text = quoted(text, kind, header)
    if kind == "code":
        return f"{text}\n[{n}]"
    if kind == "row":  # one marker for the row: its cells are not sentences of their own
        return f"{text[:-1]} [{n}]." if text.endswith(".") else f"{text} [{n}]"
    marked = []
    pieces = sentences(text)
    for i in range(len(pieces) - 1):  # a glossary's "Sweep. The settlement job ...": the term leads its definition
        if len(pieces[i].split()) == 1 and pieces[i].endswith(".") and pieces[i + 1]:
            pieces[i + 1] = f"{pieces[i][:-1]}: {pieces[i + 1]}"
            pieces[i] = ""
    for sentence in filter(None, pieces):
        if sentence.endswith((".", "!", "?")):
            marked.append(f"{sentence[:-1]} [{n}]{sentence[-1]}")
        else:
            marked.append(f"{sentence} [{n}]")
    return " ".join(marked)
