"""rag-search: questions -> ranked hits, by dense retrieval, BM25, fusion and a lexical rerank.

    echo '{"id":"q1","question":"when does the settlement sweep run"}' | rag-search --index build/idx
    rag-search --index build/idx "NW-4021"                      # readable ranking on a terminal
    rag-search --index build/idx --sparse --explain 03-error-codes#client-errors "NW-4021"

Reads query records (`id`, `question`; other fields pass through) or questions as
arguments, and writes each query back with:

    hits        ranked [{rank, chunk_id, doc, path, start_line, end_line, headings,
                text, score, signals}]; signals holds each retriever's own score and
                rank, the fused score (`fused`, or `rrf`) and the lexical overlap
    confidence  the abstain signal in [0, 1] (`ragline.abstain.blend`)
    confidence_parts  its parts: best, coverage (BM25 statistics), dense (best cosine)
    retrieval   the configuration that ran and the index it ran on (`Searcher.retrieval`)
    ms          time spent on this query, its share of the batch's embedding included
    explain     with --explain CHUNK_ID: per-term BM25 contributions for that chunk

The default: dense retrieval (each chunk scored by the best of its own vector and its
passages' vectors, `dense_scores`) and BM25, combined by a weighted sum of normalised
scores (`score_fusion`, dense weight 0.9), then the lexical rerank, which reorders
the candidates by idf-weighted query-term overlap, headings weighted. `--fusion rrf`
fuses by reciprocal rank instead, `--no-sparse` runs dense alone and `--no-dense`
BM25 alone. Dense retrieval embeds the question with the index's own model (with its
query prefix); asking for another model is an error. When a page the index was built from
has changed or vanished since, one line on stderr says which and how to rebuild
(`rag_index.stale_notice`).
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import click
import numpy as np

import rag_embed
import rag_index
import ragline
import ragline.records
import ragline.text
from rag_index import Index
from ragline import abstain, cli, models, options, progress, terminal
from ragline.bm25 import Bm25, term_weight
from ragline.options import Config
from ragline.ranking import DenseTop, dense_top, rrf, score_fusion, topk
from ragline.records import StageError

STAGE = "rag-search"
DENSE_WEIGHT = options.default("dense_weight")
MAX_QUESTION = (
    options.MAX_QUESTION
)  # characters of a question read from the command line or stdin; the rest is cut, with a notice (`cli.question_records`)
RERANK_WEIGHT = 0.5  # lexical overlap's weight against the min-max normalised base score
HEADING_WEIGHT = 0.5  # a query term in the heading path counts this much on top of the text
BATCH = 64
EXACT_WEIGHT = 0.5  # --exact: added to the final score, times the share of the question's identifiers a chunk holds
EXACT_MAX_DF = 0.05  # an identifier in more than this share of the chunks (or 2, if more) tells them apart no better than a word


def identifiers(question: str, bm25: Bm25) -> np.ndarray:
    """Term ids of the question's identifiers that the index holds: error codes, commands,
    config keys, file names (NW-4021, --force-with-lease, init.defaultBranch, dependabot.yml).

    An identifier is a word as the tokeniser splits it (`ragline.text.words`) that holds a digit,
    a joiner between word characters (- _ . / :), a capital after a small letter, or is an
    acronym of two or more capitals; its whole term (the first `ragline.text.tokenize` gives)
    must be in the index, in at most EXACT_MAX_DF of the chunks (and at least 2 allowed).
    """
    found: list[str] = []
    for match in ragline.text.words(question):
        word = match.group()
        if not (ragline.text.identifier_like(word) or re.fullmatch(r"[A-Z]{2,}s?", word)):
            continue
        terms = ragline.text.tokenize(word)
        if terms and not terms[0].isdigit():
            found.append(terms[0])
    _, ids = bm25.term_ids(found)
    ids = ids[ids >= 0]
    limit = max(2, EXACT_MAX_DF * bm25.n_docs)
    return np.array([t for t in ids if bm25.df[t] <= limit], dtype=np.int64)


def holders(bm25: Bm25, idents: np.ndarray) -> list[int]:
    """The rows that hold any of the identifiers."""
    return sorted({int(d) for t in idents for d in bm25.holding(int(t))})


def query_terms(bm25: Bm25, question: str) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(distinct terms, their ids or -1, their idf) for a question."""
    terms, ids = bm25.term_ids(ragline.text.tokenize(question))
    return terms, ids, bm25.idf_of(ids)


def overlap(bm25: Bm25, ids: np.ndarray, weights: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Per row: the idf-weighted share of the query's terms that the row's indexed text contains."""
    total = weights.sum()
    out = np.zeros(len(rows), dtype=np.float64)
    if total <= 0:
        return out
    for tid, w in zip(ids, weights, strict=True):
        if tid >= 0:
            out += w * bm25.contains(int(tid), rows)
    return out / total


def heading_overlap(chunks: list[dict[str, Any]], terms: list[str], weights: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Per row: the idf-weighted share of the query's terms found in the heading path."""
    total = weights.sum()
    out = np.zeros(len(rows), dtype=np.float64)
    if total <= 0:
        return out
    index: dict[str, float] = {t: float(w) for t, w in zip(terms, weights, strict=True)}
    for i, row in enumerate(rows):
        heads = ragline.text.term_set(" ".join(chunks[row].get("headings") or []))
        out[i] = sum(w for t, w in index.items() if t in heads) / total
    return out


def explain(index: Index, question: str, chunk_id: str) -> dict[str, Any]:
    """Every query term's BM25 contribution to one chunk: tf, df, idf, contribution, and the total."""
    try:
        row = index.ids.index(chunk_id)
    except ValueError:
        raise StageError(f"--explain: no chunk '{chunk_id}' in the index") from None
    bm25 = index.bm25
    terms, ids, weights = query_terms(bm25, question)
    doc_len = int(bm25.doc_len[row])
    rows: list[dict[str, Any]] = []
    for term, tid, w in zip(terms, ids, weights, strict=True):
        tf = bm25.tf_in(int(tid), row) if tid >= 0 else 0
        df = int(bm25.df[tid]) if tid >= 0 else 0
        contribution = float(term_weight(np.array([tf]), np.array([w]), np.array([doc_len]), bm25.avgdl, bm25.k1, bm25.b)[0])
        rows.append({"term": term, "tf": tf, "df": df, "idf": round(float(w), 6), "contribution": round(contribution, 6)})
    return {
        "chunk_id": chunk_id,
        "doc_len": doc_len,
        "avgdl": round(bm25.avgdl, 3),
        "k1": bm25.k1,
        "b": bm25.b,
        "terms": rows,
        "total": round(sum(r["contribution"] for r in rows), 6),
    }


def explain_dense(searcher: Searcher, question: str, chunk_id: str) -> dict[str, Any]:
    """The dense side of one chunk for a question: the cosine of its vector with the
    question's, its best passage's (where the index has passage vectors), the closest of
    the questions rag-expand wrote for it (where it has them), and its sentence closest
    to the question with that sentence's cosine."""
    index = searcher.index
    try:
        row = index.ids.index(chunk_id)
    except ValueError:
        raise StageError(f"--explain: no chunk '{chunk_id}' in the index") from None
    query = rag_embed.embed_texts(searcher.embedder, [question], query=True, cache=searcher.cache)[0]
    out: dict[str, Any] = {"cosine": round(float(np.asarray(index.vectors[row]) @ query), 6), "passage_cosine": None}
    if index.passages is not None and index.passage_rows is not None:
        mine = np.flatnonzero(index.passage_rows == row)
        if mine.size:
            cosines = np.asarray(index.passages[mine]) @ query
            out["passage_cosine"] = round(float(cosines.max()), 6)
            asked = index.chunks[row].get("questions") or []
            if asked and len(asked) <= len(mine):  # rag-expand's questions: the chunk's last passages (`rag_embed.question_texts`)
                tail = cosines[len(mine) - len(asked) :]
                out |= {"question": asked[int(tail.argmax())], "question_cosine": round(float(tail.max()), 6)}
    sentences = rag_embed.chunk_sentences(index.chunks[row]["text"])
    if sentences:
        cosines = rag_embed.embed_texts(searcher.embedder, sentences, query=False, cache=searcher.cache) @ query
        best = int(cosines.argmax())
        out |= {"sentence": sentences[best], "sentence_cosine": round(float(cosines[best]), 6)}
    return out


# --------------------------------------------------------------------------- the searcher


def _other_weights(embedder: Any, model: str, threads: int, want: str) -> Any:
    """The model's other file (the shipped int8 one, the float32 one derived from it, or the
    int8-arithmetic one derived from that) where that is the file the index was built with, else
    `embedder` unchanged: an index is queried with vectors of the file that made the ones it holds."""
    for other in models.WEIGHTS:
        if other == getattr(embedder, "weights", "int8"):
            continue
        try:
            candidate = rag_embed.load_embedder(model, threads=threads, weights=other)
        except StageError:
            continue
        if candidate.sha256 == want:
            return candidate
    return embedder


class Searcher:
    """Searches one index with one configuration; embeds queries with the index's model."""

    def __init__(
        self, index: Index, config: Config, model: str | None = None, threads: int = 0, embedder: rag_embed.Embedder | None = None
    ):
        """`embedder`: one already loaded (rag-serve shares one across configurations and index generations), checked as a loaded one is."""
        config.check()
        self.index = index
        self.config = config
        built = index.manifest["model"]
        if model is not None and model != built and Path(model).name != built:
            raise StageError(f"the index was built with model '{built}', not '{model}': rebuild it or drop --model")
        # The query is embedded even with --no-dense: the abstain signal's dense part needs it (see `abstain.blend`).
        self.embedder = embedder if embedder is not None else rag_embed.load_embedder(model or built, threads=threads)
        if self.embedder.name != built:
            raise StageError(f"the index was built with model '{built}', the query model is '{self.embedder.name}'")
        want = index.manifest.get("model_sha256")
        if want and self.embedder.sha256 and want != self.embedder.sha256:
            self.embedder = _other_weights(self.embedder, model or built, threads, want)
        if want and self.embedder.sha256 and want != self.embedder.sha256:
            raise StageError(
                f"the index was built with another {built} file (sha256 {want[:12]}..., this one {self.embedder.sha256[:12]}...)"
            )
        if self.embedder.dim != index.manifest["dim"]:
            raise StageError(f"the query model gives {self.embedder.dim} dimensions, the index has {index.manifest['dim']}")
        self.cache = rag_embed.cache_for(self.embedder)
        ids = index.ids
        order = np.argsort(np.array(ids, dtype=str), kind="stable")
        self.tiebreak = np.empty(len(ids), dtype=np.int64)
        self.tiebreak[order] = np.arange(len(ids))

    def retrieval(self) -> dict[str, Any]:
        """The record's `retrieval`: model and its file's sha256, index path and its corpus digest, how it was embedded and
        chunked, and every Config field (passages: asked for, and the index embedded with them)."""
        m = self.index.manifest
        return (
            {
                "model": m["model"],
                "model_sha256": m.get("model_sha256"),  # which file of the model ran (float32, int8 arithmetic, ...)
                "index": str(self.index.path),
                "embed_headings": m.get("embed_headings"),
                "embed_long": m.get("embed_long"),
                "window": m.get("chunking", {}).get("window"),
                "corpus_digest": m.get("corpus_digest"),  # rag-answer and rag-eval check which chunks these hits are
            }
            | asdict(self.config)
            | {"passages": self.config.passages and bool(m.get("embed_passages") or m.get("counts", {}).get("passages"))}
            | {
                "questions": (m.get("expand") or {}).get("questions", 0)
                if self.config.passages and m.get("counts", {}).get("questions")
                else 0
            }
        )

    def search(self, questions: list[str]) -> list[dict[str, Any]]:
        """Hits, confidence and timing for a batch of questions."""
        start = time.perf_counter()
        qvecs = rag_embed.embed_texts(self.embedder, questions, query=True, cache=self.cache)
        dense_all = dense_top(self.index, qvecs, self.config.candidates, self.tiebreak, passages=self.config.passages)
        share = (time.perf_counter() - start) / max(1, len(questions))
        out = []
        for i, question in enumerate(questions):
            t0 = time.perf_counter()
            result = self._one(question, dense_all[i])
            result["ms"] = round((share + time.perf_counter() - t0) * 1000, 3)
            out.append(result)
        return out

    def _one(self, question: str, dense: DenseTop) -> dict[str, Any]:
        """One question's hits, confidence and retrieval, in five steps: each retriever's candidates,
        their fusion, the lexical rerank, the lift of chunks holding the question's identifiers, and
        the top k as hits. `signals` gathers, per chunk row, what each step made of it."""
        bm25 = self.index.bm25
        terms, ids, weights = query_terms(bm25, question)
        bm25_scores = bm25.scores(ids)
        idents = identifiers(question, bm25) if self.config.exact else np.zeros(0, dtype=np.int64)
        signals: dict[int, dict[str, Any]] = {}
        rankings = self._candidates(dense, bm25_scores, idents, signals)
        rows, scores = self._fuse(rankings, dense, bm25_scores, signals)
        scores = self._rerank(rows, scores, terms, ids, weights, signals)
        scores = self._lift_identifiers(rows, scores, idents, signals)
        hits = self._hits(rows, scores, signals)
        parts = abstain.confidence_parts(bm25, ids, weights, bm25_scores, self.tiebreak)
        parts["dense"] = round(float(dense.max()), 6) if len(dense) else 0.0
        return {"hits": hits, "confidence": abstain.blend(parts), "confidence_parts": parts, "retrieval": self.retrieval()}

    def _candidates(
        self, dense: DenseTop, bm25_scores: np.ndarray, idents: np.ndarray, signals: dict[int, dict[str, Any]]
    ) -> dict[str, list[int]]:
        """Each retriever's ranking of its `candidates` best rows (BM25's: those scoring above 0),
        by name ("dense", "bm25"); with --exact under score fusion, every row holding one of the
        question's identifiers joins each ranking, whatever its rank."""
        cfg = self.config
        rankings: dict[str, list[int]] = {}
        if cfg.dense:
            rankings["dense"] = dense.top(cfg.candidates).tolist()
            for rank, row in enumerate(rankings["dense"], 1):
                signals.setdefault(row, {})["dense"] = {"score": round(float(dense[row]), 6), "rank": rank}
        if cfg.sparse:
            ranked = topk(bm25_scores, cfg.candidates, self.tiebreak)
            rankings["bm25"] = [int(r) for r in ranked if bm25_scores[r] > 0]
            for rank, row in enumerate(rankings["bm25"], 1):
                signals.setdefault(row, {})["bm25"] = {"score": round(float(bm25_scores[row]), 6), "rank": rank}
        if len(idents) and cfg.fusion == "score":
            held = holders(self.index.bm25, idents)
            rankings = {name: ranking + sorted(set(held) - set(ranking)) for name, ranking in rankings.items()}
        return rankings

    def _fuse(
        self, rankings: dict[str, list[int]], dense: DenseTop, bm25_scores: np.ndarray, signals: dict[int, dict[str, Any]]
    ) -> tuple[np.ndarray, np.ndarray]:
        """The candidate rows and their one score: the weighted sum of normalised scores
        (`score_fusion`), reciprocal rank fusion (`rrf`), or the one retriever's own score."""
        cfg = self.config
        if len(rankings) > 1 and cfg.fusion == "score":
            rows = np.array(sorted(set(rankings["dense"]) | set(rankings["bm25"])), dtype=np.int64)
            scores = score_fusion(dense, bm25_scores, rows, cfg.dense_weight)
            for r, value in zip(rows, scores, strict=True):
                signals.setdefault(int(r), {})["fused"] = round(float(value), 6)
        elif len(rankings) > 1:
            fused = rrf(rankings, cfg.rrf_k)
            rows = np.array(list(fused), dtype=np.int64)
            scores = np.array([fused[r] for r in rows])
            for r in rows:
                signals[int(r)]["rrf"] = round(fused[int(r)], 6)
        else:
            ((name, ranking),) = rankings.items()
            rows = np.array(ranking, dtype=np.int64)
            scores = dense[rows] if name == "dense" else bm25_scores[rows]
        return rows, scores.astype(np.float64)

    def _rerank(
        self,
        rows: np.ndarray,
        scores: np.ndarray,
        terms: list[str],
        ids: np.ndarray,
        weights: np.ndarray,
        signals: dict[int, dict[str, Any]],
    ) -> np.ndarray:
        """With --rerank lexical: the min-max normalised scores plus RERANK_WEIGHT times the
        idf-weighted query-term overlap of text and headings (HEADING_WEIGHT)."""
        if self.config.rerank != "lexical" or not len(rows):
            return scores
        bm25 = self.index.bm25
        lex_text = overlap(bm25, ids, weights, rows)
        lex_head = heading_overlap(self.index.chunks, terms, weights, rows)
        lex = (lex_text + HEADING_WEIGHT * lex_head) / (1 + HEADING_WEIGHT)
        spread = scores.max() - scores.min()
        normed = (scores - scores.min()) / spread if spread > 0 else np.ones_like(scores)
        for r, value in zip(rows, lex, strict=True):
            signals.setdefault(int(r), {})["lexical"] = round(float(value), 6)
        return normed + RERANK_WEIGHT * lex

    def _lift_identifiers(self, rows: np.ndarray, scores: np.ndarray, idents: np.ndarray, signals: dict[int, dict[str, Any]]) -> np.ndarray:
        """With --exact: EXACT_WEIGHT times the share of the question's identifiers each row holds, on top."""
        if not (len(idents) and len(rows)):
            return scores
        share = overlap(self.index.bm25, idents, np.ones(len(idents)), rows)
        for r, value in zip(rows, share, strict=True):
            if value:
                signals.setdefault(int(r), {})["exact"] = round(float(value), 6)
        return scores + EXACT_WEIGHT * share

    def _hits(self, rows: np.ndarray, scores: np.ndarray, signals: dict[int, dict[str, Any]]) -> list[dict[str, Any]]:
        """The k best rows as hits, best first (ties broken by chunk id)."""
        order = topk(scores, self.config.k, self.tiebreak[rows]) if len(rows) else np.zeros(0, dtype=np.int64)
        hits = []
        for rank, i in enumerate(order, 1):
            row = int(rows[i])
            c = self.index.chunks[row]
            hits.append(
                {
                    "rank": rank,
                    "chunk_id": c["id"],
                    "doc": c.get("doc"),
                    "path": c.get("path"),
                    "start_line": c.get("start_line"),
                    "end_line": c.get("end_line"),
                    "headings": c.get("headings") or [],
                    "text": c["text"],
                    "score": round(float(scores[i]), 6),
                    "signals": signals[row],
                }
            )
        return hits


def search_records(
    searcher: Searcher, records: Iterable[tuple[ragline.records.Line, dict[str, Any]]], explain_id: str | None = None, batch: int = BATCH
) -> Iterator[dict[str, Any]]:
    """Query records with hits added, `batch` questions per model call, input order kept."""
    pending: list[dict[str, Any]] = []
    for where, record in records:
        question = ragline.records.require_field(record, "question", str, where)
        if not question.strip():
            raise StageError("field 'question' is empty", str(where))
        pending.append(record)
        if len(pending) >= batch:
            yield from _search_batch(searcher, pending, explain_id)
            pending = []
    if pending:
        yield from _search_batch(searcher, pending, explain_id)


def _search_batch(searcher: Searcher, records: list[dict[str, Any]], explain_id: str | None) -> Iterator[dict[str, Any]]:
    results = searcher.search([r["question"] for r in records])
    for record, result in zip(records, results, strict=True):
        record.update(result)
        record["schema"] = "hits/1"
        if explain_id is not None:
            record["explain"] = explain(searcher.index, record["question"], explain_id)
            record["explain"]["dense"] = explain_dense(searcher, record["question"], explain_id)
        yield record


# --------------------------------------------------------------------------- for people


def render(record: dict[str, Any], width: int = 100, lines_per_hit: int = 2) -> str:
    """A readable ranking for a terminal `width` columns wide: each hit with its place, heading
    path and the lines of its text that hold the most of the question's terms; --explain's
    BM25 terms and dense side. Every line fits: ids and quoted lines are cut, `file:lines`
    shortened from the left but kept whole (`terminal.place`), the question and heading
    paths wrapped (the JSON keeps them whole)."""
    r = record["retrieval"]
    mode = "+".join([n for n, on in (("dense", r["dense"]), ("bm25", r["sparse"])) if on]) + ("+rerank" if r["rerank"] != "none" else "")
    lines = [*terminal.wrap(record["question"], width)]
    lines += [f"  confidence {record['confidence']:.2f} · {mode} · {r['model']} · {record['ms']:.0f} ms", ""]
    terms = set(ragline.text.tokenize(record["question"]))
    for hit in record["hits"]:
        where = terminal.place(hit["path"], hit["start_line"], hit["end_line"], width - 7) if hit.get("path") else ""
        head = f"{hit['rank']:>3}  {hit['score']:.3f}  {hit['chunk_id']}"
        if where and len(head) + 3 + len(where) <= width:
            lines.append(f"{head}   {where}")
        else:
            lines += [head, f"       {where}"] if where else [head]
        lines += terminal.wrap(" > ".join(hit["headings"]), width, indent="       ")
        lines += [f"       {text}" for text in best_lines(hit["text"], terms, lines_per_hit)]
    if "explain" in record:
        e = record["explain"]
        lines += ["", f"  BM25 explain for {e['chunk_id']} (doc length {e['doc_len']}, average {e['avgdl']}, k1 {e['k1']}, b {e['b']})"]
        lines.append(f"  {'term':<24}{'tf':>5}{'df':>7}{'idf':>9}{'contribution':>15}")
        for t in e["terms"]:
            lines.append(f"  {t['term']:<24}{t['tf']:>5}{t['df']:>7}{t['idf']:>9.3f}{t['contribution']:>15.3f}")
        lines.append(f"  {'total':<45}{e['total']:>15.3f}")
        d = e.get("dense")
        if d:
            passage = "" if d.get("passage_cosine") is None else f", its best passage {d['passage_cosine']:.3f}"
            lines += ["", f"  Dense: the chunk's cosine with the question {d['cosine']:.3f}{passage}"]
            if d.get("sentence"):
                lines.append(f"  closest sentence ({d['sentence_cosine']:.3f}): {d['sentence']}")
    return "\n".join(terminal.cut(line, width) for line in lines) + "\n"


def best_lines(text: str, terms: set[str], n: int) -> list[str]:
    """The `n` non-heading lines of a hit's text holding the most distinct question terms
    (the earlier line on a tie), in the text's order; the first lines when none holds one."""
    rows = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    scored = sorted(range(len(rows)), key=lambda i: (-len(terms & set(ragline.text.tokenize(rows[i]))), i))[:n]
    return [rows[i] for i in sorted(scored)]


# --------------------------------------------------------------------------- the command


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("questions", nargs=-1)
@cli.search_options
@click.option(
    "--queries",
    type=click.Path(dir_okay=False, allow_dash=True),
    default=None,
    help="A JSON Lines file of query records (default: stdin when no QUESTIONS).",
)
@click.option("--raw-input", "-R", "raw", is_flag=True, help="Read one plain-text question a line (stdin or --queries), not JSON.")
@click.option("--explain", "explain_id", default=None, metavar="CHUNK_ID", help="Add each query term's BM25 contribution to this chunk.")
@cli.view_options
@ragline.records.stage_main(STAGE)
def main(
    questions: tuple[str, ...],
    search: cli.SearchArgs,
    queries: str | None,
    raw: bool,
    explain_id: str | None,
    human: bool,
) -> None:
    """Search an index for each question (arguments, query records on stdin, or plain lines with -R)."""
    index = rag_index.load(search.index_path)
    cli.note_stale(STAGE, index.path, rag_index.stale_notice(index))
    searcher = Searcher(index, search.config(), model=search.model, threads=search.threads)
    records = cli.question_records(
        questions, queries, 'no input: pipe query records ({"id","question"}) into rag-search, or give questions as arguments', raw, STAGE
    )
    columns = terminal.width() if human else 0
    if not questions and not human:
        records = progress.Progress(STAGE, "questions", lambda: progress.count_lines([queries or "-"])).track(records)
    out = sys.stdout.buffer
    for record in search_records(searcher, records, explain_id):
        out.write(ragline.records.printable(render(record, columns), keep="\n\t\\").encode() if human else ragline.records.dumps(record))
    out.flush()


if __name__ == "__main__":
    main()
