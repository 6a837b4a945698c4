"""expand: the questions a chunk answers, written by the local model at index time (doc2query).

A library, not a stage: rag-expand runs it, rag-embed embeds what it wrote. The questions
that miss are those asked in other words than the page's ("our deploys keep breaking on
Fridays" where the page says "no releases after Thursday noon"): the query and the chunk
share no words and little of their embedding. A small model asked, at index time, to write
the questions a colleague would ask of a chunk, in everyday words, bridges part of that
gap; each question becomes one more passage vector of its chunk (rag-embed), and the passage
machinery already scores a chunk by its best vector.

`Expander.questions(record)` asks the model once per chunk for up to `n` questions (one
prompt, greedy decoding, so the same chunk and model give the same questions), parses its
lines (`parse`), and keeps them in a `QuestionCache` keyed by the model file, the prompt's
version, `n` and the chunk's heading path and text: an edit re-expands only the chunks it
touched. The model never writes into an answer: its questions are only matched against.

    >>> parse("1. How do I void a charge?\\n- Can I refund twice?\\nThe passage says ...", 3)
    ['How do I void a charge?', 'Can I refund twice?']
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

import ragline.text
from ragline.vectorcache import Store

PROMPT_VERSION = 2  # bump when SYSTEM or INSTRUCTION change: the cache keys on it
MAX_WORDS = 350  # words of a chunk shown to the model: its first ones (a chunk is ~180 words; a fence or table may be longer)
MAX_TOKENS = 160  # tokens the model may write for one chunk's questions
QUESTION_WORDS = (3, 40)  # a line outside this many words is not a question
SYSTEM = "You write the questions that engineers ask about their team's handbook."
INSTRUCTION = (
    "Here is a section of an engineering handbook.\n\n{text}\n\n"
    "Write {n} different questions that this section answers, as a colleague who has not read it would ask them: "
    "in their own everyday words, often describing their situation, without copying the section's phrases. "
    "One question per line, plain text: no numbers, no bold, no answers."
)
_MARKUP = re.compile(r"\*\*|__|`")  # bold and code marks: the model's markdown habits
_LABEL = re.compile(r"^[A-Z][\w -]{0,30}:\s+(?=\S)")  # "Complexity: How complex ...?": a label before the question
_NUMBERING = re.compile(r"^\s*(?:(?:[-*•]|\d{1,2}[.):]|Q\d*[.:)]|Question\s*\d*[.:)])\s*)+", re.IGNORECASE)


def parse(text: str, n: int) -> list[str]:
    """The model's reply as at most `n` distinct questions: one a line, numbering and bullets
    dropped (and bold marks, and a "Label:" before the question), a line kept only if it ends in "?"
    and has QUESTION_WORDS words."""
    out: list[str] = []
    seen: set[str] = set()
    for line in text.splitlines():
        q = " ".join(_LABEL.sub("", _NUMBERING.sub("", _MARKUP.sub("", line))).strip().strip('"').split())
        words = len(q.split())
        if not q.endswith("?") or not QUESTION_WORDS[0] <= words <= QUESTION_WORDS[1] or q.lower() in seen:
            continue
        seen.add(q.lower())
        out.append(q)
        if len(out) == n:
            break
    return out


def shown_text(record: dict[str, Any]) -> str:
    """What the model reads of a chunk: its heading path, then its first MAX_WORDS words (template tags out)."""
    path = record.get("headings")
    head = " > ".join(path) + "\n\n" if isinstance(path, list) and path and all(isinstance(h, str) for h in path) else ""
    words = ragline.text.strip_templates(record["text"]).split(" ")
    return head + " ".join(words[:MAX_WORDS]).strip()


def messages(record: dict[str, Any], n: int) -> list[tuple[str, str]]:
    """The chat the model is given for one chunk."""
    return [("system", SYSTEM), ("user", INSTRUCTION.format(text=shown_text(record), n=n))]


class QuestionCache(Store):
    """rag-expand's cache: the questions written for a chunk, keyed by sha256(model, prompt version, n, text)."""

    TABLE = "questions"
    COLUMN = "questions"
    WHAT = "question cache"
    HOLDS = "questions"
    OPTION = "--cache or RAG_EXPAND_CACHE"

    def key(self, shown: str, n: int) -> bytes:
        return hashlib.sha256(self.model_id + f"\x00v{PROMPT_VERSION}\x00n{n}\x00".encode() + shown.encode("utf-8")).digest()

    def get(self, key: bytes) -> list[str] | None:
        blob = self.blobs([key]).get(key)
        return None if blob is None else list(orjson.loads(blob))

    def put(self, key: bytes, questions: Sequence[str]) -> None:
        self.put_blobs([(key, orjson.dumps(list(questions)))])


@dataclass
class Written:
    """One chunk's questions, and whether they came from the cache."""

    questions: list[str]
    cached: bool


class Expander:
    """Writes a chunk's questions with `model` (a `ragline.answer.local.LocalModel`, loaded on the
    first chunk not in the cache: a rerun over an unchanged handbook never loads it), `n` a chunk."""

    def __init__(self, load: Any, n: int, cache: QuestionCache | None = None):
        self.load, self.n, self.cache = load, n, cache
        self.model: Any = None

    def questions(self, record: dict[str, Any]) -> Written:
        shown = shown_text(record)
        key = self.cache.key(shown, self.n) if self.cache is not None else b""
        if self.cache is not None and (hit := self.cache.get(key)) is not None:
            return Written(hit, True)
        if self.model is None:
            self.model = self.load()
        reply = self.model.generate(self.model.chat(messages(record, self.n)), MAX_TOKENS)
        out = parse(reply, self.n)
        if self.cache is not None:
            self.cache.put(key, out)  # committed at once: an interrupt loses at most the chunk in hand
        return Written(out, False)


def default_cache() -> Path:
    """`$XDG_CACHE_HOME/ragline/expand.sqlite` (`~/.cache/...` where unset)."""
    from ragline.models import user_cache

    return user_cache() / "expand.sqlite"
