"""choice: how the extractive reader chooses what to quote, as pure functions over scored pieces.

The whole rule, in the order it runs:

1. `rank`: every candidate piece (`ragline.answer.context.Piece`) gets a score from the
   question's terms (each weighted by its idf, or 1), the block's heading path, what the
   question asks for (`ragline.answer.cues.cue_match`; for steps and advice, less the lower the block)
   and the block's rank; best first.
2. `rescore`: the DENSE_POOL best get the cosine of the question with the piece (the
   reader computes it with the index's embedder), weighted, and are ranked again; with the
   local model as a judge, the `JudgeWeights.pieces` best then get its judgement relative to
   the best judged piece's (`relative`), weighted.
3. `select`: `choose` picks the pieces, the one that answers first: a steps question whose best
   piece is a list item gets that list within `listed` words (`fit_list`); a further list item over the word budget
   is quoted as its first sentence; a code block is the answer alone and never a further piece; a question after a
   time, a duration, a number or a name gets a piece holding it (`holds_asked`), and once the best
   piece holds it nothing comes from a lower block (but for a frequency: `HOW_OFTEN`); a lead
   that brings its list, table or code (`continued`) is the answer alone; each piece that
   leads in to what follows brings that, and a list item brings what introduces it where that
   carries the question's condition or the item only finishes its sentence (`with_leads`); a sentence opening "For example" brings the
   sentence before it, the claim it illustrates (`with_claims`); a first piece that states a problem and
   nothing of what to do brings the next sentence where that says what to do (`with_remedy`); a table row over
   the word budget is quoted in the cells that answer, after the cell that names the row (`fit_row`).
4. Then, whichever reader chose the pieces (`ragline.answer.extractive.Extractive.generate`): an answer to a steps
   question opens with its section's first sentence where that is an order left out (`with_first_step`), and a first
   piece pointing back at what only its heading names is quoted after the heading, and a first item of the list its
   section opens with after the heading as its lead-in (`with_antecedent`).

The numbers are `ChoiceWeights`; `FITTED` is what `just fit-answer` chose.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import ragline.text
from ragline import markup
from ragline.answer.citations import sentences
from ragline.answer.context import Piece
from ragline.answer.cues import ANNOUNCES, HOW_OFTEN, STATES, asked_quantity, cue_match, holds_quantity, orders
from ragline.text import leads_in

BY_BLOCK = ("steps", "advice")  # cues whose match counts less the lower the block (`rank`)
DENSE_POOL = 12  # candidates the dense similarity rescores (embedding them all costs ~0.7 s a question)


@dataclass(frozen=True)
class ChoiceWeights:
    """The numbers of the extractive sentence choice (`rank`, `choose`).

    `headings`, `cue`, `dense`, `rank` weigh the score's terms; `keep` is the share of the
    best score a further piece needs, `most` the pieces quoted at most, `budget` the words
    further pieces may bring the answer to, `listed` the words a list quoted as the answer may
    take (`fit_list`). `FITTED` is what ships.
    """

    headings: float
    cue: float
    dense: float
    rank: float
    keep: float
    most: int
    budget: int
    listed: int = 100


# Fitted by `just fit-answer` (scripts/fit_answer.py): the grid point with the best mean answer-ok
# (an answer over 100 words counts as wrong) of answerable questions over the five development
# corpora, the default retrieval's top 5 blocks; leave-one-corpus-out and the hand-set weights it
# replaced in results/answer-fit.json. tests/test_golden.py checks these against that file.
FITTED = ChoiceWeights(headings=0.3, cue=0.3, dense=0.3, rank=0.15, keep=0.35, most=3, budget=60, listed=60)


@dataclass(frozen=True)
class JudgeWeights:
    """How the local model's judgement joins the choice (`rag-answer --llm local`): the `pieces`
    best by the score above are judged, each gains `weight` x its judgement relative to the best
    judged piece's (`relative`, `rescore`), and with `floor` > 0 a question none of whose pieces'
    judgement reaches `floor` is refused (`ragline.answer.refusal.judged_none`)."""

    pieces: int
    weight: float
    floor: float


# Fitted by `just fit-judge` (scripts/fit_judge.py) on the five development corpora with the default local model;
# leave-one-corpus-out in results/judge-fit.json, which tests/test_golden.py checks these against. The best the grid
# holds: on the mean and on every corpus but GitLab's it answers fewer questions right than the extractive reader
# alone (docs/answers.md).
JUDGED = JudgeWeights(pieces=12, weight=0.5, floor=0.0)


@dataclass(frozen=True)
class SpanWeights:
    """How the span reader (`rag-answer --reader span`, `ragline.answer.span`) chooses: spans are made
    around the `pieces` best-ranked pieces, from at most `blocks` blocks, `spans` of them scored by
    the local model, and a span's score is its extractive score relative to the best candidate's
    plus `weight` x its PMI min-max scaled among the candidates (`span_choice`)."""

    pieces: int
    blocks: int
    spans: int
    weight: float


# Chosen by scripts/fit_span.py (`just fit-span`) on the five development corpora: results/span-fit.json.
SPANNED = SpanWeights(pieces=3, blocks=2, spans=4, weight=0.25)


@dataclass(frozen=True)
class PmiWeights:
    """How the PMI reader (`rag-answer --reader pmi`, `ragline.answer.pmi`) weighs pieces: every candidate
    piece of the `blocks` blocks first met down the ranking (each block by its best piece) is scored by the local model, and gains
    `weight` x its PMI with the question min-max scaled among them (`pmi_rescore`)."""

    blocks: int
    weight: float


# Chosen by scripts/fit_pmi.py (`just fit-pmi`) on the five development corpora: results/pmi-fit.json,
# which tests/test_golden.py checks this against.
PMI_FITTED = PmiWeights(blocks=2, weight=0.1)


class Scored(NamedTuple):
    """A piece and its score (higher is better)."""

    score: float
    piece: Piece


def _order(s: Scored) -> tuple[float, int, int]:
    return (-s.score, s.piece.block, s.piece.position)


def rank(
    question: str,
    weights: dict[str, float],
    pieces: Sequence[Piece],
    headings: dict[int, set[str]] | None,
    cue: str | None,
    choice: ChoiceWeights = FITTED,
) -> tuple[list[Scored], float]:
    """(the pieces scored, best first; the best lexical and heading match).

    Score of piece s from block b, with T the question's terms and w(t) their `weights`
    (`headings`: each block's heading-path terms, None to leave them out):
        sum(w(t) for t in T if t in s) / sum(w)
      + headings * sum(w(t) for t in T if t in b's heading path) / sum(w)   (with `headings`)
      + cue      * cue_match(cue, s, question)                              (with a cue; / b for steps, advice)
      + rank     / b
    A nested list item's terms T are its own and its top-level item's. Ties go to the earlier
    block, then the earlier piece. The match returned is the best of
    the first two terms: 0 means no word of the question in any piece or heading.
    """
    total = sum(weights.values())
    matched = 0.0
    out: list[Scored] = []
    at = {(p.block, p.position): p for p in pieces}
    for p in pieces:
        terms = ragline.text.term_set(p.text)
        if p.kind == "item" and (parent := at.get((p.block, p.lead))) is not None and parent.kind == "item":
            terms |= ragline.text.term_set(parent.text)  # a nested item means what its parent says of it
        score = sum(w for t, w in weights.items() if t in terms) / total
        if headings is not None:
            score += choice.headings * sum(w for t, w in weights.items() if t in headings[p.block]) / total
        matched = max(matched, score)
        if cue:
            # a list or code answers a steps question, advice an advice question, in the block retrieval put first;
            # further down, less
            score += choice.cue * cue_match(cue, p, question) / (p.block if cue in BY_BLOCK else 1)
        score += choice.rank / p.block
        out.append(Scored(score, p))
    return sorted(out, key=_order), matched


def rescore(ranked: list[Scored], values: Sequence[float], weight: float) -> list[Scored]:
    """The first len(values) of `ranked` each plus `weight` x its value (a cosine with the
    question, a model's judgement), ranked again among themselves, then the rest as they were."""
    n = len(values)
    pool = [Scored(s.score + weight * float(v), s.piece) for s, v in zip(ranked[:n], values, strict=True)]
    return sorted(pool, key=_order) + ranked[n:]


def relative(values: Sequence[float]) -> list[float]:
    """Each value over the largest (the best judged piece gets 1.0): a judgement's scale differs from
    question to question (how predictable the question's words are), its order within one does not.
    All zero (or none): all zero."""
    top = max(values, default=0.0)
    return [v / top for v in values] if top > 0 else [0.0 for _ in values]


def minmax(values: Sequence[float]) -> list[float]:
    """Each value min-max scaled to [0, 1] among `values`; all equal (or one): all 0, so they tell
    nothing apart."""
    low, high = min(values, default=0.0), max(values, default=0.0)
    return [(v - low) / (high - low) if high > low else 0.0 for v in values]


def pmi_rescore(ranked: list[Scored], weighed: Sequence[Piece], pmi: Sequence[float], weight: float) -> list[Scored]:
    """`ranked` with each piece of `weighed` plus `weight` x its PMI min-max scaled among them
    (`minmax`), the whole ranking sorted again; the pieces not weighed keep their score."""
    bonus = {(p.block, p.position): weight * v for p, v in zip(weighed, minmax(pmi), strict=True)}
    return sorted((Scored(s.score + bonus.get((s.piece.block, s.piece.position), 0.0), s.piece) for s in ranked), key=_order)


def span_choice(scores: Sequence[float], pmi: Sequence[float], weight: float) -> int:
    """The index of the span to quote: the best of score / max(scores) + weight x (pmi - min) /
    (max - min), the PMI scaled among these candidates (all equal: 0 for each, so the extractive
    order decides); ties to the earlier candidate. No candidates: a ValueError."""
    if not scores:
        raise ValueError("no candidate spans")
    top = max(scores)
    total = [(s / top if top > 0 else 0.0) + weight * v for s, v in zip(scores, minmax(pmi), strict=True)]
    return max(range(len(total)), key=lambda i: (total[i], -i))


def asks(piece: Piece) -> bool:
    """Whether a piece is a sentence that is itself a question: its text, closing emphasis and quotes
    aside, ends in a question mark. A list's items are not asked: a list of questions is content
    (the four questions a threat-modelling session answers)."""
    return piece.kind == "sentence" and asking(piece.text)


def asking(text: str) -> bool:
    """Whether a text, closing emphasis, code and quotes aside, ends in a question mark."""
    return text.rstrip(" *_`)\"'\u201d\u2019").endswith("?")


# a paragraph that is only pictures, linked or not: `![GitLab.com deployment process](/images/....png)`, a badge
# `[![Build status](x.svg)](pipeline)` or a line of them, `![a][ref]`, a title or URL with parentheses, a kramdown
# attribute list after it (`{: .shadow}`)
_TARGET = r"(?:\((?:[^()\n]|\([^()\n]{0,500}\)){0,2048}\)|\[[^\]\n]{0,500}\])"
_IMAGE = r"!\[(?:[^\[\]\n]|\[[^\[\]\n]{0,200}\]){0,500}\]" + _TARGET
_PICTURE = re.compile(rf"(?:(?:{_IMAGE}|\[\s*{_IMAGE}\s*\]{_TARGET})(?:\{{:?[^}}\n]{{0,200}}\}})?[\s.]*)+")
_LIST_MARK = re.compile(rf"^\s*(?:{markup.MARKER})\s+")  # an item's marker, where it opens the item


def pictures(piece: Piece) -> bool:
    """Whether a piece is a sentence (or a list item, its marker aside) that is only pictures (images, or images in
    links: badges): an alt text says what a picture shows, not what the handbook states, and is no answer."""
    text = _LIST_MARK.sub("", piece.text, count=1) if piece.kind == "item" else piece.text
    return piece.kind in ("sentence", "item") and _PICTURE.fullmatch(text.strip()) is not None


def holds_asked(cue: str | None, piece: Piece, question: str) -> bool:
    """Whether a piece holds what the question asks for: the cue's kind fully
    (`cue_match`), and the precise quantity where the question names one (`asked_quantity`:
    "how many days" wants a number of days, not any number)."""
    if cue not in ("time", "duration", "number", "name"):
        return False
    if cue == "number" and (asked := asked_quantity(question)) is not None:
        return holds_quantity(asked, piece.text, question)
    return cue_match(cue, piece, question) == 1.0


def quotes_list(ranked: list[Scored], cue: str | None) -> bool:
    """Whether `choose` quotes a list as the answer: a steps question whose best piece is a list item."""
    return cue == "steps" and ranked[0].piece.kind == "item"


def choose(ranked: list[Scored], pieces: Sequence[Piece], question: str, cue: str | None, weights: ChoiceWeights) -> list[Piece]:
    """The pieces to quote, the one that answers first.

    For a steps question whose best candidate is a list item: its list, in its order, within
    `listed` words (`fit_list`).
    A code block: alone. Otherwise the best candidate, then up to `most - 1` more scoring at
    least `keep` of it while the answer stays within `budget` words; a list item over what is left
    of them is quoted as its first sentence (the step, not its detail, as `fit_list` cuts a list),
    where that stands for it (`item_step`); each place of a block is quoted once (`once`). A question after a
    time, a duration, a number or a name must get a piece holding it (`holds_asked`): when
    none of those chosen does, the best one that does and scores half the best's joins,
    from whichever block holds it, and the piece holding it leads; the rest follow in
    handbook order.
    """
    best = ranked[0]
    if quotes_list(ranked, cue):  # the list, in its own order, within `listed` words
        return fit_list([p for p in pieces if p.block == best.piece.block and p.group == best.piece.group], weights.listed, best.piece)
    if best.piece.kind == "code":
        return [best.piece]
    chosen = [best]
    words = len(best.piece.text.split())
    # the best already holds what is asked: nothing from a lower block (but a frequency: a handbook says how
    # often many things happen, "Daily restoration testing" beside "a full backup every 24 hours")
    settled = holds_asked(cue, best.piece, question) and not HOW_OFTEN.search(question)
    for s in ranked[1:]:
        if len(chosen) >= weights.most or s.score < weights.keep * best.score:
            break
        if settled and s.piece.block > best.piece.block:
            continue
        if s.piece.kind == "code":
            continue
        if words + len(s.piece.text.split()) > weights.budget and s.piece.kind == "item" and (step := item_step(s.piece)):
            s = Scored(s.score, step)
        if words + len(s.piece.text.split()) <= weights.budget:
            chosen.append(s)
            words += len(s.piece.text.split())
    if cue and not any(holds_asked(cue, s.piece, question) for s in chosen):
        fit = [s for s in ranked if holds_asked(cue, s.piece, question) and s.score >= 0.5 * best.score]
        if fit:
            chosen = [*chosen[: weights.most - 1], fit[0]]
    fits = [s for s in chosen if holds_asked(cue, s.piece, question)]
    lead = max(fits, key=lambda s: s.score) if fits else best
    return [lead.piece, *sorted((s.piece for s in chosen if s is not lead), key=lambda p: (p.block, p.position))]


STEP_WORDS_LEAST = 3  # the fewest words of prose an item's first sentence needs to stand for it (`item_step`)


def item_step(item: Piece) -> Piece | None:
    """A list item quoted as its first sentence, the step and not its detail (`choose`, for an item over the words
    left): None where that is the whole item, or asks, holds fenced code or a link or span cut open, has fewer than
    STEP_WORDS_LEAST words of prose ("- Step 1."), or is only a picture."""
    first = first_sentence(item.text)
    step = dataclasses.replace(item, text=first)
    if first == item.text or "```" in first or not balanced(first) or asking(first) or pictures(step):
        return None
    return step if prose_words(_LIST_MARK.sub("", first, count=1)) >= STEP_WORDS_LEAST else None


def continued(
    chosen: list[Piece], every: Sequence[Piece], weights: ChoiceWeights | None = None, as_list: bool = False, asked: str | None = None
) -> list[Piece]:
    """`chosen`, each sentence that leads in to what follows it, followed by that.

    "Our core languages for backend development are:" says nothing without the list
    after it; "then run:" nothing without its code block. The next piece of the same
    block comes along: a whole list or table, a code block, or one sentence (with the code block
    it leads in to: "check the migration number:", "Without namespace:", the command). A sentence
    without the colon leads in too when a list or table follows its paragraph at once
    and it announces one ("There are a number of tools in use." then more words, then
    the list; "the following", "several", "these") or names what the question asks a list of
    (`asked`, from `asked_plural`: "what sections make up ..." and "... broken up into many
    separate sections", then the sections). A sentence whose paragraph ends in a colon
    lead-in pointing back at it ("This should be done when at least one of the following
    applies:") brings that lead-in and what it introduces (`bridges`).

    With `weights`, the answer's length is bounded: the first piece's list is quoted within
    `listed` words (`fit_list`); a later piece brings its list only where the answer stays
    within `listed` words, and a lead-in ending in a colon that cannot bring it is left out
    (it says nothing alone). With `as_list` (`chosen` is a steps list `choose` cut to its words
    with `fit_list`), the items of that list bring nothing more.
    """
    out: list[Piece] = []
    words = size(chosen)
    for i, c in enumerate(chosen):
        if c in out:
            continue
        out.append(c)
        if as_list and c.kind == "item" and (c.block, c.group) == (chosen[0].block, chosen[0].group):
            continue  # an item of a list quoted as the answer (`fit_list`): the list is already as it should be
        after = [x for x in every if x.block == c.block and x.position > c.position]
        if bridges(c, after):  # "... certain situations in which ...", then "This should be done when ... the following applies:"
            c = after[0]
            out.append(c)
            words += size(new_to([c], chosen))
            after = after[1:]
        if not leads_in(c.text):
            after = [x for x in after if x.group != c.group]  # what follows its paragraph
            announced = ANNOUNCES.search(c.text) or (asked is not None and re.search(rf"\b{re.escape(asked)}\b", c.text, re.I))
            if not (c.kind == "sentence" and after and after[0].kind in ("item", "row") and announced):
                continue
        if not after:
            continue
        follow = after[0]
        more = [x for x in after if x.group == follow.group and x not in out] if follow.kind in ("item", "row") else [follow]
        # a lead-in to a lead-in ("check the migration number:", "Without namespace:", the command), within `listed` words
        chained = follow.kind == "sentence" and leads_in(follow.text) and len(after) > 1 and after[1].kind == "code"
        if chained and (weights is None or words + size(new_to([follow, after[1]], chosen)) <= weights.listed):
            more.append(after[1])
        if weights is not None and follow.kind in ("item", "row"):
            if i == 0:
                more = fit_list(more, weights.listed, items_at={x.position for x in every if x.block == c.block and x.kind == "item"})
            elif words + size(new_to(more, chosen)) > weights.listed:
                if leads_in(c.text):
                    out.pop()
                    words -= size([c])
                continue
        out.extend(x for x in more if x not in out)
        words += size(new_to(more, chosen))  # a piece `chosen` holds is counted already
    return out


def bridges(c: Piece, after: Sequence[Piece]) -> bool:
    """Whether sentence `c` is followed, in its paragraph, by the colon lead-in of a list or table that
    ends the paragraph and opens by pointing back at `c` (`ANAPHOR`: "This should be done when at least
    one of the following applies:"): the lead-in goes on from `c`, so `c` brings it and what it
    introduces. ("For example:" points at nothing: the examples are not what `c` says.)"""
    return (
        c.kind == "sentence"
        and not leads_in(c.text)
        and len(after) > 1
        and after[0].kind == "sentence"
        and after[0].group == c.group
        and leads_in(after[0].text)
        and ANAPHOR.match(after[0].text) is not None
        and after[1].kind in ("item", "row")
    )


ANAPHOR = re.compile(r"\W*(?:this|these|that|those|it|they|such)\b", re.I)  # a sentence going on from the one before


# "what sections make up ...", "which tools ...", "what are the steps to ...", "what kinds of checks ...": the plural
# noun asked after. A verb in its place is none: what follows it reads as a verb's object or complement, not as the
# noun's verb ("what does X mean", "what happens after I merge", "what counts as", "what belongs in", "what needs to be
# done", "what matters most": an article, a pronoun, a preposition, a condition, "to" or an adverb next; after "what
# are the" or "what kinds of" a noun it is); nor a word ending in -ss, -us or -is ("what process", "what status",
# "what analysis"; "alias" or "bias" passes). A verb followed by a bare noun ("what causes outages") is read as a noun
# asked after, and a sentence naming it seldom has a list after it.
_PLURAL = r"([a-z]{2,}(?<![sui])s)\b"  # not -ss, -us, -is
ASKED_PLURAL = re.compile(
    r"^\W*(?:what|which)\s+(?:(?:are\s+the|(?:kinds?|types?|sorts?)\s+of)\s+"
    + _PLURAL
    + r"|(?!(?:does|goes)\b)"
    + _PLURAL
    + r"(?!\s+(?:as|if|when|whether|where|the|a|an|my|our|your|their|this|that|these|those|it|we|i|you|he|she|they|to|in|on|at"
    r"|after|before|for|from|with|into|onto|next|most|more|least|here|there|now|then|once|during|until|up|out|off|down|over)\b))",
    re.I,
)


def asked_plural(question: str) -> str | None:
    """The plural noun a "what / which ..." question asks after (`ASKED_PLURAL`), or None: a sentence naming it that a
    list follows announces that list (`continued`): "... broken up into many separate sections", then the sections."""
    m = ASKED_PLURAL.match(question)
    return (m.group(1) or m.group(2)) if m else None


def new_to(pieces: Sequence[Piece], chosen: Sequence[Piece]) -> list[Piece]:
    """The pieces of `pieces` that `chosen` does not hold: what bringing them adds to the answer's words."""
    return [p for p in pieces if p not in chosen]


def size(pieces: Sequence[Piece]) -> int:
    """The words of `pieces`' texts: what the answer's word bounds count."""
    return sum(len(p.text.split()) for p in pieces)


def fit_list(items: list[Piece], most: int, keep: Piece | None = None, items_at: set[int] | None = None) -> list[Piece]:
    """A list (or a table's rows) quoted within `most` words, its structure kept, in its order: the
    whole list; else its top-level items (what a nested item details left out); else each
    top-level item's first sentence (the step, not its explanation); else every item clipped to
    its first words, `keep` (the item that answers best) whole (`clip_items`); else the items from
    the first, as many as fit, with `keep` always among them.
    `items_at`: the positions of the block's list items (a nested item's lead is one of them),
    where `items` may leave its parent out; by default those of `items`."""

    if size(items) <= most:
        return items
    at = items_at if items_at is not None else {p.position for p in items if p.kind == "item"}
    top = [p for p in items if not (p.kind == "item" and p.lead in at)]
    if keep is not None and keep not in top:
        keep = next((p for p in items if p.kind == "item" and p.position == keep.lead), None)
    if size(top) <= most:
        return top
    cut = [dataclasses.replace(p, text=first) if p.kind == "item" and (first := first_sentence(p.text)) != p.text else p for p in top]
    if keep is not None:
        keep = cut[top.index(keep)] if keep in top else None
    if size(cut) <= most:
        return cut
    if clipped := clip_items(cut, most, keep):
        return clipped
    out: list[Piece] = []
    room = most - (len(keep.text.split()) if keep is not None else 0)
    for p in cut:
        if p is keep:
            out.append(p)
        elif len(p.text.split()) <= room:
            out.append(p)
            room -= len(p.text.split())
        else:
            break
    if keep is not None and keep not in out:
        out.append(keep)
    return out or cut[:1]


CLIP_WORDS = 10  # the fewest words of a step's prose (its marker counted) a clipped list shows (`clip_items`)
_FENCED = re.compile(r"```.*?```", re.S)


def clip_items(items: list[Piece], most: int, keep: Piece | None = None) -> list[Piece] | None:
    """Every item of `items` (a list's steps) within `most` words together: each item's prose
    cut to its first k words, an ellipsis after what was cut, the largest k that fits, at least
    CLIP_WORDS; a command fenced in the item ("Log in: ``` gcloud auth login ```") is kept whole
    after its prose, since it is the step (prose after it is left out, an ellipsis says so); `keep`
    is not clipped; an item whose prose fits k words is left as it is. A cut never leaves a link or a code
    span open. None where even CLIP_WORDS each do not fit. Every step named is more of the answer
    to "how do I" than the first steps whole and the rest left out (the step that matters is
    often late: "4. Generate a postmortem")."""

    def clip(text: str, k: int) -> str:
        fences, prose = _FENCED.findall(text), _FENCED.split(text)
        if prose_words(text) <= k:
            return text  # nothing to clip
        head = prose[0].split()
        if len(head) > k:
            kept = head[:k]
            while len(kept) > 1 and not balanced(" ".join(kept)):  # no link or code span cut open
                kept.pop()
            lead = " ".join(kept) + " …"
        else:
            lead = " ".join(head)
        after = " …" if len(head) <= k and any(part.split() for part in prose[1:]) else ""  # prose after a command, left out
        return " ".join([lead, *fences]).strip() + after

    def clipped(k: int) -> list[Piece]:
        return [dataclasses.replace(p, text=clip(p.text, k)) if p.kind == "item" and p is not keep else p for p in items]

    if size(items) <= most:
        return items
    # from k = the longest prose clipping nothing, which does not fit: the largest k that clips something
    longest = max((prose_words(p.text) for p in items if p.kind == "item" and p is not keep), default=0)
    for k in range(longest - 1, CLIP_WORDS - 1, -1):
        if size(out := clipped(k)) <= most:
            return out
    return None


def prose_words(text: str) -> int:
    """The words of an item's text outside its fenced commands (`clip_items` cuts those, never a command)."""
    return sum(len(part.split()) for part in _FENCED.split(text))


def balanced(text: str) -> bool:
    """Whether `text` closes every code span, link text and link target it opens: "[the guide](x.md)"
    and "it broke :(" are balanced, "[the guide", "[the guide](x" and "run `make" are not. A bracket
    inside a code span, or a parenthesis outside a link's target, opens nothing."""
    code, texts, target = False, 0, 0  # in a code span; link texts open; the target's parentheses open
    for i, c in enumerate(text):
        if c == "`":
            code = not code
        elif code:
            continue
        elif target:
            target += {"(": 1, ")": -1}.get(c, 0)
        elif c == "[":
            texts += 1
        elif c == "]" and texts:
            texts -= 1
        elif c == "(" and text[i - 1 : i] == "]":
            target = 1  # "](": a link's target opens
    return not code and texts == 0 and target == 0


def first_sentence(text: str) -> str:
    """The first sentence of a list item's text (its marker kept), or the text as it is."""
    cut = sentences(text)
    return cut[0] if len(cut) > 1 else text


NEGATION = re.compile(r"\b(?:not|never|no|don't|do not|isn't|aren't|shouldn't|must not|cannot|can't|without|except|unless)\b", re.I)


def with_leads(quoted: list[Piece], every: Sequence[Piece], question: str) -> list[Piece]:
    """`quoted`, each list item preceded by what introduces it (`Piece.lead`: its list's lead-in
    sentence, a nested item's top-level item) where that carries the condition the question asks
    about: a term of the question the item lacks, or a negation ("the following are *not* an
    emergency:", then "- Rolling back a CL that broke the build"); or where the item only
    finishes the lead's sentence (`completes`)."""
    asked = ragline.text.term_set(question)

    def lead_of(p: Piece, at: dict[tuple[int, int], Piece]) -> Piece | None:
        lead = at.get((p.block, p.lead)) if p.kind == "item" and p.lead >= 0 else None
        if lead is None:
            return None
        missing = (ragline.text.term_set(lead.text) - ragline.text.term_set(p.text)) & asked
        return lead if missing or NEGATION.search(lead.text) or completes(p, lead) else None

    return preceded(quoted, every, lead_of)


FRAGMENT = re.compile(r"^\s*(?:[-*+]|\d{1,3}[.)])\s+[*_`\[]*[a-z]")  # an item opening in lower case: it goes on the lead's sentence


def completes(item: Piece, lead: Piece) -> bool:
    """Whether a list item finishes its lead-in's sentence: the lead ends in a colon and the item opens
    in lower case ("You should use <https://vdp...> in either:", then "- the origin for your site's
    `/.well-known/security.txt`"): the item alone says nothing of what the lead asks of it."""
    return lead.kind == "sentence" and bool(FRAGMENT.match(item.text))  # a list's lead-in ends in a colon (`context.pieces`)


def preceded(
    quoted: list[Piece], every: Sequence[Piece], before: Callable[[Piece, dict[tuple[int, int], Piece]], Piece | None]
) -> list[Piece]:
    """`quoted`, each piece preceded by the piece `before` names for it (given the piece and every piece of
    the context by (block, position)), where that is neither quoted nor already put before another."""
    at = {(p.block, p.position): p for p in every}
    out: list[Piece] = []
    for p in quoted:
        prior = before(p, at)
        if prior is not None and prior not in out and prior not in quoted:
            out.append(prior)
        if p not in out:
            out.append(p)
    return out


def select(
    ranked: list[Scored], every: Sequence[Piece], pieces: Sequence[Piece], question: str, cue: str | None, weights: ChoiceWeights
) -> list[Piece]:
    """What is quoted, in order: `choose`'s pieces, each followed by what it leads in to
    (`continued`); when the lead itself brings a list, a table or code, that is the answer
    alone; an item brings what introduces it where needed (`with_leads`), an example the claim
    it illustrates (`with_claims`), a stated problem the remedy after it (`with_remedy`); a table
    row over `budget` words is cut to the cells that answer (`fit_row`). `every` is all the
    context's pieces, `pieces` those that may be chosen."""
    chosen = choose(ranked, pieces, question, cue, weights)
    listed = quotes_list(ranked, cue)  # `choose` quoted the list itself (`fit_list`)
    asked = asked_plural(question)
    if not listed and len(continued(chosen[:1], every, asked=asked)) > 1:  # the lead brings its list, table or code: that is the answer
        chosen = chosen[:1]
    quoted = with_claims(with_leads(continued(chosen, every, weights, listed, asked), every, question), every)
    return [fit_row(p, question, weights.budget) for p in once(with_remedy(quoted, every, weights.budget))]


def once(quoted: list[Piece]) -> list[Piece]:
    """`quoted`, each place of a block (block, position) once, where it first comes: an item `choose` quoted as its step
    (`item_step`) is the same item as the whole one a lead-in, a list or a quantity asked for brings again."""
    seen: set[tuple[int, int]] = set()
    out = []
    for p in quoted:
        if (p.block, p.position) not in seen:
            seen.add((p.block, p.position))
            out.append(p)
    return out


# a sentence that says what to do, or what may or must happen: a modal, or a condition or purpose and its comma
PRESCRIBES = re.compile(
    r"\b(?:should|must|need|needs|can|may|might|will|would|could|shall)\b|^\W*(?:if|when|once|after|before|to)\b[^,]*,", re.I
)
# what to do about it: "you should ...", "The simplest fix is ...", "Instead, ...", "consider ..."
REMEDY = re.compile(
    r"\b(?:you|we)\s+(?:should|must|can|may|need|will need|might|could)\b"
    r"|\b(?:simplest|best|easiest|recommended|preferred|right|appropriate) (?:fix|way|approach|option|solution|path)\b"
    r"|^\W*(?:instead|rather)\b|\bconsider\b",
    re.I,
)


def with_remedy(quoted: list[Piece], every: Sequence[Piece], budget: int) -> list[Piece]:
    """`quoted`, its first piece followed by the next piece of its block (the next sentence of its paragraph, or the
    paragraph after's first) where the first is a sentence that opens as a statement (`STATES`: not an order,
    "Isolate test environments ...") and says nothing of what to do (no modal, no condition: `PRESCRIBES`) and the
    next is a sentence that does (`REMEDY`) and leads in to nothing: "The risk is when you have interpolation ...
    executed in a `run:`", then "The simplest fix is to use an intermediate environment variable". The answer stays
    within `budget` words, the last pieces of other blocks left out to make room, a list or paragraph whole or not at
    all (never a lead-in without its list), and never grows past its own length where that was more: else it is as
    it was."""
    if not quoted or quoted[0].kind != "sentence" or PRESCRIBES.search(quoted[0].text) or not STATES.match(quoted[0].text):
        return quoted
    first = quoted[0]
    after = next((p for p in every if (p.block, p.position) == (first.block, first.position + 1)), None)
    if after is None or after.kind != "sentence" or after in quoted or leads_in(after.text) or not REMEDY.search(after.text):
        return quoted
    out = [first, after, *quoted[1:]]
    while len(out) > 2 and out[-1].block != first.block and size(out) > budget:
        gone = out[-1]
        out = [p for p in out if p.block == first.block or (p.block, p.group) != (gone.block, gone.group)]  # its list whole
        while len(out) > 2 and out[-1].block != first.block and leads_in(out[-1].text):
            out.pop()  # a lead-in whose list went says nothing alone
    return out if size(out) <= max(budget, size(quoted)) and not leads_in(out[-1].text) else quoted


# a sentence that points back at what its section's heading names ("This deployment ..."; not "It's usually best ...")
POINTS_BACK = re.compile(r"\W*(?:this|these|that|those)\b", re.I)


def with_antecedent(quoted: list[Piece], headings: dict[int, list[str]]) -> list[Piece]:
    """`quoted`, its first piece opened by its section's heading where that piece is a sentence, opens its section (the
    block's first piece, position 0, the block being the section's first chunk: `headings` holds only those, the last
    its heading's title as written) and points back (`POINTS_BACK`) at what only the heading names: under
    "sourcegraph.sourcegraph.com (S2)", "This deployment is also colloquially referred to as ..." says nothing of which
    deployment it is. Where that piece is an item of the list the section opens with (the block's first part after its
    heading line: group 2), the heading is the list's lead-in and comes before it as one, `Heading:`: under "Procedure for
    requesting escalated permission for incident response", the item "Google group to be added to:
    gcp-admin-escalated@..." says nothing of what the group is for. A heading that asks or says something ("Does the
    backport PR merge?", "Step 1. Install": more than one sentence) names nothing; the heading's few words may take the
    answer past its budget."""
    if not quoted:
        return quoted
    first, head = quoted[0], (headings.get(quoted[0].block) or [""])[-1].strip().rstrip(":")
    if not head or head.endswith(("?", ".", "!")) or len(sentences(head)) > 1 or head.lower() in first.text.lower():
        return quoted
    if first.kind == "item" and first.group == 2:
        return [Piece(first.block, first.position, f"{head}:", "sentence", first.group), *quoted]
    if first.kind != "sentence" or first.position != 0 or POINTS_BACK.match(first.text) is None:
        return quoted
    return [dataclasses.replace(first, text=f"{head}: {first.text}"), *quoted[1:]]


EXAMPLE = re.compile(r"^\W*(?:(?:for example|for instance|as an example)\b|e\.g\.)", re.I)  # a sentence that illustrates the one before


def with_claims(quoted: list[Piece], every: Sequence[Piece]) -> list[Piece]:
    """`quoted`, each sentence that opens with "For example" (`EXAMPLE`) preceded by the sentence
    before it in its paragraph, the claim it illustrates, where that is not quoted already: the
    example alone ("say 'Delete the FizzBuzz RPC' instead of 'Deleting ...'") leaves out the rule
    it shows ("written as though it were an order (an imperative sentence)")."""

    def claim_of(p: Piece, at: dict[tuple[int, int], Piece]) -> Piece | None:
        claim = at.get((p.block, p.position - 1))
        if p.kind == "sentence" and EXAMPLE.search(p.text) and claim is not None and claim.kind == "sentence" and claim.group == p.group:
            return claim
        return None

    return preceded(quoted, every, claim_of)


STEP_WORDS = 15  # the most words of an order with code that may take an answer past its budget (`with_first_step`)


def with_first_step(quoted: list[Piece], every: Sequence[Piece], opening: Collection[int], budget: int) -> list[Piece]:
    """`quoted` (the answer to a steps question), opened by the first piece of its first piece's block where that block
    opens its section (`opening`: the numbers of such blocks; a later chunk of a section goes on from the one before)
    and that piece is a sentence, not quoted, that opens with an order (`cues.orders`) and introduces nothing (no
    colon, no "the following", "these": alone it would point at a list or a command that is not there). A section
    that says how in its first sentence and the details after it ("Capture a charge with
    `POST /v2/charges/{id}/capture`.", then "To capture less, pass `amount`; ...") is answered by both, the order
    first. Within `budget` words, or past it where the order is short (STEP_WORDS at most) and holds code: the
    endpoint or the command to use is the step itself."""
    if not quoted or quoted[0].block not in opening:
        return quoted
    first = next((p for p in every if p.block == quoted[0].block and p.position == 0), None)
    if first is None or first in quoted or first.kind != "sentence" or not orders(first.text):
        return quoted
    if leads_in(first.text) or ANNOUNCES.search(first.text):  # "Run the following commands ...": it points at what follows
        return quoted
    words = len(first.text.split())
    if size(quoted) + words > budget and not ("`" in first.text and words <= STEP_WORDS):
        return quoted
    return [first, *quoted]


def _cell_size(name: str, cell: str) -> int:
    return len(name.split()) + len(cell.split())


def fit_row(piece: Piece, question: str, most: int) -> Piece:
    """A table row quoted within `most` words, its column names counted (`citations.quoted` puts each
    cell after its name): the whole row where it fits; else its first cell (what names the row) and,
    in the row's order, the cells holding the most of the question's terms while they fit, a cell
    that fits no more cut to its first sentences (or first words) that do; cells with none of the
    question's terms only where no cell has any. Any other piece, or a row whose header does not
    match its cells, is returned as it is."""
    if piece.kind != "row" or not piece.header:
        return piece
    names, cells = piece.header.split(" | "), piece.text.strip().split(" | ")
    if len(names) != len(cells) or not all(names):
        return piece
    if sum(_cell_size(n, c) for n, c in zip(names, cells, strict=True) if c) <= most:
        return piece
    asked = ragline.text.term_set(question)
    overlap = [len(ragline.text.term_set(c) & asked) for c in cells]
    order = sorted(range(1, len(cells)), key=lambda i: (-overlap[i], i))
    if any(overlap[i] for i in order):
        order = [i for i in order if overlap[i]]
    kept: dict[int, str] = {}
    room = most
    for i in [0, *order]:
        if not cells[i]:
            continue
        size = _cell_size(names[i], cells[i])
        if size <= room:
            kept[i], room = cells[i], room - size
        elif cut := _cut(cells[i], room - len(names[i].split())):
            kept[i], room = cut, room - _cell_size(names[i], cut)
    at = sorted(kept)
    return dataclasses.replace(piece, text=" | ".join(kept[i] for i in at), header=" | ".join(names[i] for i in at))


def _cut(cell: str, most: int) -> str:
    """A cell's first sentences within `most` words, else its first `most` - 1 words and an ellipsis; "" when `most` < 3."""
    if most < 3:
        return ""
    out: list[str] = []
    for sentence in sentences(cell):
        if len(" ".join([*out, sentence]).split()) > most:
            break
        out.append(sentence)
    return " ".join(out) if out else " ".join(cell.split()[: most - 1]) + " …"
