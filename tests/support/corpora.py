"""The corpora the tests read: the repository's paths, the tiny handbook built into an index
in-process (`build_index`), the shared corpora beside the repository, the real model."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
SHARED = ROOT.parent / "shared" / "corpora" / "eng-practices" / "docs"
GDS_WAY = ROOT.parent / "shared" / "corpora" / "gds-way" / "docs"


def load_minilm(weights: str = "fp32"):
    """The real all-MiniLM-L6-v2 embedder with these weights. Missing model: skip locally, fail in CI."""
    import rag_embed
    from ragline.records import StageError

    try:
        embedder = rag_embed.load_embedder("all-MiniLM-L6-v2", weights=weights)
    except StageError as err:
        if os.environ.get("CI"):
            pytest.fail(f"the model must be present in CI ({err}); run 'just model'")
        pytest.skip(f"model not fetched ({err}); run 'just model'")
    if weights == "fp32" and embedder.model_file.name != "model.fp32.onnx":
        if os.environ.get("CI"):
            pytest.fail("the model folder has no derived float32 file; run 'just model'")
        pytest.skip("the model folder predates the derived float32 file; run 'just model'")
    return embedder


TINY = {
    "settlement": """# Settlement

## The nightly sweep

The sweep runs once a day at 23:40 IST and closes the batch.
There is no manual sweep.

## Payout timing

Payouts arrive T+1 after settlement.
""",
    "errors": """# Error codes

## Platform errors

| code | meaning | what to do |
|---|---|---|
| NW-5001 | acquirer timeout | do not retry the charge, poll its state |
| NW-5002 | ledger write failed | safe to retry with the same idempotency key |

## Client errors

NW-4021 means the capture amount is larger than the authorized amount.
""",
    "runbook": """# Runbook: Settlement stall

## Recovery steps

1. Release the lock: `marlctl lock release`.
2. Retry twice, then page the on-call.

## Example request

```bash
curl -X POST https://api.example/v2/charges -H "NW-Idempotency-Key: abc"
```
""",
}


def build_index(
    tmp_path: Path, docs: dict[str, str] | None = None, model: str = "hash", window: int = 180, passages: bool = False, select: Any = None
) -> Path:
    """Chunk, embed and index a tiny corpus in-process (`select`: rag-chunk's Selection, its globs); returns the index directory."""
    import rag_chunk
    import rag_embed
    import rag_index
    from ragline.records import Line

    corpus = tmp_path / "corpus"
    corpus.mkdir(exist_ok=True)
    for name, text in (docs or TINY).items():
        (corpus / f"{name}.md").write_text(text)
    chunks = list(rag_chunk.chunk_paths([str(corpus)], window, select=select or rag_chunk.Selection()))
    embedder = rag_embed.load_embedder(model)
    records = list(rag_embed.embed_records(((Line("x", i), c) for i, c in enumerate(chunks, 1)), embedder, passages=passages))
    for r in records:
        r["vector"] = r["vector"].tolist()
    out = tmp_path / "idx"
    rows, vectors, facts = rag_index.collect((Line("x", i), r) for i, r in enumerate(records, 1))
    rag_index.write(out, rows, vectors, facts)
    return out
