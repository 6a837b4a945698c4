"""Shared fixtures of the rag-eval tests: a tiny golden file and its chunks, answer records as
rag-search | rag-answer writes them, perfect and partial runs, scored results."""

from __future__ import annotations

from pathlib import Path

import pytest
from jsonl import jsonl

import rag_eval
from ragline.eval.golden import ANSWERABLE_KINDS, Chunking, Golden, load_golden, parse_golden, read_chunking
from ragline.eval.runs import RUNS
from ragline.records import Line

# --------------------------------------------------------------------------- fixtures

GOLDEN = """\
# a tiny golden set
version: 1
questions:
  - id: id-01
    kind: identifier
    question: What does NW-5001 mean?
    gold: [errors#platform, errors#why]
    evidence: ["acquirer did not answer", "retry under a new key"]
    answer_contains: [poll, unknown]
  - id: se-01
    kind: semantic
    question: How do I make sure a shopper is billed once?
    gold: [idem#keys]
    evidence: ["An idempotency key is a value"]
    answer_contains: [idempotency key]
  - id: pr-01
    kind: procedural
    question: How do I recover a stalled batch?
    gold: [runbook#steps]
    evidence: ["release the lock"]
    answer_contains: [release]
  - id: fa-01
    kind: factual
    question: When do payouts arrive?
    gold: [payouts#how]
    evidence: ["Payouts arrive T+1"]
    answer_contains: [T+1]
  - id: un-01
    kind: unanswerable
    question: Does Northwind support Apple Pay?
"""

CHUNKS = [
    {"id": "errors#platform", "doc": "errors", "text": "NW-5001: the acquirer did not\nanswer in time.", "window": 180},
    {"id": "errors#why", "doc": "errors", "text": "A retry under a new key creates a second charge.", "window": 180},
    {"id": "idem#keys", "doc": "idem", "text": "An idempotency key is a value you choose.", "window": 180},
    {"id": "runbook#steps", "doc": "runbook", "text": "First release the lock, then resume.", "window": 180},
    {"id": "payouts#how", "doc": "payouts", "text": "Payouts arrive T+1 after settlement.", "window": 180},
    {"id": "misc#other", "doc": "misc", "text": "Nothing useful here.", "window": 180},
]

NO_INDEX = "no/such/index"  # what the records name as their index unless a test gives one
MODEL_FILE = "5e" * 32  # the sha256 of the model file the records say ran

# id -> (question, hits, answer, cited chunk ids, confidence): every answer right.
PERFECT = {
    "id-01": ("What does NW-5001 mean?", ["errors#platform", "errors#why", "misc#other"], "Status unknown: poll it.", ["errors#why"], 0.8),
    "se-01": ("How do I make sure a shopper is billed once?", ["idem#keys"], "Send an Idempotency Key.", ["idem#keys"], 0.7),
    "pr-01": ("How do I recover a stalled batch?", ["misc#other", "runbook#steps"], "Release the lock.", ["runbook#steps"], 0.6),
    "fa-01": ("When do payouts arrive?", ["payouts#how"], "They arrive T+1.", ["payouts#how"], 0.9),
    "un-01": ("Does Northwind support Apple Pay?", ["misc#other"], "", [], 0.2),
}


def record(
    qid: str, question: str, hits: list[str], answer: str = "", cited: list[str] = (), confidence: float = 0.5, index=NO_INDEX, **config
) -> dict:
    """An answer record as rag-search | rag-answer writes it; `config` overrides RUNS['default'].
    `index` is the index path the record names (by default one that is nowhere)."""
    cfg = RUNS["default"] | config
    refused = not answer
    return {
        "schema": "answer/1",
        "id": qid,
        "question": question,
        "hits": [
            {
                "rank": rank,
                "chunk_id": cid,
                "doc": cid.partition("#")[0],
                "path": f"corpus/{cid.partition('#')[0]}.md",
                "start_line": 1,
                "end_line": 5,
                "headings": [],
                "text": "text",
                "score": 1.0 - rank / 10,
                "signals": {},
            }
            for rank, cid in enumerate(hits, 1)
        ],
        "confidence": confidence,
        "retrieval": {
            "model": cfg["model"],
            "model_sha256": MODEL_FILE,
            "index": index,
            "embed_headings": cfg["embed_headings"],
            "embed_long": cfg["embed_long"],
            "window": cfg["window"],
            "dense": cfg["dense"],
            "sparse": cfg["sparse"],
            "rerank": cfg["rerank"],
            "fusion": cfg["fusion"],
            "dense_weight": cfg["dense_weight"],
            "passages": cfg["passages"],
            "exact": cfg["exact"],
            "k": cfg["k"],
            "rrf_k": cfg["rrf_k"],
            "candidates": cfg["candidates"],
        },
        "ms": 10.0,
        "answer": answer,
        "citations": [{"n": n, "chunk_id": c, "doc": c.partition("#")[0]} for n, c in enumerate(cited, 1)],
        "refused": refused,
        "reason": "the handbook does not cover this" if refused else None,
        "dropped": 0,
        "generator": {"name": "extractive", "features": list(cfg["features"]), "threshold": cfg["threshold"], "context": cfg["context"]},
        "answer_ms": 2.0,
    }


def perfect_run(**config) -> list[dict]:
    return [record(qid, q, hits, answer, cited, conf, **config) for qid, (q, hits, answer, cited, conf) in PERFECT.items()]


def lines(records: list[dict], source: str = "answers.jsonl") -> list[tuple[Line, dict]]:
    return [(Line(source, n), r) for n, r in enumerate(records, 1)]


def chunking(chunks: list[dict] = CHUNKS) -> Chunking:
    return read_chunking(lines(chunks, "chunks.jsonl"), "chunks.jsonl")


@pytest.fixture
def golden_path(tmp_path: Path) -> Path:
    path = tmp_path / "golden.yaml"
    path.write_text(GOLDEN)
    return path


@pytest.fixture
def golden(golden_path: Path) -> Golden:
    return load_golden(str(golden_path))


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_bytes(jsonl(*records))
    return path


def score(golden, records, label="default", chunks=CHUNKS, **kw):
    return rag_eval.score_run(golden, lines(records), label, chunking(chunks) if chunks else None, inputs="answers.jsonl", **kw)


def corpus_run(name: str, confidence: dict[str, float]) -> tuple[Golden, dict]:
    """A golden file and a threshold-0 run's result on it: ids a* answerable, u* unanswerable;
    answerable ones answered right, unanswerable ones answered (the run refused nothing)."""
    lines_ = ["version: 1", "questions:"]
    for q in confidence:
        if q.startswith("a"):
            lines_.append(f'  - {{id: {q}, kind: factual, question: "{name} {q}?", gold: [x#{q}], evidence: [e], answer_contains: [p]}}')
        else:
            lines_.append(f'  - {{id: {q}, kind: unanswerable, question: "{name} {q}?"}}')
    golden = parse_golden("\n".join(lines_) + "\n", f"{name}.yaml")
    rows = [{"id": q, "confidence": c, "answer_ok": q.startswith("a"), "refused": False} for q, c in confidence.items()]
    result = {"label": "threshold-0", "corpus": name, "golden": {"source": golden.source, "sha256": golden.sha256}, "questions": rows}
    return golden, result | {"actual": {"threshold": 0.0}}


# A: answerable 0.6 0.7 0.8 0.9, unanswerable 0.2.  B: answerable 0.3 0.7 0.8 0.9, unanswerable 0.25 0.4 0.5.
# Four answerable questions each: no corpus may lose one (0.125 * 4 < 1).
CORPUS_A = {"a1": 0.6, "a2": 0.7, "a3": 0.8, "a4": 0.9, "u1": 0.2}
CORPUS_B = {"a1": 0.3, "a2": 0.7, "a3": 0.8, "a4": 0.9, "u1": 0.25, "u2": 0.4, "u3": 0.5}


# --------------------------------------------------------------------------- tables


def big_golden(n: int = 30) -> str:
    kinds = ANSWERABLE_KINDS
    out = ["version: 1", "questions:"]
    for i in range(n):
        out.append(
            f"  - {{id: q{i:02d}, kind: {kinds[i % 4]}, question: 'question {i}?', gold: [d#{i}], evidence: [e{i}], answer_contains: [w{i}]}}"
        )
    out += [f"  - {{id: u{i}, kind: unanswerable, question: 'nothing {i}?'}}" for i in range(4)]
    return "\n".join(out) + "\n"


def big_run(golden: Golden, found: bool = True, **config) -> list[dict]:
    out = []
    for q in golden.questions:
        if q.answerable:
            i = int(q.id[1:])
            hits = [f"d#{i}"] if found else ["other#none"]
            out.append(record(q.id, q.question, [*hits, "d#x"], f"w{i}." if found else "no idea", hits, 0.7, **config))
        else:
            out.append(record(q.id, q.question, ["d#x"], "", [], 0.1, **config))
    return out


@pytest.fixture
def results(tmp_path: Path) -> tuple[Path, list[Path]]:
    golden = tmp_path / "golden.yaml"
    golden.write_text(big_golden())
    parsed = load_golden(str(golden))
    paths = []
    for label, found, config in (("hash", False, {"model": "hash"}), ("default", True, {}), ("no-rerank", True, {"rerank": "none"})):
        result = rag_eval.score_run(parsed, lines(big_run(parsed, found, **config)), label, resamples=500)
        path = tmp_path / f"{label}.json"
        path.write_bytes(rag_eval.dump_json(result))
        paths.append(path)
    return golden, paths
