"""rag-index: the on-disk format, its checks, BM25 statistics, and atomic rebuilds."""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import orjson
import pytest
from corpora import GDS_WAY, SHARED, build_index
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonl import jsonl
from properties import examples

import rag_index
import ragline
import ragline.bm25
import ragline.text
from rag_index import load, main
from ragline.bm25 import build_bm25
from ragline.records import StageError


def rec(cid: str, vec, model="hash", text="some text", **extra):
    return {"id": cid, "text": text, "vector": vec, "model": model, **extra}


class TestBm25:
    def test_statistics_by_hand(self):
        bm = build_bm25(["sweep runs nightly", "sweep sweep payout", "refund"])
        terms = bm.terms.tolist()
        assert terms == sorted(terms)
        sweep = terms.index("sweep")
        assert bm.df[sweep] == 2
        assert bm.doc_len.tolist() == [3, 3, 1]
        # doc 1, term "sweep": tf 2, N 3, df 2, |d| 3, avgdl 7/3
        idf = math.log(1 + (3 - 2 + 0.5) / (2 + 0.5))
        want = idf * 2 / (2 + 1.2 * (1 - 0.75 + 0.75 * 3 / (7 / 3)))
        _, ids = bm.term_ids(["sweep"])
        assert bm.scores(ids)[1] == pytest.approx(want, rel=1e-6)
        assert bm.scores(ids)[2] == 0

    def test_unknown_terms_score_nothing(self):
        bm = build_bm25(["alpha beta"])
        terms, ids = bm.term_ids(["zeta", "alpha"])
        assert terms == ["zeta", "alpha"] and ids[0] == -1 and ids[1] >= 0
        assert bm.scores(ids[:1]).tolist() == [0.0]

    def test_idf_is_lucene(self):
        assert ragline.bm25.idf(10, np.array([0, 10])).tolist() == pytest.approx([math.log(1 + 10.5 / 0.5), math.log(1 + 0.5 / 10.5)])

    @pytest.mark.reference
    def test_agrees_with_bm25s(self):
        bm25s = pytest.importorskip("bm25s", reason="bm25s is the reference implementation (pip install -e '.[dev]')")
        docs = [
            "The sweep runs nightly at 23:40 IST and closes the batch",
            "Payouts arrive T+1 after settlement; payout retries follow",
            "NW-5001 acquirer timeout: do not retry the charge, poll its state",
            "Refunds are netted in the next settlement batch",
            "Webhook retries: 1 minute, 5 minutes, 30 minutes",
            "settlement settlement settlement sweep",
        ]
        queries = ["when does the sweep run", "NW-5001 retry", "settlement batch refunds", "webhook retry minutes"]
        ours = build_bm25(docs)
        ref = bm25s.BM25(method="lucene", k1=1.2, b=0.75)
        ref.index([ragline.text.tokenize(d) for d in docs], show_progress=False)
        for q in queries:
            terms = list(dict.fromkeys(ragline.text.tokenize(q)))
            _, ids = ours.term_ids(terms)
            want = ref.get_scores(terms)
            assert np.allclose(ours.scores(ids), want, atol=1e-6), q


def reference_bm25(texts: list[str]) -> dict[str, np.ndarray]:
    """BM25's arrays counted the plain way: ragline.text.tokenize per document, a dict of term counts, a sort."""
    counts = [{} for _ in texts]
    for row, text in enumerate(texts):
        for term in ragline.text.tokenize(text):
            counts[row][term] = counts[row].get(term, 0) + 1
    terms = sorted({t for c in counts for t in c})
    postings = sorted((t, row, tf) for row, c in enumerate(counts) for t, tf in c.items())
    df = np.array([sum(1 for c in counts if t in c) for t in terms], dtype=np.int32)
    return {
        "terms": np.array(terms, dtype=str),
        "df": df,
        "doc_len": np.array([sum(c.values()) for c in counts], dtype=np.int32),
        "indptr": np.concatenate([[0], np.cumsum(df)]).astype(np.int64),
        "docs": np.array([row for _, row, _ in postings], dtype=np.int32),
        "tf": np.array([tf for _, _, tf in postings], dtype=np.int32),
    }


def assert_same_as_reference(texts: list[str]) -> None:
    got, want = build_bm25(texts), reference_bm25(texts)
    for name, array in want.items():
        assert getattr(got, name).tolist() == array.tolist(), name
        if name != "terms":  # the vocabulary is a ragline.bm25.Vocabulary (UTF-8 bytes and offsets), not an array
            assert getattr(got, name).dtype.kind == array.dtype.kind, name


def test_memoised_build_counts_what_tokenize_gives_on_the_corpora():
    """The word-by-word memoised build gives the arrays of a plain count over ragline.text.tokenize,
    on every handbook the project evaluates on."""
    roots = [Path(__file__).resolve().parent.parent / "corpus", SHARED, GDS_WAY]
    texts = [p.read_text(encoding="utf-8") for root in roots if root.is_dir() for p in sorted(root.rglob("*.md"))]
    assert len(texts) >= 10
    assert_same_as_reference(texts)


@settings(max_examples=examples(60), deadline=None)
@given(st.lists(st.text(alphabet=st.sampled_from(list("ab AB-./:'_9 4000 ÉéİﬁK½ß\n")) | st.characters(), max_size=60), max_size=6))
def test_memoised_build_counts_what_tokenize_gives_on_any_text(texts):
    assert_same_as_reference(texts)


class TestWriteLoad:
    def test_roundtrip(self, tmp_path):
        idx = build_index(tmp_path)
        index = load(idx)
        m = index.manifest
        assert m["format"] == "ragline-index/2" and m["model"] == "hash" and m["dim"] == 384
        assert m["counts"]["chunks"] == len(index.chunks) == index.vectors.shape[0]
        assert isinstance(index.vectors, np.memmap)
        assert np.allclose(np.linalg.norm(index.vectors, axis=1), 1, atol=1e-5)
        assert "vector" not in index.chunks[0]
        assert len(m["corpus_digest"]) == 64

    def test_rebuild_replaces_and_sweeps_old_generation(self, tmp_path):
        idx = build_index(tmp_path)
        first = (idx / "CURRENT").read_text()
        build_index(tmp_path)
        assert (idx / "CURRENT").read_text() != first
        assert sorted(p.name for p in idx.iterdir()) == sorted([".lock", "CURRENT", (idx / "CURRENT").read_text().strip()])

    def test_failure_midway_leaves_old_index(self, tmp_path, monkeypatch):
        idx = build_index(tmp_path)
        before = load(idx).manifest["corpus_digest"]
        real = rag_index._save
        calls = []

        def boom(path, arr):
            calls.append(path)
            if len(calls) == 3:
                raise KeyboardInterrupt
            return real(path, arr)

        monkeypatch.setattr(rag_index, "_save", boom)
        with pytest.raises(KeyboardInterrupt):
            build_index(tmp_path, {"other": "# Other\n\nDifferent text.\n"})
        monkeypatch.undo()
        assert load(idx).manifest["corpus_digest"] == before
        assert len([p for p in idx.iterdir() if p.name.startswith("gen-")]) == 1

    def test_a_load_racing_a_rebuild_follows_current(self, tmp_path, monkeypatch):
        """A reader reads CURRENT, then a rebuild swaps it and sweeps the generation the reader was
        about to open: the load follows CURRENT to the new generation instead of failing."""
        idx = build_index(tmp_path)
        stale = (idx / "CURRENT").read_text().strip()
        build_index(tmp_path, {"other": "# Other\n\nDifferent text.\n"})
        assert not (idx / stale).exists(), "the rebuild swept the generation the reader had read from CURRENT"
        real, reads = rag_index.live_generation, []

        def first_read_is_stale(out):
            reads.append(out)
            return stale if len(reads) == 1 else real(out)

        monkeypatch.setattr(rag_index, "live_generation", first_read_is_stale)
        index = load(idx)
        assert "other#other" in index.ids and len(reads) >= 2

    def test_a_generation_missing_while_current_stays_is_an_error(self, tmp_path):
        idx = build_index(tmp_path)
        (idx / "CURRENT").write_text("gen-gone\n")
        with pytest.raises(StageError, match="half-written"):
            load(idx)

    def test_half_written_generation_is_refused(self, tmp_path):
        idx = build_index(tmp_path)
        gen = idx / (idx / "CURRENT").read_text().strip()
        (gen / "manifest.json").unlink()
        with pytest.raises(StageError, match="half-written"):
            load(idx)

    def test_missing_file(self, tmp_path):
        idx = build_index(tmp_path)
        gen = idx / (idx / "CURRENT").read_text().strip()
        (gen / "bm25" / "df.npy").unlink()
        with pytest.raises(StageError, match=r"index file bm25/df\.npy is missing: rebuild it"):
            load(idx)

    def test_corrupted_npy(self, tmp_path):
        idx = build_index(tmp_path)
        gen = idx / (idx / "CURRENT").read_text().strip()
        data = (gen / "vectors.npy").read_bytes()
        (gen / "vectors.npy").write_bytes(b"garbage!" + data[8:])
        with pytest.raises(StageError, match="index arrays cannot be read"):
            load(idx)

    def test_not_an_index(self, tmp_path):
        (tmp_path / "d").mkdir()
        with pytest.raises(StageError, match="no CURRENT"):
            load(tmp_path / "d")
        with pytest.raises(StageError, match="no index here"):
            load(tmp_path / "none")

    def test_refuses_to_write_into_a_foreign_directory(self, tmp_path, runner):
        (tmp_path / "home").mkdir()
        (tmp_path / "home" / "thesis.tex").write_text("precious")
        result = runner.invoke(main, ["--out", str(tmp_path / "home")], input=jsonl(rec("a", [1.0, 0.0])))
        assert result.exit_code == 1
        assert "is not a ragline index" in result.stderr
        assert (tmp_path / "home" / "thesis.tex").read_text() == "precious"


class TestStreamChecks:
    @pytest.mark.parametrize(
        ("records", "message"),
        [
            (
                [rec("a", [1.0, 0.0]), rec("b", [0.0, 1.0], model="other")],
                "<stdin>:2: model 'other' differs from 'hash' at <stdin>:1: one index, one model",
            ),
            ([rec("a", [1.0, 0.0]), rec("b", [0.0, 1.0, 0.0])], "<stdin>:2: vector has 3 values, the stream's first has 2"),
            ([rec("a", [1.0, 0.0]), rec("a", [0.0, 1.0])], "<stdin>:2: duplicate chunk id 'a' (first at <stdin>:1)"),
            ([rec("a", [1.0, "x"])], "<stdin>:1: field 'vector' must be a list of numbers"),
            (
                [rec("a", [1.0, 0.0], passage_vectors=[[1.0, 0.0, 0.0]])],
                "<stdin>:1: passage vectors have 3 values, the stream's first vector has 2",
            ),
            (
                [rec("a", [1.0, 0.0], passage_vectors=[1.0, 0.0])],
                "<stdin>:1: field 'passage_vectors' must be a list of equally long lists of numbers",
            ),
            (
                [rec("a", [1.0, 0.0], passage_vectors=[[1.0, 0.0], [1.0]])],
                "<stdin>:1: field 'passage_vectors' must be a list of equally long lists of numbers",
            ),
            ([rec("a", [1.0, 0.0], passage_vectors=[[1e39, 0.0]])], "<stdin>:1: passage_vectors has a non-finite value (NaN or infinity)"),
            ([{"id": "a", "text": "t", "model": "hash"}], "<stdin>:1: missing field 'vector'"),
            ([], "no records: nothing to index"),
        ],
    )
    def test_refused_with_the_line(self, runner, tmp_path, records, message):
        out = tmp_path / "idx"
        result = runner.invoke(main, ["--out", str(out)], input=jsonl(*records))
        assert result.exit_code == 1
        assert result.stderr == f"rag-index: {message}\n"
        assert not out.exists() or not (out / "CURRENT").exists()

    def test_non_finite_vector(self, runner, tmp_path):
        result = runner.invoke(main, ["--out", str(tmp_path / "i")], input=b'{"id":"a","text":"t","model":"hash","vector":[1.0, NaN]}\n')
        assert result.exit_code == 1 and "not valid JSON" in result.stderr
        # orjson refuses NaN literals; a huge number overflows float32 to infinity
        result = runner.invoke(main, ["--out", str(tmp_path / "i")], input=jsonl(rec("a", [1e39, 0.0])))
        assert result.stderr == "rag-index: <stdin>:1: vector has a non-finite value (NaN or infinity)\n"

    def test_cli_happy_path(self, runner, tmp_path):
        result = runner.invoke(main, ["--out", str(tmp_path / "i")], input=jsonl(rec("a", [3.0, 4.0], headings=["H"], doc="d")))
        assert result.exit_code == 0, result.stderr
        index = load(tmp_path / "i")
        assert index.vectors[0].tolist() == pytest.approx([0.6, 0.8])
        assert index.chunks[0]["headings"] == ["H"]

    def test_usage_error(self, runner):
        assert runner.invoke(main, [], input=b"").exit_code == 2


def test_manifest_lists_every_file_with_its_size(tmp_path):
    idx = build_index(tmp_path)
    gen = idx / (idx / "CURRENT").read_text().strip()
    manifest = orjson.loads((gen / "manifest.json").read_bytes())
    on_disk = {p.relative_to(gen).as_posix(): p.stat().st_size for p in gen.rglob("*") if p.is_file() and p.name != "manifest.json"}
    assert manifest["files"] == on_disk
    assert os.path.getsize(gen / "vectors.npy") == manifest["files"]["vectors.npy"]


class TestPassages:
    def test_passage_vectors_are_stored_unit_length_with_their_chunk(self, runner, tmp_path):
        records = [
            rec("a", [1.0, 0.0]),
            rec("b", [0.0, 1.0], passage_vectors=[[3.0, 4.0], [0.0, 2.0]]),
            rec("c", [1.0, 1.0], passage_vectors=[]),
        ]
        result = runner.invoke(main, ["--out", str(tmp_path / "i")], input=jsonl(*records))
        assert result.exit_code == 0, result.stderr
        index = load(tmp_path / "i")
        assert np.allclose(index.passages, [[0.6, 0.8], [0.0, 1.0]])
        assert index.passage_rows.tolist() == [1, 1]
        assert index.manifest["counts"]["passages"] == 2

    def test_an_index_without_passages_has_none(self, tmp_path):
        index = load(build_index(tmp_path))
        assert index.passages is None and index.manifest["counts"]["passages"] == 0

    def test_passage_arrays_that_disagree_with_the_manifest_are_refused(self, tmp_path):
        idx = build_index(tmp_path, {"a": "# A\n\n" + " ".join(f"Sentence number {i} is here." for i in range(40)) + "\n"}, passages=True)
        gen = idx / (idx / "CURRENT").read_text().strip()
        rows = np.load(gen / "passage_rows.npy")
        np.save(gen / "passage_rows.npy", rows + 5)  # same size, rows past the last chunk
        with pytest.raises(StageError, match="does not match the manifest's sha256|passage arrays disagree"):
            load(idx)
