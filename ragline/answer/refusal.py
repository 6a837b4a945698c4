"""refusal: why the context cannot answer a question, read from what the question asks for.

rag-answer refuses a question whose confidence is under the abstain threshold (rag-search's
signal, `ragline.abstain`); past it, the extractive reader asks `missing_evidence` whether
the blocks sent can hold the answer at all. Pure functions over the question, the blocks
and their pieces; the index's statistics are asked only for `term_ids` (`idf_source`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import ragline.text
from ragline.answer.context import ContextBlock
from ragline.answer.cues import asked_quantity, cue_match, holds_quantity, question_cue, unknown_names

REFUSAL = "I could not find that in the handbook."  # what every refusal answers, whatever refused


class NoAnswer(Exception):
    """A reader found no answer: `reason` is what the refusal says (the answer is REFUSAL)."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def judged_none(scores: Sequence[float], floor: float) -> str | None:
    """Why a question is refused on the local model's judgement (`ragline.answer.local.Judge`): no
    piece judged scores at least `floor` (`floor` 0: never). None when one does, or none was judged."""
    if floor <= 0 or not scores or max(scores) >= floor:
        return None
    return f"the local model judged no piece to answer it (best score {max(scores):.2f}, under {floor:g})"


def missing_evidence(question: str, blocks: Sequence[ContextBlock], features: Sequence[str], idf_source: Any = None) -> str | None:
    """Why the context cannot answer, from what the question asks for, or None.

    "names" (a feature): a question that names something the index never mentions
    (`unknown_names`: Gerrit, a CLA, NW-9999) is about something else, however close its
    topic; unless it names one such thing and one block sent holds every other content word
    of the question (at least two of them): "Where is the Slack channel for refunds?" is
    about refunds' channel, whatever the handbook calls the chat tool.
    "cue" (a feature): a question asking for code (a command, a payload, a configuration)
    whose context holds no code at all; one asking for a precise quantity (`asked_quantity`:
    "how many days", "what percentage", "which version", "how much does it pay", "at what time") whose context holds none of that
    shape; one asking for a number whose context holds no number but those it states.
    The pieces read are the blocks' own (`ContextBlock.quotes`, unwrapped with "unwrap").
    """
    unknown = unknown_names(question, idf_source) if "names" in features and idf_source is not None else []
    if unknown and not covered_without(question, unknown, blocks):
        return f"the handbook never mentions {', '.join(repr(n) for n in unknown)}"
    if "cue" not in features:
        return None
    quotes = [c for b in blocks for c in b.quotes("unwrap" in features)]
    cue = question_cue(question)
    if cue == "code" and not any(c.kind == "code" or "`" in c.text for c in quotes):
        return "the question asks for code (a command, a payload, a configuration) and no block sent holds any"
    if (asked := asked_quantity(question)) is not None:
        if any(holds_quantity(asked, c.text, question) for c in quotes):
            return None
        kind, unit = asked
        what = (
            f"a number of {unit}"
            if kind == "count"
            else f"a version of {unit}"
            if kind == "version" and unit
            else {
                "percent": "a percentage",
                "version": "a version",
                "region": "a cloud region",
                "money": "a sum of money",
                "clock": "a time of day",
                "length": "a length (of time or size)",
            }.get(kind, "a number")
        )
        return f"the question asks for {what} and no block sent holds one"
    if cue != "number" or any(cue_match("number", c, question) == 1.0 for c in quotes):
        return None
    return "the question asks for a number and no block sent holds one but those it states"


def covered_without(question: str, names: list[str], blocks: Sequence[ContextBlock]) -> bool:
    """Whether the question names one unknown thing, and one block (its text and heading path)
    holds every other content word of the question, at least two of them."""
    named = {t for n in names for t in ragline.text.tokenize(n)}
    rest = set(ragline.text.tokenize(question)) - named
    if len(names) > 1 or len(rest) < 2:
        return False
    return any(rest <= ragline.text.term_set(b.shown + " " + " ".join(b.headings)) for b in blocks)
