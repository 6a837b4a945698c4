"""rag-search: fusion, top-k, the abstain signal, explain, and the command."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from corpora import build_index
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonl import jsonl, parse
from properties import examples

import rag_embed
import rag_index
import rag_search
from rag_search import Config, Searcher, main, rrf, topk
from ragline import ranking
from ragline.records import StageError


class TestRrf:
    def test_k60(self):
        fused = rrf({"dense": [10, 11, 12, 13], "bm25": [20, 21, 22, 13]}, k=60)
        assert fused[13] == pytest.approx(2 / 64)  # fourth in both: 0.03125
        assert fused[10] == pytest.approx(1 / 61)  # first in one, absent from the other: 0.0164
        assert fused[13] > fused[10]

    def test_k0(self):
        fused = rrf({"a": [1, 2], "b": [2, 1]}, k=0)
        assert fused == {1: pytest.approx(1.5), 2: pytest.approx(1.5)}

    def test_single_list_keeps_order(self):
        fused = rrf({"a": [5, 3, 9]})
        assert sorted(fused, key=lambda r: -fused[r]) == [5, 3, 9]


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(st.integers(-3, 3), min_size=1, max_size=60), st.integers(1, 70), st.randoms())
def test_topk_equals_a_full_sort(values, k, rnd):
    scores = np.array(values, dtype=np.float64)  # small integers: many ties
    tiebreak = np.arange(len(values))
    rnd.shuffle(tiebreak)
    full = sorted(range(len(values)), key=lambda i: (-scores[i], tiebreak[i]))[:k]
    assert topk(scores, k, tiebreak).tolist() == full


class TestSearcher:
    def test_dense_finds_the_sweep(self, tiny_index):
        s = Searcher(rag_index.load(tiny_index), Config())
        hit = s.search(["when does the nightly sweep run"])[0]["hits"][0]
        assert hit["chunk_id"] == "settlement#the-nightly-sweep"
        assert hit["signals"]["dense"]["rank"] >= 1 and "lexical" in hit["signals"]

    def test_bm25_alone_and_hybrid_signals(self, tiny_index):
        index = rag_index.load(tiny_index)
        only = Searcher(index, Config(dense=False, sparse=True, rerank="none")).search(["NW-5001"])[0]
        assert only["hits"][0]["chunk_id"] == "errors#platform-errors"
        assert set(only["hits"][0]["signals"]) == {"bm25"}
        both = Searcher(index, Config(sparse=True, fusion="rrf")).search(["NW-5001"])[0]
        assert {"dense", "bm25", "rrf"} <= set(both["hits"][0]["signals"])
        fused = Searcher(index, Config()).search(["NW-5001"])[0]  # the default: score fusion
        assert {"dense", "bm25", "fused", "lexical"} <= set(fused["hits"][0]["signals"])

    def test_confidence_does_not_depend_on_the_retrievers(self, tiny_index):
        index = rag_index.load(tiny_index)
        qs = ["when does the sweep run", "can I pay with crypto", "NW-4021", "the"]
        runs = [
            Searcher(index, c).search(qs) for c in (Config(), Config(sparse=True), Config(dense=False, sparse=True), Config(rerank="none"))
        ]
        for a in runs[1:]:
            assert [r["confidence"] for r in a] == [r["confidence"] for r in runs[0]]
            assert [r["confidence_parts"] for r in a] == [r["confidence_parts"] for r in runs[0]]

    def test_confidence_high_when_covered_low_when_not(self, tiny_index):
        s = Searcher(rag_index.load(tiny_index), Config())
        covered, absent, empty = s.search(["when does the nightly sweep run", "does ragline support apple pay wallets", "the of and"])
        assert covered["confidence"] > absent["confidence"]
        assert empty["confidence_parts"]["best"] == 0.0 and empty["confidence_parts"]["coverage"] == 0.0
        assert 0.0 <= absent["confidence"] <= 1.0

    @pytest.mark.parametrize("config", [Config(), Config(sparse=True), Config(dense=False, sparse=True), Config(rerank="none")])
    def test_ties_are_broken_by_chunk_id(self, tmp_path, config):
        # three chunks with the same text and heading: every retriever scores them equally,
        # and they were indexed in the order c, a, b (files sorted: the ids differ in the doc part)
        same = "# Same\n\nRetry the charge twice.\n"
        index = rag_index.load(build_index(tmp_path, {"c": same, "a": same, "b": same}))
        hits = Searcher(index, config).search(["retry the charge"])[0]["hits"]
        for retriever in ("dense", "bm25"):
            assert len({(h["signals"].get(retriever) or {}).get("score") for h in hits}) == 1  # a tie, not a ranking
        assert [h["chunk_id"] for h in hits] == ["a#same", "b#same", "c#same"]

    def test_explain_sums_to_the_bm25_score(self, tiny_index):
        index = rag_index.load(tiny_index)
        q = "NW-5001 retry the charge"
        e = rag_search.explain(index, q, "errors#platform-errors")
        _, ids, _ = rag_search.query_terms(index.bm25, q)
        row = index.ids.index("errors#platform-errors")
        assert e["total"] == pytest.approx(index.bm25.scores(ids)[row], abs=1e-5)
        nw = next(t for t in e["terms"] if t["term"] == "nw-5001")
        assert nw["tf"] == 1 and nw["df"] == 1 and nw["contribution"] > 0

    def test_explain_unknown_chunk(self, tiny_index):
        with pytest.raises(StageError, match="--explain: no chunk 'nope' in the index"):
            rag_search.explain(rag_index.load(tiny_index), "x", "nope")

    def test_model_mismatch(self, tiny_index):
        with pytest.raises(StageError, match="the index was built with model 'hash', not 'all-MiniLM-L6-v2'"):
            Searcher(rag_index.load(tiny_index), Config(), model="all-MiniLM-L6-v2")


class TestCli:
    def test_happy_path_json(self, runner, tiny_index):
        result = runner.invoke(main, ["--index", str(tiny_index)], input=jsonl({"id": "q1", "question": "NW-4021", "extra": 1}))
        assert result.exit_code == 0, result.stderr
        out = parse(result.stdout_bytes)[0]
        assert out["id"] == "q1" and out["extra"] == 1 and out["schema"] == "hits/1"
        assert len(out["hits"]) == 5 and out["hits"][0]["rank"] == 1
        assert out["retrieval"]["dense"] is True and out["retrieval"]["sparse"] is True and out["retrieval"]["model"] == "hash"
        assert out["retrieval"]["fusion"] == "score" and out["retrieval"]["dense_weight"] == rag_search.DENSE_WEIGHT
        assert out["ms"] > 0

    def test_raw_input_ids_and_the_question_limit(self, runner, tiny_index):
        """-R reads plain lines (blank ones skipped); a record without an id gets its line
        number; a question over MAX_QUESTION characters is cut, with a notice."""
        result = runner.invoke(main, ["--index", str(tiny_index), "-R"], input="NW-4021\n\nWhen does the nightly sweep run?\n")
        assert result.exit_code == 0, result.stderr
        out = parse(result.stdout_bytes)
        assert [(r["id"], r["question"]) for r in out] == [("1", "NW-4021"), ("3", "When does the nightly sweep run?")]
        assert runner.invoke(main, ["--index", str(tiny_index)], input="NW-4021\n").exit_code == 1  # not JSON without -R
        result = runner.invoke(main, ["--index", str(tiny_index)], input=jsonl({"question": "NW-4021"}, {"id": "x", "question": "NW-4021"}))
        assert [r["id"] for r in parse(result.stdout_bytes)] == ["1", "x"]
        long = "sweep " * 999 + "sweep"
        result = runner.invoke(main, ["--index", str(tiny_index), "-R"], input=long + "\n")
        assert result.exit_code == 0, result.stderr
        assert parse(result.stdout_bytes)[0]["question"] == long[: rag_search.MAX_QUESTION]
        assert result.stderr == f"rag-search: <stdin>:1: a question of {len(long):,} characters, cut to its first 2,000\n"
        both = runner.invoke(main, ["--index", str(tiny_index), "-R", "NW-4021"])
        assert both.exit_code == 2 and "not both" in both.stderr

    def test_an_empty_question_is_usage_on_the_command_line_and_bad_data_on_stdin(self, runner, tiny_index):
        """Like any other argument: what is typed is a usage error (exit 2), what is read is data (exit 1)."""
        typed = runner.invoke(main, ["--index", str(tiny_index), "NW-4021", " "])
        assert typed.exit_code == 2 and "question 2 is empty" in typed.stderr
        assert runner.invoke(main, ["--index", str(tiny_index)]).exit_code == 0  # CliRunner's stdin is empty, not a terminal
        read = runner.invoke(main, ["--index", str(tiny_index)], input=jsonl({"id": "a", "question": " "}))
        assert (read.exit_code, read.stderr) == (1, "rag-search: <stdin>:1: field 'question' is empty\n")

    def test_version(self, runner):
        result = runner.invoke(main, ["--version"])
        assert result.exit_code == 0 and result.stdout.startswith("rag-search (ragline) ")

    def test_questions_as_arguments_and_explain(self, runner, tiny_index):
        result = runner.invoke(main, ["--index", str(tiny_index), "--sparse", "--explain", "errors#client-errors", "NW-4021"])
        assert result.exit_code == 0, result.stderr
        assert parse(result.stdout_bytes)[0]["explain"]["terms"][0]["term"] == "nw-4021"

    def test_explain_shows_the_dense_side(self, runner, tiny_index):
        """The chunk's cosine is the dense signal its hit shows; the closest sentence is one of its sentences."""
        chunk = "settlement#the-nightly-sweep"
        result = runner.invoke(main, ["--index", str(tiny_index), "--explain", chunk, "When does the nightly sweep run?"])
        assert result.exit_code == 0, result.stderr
        out = parse(result.stdout_bytes)[0]
        dense = out["explain"]["dense"]
        hit = next(h for h in out["hits"] if h["chunk_id"] == chunk)
        assert dense["cosine"] == pytest.approx(hit["signals"]["dense"]["score"], abs=1e-5)
        assert dense["passage_cosine"] is None  # the tiny index has no passage vectors
        assert dense["sentence"] in ("The sweep runs once a day at 23:40 IST and closes the batch.", "There is no manual sweep.")
        text = rag_search.render(out)
        assert f"Dense: the chunk's cosine with the question {dense['cosine']:.3f}" in text
        assert f"closest sentence ({dense['sentence_cosine']:.3f}): {dense['sentence']}" in text

    def test_an_index_embedded_with_passages_reports_them_even_with_none_long_enough(self, tmp_path):
        """A handbook of short chunks gets no passage vectors, yet was embedded with --passages:
        its records show the configuration asked for (the `default` run's), not `no-passages`."""
        idx = build_index(tmp_path, passages=True)
        index = rag_index.load(idx)
        assert index.manifest["counts"]["passages"] == 0 and index.manifest["embed_passages"] is True
        assert rag_search.Searcher(index, rag_search.Config()).retrieval()["passages"] is True
        assert rag_search.Searcher(index, rag_search.Config(passages=False)).retrieval()["passages"] is False

    def test_a_terminal_shows_the_lines_that_match(self):
        text = "## Refunds\n\nRefunds go back to the card.\nThey take five days.\nA refund of a settled charge waits for the sweep.\n"
        assert rag_search.best_lines(text, {"settled", "refund", "sweep"}, 1) == ["A refund of a settled charge waits for the sweep."]
        assert rag_search.best_lines(text, {"card", "sweep"}, 2) == [
            "Refunds go back to the card.",
            "A refund of a settled charge waits for the sweep.",
        ]
        assert rag_search.best_lines(text, {"nothing"}, 2) == ["Refunds go back to the card.", "They take five days."]

    def test_both_retrievers_off_is_usage_error(self, runner, tiny_index):
        result = runner.invoke(main, ["--index", str(tiny_index), "--no-dense", "--no-sparse", "x"])
        assert result.exit_code == 2 and "both retrievers are off" in result.stderr

    def test_env_variables(self, runner, tiny_index):
        result = runner.invoke(main, ["x"], env={"RAG_INDEX": str(tiny_index), "RAG_USE_SPARSE": "1", "RAG_RERANK": "none", "RAG_K": "2"})
        out = parse(result.stdout_bytes)[0]
        assert out["retrieval"]["sparse"] is True and out["retrieval"]["rerank"] == "none" and len(out["hits"]) == 2

    def test_malformed_line(self, runner, tiny_index):
        result = runner.invoke(main, ["--index", str(tiny_index)], input=b'{"id":"q","question":"x"}\n{"id":"q2"}\n')
        assert result.exit_code == 1
        assert result.stderr == "rag-search: <stdin>:2: missing field 'question'\n"

    def test_missing_index(self, runner, tmp_path):
        result = runner.invoke(main, ["--index", str(tmp_path / "none"), "x"])
        assert result.exit_code == 1
        assert result.stderr == f"rag-search: {tmp_path / 'none'}: no index here (run rag-index --out first)\n"

    def test_readable_rendering(self, tiny_index):
        record = Searcher(rag_index.load(tiny_index), Config()).search(["sweep"])[0] | {"question": "sweep"}
        record["explain"] = rag_search.explain(rag_index.load(tiny_index), "sweep", "settlement#the-nightly-sweep")
        text = rag_search.render(record)
        assert "confidence" in text and "settlement#the-nightly-sweep" in text and "total" in text


def test_rerank_reorders_by_heading_terms(tmp_path):
    filler = " ".join(f"word{i}" for i in range(10))
    docs = {
        "a": f"# Alpha\n\n## Limits\n\nNumbers live here. {filler}\n",
        "b": "# Beta\n\n## Misc\n\nAlpha limits, limits, limits and alpha limits.\n",
        "c": "# Gamma\n\n## Other\n\nThe limits of " + " ".join(f"w{i}" for i in range(80)) + "\n",
    }
    index = rag_index.load(build_index(tmp_path, docs))
    plain = Searcher(index, Config(dense=False, sparse=True, rerank="none")).search(["alpha limits"])[0]
    reranked = Searcher(index, Config(dense=False, sparse=True)).search(["alpha limits"])[0]
    assert plain["hits"][0]["chunk_id"] == "b#misc"  # BM25 alone: three times "limits"
    assert reranked["hits"][0]["chunk_id"] == "a#limits"  # the rerank: both terms, one in the heading path
    assert reranked["hits"][0]["signals"]["lexical"] > reranked["hits"][1]["signals"]["lexical"]


def test_query_cache_gives_identical_results(tiny_index, tmp_path, monkeypatch):
    index = rag_index.load(tiny_index)
    questions = ["when does the nightly sweep run", "NW-5001"]
    cold = Searcher(index, Config(sparse=True)).search(questions)
    monkeypatch.setenv("RAG_EMBED_CACHE", str(tmp_path / "cache.sqlite"))
    first = Searcher(index, Config(sparse=True)).search(questions)
    warm = Searcher(index, Config(sparse=True))
    again = warm.search(questions)
    assert warm.cache is not None and warm.cache.hits == 2
    for a, b, c in zip(cold, first, again, strict=True):
        assert a["hits"] == b["hits"] == c["hits"] and a["confidence"] == b["confidence"] == c["confidence"]


# --------------------------------------------------------------------------- score fusion and passages


def test_score_fusion_by_hand():
    dense = np.array([0.2, 0.6, 1.0, -0.2])  # min -0.2, max 1.0
    sparse = np.array([0.0, 4.0, 2.0, 8.0])  # max 8
    rows = np.array([1, 2, 3])
    got = ranking.score_fusion(dense, sparse, rows, 0.75)
    assert got.tolist() == pytest.approx([0.75 * 0.8 / 1.2 + 0.25 * 0.5, 0.75 * 1.0 + 0.25 * 0.25, 0.75 * 0.0 + 0.25 * 1.0])
    # a retriever with nothing to say (no query term in the corpus) adds nothing
    assert ranking.score_fusion(dense, np.zeros(4), rows, 0.5).tolist() == pytest.approx([0.5 * 0.8 / 1.2, 0.5, 0.0])


def test_score_fusion_ranks_by_the_weighted_scores(tmp_path):
    docs = {"a": "# Alpha\n\nNW-4021 means the capture was too large.\n", "b": "# Beta\n\nCapture amounts and limits.\n"}
    index = rag_index.load(build_index(tmp_path, docs))
    for w in (0.0, 1.0):
        got = Searcher(index, Config(sparse=True, fusion="score", dense_weight=w, rerank="none")).search(["NW-4021"])[0]
        assert all("fused" in h["signals"] for h in got["hits"])
        key = "bm25" if w == 0.0 else "dense"
        scores = [(h["signals"].get(key) or {}).get("score", 0.0) for h in got["hits"]]
        assert scores == sorted(scores, reverse=True)
    assert got["retrieval"]["fusion"] == "score" and got["retrieval"]["dense_weight"] == 1.0


def test_config_refuses_what_cannot_run():
    for bad in (Config(fusion="max"), Config(dense_weight=1.5), Config(dense=False, sparse=False), Config(rerank="x")):
        with pytest.raises(ValueError):
            bad.check()


def test_a_chunk_scores_its_best_passage(tmp_path):
    filler = " ".join(f"Cooking step {i} needs onions and butter." for i in range(20))
    docs = {"a": f"# Kitchen\n\n{filler} The settlement sweep runs nightly at 23:40.\n", "b": "# Other\n\nNothing about it at all here.\n"}
    index = rag_index.load(build_index(tmp_path, docs, passages=True))
    assert index.passages is not None and len(index.passages) >= 2
    q = rag_embed.load_embedder("hash").embed(["settlement sweep nightly"], query=True)
    with_p = ranking.dense_scores(index, q, passages=True)[0]
    without = ranking.dense_scores(index, q, passages=False)[0]
    best = max(float(index.passages[i] @ q[0]) for i in np.flatnonzero(index.passage_rows == 0))
    assert with_p[0] == pytest.approx(max(without[0], best)) and best > without[0]
    assert with_p[1] == pytest.approx(without[1])  # no passages of its own: its own vector
    hits = Searcher(index, Config(rerank="none")).search(["settlement sweep nightly"])[0]
    assert hits["retrieval"]["passages"] is True
    assert Searcher(index, Config(passages=False)).search(["x"])[0]["retrieval"]["passages"] is False


# --------------------------------------------------------------------------- what `just mutate` found untested


def test_topk_of_nothing_is_an_empty_index_array():
    scores, tiebreak = np.array([0.3, 0.9, 0.1]), np.arange(3)
    for got in (topk(scores, 0, tiebreak), topk(scores, -1, tiebreak), topk(np.zeros(0), 3, np.zeros(0, dtype=np.int64))):
        assert got.tolist() == [] and got.dtype.kind == "i"  # row indices, usable to index with
    assert topk(scores, 3, tiebreak).tolist() == [1, 0, 2]  # k = n: every row, sorted


def test_score_fusion_with_flat_dense_scores_or_small_bm25():
    rows = np.array([0, 1, 2])
    # dense scores all equal (nothing to tell the chunks apart): dense adds 0, not NaN
    assert ranking.score_fusion(np.full(3, 0.4), np.array([0.0, 1.0, 2.0]), rows, 0.5).tolist() == [0.0, 0.25, 0.5]
    # BM25 is scaled by its best score whatever its size, below 1 too
    got = ranking.score_fusion(np.array([0.0, 0.5, 1.0]), np.array([0.1, 0.2, 0.4]), rows, 0.5)
    assert got.tolist() == pytest.approx([0.125, 0.5, 1.0])


def test_dense_scores_use_passages_by_default(tmp_path):
    filler = " ".join(f"Cooking step {i} needs onions and butter." for i in range(20))
    docs = {"a": f"# Kitchen\n\n{filler} The settlement sweep runs nightly at 23:40.\n", "b": "# Other\n\nNothing about it at all here.\n"}
    index = rag_index.load(build_index(tmp_path, docs, passages=True))
    q = rag_embed.load_embedder("hash").embed(["settlement sweep nightly"], query=True)
    default = ranking.dense_scores(index, q)
    assert default.tolist() == ranking.dense_scores(index, q, passages=True).tolist()
    assert default[0, 0] > ranking.dense_scores(index, q, passages=False)[0, 0]


# --------------------------------------------------------------------------- exact identifiers

IDENT_DOCS = {
    "a": "# Errors\n\nNW-4021 means the capture was larger than the authorization.\n",
    "b": "# Captures\n\nA capture larger than the authorization is refused with an error code.\n",
    "c": "# Git\n\nPush with --force-with-lease, and set init.defaultBranch to main.\n",
}


def test_identifiers_are_the_questions_rare_codes_commands_and_keys(tmp_path):
    index = rag_index.load(build_index(tmp_path, IDENT_DOCS))
    bm25 = index.bm25
    names = lambda q: [str(bm25.terms[t]) for t in rag_search.identifiers(q, bm25)]  # noqa: E731
    assert names("why NW-4021 on capture?") == ["nw-4021"]
    assert names("should I use --force-with-lease or set init.defaultBranch") == ["force-with-lease", "init.defaultbranch"]
    assert names("capture larger than the authorization") == []  # words, not identifiers
    assert names("what is NW-9999") == []  # not in the index: nothing to lift


def test_exact_lifts_the_chunk_that_holds_the_identifier(tmp_path):
    index = rag_index.load(build_index(tmp_path, IDENT_DOCS))
    q = "capture larger than authorization NW-4021"
    plain = Searcher(index, Config(rerank="none")).search([q])[0]["hits"]
    lifted = Searcher(index, Config(rerank="none", exact=True)).search([q])[0]["hits"]
    assert lifted[0]["chunk_id"] == "a#errors" and lifted[0]["signals"]["exact"] == 1.0
    assert [h["chunk_id"] for h in lifted[1:]] == [h["chunk_id"] for h in plain if h["chunk_id"] != "a#errors"][: len(lifted) - 1]
    gap = lifted[0]["score"] - next(h["score"] for h in plain if h["chunk_id"] == "a#errors")
    assert gap == pytest.approx(rag_search.EXACT_WEIGHT)


# --------------------------------------------------------------------------- blocked dense scoring


@settings(max_examples=examples(40), deadline=None)
@given(
    n=st.integers(1, 40),
    q=st.integers(1, 4),
    block=st.integers(1, 50),
    k=st.integers(1, 12),
    seed=st.integers(0, 2**16),
    ties=st.booleans(),
    with_passages=st.booleans(),
)
def test_dense_top_equals_topk_over_the_full_score_matrix(n, q, block, k, seed, ties, with_passages):
    """Block by block, with passages or without, ties included: the same rows in the same order as
    `topk` over `dense_scores`, the same score for any row asked for, the same extremes. The values
    are multiples of 1/4 (or 1/64), so every sum is exact in float32 whatever order a kernel adds in."""
    rng = np.random.default_rng(seed)
    scale = 4 if ties else 64  # coarse values: many equal scores, and the tiebreak decides
    vectors = (rng.integers(-scale, scale + 1, (n, 8)) / scale).astype(np.float32)
    owners = np.sort(rng.integers(0, n, size=2 * n)).astype(np.int32)
    passages = (rng.integers(-scale, scale + 1, (len(owners), 8)) / scale).astype(np.float32)
    index = rag_index.Index(None, {}, vectors, [], None, passages if with_passages else None, owners if with_passages else None)
    queries = (rng.integers(-scale, scale + 1, (q, 8)) / scale).astype(np.float32)
    tiebreak = rng.permutation(n).astype(np.int64)
    full = ranking.dense_scores(index, queries)
    got = ranking.dense_top(index, queries, k, tiebreak, block=block)
    for i in range(q):
        assert got[i].top(k).tolist() == topk(full[i], k, tiebreak).tolist()
        assert got[i].min() == full[i].min() and got[i].max() == full[i].max() and len(got[i]) == n
        assert got[i][np.arange(n)].tolist() == full[i].tolist()
        assert got[i][n - 1] == full[i][n - 1]


def test_searcher_results_do_not_depend_on_the_block(tmp_path, monkeypatch):
    filler = " ".join(f"Cooking step {i} needs onions and butter." for i in range(20))
    docs = dict(IDENT_DOCS, k=f"# Kitchen\n\n{filler} The settlement sweep runs nightly at 23:40.\n")
    index = rag_index.load(build_index(tmp_path, docs, passages=True))
    questions = ["settlement sweep nightly", "NW-4021 capture", "force with lease", "onions"]
    for config in (Config(), Config(sparse=False), Config(fusion="rrf"), Config(exact=True)):
        whole = Searcher(index, config).search(questions)
        monkeypatch.setattr(ranking, "BLOCK", 1)
        blocked = Searcher(index, config).search(questions)
        monkeypatch.undo()
        strip = lambda rs: [{k: v for k, v in r.items() if k != "ms"} for r in rs]  # noqa: E731
        assert strip(blocked) == strip(whole)


def test_one_question_loads_no_writer_and_no_cache_modules(tmp_path):
    """rag-search QUESTION with no vector cache only reads: it does not import what only the writers
    (tempfile, shutil: atomic files, generation sweeps) and the vector cache (sqlite3) need, each a
    share of a one-question start-up (bench/question.py)."""
    idx = build_index(tmp_path)
    code = (
        "import sys, ragline\n"
        "sys.argv = ['rag-search', '--index', sys.argv[1], '--json', 'When does the nightly sweep run?']\n"
        "try:\n    ragline.rag_search()\nexcept SystemExit as done:\n    assert not done.code, done.code\n"
        "print(sorted(m for m in ('sqlite3', 'tempfile', 'shutil') if m in sys.modules), file=sys.stderr)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "RAG_EMBED_CACHE"}
    done = subprocess.run([sys.executable, "-c", code, str(idx)], cwd=Path(__file__).parent.parent, capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert parse(done.stdout)[0]["hits"]
    assert done.stderr.strip().splitlines()[-1] == "[]"
