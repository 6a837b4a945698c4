"""reader: what every reader of an answer is (the `Reader` protocol), and the one registry of them.

A reader turns a question and its numbered context blocks into answer text whose every
sentence ends in [n], or says why it has none. `rag_answer.answer` asks a reader only what
the protocol declares; then every sentence passes the citation check
(`ragline.answer.citations.check_citations`), whoever wrote it.

Each reader is one module of ragline/answer/ with a `build(setup) -> Reader` function, and one
line of REGISTRY (`Kind`): the name `--reader` takes, the module, one line of help, whether it
writes its own words (no extractive feature then, and its sentences are attributed before the
check drops) and whether it runs the local model (`just llm-model`; `rag-eval plan` leaves its
runs out unless named). `--reader`'s choices, `rag_answer.make_reader`, the eval plan's flags
and `just bench`'s rows all read REGISTRY, so a new reader is its module and one `register`
line. Nothing here imports a reader's module until it is built.

    >>> [kind.name for kind in REGISTRY.values()]
    ['extractive', 'judge', 'span', 'pmi', 'write', 'openai']
    >>> REGISTRY["write"].writes, REGISTRY["judge"].local
    (True, True)
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import numpy as np

    from ragline.answer.context import ContextBlock
    from ragline.bm25 import Bm25

Embed = Callable[[list[str], bool], "np.ndarray"]  # (texts, as queries?) -> unit vectors, one row a text


class Reader(Protocol):
    """What `rag_answer.answer` asks of a reader.

    `name` is its REGISTRY name; `features` the extractive switches it uses (none for a writer);
    `written`: its text is a model's own words, so a sentence citing nothing is attributed to a
    block that supports it before the check drops what no block supports. `record()` is what the
    answer record's `generator` shows of it beyond name and features; `frame(question)` the
    prompt's texts besides the blocks (a sentence repeating one is no answer); `usage()` the
    model tokens (prompt, generated) spent since the last call, None for a reader that runs no
    model; `fallback()` why the last answer is not the reader's own but the one it extends (a
    local judge past its question's budget quotes the extractive choice), None when it is, read
    after every `generate` as `usage` is; `missing_evidence` why the context cannot answer (None
    when it may); `generate` the answer text with [n] markers, or
    `ragline.answer.refusal.NoAnswer` saying why there is none.
    """

    name: str
    features: tuple[str, ...]
    written: bool

    def record(self) -> dict[str, Any]: ...

    def frame(self, question: str) -> tuple[str, ...]: ...

    def usage(self) -> tuple[int, int] | None: ...

    def fallback(self) -> str | None: ...

    def missing_evidence(self, question: str, blocks: list[ContextBlock]) -> str | None: ...

    def generate(self, question: str, blocks: list[ContextBlock]) -> str: ...


@dataclass(frozen=True)
class Setup:
    """What a reader is built from: the extractive features left on, the index's BM25 statistics
    (the idf of the question's terms), `embed` (the index's embedder, loaded on first call; None
    when the dense feature is off), and the local model's settings (`--local-model`, threads,
    context). The environment's settings (RAG_LLM_*, RAG_LOCAL_TIMEOUT, RAG_LOCAL_TOKENS) are read by the readers
    that use them, when built."""

    features: tuple[str, ...]
    bm25: Bm25 | None = None
    embed: Embed | None = None
    local_model: str = "qwen2.5-coder-0.5b-instruct"
    local_threads: int = 0
    local_context: int = 4096


@dataclass(frozen=True)
class Kind:
    """One reader of REGISTRY: its name, the module whose `build(setup)` makes it, one line of help,
    whether it writes its own words, whether it runs the local model, whether it needs a server."""

    name: str
    module: str
    help: str
    writes: bool = False
    local: bool = False
    server: bool = False  # it needs a server of the user's own (the bench leaves it out)

    def build(self, setup: Setup) -> Reader:
        reader: Reader = importlib.import_module(self.module).build(setup)
        return reader


REGISTRY: dict[str, Kind] = {}


def register(kind: Kind) -> Kind:
    """Add a reader (or replace the one of that name); its name is then a choice of `--reader`."""
    REGISTRY[kind.name] = kind
    return kind


register(Kind("extractive", "ragline.answer.extractive", "quote the handbook's best sentences (no model)"))
register(Kind("judge", "ragline.answer.judge", "the local model judges the extractive reader's best pieces", local=True))
register(Kind("span", "ragline.answer.span", "the local model scores candidate spans of the best blocks", local=True))
register(Kind("pmi", "ragline.answer.pmi", "the local model weighs the best blocks' pieces by PMI with the question", local=True))
register(Kind("write", "ragline.answer.write", "the local model writes the answer, its citations checked", writes=True, local=True))
register(
    Kind(
        "openai",
        "ragline.answer.openai_chat",
        "an OpenAI-protocol server writes the answer, its citations checked",
        writes=True,
        server=True,
    )
)


def names() -> tuple[str, ...]:
    """The registered readers' names, in registration order."""
    return tuple(REGISTRY)


def kind_of(name: str) -> Kind:
    """The registry's entry for `name` (KeyError naming the choices when there is none)."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise KeyError(f"no reader named {name!r} (readers: {', '.join(REGISTRY)})") from None


# The flags of earlier releases, kept as aliases: --llm extractive|local|openai with --local-mode judge|write.
LEGACY = {("extractive", None): "extractive", ("openai", None): "openai", ("local", "judge"): "judge", ("local", "write"): "write"}


def from_legacy(llm: str | None, local_mode: str | None) -> str:
    """The reader that `--llm LLM --local-mode MODE` named (the mode matters only for `local`, whose
    default mode was judge)."""
    if llm == "local":
        return LEGACY[("local", local_mode or "judge")]
    return LEGACY[(llm or "extractive", None)]
