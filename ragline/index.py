"""index: a loaded index, as `rag_index.load` returns it and rag-search, rag-answer and rag-serve read it.

The type alone: `rag_index` owns the format (it alone writes and reads index directories) and
builds these; the package's readers of an index (`ragline.ranking`'s dense retrieval) take one
without importing a stage.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ragline.bm25 import Bm25


@dataclass
class Index:
    """A loaded index: vectors (memory-mapped), chunk records, BM25, manifest."""

    path: Path
    manifest: dict[str, Any]
    vectors: np.ndarray
    chunks: list[dict[str, Any]]
    bm25: Bm25
    passages: np.ndarray | None = None  # passage vectors (rag-embed --passages), one row each
    passage_rows: np.ndarray | None = None  # the chunk row each passage belongs to

    @property
    def ids(self) -> list[str]:
        return [c["id"] for c in self.chunks]
