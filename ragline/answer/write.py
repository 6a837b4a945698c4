"""write: the local model writes the answer, its citations checked (`--reader write`).

The prompt of `ragline.answer.prompt.messages` in the model's chat template, cut to what the
context holds (`ragline.answer.prompt.fitted`: the best-ranked blocks first), greedy, bounded by
RAG_LLM_MAX_TOKENS and by the question's `ragline.answer.local.Budget` (RAG_LOCAL_TIMEOUT,
RAG_LOCAL_TOKENS), spent from the prompt's first step; an empty reply, one past the budget or a
question whose first block cannot fit is a refusal saying so.
"""

from __future__ import annotations

from typing import Any

from ragline.answer.context import ContextBlock
from ragline.answer.local import BOUNDS, Bounds, LocalModel, OverBudget, bounds, load
from ragline.answer.prompt import MAX_TOKENS, STOP, fitted, frame, limits
from ragline.answer.reader import Setup
from ragline.answer.refusal import NoAnswer


class LocalWriter:
    """The local model writes the answer (`rag-answer --reader write`): the prompt of `messages`
    (as much of it as the context holds, leaving room for the answer) in the model's chat template,
    greedy, at most `max_tokens`, within the question's budget (`bounds`); an empty reply, one past
    the budget, or no block that fits is a refusal saying so (NoAnswer)."""

    name = "write"
    features: tuple[str, ...] = ()
    written = True

    def __init__(self, model: LocalModel, max_tokens: int = MAX_TOKENS, bounds: Bounds = BOUNDS):
        self.model, self.max_tokens, self.bounds = model, max_tokens, bounds

    def record(self) -> dict[str, Any]:
        return {"reader": self.name} | self.model.record()

    def usage(self) -> tuple[int, int] | None:
        return self.model.take_counts()

    def fallback(self) -> str | None:
        return None

    def frame(self, question: str) -> tuple[str, ...]:
        return frame(question)

    def generate(self, question: str, blocks: list[ContextBlock]) -> str:
        budget = self.bounds.start()  # one a question, from before the prompt is written
        room = self.model.context - min(self.max_tokens, self.model.context // 2)  # the rest is the answer's
        shown = fitted(question, blocks, lambda m: len(self.model.tokens(self.model.chat(m))), room)
        if shown is None:
            raise NoAnswer(
                f"the question and its first block do not fit in the {room} tokens of the local model's context of "
                f"{self.model.context} left for a prompt (--local-context raises it)"
            )
        try:
            text = self.model.generate(self.model.chat(shown), self.max_tokens, STOP, budget)
        except OverBudget as over:
            raise NoAnswer(over.why) from None
        if not text.strip():
            raise NoAnswer("the local model wrote nothing")
        return text

    def missing_evidence(self, question: str, blocks: list[ContextBlock]) -> str | None:
        """None: the model judges for itself whether the blocks answer (it replies REFUSAL when not)."""
        return None


def build(setup: Setup) -> LocalWriter:
    return LocalWriter(load(setup), limits(), bounds())
