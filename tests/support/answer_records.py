"""Hit and hits records for the answer stage's tests: one block of handbook text, one question."""

from __future__ import annotations


def hit(cid: str, text: str, headings: tuple[str, ...] = ("Doc", "Section")) -> dict:
    """A search hit of chunk `cid` (its doc the part before `#`, its path DOC.md) holding `text`."""
    doc = cid.split("#")[0]
    return {"chunk_id": cid, "doc": doc, "path": f"{doc}.md", "start_line": 1, "end_line": 9, "headings": list(headings), "text": text}


def hits_record(question: str, *hits: dict, confidence: float = 0.9) -> dict:
    """A hits record, as rag-search writes it, for `question`."""
    return {"id": "q", "question": question, "hits": list(hits), "confidence": confidence}
