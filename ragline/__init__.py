"""ragline: the shared parts of the ragline stages (the `rag_*.py` files beside this package).

One module per concept: `records` (JSON Lines, errors, atomic writes, the stage entry),
`text` (template tags, retrieval text, sentences, the tokeniser), `markdown` (the block
scanner and the document source), `options` (every option declared once), `ranking`,
`abstain` (the abstain signal), `models` (the model store), `vectorcache`, `progress`,
`page` (rag-serve's page and response schemas), `eval/` (metrics, runs, tables, golden
files, the sweep) and `answer/` (cues, citations). Nothing here imports a stage (a
type-only import goes under TYPE_CHECKING), and importing the package loads nothing.
"""

from __future__ import annotations

__version__ = "0.1.0"


def _launch(module: str, name: str) -> None:
    from ragline.records import launch

    launch(module, name)


# The console scripts (pyproject's [project.scripts]), one a stage; `ragline.records.launch`
# turns a Ctrl-C during start-up into exit 130 and one line.
def rag_chunk() -> None:
    _launch("rag_chunk", "rag-chunk")


def rag_embed() -> None:
    _launch("rag_embed", "rag-embed")


def rag_index() -> None:
    _launch("rag_index", "rag-index")


def rag_search() -> None:
    _launch("rag_search", "rag-search")


def rag_answer() -> None:
    _launch("rag_answer", "rag-answer")


def rag_eval() -> None:
    _launch("rag_eval", "rag-eval")


def rag_serve() -> None:
    _launch("rag_serve", "rag-serve")
