"""ragline: the shared parts of the ragline stages (the `rag_*.py` files beside this package).

One module per concept (docs/design.md lists them, and tests/test_docs.py holds it to the tree):
`records`, `text`, `markup`, `markdown`, `globs`, `sources`, `options`, `cli`, `bm25`, `index`, `ranking`,
`abstain`, `models`, `local_models`, `expand`, `rerank`, `vectorcache`, `progress`, `terminal`; rag-serve's `api`,
`serving`, `abandon`, `prefork`, `mcpserver`, `page`; `eval/` and `answer/` (every reader, one module
each, behind `answer.reader`'s protocol and registry). Nothing in the
package imports a stage, and importing it loads nothing. The one exception is below: the
console scripts, each of which imports its stage by name when it is run.
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


def rag_expand() -> None:
    _launch("rag_expand", "rag-expand")


def rag_embed() -> None:
    _launch("rag_embed", "rag-embed")


def rag_index() -> None:
    _launch("rag_index", "rag-index")


def rag_search() -> None:
    _launch("rag_search", "rag-search")


def rag_rerank() -> None:
    _launch("rag_rerank", "rag-rerank")


def rag_answer() -> None:
    _launch("rag_answer", "rag-answer")


def rag_eval() -> None:
    _launch("rag_eval", "rag-eval")


def rag_serve() -> None:
    _launch("rag_serve", "rag-serve")
