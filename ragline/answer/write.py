"""write: the local model writes the answer, its citations checked (`--reader write`).

The prompt of `ragline.answer.prompt.messages` in the model's chat template, greedy, bounded
by RAG_LLM_MAX_TOKENS and RAG_LOCAL_TIMEOUT; an empty reply or one past the timeout is a
refusal saying so.
"""

from __future__ import annotations

import time
from typing import Any

from ragline.answer.context import ContextBlock
from ragline.answer.local import LocalModel, load
from ragline.answer.prompt import MAX_TOKENS, STOP, frame, limits, messages
from ragline.answer.reader import Setup
from ragline.answer.refusal import NoAnswer


class LocalWriter:
    """The local model writes the answer (`rag-answer --reader write`): the prompt
    of `messages` in the model's chat template, greedy, at most `max_tokens`, within `timeout`
    seconds; an empty reply or one past the timeout is a refusal saying so (NoAnswer)."""

    name = "write"
    features: tuple[str, ...] = ()
    written = True

    def __init__(self, model: LocalModel, max_tokens: int = MAX_TOKENS, timeout: float = 60.0):
        self.model, self.max_tokens, self.timeout = model, max_tokens, timeout

    def record(self) -> dict[str, Any]:
        return {"reader": self.name} | self.model.record()

    def usage(self) -> tuple[int, int] | None:
        return self.model.take_counts()

    def frame(self, question: str) -> tuple[str, ...]:
        return frame(question)

    def generate(self, question: str, blocks: list[ContextBlock]) -> str:
        prompt = self.model.chat(messages(question, blocks))
        try:
            text = self.model.generate(prompt, self.max_tokens, STOP, time.monotonic() + self.timeout)
        except TimeoutError:
            raise NoAnswer(f"the local model did not finish within {self.timeout:g} s (RAG_LOCAL_TIMEOUT)") from None
        if not text.strip():
            raise NoAnswer("the local model wrote nothing")
        return text

    def missing_evidence(self, question: str, blocks: list[ContextBlock]) -> str | None:
        """None: the model judges for itself whether the blocks answer (it replies REFUSAL when not)."""
        return None


def build(setup: Setup) -> LocalWriter:
    return LocalWriter(load(setup), *limits())
