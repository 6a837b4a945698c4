"""pmi: the extractive reader with the local model weighing each piece of its best blocks (`--reader pmi`).

The extractive reader ranks the context's pieces (`ragline.answer.extractive`); this reader
then asks the local model, of every candidate piece in the `PmiWeights.blocks` blocks first met
down the ranking (each block by its best piece), how much the question makes that piece the answer: its pointwise mutual
information with the question given its block,

    pmi(piece) = log P(piece | instruction, block, question) - log P(piece | instruction, block)

(`ragline.answer.span.pmi`: the block is the prefix decoded once, every piece scored after it
with and without the question in one batch). A piece that states the fact the question asks for
gains over the sentence that merely repeats the question's words: the difference is what the
question explains, not how likely the words are anyway. Each scored piece gains
`PmiWeights.weight` x its PMI min-max scaled among the scored pieces (`ragline.answer.choice.pmi_rescore`),
and the extractive choice (`choice.select`: how many pieces, a list with its lead, the word
budget) runs on the new order, so what is quoted is still the handbook's own words. The scoring
has the question's `ragline.answer.local.Budget` (RAG_LOCAL_TIMEOUT, RAG_LOCAL_TOKENS); past it,
the extractive choice is quoted and the answer record's `fallback` says why.
"""

from __future__ import annotations

from typing import Any

from ragline.answer import choice as rule
from ragline.answer.choice import PMI_FITTED, ChoiceWeights, PmiWeights, Scored
from ragline.answer.citations import quoted
from ragline.answer.context import ContextBlock, Piece
from ragline.answer.extractive import FEATURES, Extended
from ragline.answer.local import BOUNDS, Bounds, Budget, LocalModel, OverBudget, bounds, load
from ragline.answer.reader import Embed, Setup
from ragline.answer.span import pmi
from ragline.bm25 import Bm25


class PmiScored(Extended):
    """`Extractive`, its best blocks' pieces rescored by their PMI with the question before the choice."""

    name = "pmi"

    def __init__(
        self,
        model: LocalModel,
        features: tuple[str, ...] = FEATURES,
        idf_source: Bm25 | None = None,
        embed: Embed | None = None,
        weighing: PmiWeights = PMI_FITTED,
        choice: ChoiceWeights = rule.FITTED,
        bounds: Bounds = BOUNDS,
    ):
        super().__init__(model, features, idf_source, embed, choice, bounds)
        self.weighing = weighing

    def scored(self, ranked: list[Scored], cands: list[Piece]) -> list[Piece]:
        """The pieces the model weighs: every candidate of the `weighing.blocks` blocks first met
        down the ranking, in the ranking's order."""
        blocks = list(dict.fromkeys(s.piece.block for s in ranked))[: self.weighing.blocks]
        allowed = {(p.block, p.position) for p in cands}
        return [s.piece for s in ranked if s.piece.block in blocks and (s.piece.block, s.piece.position) in allowed]

    def values(self, question: str, blocks: list[ContextBlock], pieces: list[Piece], budget: Budget | None = None) -> list[float]:
        """Each piece's PMI with the question (`ragline.answer.span.pmi`), as quoted."""
        return pmi(self.model, question, blocks, [(p.block, quoted(p.text, p.kind, p.header)) for p in pieces], budget)

    def choose(
        self, question: str, blocks: list[ContextBlock], ranked: list[Scored], every: list[Piece], cands: list[Piece], cue: str | None
    ) -> list[Piece]:
        weighed = self.scored(ranked, cands)
        if len(weighed) < 2 or self.weighing.weight <= 0:
            return super().choose(question, blocks, ranked, every, cands, cue)
        try:
            values = self.values(question, blocks, weighed, self.bounds.start())
        except OverBudget as over:
            self.give_way(over.why, "unweighed")
            return super().choose(question, blocks, ranked, every, cands, cue)
        rescored = rule.pmi_rescore(ranked, weighed, values, self.weighing.weight)
        return super().choose(question, blocks, rescored, every, cands, cue)

    def settings(self) -> dict[str, Any]:
        return {"weighed_blocks": self.weighing.blocks}


def build(setup: Setup) -> PmiScored:
    return PmiScored(load(setup), setup.features, setup.bm25, setup.embed, bounds=bounds())
