"""span: the local model scores candidate spans of the best blocks (`--reader span`).

The extractive reader ranks the context's pieces (`ragline.answer.extractive`); this reader
then chooses *what unit* to quote. From the blocks holding the best-ranked pieces it makes
candidate spans (`spans`): a piece alone, a sentence with the next one of its paragraph, a
list item with what introduces it, a whole short list, a code block with the sentence before
it. The local model scores each by pointwise mutual information with the question:

    pmi(span) = log P(span | instruction, block, question) - log P(span | instruction, block)

(each a sum over the span's tokens, `LocalModel.logprobs`), so a span wins by being what the
question makes likely, not by being likely anyway (a short or common sentence). The block is
the prefix every span of it shares, decoded once; the spans of one block go in one batch.
A span's score is its best piece's extractive score (relative to the best piece's) plus
`SpanWeights.weight` x its PMI min-max scaled among the candidates (`ragline.answer.choice.span_choice`);
the best span is quoted, in the handbook's own words. The scoring has the question's
`ragline.answer.local.Budget` (RAG_LOCAL_TIMEOUT, RAG_LOCAL_TOKENS); past it (or past the
context: a block too long to be a prefix), the extractive choice is quoted, and the answer
record's `fallback` says why.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ragline.answer import choice as rule
from ragline.answer.choice import SPANNED, ChoiceWeights, Scored, SpanWeights
from ragline.answer.citations import quoted
from ragline.answer.context import ContextBlock, Piece
from ragline.answer.extractive import FEATURES, Extended
from ragline.answer.local import BOUNDS, Bounds, Budget, LocalModel, OverBudget, bounds, load
from ragline.answer.reader import Embed, Setup
from ragline.bm25 import Bm25

INSTRUCTION = "Read the passage from an engineering handbook, then quote the words of it that answer the question.\n\n"


@dataclass(frozen=True)
class Span:
    """A candidate unit to quote: its pieces in handbook order, and its shape."""

    pieces: tuple[Piece, ...]
    shape: str  # piece, pair, item+lead, list, code+lead

    @property
    def words(self) -> int:
        return rule.size(self.pieces)

    def text(self) -> str:
        return "\n".join(quoted(p.text, p.kind, p.header) for p in self.pieces)


def spans(block: Sequence[Piece], around: Sequence[Piece], budget: int) -> list[Span]:
    """The candidate spans of one block's pieces (`block`, in order) that hold a piece of `around`
    (the best-ranked): each such piece alone; with the next sentence of its paragraph; a list
    item with its lead (the sentence that introduces its list, or its parent item); its whole
    list where that fits `budget` words; a code block with the sentence just before it.
    Prose spans over `budget` words are left out (code is whole or nothing); no span twice."""
    at = {p.position: p for p in block}
    out: list[Span] = []
    seen: set[tuple[int, ...]] = set()

    def add(pieces: Sequence[Piece], shape: str) -> None:
        ordered = tuple(sorted(dict.fromkeys(pieces), key=lambda p: p.position))
        key = tuple(p.position for p in ordered)
        span = Span(ordered, shape)
        if key in seen or (shape != "code+lead" and any(p.kind != "code" for p in ordered) and span.words > budget):
            return
        seen.add(key)
        out.append(span)

    for p in around:
        add([p], "piece")
        nxt = at.get(p.position + 1)
        if p.kind == "sentence" and nxt is not None and nxt.kind == "sentence" and nxt.group == p.group:
            add([p, nxt], "pair")
        if p.kind == "item":
            if (lead := at.get(p.lead)) is not None:
                add([lead, p], "item+lead")
            group = [x for x in block if x.kind == "item" and x.group == p.group]
            intro = at.get(group[0].lead) if group and group[0].lead >= 0 else None
            add([*([intro] if intro is not None else []), *group], "list")
        if p.kind == "code" and (before := at.get(p.position - 1)) is not None and before.kind == "sentence":
            add([before, p], "code+lead")
    return out


def pmi(
    model: LocalModel, question: str, blocks: Sequence[ContextBlock], texts: Sequence[tuple[int, str]], budget: Budget | None = None
) -> list[float]:
    """PMI of each (block number, text quoted from that block) with the question:

        log P(text | INSTRUCTION, block, question) - log P(text | INSTRUCTION, block)

    each a sum over the text's tokens (`LocalModel.logprobs`), block by block: the instruction and
    the block (its heading path, then its quotable pieces) are the prefix decoded once, and each
    text is scored after "Question: ...\nAnswer:" and after "Answer:" alone, in one batch."""
    shown = {b.n: b for b in blocks}
    values = [0.0] * len(texts)
    asked = "Question: " + " ".join(question.split()) + "\nAnswer:"
    for n in dict.fromkeys(block for block, _ in texts):
        block = shown[n]
        prefix = (
            INSTRUCTION
            + f"Passage ({' > '.join(block.headings)}):\n"
            + "\n".join(quoted(p.text, p.kind, p.header) for p in block.quotes(True))
        )
        mine = [i for i, (b, _) in enumerate(texts) if b == n]
        pairs = [(f"\n\n{head}", " " + texts[i][1]) for i in mine for head in (asked, "Answer:")]
        scored = model.logprobs(prefix, pairs, budget)
        for k, i in enumerate(mine):
            (with_q, _), (without, _) = scored[2 * k], scored[2 * k + 1]
            values[i] = with_q - without
    return values


class SpanScored(Extended):
    """`Extractive`, whose choice is the best candidate span by extractive score and the model's PMI."""

    name = "span"

    def __init__(
        self,
        model: LocalModel,
        features: tuple[str, ...] = FEATURES,
        idf_source: Bm25 | None = None,
        embed: Embed | None = None,
        spanning: SpanWeights = SPANNED,
        choice: ChoiceWeights = rule.FITTED,
        bounds: Bounds = BOUNDS,
    ):
        super().__init__(model, features, idf_source, embed, choice, bounds)
        self.spanning = spanning

    def candidates(self, blocks: list[ContextBlock], ranked: list[Scored], every: list[Piece]) -> list[tuple[Span, float]]:
        """The candidate spans with their extractive score (their best piece's): from the blocks of the
        `spanning.pieces` best-ranked pieces, at most `spanning.blocks` blocks, `spanning.spans` spans."""
        head = ranked[: self.spanning.pieces]
        score = {(s.piece.block, s.piece.position): s.score for s in ranked}
        chosen_blocks = list(dict.fromkeys(s.piece.block for s in head))[: self.spanning.blocks]
        out: list[tuple[Span, float]] = []
        for n in chosen_blocks:
            block = [p for p in every if p.block == n]
            around = [s.piece for s in head if s.piece.block == n]
            for span in spans(block, around, self.choice.budget):
                out.append((span, max(score.get((p.block, p.position), 0.0) for p in span.pieces)))
        out.sort(key=lambda c: -c[1])
        return out[: self.spanning.spans]

    def pmi(self, question: str, blocks: list[ContextBlock], cands: list[Span], budget: Budget | None = None) -> list[float]:
        """PMI of each span with the question (`pmi`), all within `budget`."""
        return pmi(self.model, question, blocks, [(c.pieces[0].block, c.text()) for c in cands], budget)

    def choose(
        self, question: str, blocks: list[ContextBlock], ranked: list[Scored], every: list[Piece], cands: list[Piece], cue: str | None
    ) -> list[Piece]:
        found = self.candidates(blocks, ranked, every)
        if not found:
            return super().choose(question, blocks, ranked, every, cands, cue)
        try:
            pmi = self.pmi(question, blocks, [s for s, _ in found], self.bounds.start())
        except OverBudget as over:
            self.give_way(over.why, "unscored")
            return super().choose(question, blocks, ranked, every, cands, cue)
        best = rule.span_choice([score for _, score in found], pmi, self.spanning.weight)
        return list(found[best][0].pieces)

    def settings(self) -> dict[str, Any]:
        return {"spans": self.spanning.spans}


def build(setup: Setup) -> SpanScored:
    return SpanScored(load(setup), setup.features, setup.bm25, setup.embed, bounds=bounds())
