"""extractive: the default reader, which quotes the handbook's best sentences and cannot invent.

`rag-answer --reader extractive`. It scores every candidate piece of the context (sentences of
unwrapped paragraphs, list items, table rows, code blocks: `ragline.answer.context.pieces`)
against the question and quotes the best, each with its block's [n]; the rule is
`ragline.answer.choice`, its switches ANSWER_FEATURES (one ablation each in `just eval`).
The readers that use the local model to judge (`ragline.answer.judge`), to score spans
(`ragline.answer.span`) or to weigh pieces by PMI (`ragline.answer.pmi`) are this reader with
one step added (they override `Extractive.choose`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

import ragline.text
from ragline.answer import choice as rule
from ragline.answer import refusal
from ragline.answer.choice import FITTED, ChoiceWeights, Scored
from ragline.answer.citations import cite
from ragline.answer.context import ContextBlock, Piece
from ragline.answer.cues import question_cue
from ragline.answer.reader import Embed, Setup
from ragline.bm25 import Bm25
from ragline.records import ANSWER_FEATURES

if TYPE_CHECKING:
    from ragline.answer.local import Bounds, LocalModel

FEATURES = ANSWER_FEATURES
MEMO_SENTENCES = 50_000  # candidate sentence vectors kept between questions (about 75 MB at 384 dimensions)
MEMO_QUESTIONS = 256  # question vectors kept between questions


class Extractive:
    """Quote the best sentences of the context, each with its block's [n].

    Score of a candidate sentence s from block b (each term switchable, for the ablation;
    the weights are `ChoiceWeights`, fitted):
        lexical(s)            share of the question's terms in s, idf-weighted ("idf")
                              or plain counts (without it)
      + headings * share of the question's terms in b's heading path ("headings")
      + cue      * how well s has what the question asks for: a time, a number, a
                   name, steps, a code block, advice (`cue_match`, "cue")
      + rank     / rank of b
      + dense    * cosine(question, s) with the index's embedder ("dense"), for the
                   DENSE_POOL best candidates by the terms above
    `choose` picks what is quoted from the ranking. A sentence that leads in with a colon,
    or announces a list, brings what it introduces (`continued`). Code is quoted only when
    the question asks for a command, a payload or a config, when it holds what is asked (a
    sample config's value), or when a quoted sentence introduces it. With no word of the question anywhere (a paraphrase), the dense
    similarity decides among the DENSE_POOL candidates of the best blocks. Prose is
    quoted without markdown markup or template tags (`plain`,
    `ragline.text.strip_templates`). `missing_evidence` refuses a question the context
    cannot answer from what it asks for.
    """

    name = "extractive"
    written = False

    def __init__(
        self, features: Iterable[str] = FEATURES, idf_source: Bm25 | None = None, embed: Embed | None = None, choice: ChoiceWeights = FITTED
    ):
        self.features = tuple(f for f in FEATURES if f in set(features))
        self.choice = choice
        self.idf_source = idf_source
        self.embed = embed if "dense" in self.features else None
        self._memo: dict[str, np.ndarray] = {}
        self._questions: dict[str, np.ndarray] = {}

    def _weights(self, question: str) -> dict[str, float]:
        terms = list(dict.fromkeys(ragline.text.tokenize(question)))
        if "idf" in self.features and self.idf_source is not None:
            _, ids = self.idf_source.term_ids(terms)
            return dict(zip(terms, self.idf_source.idf_of(ids).tolist(), strict=True))
        return dict.fromkeys(terms, 1.0)

    def generate(self, question: str, blocks: list[ContextBlock]) -> str:
        weights = self._weights(question)
        if not blocks or sum(weights.values()) <= 0:
            return ""
        cue = question_cue(question) if "cue" in self.features else None
        every = [c for b in blocks for c in b.quotes("unwrap" in self.features)]
        # code is a candidate for a question asking for code, or where it holds what is asked (a sample config's value)
        cands = every if cue == "code" else [c for c in every if c.kind != "code" or rule.holds_asked(cue, c, question)]
        # a question the handbook asks ("Does this change even make sense?") answers nothing, nor a picture's alt text:
        # each comes only along with what leads in to it or what it leads in to (`continued`), or where the blocks
        # hold nothing else
        cands = [c for c in cands if not rule.asks(c) and not rule.pictures(c)] or cands
        if not cands:
            return ""
        heads = {b.n: ragline.text.term_set(" ".join(b.headings)) for b in blocks} if "headings" in self.features else None
        ranked, matched = rule.rank(question, weights, cands, heads, cue, self.choice)
        if self.embed is not None:  # dense similarity rescoring the best DENSE_POOL
            # (with no shared word at all, as a paraphrase has, the pool is the best blocks' candidates)
            pool = ranked[: rule.DENSE_POOL]
            ranked = rule.rescore(ranked, self._dense(question, [s.piece for s in pool]).tolist(), self.choice.dense)
        elif matched <= 0:  # nothing of the question in any candidate or its headings, and nothing to judge meaning by
            return ""
        # a quote opening its section with "This deployment ..." brings the heading that names it, whichever reader chose
        # it (and a steps answer its section's first order); a section's first chunk opens with its heading line, a later
        # chunk goes on from the one before
        opening = {b.n: [*b.headings[:-1], b.title] for b in blocks if b.opens_section}
        chosen = self.choose(question, blocks, ranked, every, cands, cue)
        if cue == "steps":  # a how-to section's first order, left out, opens the answer
            chosen = rule.with_first_step(chosen, every, opening.keys(), self.choice.budget)
        chosen = rule.with_antecedent(chosen, opening)
        return "\n".join(cite(c.text, c.block, c.kind, c.header) for c in chosen)

    def choose(
        self, question: str, blocks: list[ContextBlock], ranked: list[Scored], every: list[Piece], cands: list[Piece], cue: str | None
    ) -> list[Piece]:
        """The pieces quoted, from the ranking (`ragline.answer.choice.select`): the step a reader
        built on this one changes (a judge's rescoring, a span scorer's choice)."""
        return rule.select(ranked, every, cands, question, cue, self.choice)

    def record(self) -> dict[str, Any]:
        """What the answer record's `generator` shows of this reader, besides its name and features."""
        return {"reader": self.name}

    def frame(self, question: str) -> tuple[str, ...]:
        """The question alone: a quote restating it is no answer."""
        return (question,)

    def usage(self) -> tuple[int, int] | None:
        """None: no model runs."""
        return None

    def fallback(self) -> str | None:
        """None: no step of this reader gives way to another (a judge's past its budget does)."""
        return None

    def missing_evidence(self, question: str, blocks: list[ContextBlock]) -> str | None:
        """Why the context cannot answer (`ragline.answer.refusal.missing_evidence`), or None."""
        return refusal.missing_evidence(question, blocks, self.features, self.idf_source)

    def _dense(self, question: str, cands: list[Piece]) -> np.ndarray:
        """Cosine of the question with each candidate; candidate vectors memoised by text (the latest
        MEMO_SENTENCES texts: a server answering for weeks over a large handbook stays bounded)."""
        assert self.embed is not None  # `generate` asks only with the dense feature on
        have = {c.text: v for c in cands if (v := self._memo.get(c.text)) is not None}
        todo = list(dict.fromkeys(c.text for c in cands if c.text not in have))
        if todo:
            fresh = dict(zip(todo, self.embed(todo, False), strict=True))
            have |= fresh
            self._memo |= fresh
            keep_latest(self._memo, MEMO_SENTENCES)
        if (q := self._questions.get(question)) is None:
            q = self._questions[question] = self.embed([question], True)[0]
            keep_latest(self._questions, MEMO_QUESTIONS)
        return np.array([have[c.text] @ q for c in cands])


class Extended(Extractive):
    """The extractive reader with one step the local model takes before the choice (the judge, span
    and PMI readers): it holds the model and the question's budget (`bounds`), shows the model in
    the record beside `settings()`, reports the model's tokens (`usage`), and, when the step runs
    past the budget, quotes the extractive choice and says why (`give_way`, then `fallback`)."""

    def __init__(
        self,
        model: LocalModel,
        features: Iterable[str],
        idf_source: Bm25 | None,
        embed: Embed | None,
        choice: ChoiceWeights,
        bounds: Bounds,
    ):
        super().__init__(features, idf_source, embed, choice)
        self.model, self.bounds = model, bounds
        self._fallback: str | None = None

    def give_way(self, why: str, unmade: str) -> None:
        """Note that the model's step did not finish (`why`): the answer is the extractive choice, `unmade`."""
        self._fallback = f"{why}: the extractive choice is quoted, {unmade}"

    def settings(self) -> dict[str, Any]:
        """What the record shows of the step's own settings."""
        return {}

    def record(self) -> dict[str, Any]:
        return {"reader": self.name} | self.model.record() | self.settings()

    def usage(self) -> tuple[int, int] | None:
        return self.model.take_counts()

    def fallback(self) -> str | None:
        why, self._fallback = self._fallback, None
        return why


def keep_latest(memo: dict[str, Any], most: int) -> None:
    """Drop the oldest entries of `memo` (insertion order) until `most` are left: a long-running
    server's memo stays bounded."""
    for _ in range(len(memo) - most):
        memo.pop(next(iter(memo)))


def build(setup: Setup) -> Extractive:
    return Extractive(setup.features, setup.bm25, setup.embed)
