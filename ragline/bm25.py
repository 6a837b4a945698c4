"""bm25: Okapi BM25 statistics over the chunks, the vocabulary, and the term weights.

BM25 is Okapi BM25 with Lucene's idf, idf(t) = ln(1 + (N - df + 0.5) / (df + 0.5)),
and Lucene's (>= 8) term weight without the (k1 + 1) factor:
w(t, d) = idf(t) * tf / (tf + k1 * (1 - b + b * |d| / avgdl)), k1 = 1.2, b = 0.75.
Terms come from `ragline.text.tokenize` over the heading path joined to the text.

`rag_index` writes and loads these arrays as part of an index (it owns the format); the
abstain signal, the answer's cues and term weights, and rag-search's scores read them here.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

import ragline.text

K1 = 1.2
B = 0.75


def idf(n_docs: int, df: np.ndarray) -> np.ndarray:
    """Lucene's BM25 idf: ln(1 + (N - df + 0.5) / (df + 0.5)); always positive."""
    df = np.asarray(df, dtype=np.float64)
    return np.log1p((n_docs - df + 0.5) / (df + 0.5))


def term_weight(tf: np.ndarray, idf_t: np.ndarray, doc_len: np.ndarray, avgdl: float, k1: float = K1, b: float = B) -> np.ndarray:
    """idf * tf / (tf + k1 * (1 - b + b * |d| / avgdl)); tf = 0 gives 0."""
    tf = np.asarray(tf, dtype=np.float64)
    norm = k1 * (1.0 - b + b * np.asarray(doc_len, dtype=np.float64) / (avgdl or 1.0))
    return idf_t * tf / (tf + norm)


class Vocabulary:
    """The BM25 terms, sorted (by UTF-8 bytes, which is code point order), without padding:
    their UTF-8 encodings end to end in one buffer, and V + 1 offsets into it.

    Term i is data[offsets[i]:offsets[i + 1]]; `find` is a binary search over those slices,
    so a lookup costs log2(V) comparisons and the vocabulary costs its bytes, whatever the
    longest term (ragline.text cuts a token at MAX_TERM characters anyway).
    """

    def __init__(self, data: np.ndarray, offsets: np.ndarray):
        self.data = np.asarray(data, dtype=np.uint8)  # (bytes,) uint8: what is saved
        self.offsets = np.asarray(offsets, dtype=np.int64)  # (V + 1,) int64
        self._bytes = self.data.tobytes()
        self._ends = self.offsets.tolist()

    @classmethod
    def of(cls, terms: Iterable[str]) -> Vocabulary:
        """The vocabulary of `terms` (distinct), sorted."""
        encoded = sorted(t.encode() for t in terms)
        offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum([len(e) for e in encoded], out=offsets[1:])
        return cls(np.frombuffer(b"".join(encoded), dtype=np.uint8), offsets)

    def __len__(self) -> int:
        return len(self._ends) - 1

    def _at(self, i: int) -> bytes:
        return self._bytes[self._ends[i] : self._ends[i + 1]]

    def __getitem__(self, i: int) -> str:
        if not -len(self) <= i < len(self):
            raise IndexError(i)
        return self._at(int(i) % len(self)).decode()

    def tolist(self) -> list[str]:
        return [self._at(i).decode() for i in range(len(self))]

    def find(self, term: str) -> int:
        """The id of `term`, -1 when it is not in the vocabulary."""
        key, lo, hi = term.encode(), 0, len(self)
        while lo < hi:
            mid = (lo + hi) // 2
            if self._at(mid) < key:
                lo = mid + 1
            else:
                hi = mid
        return lo if lo < len(self) and self._at(lo) == key else -1


@dataclass
class Bm25:
    """BM25 statistics: vocabulary, df, doc lengths and postings in CSR form."""

    terms: Vocabulary  # (V,) sorted
    df: np.ndarray  # (V,) int32
    doc_len: np.ndarray  # (N,) int32
    indptr: np.ndarray  # (V+1,) int64
    docs: np.ndarray  # (nnz,) int32, ascending within a term
    tf: np.ndarray  # (nnz,) int32
    weights: np.ndarray  # (nnz,) float32: the term's BM25 contribution to that doc
    k1: float = K1
    b: float = B

    @property
    def n_docs(self) -> int:
        return int(self.doc_len.shape[0])

    @property
    def avgdl(self) -> float:
        return float(self.doc_len.mean()) if self.n_docs else 0.0

    def term_ids(self, terms: Iterable[str]) -> tuple[list[str], np.ndarray]:
        """(distinct terms in first-seen order, their ids or -1 where unknown)."""
        seen = list(dict.fromkeys(terms))
        return seen, np.array([self.terms.find(t) for t in seen], dtype=np.int64)

    def idf_of(self, ids: np.ndarray) -> np.ndarray:
        """idf per term id; unknown terms (-1) get the idf of df = 0."""
        df = np.where(ids >= 0, self.df[np.clip(ids, 0, None)] if len(self.df) else 0, 0)
        return idf(self.n_docs, df)

    def scores(self, ids: np.ndarray) -> np.ndarray:
        """BM25 score of every document for the distinct known term ids."""
        known = ids[ids >= 0]
        if not len(known):
            return np.zeros(self.n_docs, dtype=np.float64)
        spans = [(self.indptr[t], self.indptr[t + 1]) for t in known]
        docs = np.concatenate([self.docs[s:e] for s, e in spans])
        weights = np.concatenate([self.weights[s:e] for s, e in spans]).astype(np.float64)
        return np.bincount(docs, weights=weights, minlength=self.n_docs)

    def tf_in(self, term: int, doc: int) -> int:
        s, e = self.indptr[term], self.indptr[term + 1]
        i = np.searchsorted(self.docs[s:e], doc)
        return int(self.tf[s + i]) if i < e - s and self.docs[s + i] == doc else 0

    def holding(self, term: int) -> np.ndarray:
        """The rows (documents) whose text holds the term: its postings."""
        return self.docs[self.indptr[term] : self.indptr[term + 1]]

    def contains(self, term: int, rows: np.ndarray) -> np.ndarray:
        """For each row in `rows`: does the document contain the term?"""
        return np.isin(rows, self.holding(term))


def build_bm25(texts: list[str], k1: float = K1, b: float = B) -> Bm25:
    """BM25 statistics for documents in row order.

    Terms are `ragline.text.tokenize`'s, memoised word by word: a word's terms depend on the
    word alone (`ragline.text.word_terms`), so each distinct word is tokenised once and
    turned into term ids once, and a document becomes one list of ids. Counting is one
    sort of (term, document) keys for the whole corpus, which also gives the postings
    in CSR order.
    """
    vocab: dict[str, int] = {}
    memo: dict[str, list[int]] = {}
    flat: list[int] = []  # term ids, document after document
    lengths = np.zeros(len(texts), dtype=np.int64)
    for row, text in enumerate(texts):
        normalised = ragline.text.normalise(text)
        start = len(flat)
        flat.extend(vocab.setdefault(t, len(vocab)) for t in ragline.text.digit_group_terms(normalised))
        for word in ragline.text.split_words(normalised):
            ids = memo.get(word)
            if ids is None:
                ids = memo[word] = [vocab.setdefault(t, len(vocab)) for t in ragline.text.word_terms(word)]
            flat.extend(ids)
        lengths[row] = len(flat) - start
    names = list(vocab)
    order = sorted(range(len(names)), key=lambda i: names[i].encode())  # code point order, as Vocabulary.of sorts
    remap = np.empty(len(order), dtype=np.int64)
    remap[np.asarray(order, dtype=np.int64)] = np.arange(len(order))
    n = max(len(texts), 1)
    keys = remap[np.asarray(flat, dtype=np.int64)] * n + np.repeat(np.arange(len(texts), dtype=np.int64), lengths)
    keys, tf_arr = np.unique(keys, return_counts=True)  # sorted by term, then doc
    col, docs = keys // n, (keys % n).astype(np.int32)
    tf_arr = tf_arr.astype(np.int32)
    df = np.bincount(col, minlength=len(names)).astype(np.int32)
    indptr = np.zeros(len(names) + 1, dtype=np.int64)
    np.cumsum(df, out=indptr[1:])
    lengths = lengths.astype(np.int32)
    avgdl = float(lengths.mean()) if len(texts) else 0.0
    idf_t = idf(len(texts), df)[col]
    weights = term_weight(tf_arr, idf_t, lengths[docs], avgdl, k1, b).astype(np.float32)
    return Bm25(Vocabulary.of(names), df, lengths, indptr, docs, tf_arr, weights, k1, b)
