"""The benchmarks' inputs: real chunk texts and questions, and synthetic vectors, queries and documents.

Nothing here is timed. The real inputs come from the stages themselves (rag_chunk's
chunks, rag_embed's text to embed, rag_eval's golden questions and runs); the
synthetic ones are seeded, so every run measures the same data.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from bench.harness import ROOT

CORPORA = [ROOT / "corpus", ROOT.parent / "shared" / "corpora" / "eng-practices" / "docs"]
MODEL = "all-MiniLM-L6-v2"
DIM = 384


# --------------------------------------------------------------------------- real texts


def chunk_records() -> list[dict[str, Any]]:
    """The chunk records of the handbook corpus and the eng-practices docs (where present)."""
    import rag_chunk

    paths = [str(p) for p in CORPORA if p.exists()]
    return list(rag_chunk.chunk_paths(paths))


def workload(n: int) -> list[dict[str, Any]]:
    """n realistic chunk records: the real chunks, then copies with their sentences rotated.

    Copy c of a chunk rotates its sentences (citations.split_sentences) by c, so texts
    differ but keep their length and vocabulary, and ends with " (rev c)". Ids are `<id>~c`.
    """
    from ragline.answer import citations

    base = chunk_records()
    out: list[dict[str, Any]] = []
    copy = 0
    while len(out) < n:
        for record in base:
            if len(out) >= n:
                break
            text = record["text"]
            if copy:
                parts = citations.split_sentences(text) or [text]
                shift = copy % len(parts)
                text = " ".join(parts[shift:] + parts[:shift]) + f" (rev {copy})"
            out.append({"id": f"{record['id']}~{copy}", "headings": record.get("headings") or [], "text": text})
        copy += 1
    return out


def embed_texts_of(records: list[dict[str, Any]]) -> list[str]:
    """The texts rag-embed embeds for these records (heading path joined, as by default)."""
    import rag_embed

    return [rag_embed.record_text(r, "bench", "text", query=False, headings=True) for r in records]


def golden_questions() -> list[dict[str, Any]]:
    """The query records of golden.yaml (`rag-eval questions`): what an evaluation embeds on every run."""
    import rag_eval

    return list(rag_eval.query_records(rag_eval.load_golden(str(ROOT / "golden.yaml"))))


def eval_embeds() -> list[tuple[int, str]]:
    """The MiniLM embedding steps of `just eval` on Northwind, in order: (rag-chunk --words, rag-embed flags),
    one per run of evalruns.RUNS that embeds with the model (the hash runs embed nothing worth caching), the
    flags derived by evalruns.run_flags as `just eval` derives them. Most runs re-embed the default chunking
    unchanged (no-rerank, dense, rrf, bm25, answer-no-*)."""
    from ragline.eval import runs as evalruns

    steps = []
    for run in evalruns.RUNS.values():
        if run["model"] != MODEL:
            continue
        steps.append((int(run["window"]), " ".join(evalruns.run_flags(run)["embed"])))
    return steps


# --------------------------------------------------------------------------- synthetic vectors


def make_vectors(path: Path, n: int, seed: int = 1, clusters: int = 1000, block: int = 100_000) -> None:
    """n unit vectors (float32, dim 384) written to a .npy in blocks; clustered like real embeddings.

    Each vector is a random cluster centre plus isotropic noise of the same norm, then
    normalised: neighbours in a cluster have cosine ~0.5, strangers ~0.
    """
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, DIM), dtype=np.float32)
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(n, DIM))
    for start in range(0, n, block):
        m = min(block, n - start)
        v = centres[rng.integers(0, clusters, m)] + rng.standard_normal((m, DIM), dtype=np.float32)
        out[start : start + m] = v / np.linalg.norm(v, axis=1, keepdims=True)
    out.flush()
    del out


def make_queries(vectors_path: Path, count: int, seed: int = 2) -> np.ndarray:
    """Queries near stored vectors (a row plus noise, normalised), as questions near their answer."""
    rng = np.random.default_rng(seed)
    vectors = np.load(vectors_path, mmap_mode="r")
    rows = np.sort(rng.choice(vectors.shape[0], count, replace=False))
    q = np.asarray(vectors[rows]) + 0.08 * rng.standard_normal((count, DIM), dtype=np.float32)
    return (q / np.linalg.norm(q, axis=1, keepdims=True)).astype(np.float32)


# --------------------------------------------------------------------------- synthetic documents


def zipf_corpus(n_docs: int, seed: int = 3, vocab: int = 50_000, mean_len: int = 100) -> tuple[list[str], list[str]]:
    """(documents, vocabulary by rank): words drawn from a Zipf-Mandelbrot law, p(r) ~ 1 / (r + 2.7).

    Words are pronounceable letter strings (never stopwords, never plural-looking, so
    ragline.text.tokenize keeps each as one term); document lengths are log-normal around
    `mean_len`; a full stop ends a sentence every ~12 words and sentences start with
    a capital, so the tokeniser does its normal work.
    """
    import ragline
    import ragline.text

    rng = np.random.default_rng(seed)
    consonants, vowels = "bcdfghjklmnprtvz", "aeiou"
    words: list[str] = []
    seen: set[str] = set()
    while len(words) < vocab:
        syllables = int(rng.integers(2, 5))
        w = "".join(consonants[rng.integers(len(consonants))] + vowels[rng.integers(len(vowels))] for _ in range(syllables))
        if w not in seen and w not in ragline.text.STOPWORDS:
            seen.add(w)
            words.append(w)
    ranks = np.arange(1, vocab + 1)
    p = 1.0 / (ranks + 2.7)
    p /= p.sum()
    lengths = np.clip(rng.lognormal(np.log(mean_len), 0.35, n_docs).astype(int), 5, 1000)
    draws = rng.choice(vocab, int(lengths.sum()), p=p)
    docs = []
    pos = 0
    for length in lengths:
        terms = [words[i] for i in draws[pos : pos + length]]
        pos += length
        for j in range(0, len(terms), 12):
            terms[j] = terms[j].capitalize()
            end = min(j + 11, len(terms) - 1)
            terms[end] = terms[end] + "."
        docs.append(" ".join(terms))
    return docs, words


def zipf_queries(words: list[str], count: int, seed: int = 4) -> list[str]:
    """Questions of 2-5 terms drawn from the same law but skipping the 20 commonest words."""
    rng = np.random.default_rng(seed)
    ranks = np.arange(21, len(words) + 1)
    p = 1.0 / ranks
    p /= p.sum()
    return [" ".join(words[r - 1] for r in rng.choice(ranks, int(rng.integers(2, 6)), p=p)) for _ in range(count)]
