"""judge: the extractive reader with the local model judging its best pieces (`--reader judge`).

The `JudgeWeights.pieces` best pieces by the extractive score are judged by the local model
(`ragline.answer.local.Judge`: query likelihood of the question after the piece, by default);
each gains `weight` x its judgement relative to the best judged piece's, and the choice runs on
the new order. With `floor` > 0, a question none of whose pieces is judged to reach it is
refused. What is quoted is still the handbook's own words. The judging has the question's
`ragline.answer.local.Budget` (RAG_LOCAL_TIMEOUT, RAG_LOCAL_TOKENS); past it, the extractive
choice is quoted, and the answer record's `fallback` says why.
"""

from __future__ import annotations

from typing import Any

from ragline.answer import choice as rule
from ragline.answer import refusal
from ragline.answer.choice import JUDGED, ChoiceWeights, JudgeWeights, Scored
from ragline.answer.citations import quoted
from ragline.answer.context import ContextBlock, Piece
from ragline.answer.extractive import FEATURES, Extended
from ragline.answer.local import BOUNDS, Bounds, Judge, OverBudget, bounds, load
from ragline.answer.reader import Embed, Setup
from ragline.answer.refusal import NoAnswer
from ragline.bm25 import Bm25


class Judged(Extended):
    """`Extractive`, its ranking rescored by the local model's judgement before the choice."""

    name = "judge"

    def __init__(
        self,
        judge: Judge,
        features: tuple[str, ...] = FEATURES,
        idf_source: Bm25 | None = None,
        embed: Embed | None = None,
        judging: JudgeWeights = JUDGED,
        choice: ChoiceWeights = rule.FITTED,
        bounds: Bounds = BOUNDS,
    ):
        super().__init__(judge.model, features, idf_source, embed, choice, bounds)
        self.judge, self.judging = judge, judging

    def choose(
        self, question: str, blocks: list[ContextBlock], ranked: list[Scored], every: list[Piece], cands: list[Piece], cue: str | None
    ) -> list[Piece]:
        head = [s.piece for s in ranked[: self.judging.pieces]]
        paths = {b.n: b.headings for b in blocks}
        try:
            judged = self.judge.scores(question, [(paths[p.block], quoted(p.text, p.kind, p.header)) for p in head], self.bounds.start())
        except OverBudget as over:
            self.give_way(over.why, "unjudged")
            return super().choose(question, blocks, ranked, every, cands, cue)
        if (why := refusal.judged_none(judged, self.judging.floor)) is not None:
            raise NoAnswer(why)
        return super().choose(question, blocks, rule.rescore(ranked, rule.relative(judged), self.judging.weight), every, cands, cue)

    def settings(self) -> dict[str, Any]:
        return {"judge": self.judge.method, "judged": self.judging.pieces}


def build(setup: Setup) -> Judged:
    return Judged(Judge(load(setup)), setup.features, setup.bm25, setup.embed, bounds=bounds())
