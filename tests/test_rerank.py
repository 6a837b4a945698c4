"""rerank: the local model's reordering of hits, on a scorer whose likelihoods are written out here;
and rag-rerank on the real model (marked local)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from ragline import rerank

ROOT = Path(__file__).resolve().parent.parent


class Written:
    """A scorer whose likelihood of the question after each passage is looked up by the passage's first word."""

    def __init__(self, by_word: dict[str, float], prior: float = 0.01):
        self.by_word, self.likely, self.read = by_word, prior, []

    def scores(self, question: str, pieces: Sequence[tuple[Sequence[str], str]], budget: object = None) -> list[float]:
        self.read += [text for _, text in pieces]
        return [self.by_word[text.split()[0]] for _, text in pieces]

    def prior(self, question: str, budget: object = None) -> float:
        return self.likely


def hit(rank: int, word: str, score: float) -> dict:
    return {
        "rank": rank,
        "chunk_id": f"d#{word}",
        "headings": ["D", word],
        "text": f"{word} and more words here",
        "score": score,
        "signals": {"fused": score},
    }


def test_order_weighs_the_model_against_retrieval() -> None:
    base, logp = np.array([1.0, 0.8, 0.0]), np.array([-3.0, -1.0, -2.0])
    assert rerank.order(base, logp, 0.0).tolist() == [0, 1, 2]  # weight 0: retrieval's order
    assert rerank.order(base, logp, 0.5).tolist() == [1, 0, 2]  # 0.8 + 0.5 beats 1.0 + 0
    assert rerank.order(base, logp, 0.1).tolist() == [0, 1, 2]  # 0.8 + 0.1 does not
    assert rerank.order(base, logp, 1000.0).tolist() == [1, 2, 0]  # the model's own order
    assert rerank.order(np.array([0.5, 0.5]), np.array([-1.0, -1.0]), 2.0).tolist() == [0, 1]  # ties: retrieval's order


def test_rerank_keeps_the_depth_renumbers_and_says_why() -> None:
    hits = [hit(1, "alpha", 0.9), hit(2, "beta", 0.7), hit(3, "gamma", 0.6), hit(4, "delta", 0.5)]
    scorer = Written({"alpha": math.exp(-4.0), "beta": math.exp(-1.0), "gamma": math.exp(-3.0)}, prior=math.exp(-2.5))
    out, relevance = rerank.Reranker(scorer, depth=3, weight=2.0, words=2).rerank("q", hits)
    assert [h["chunk_id"] for h in out] == ["d#beta", "d#alpha", "d#gamma"]  # delta, past the depth, is dropped
    assert [h["rank"] for h in out] == [1, 2, 3]
    assert scorer.read == ["alpha and", "beta and", "gamma and"]  # the first `words` words of each, and only the depth's
    first = out[0]
    assert first["signals"]["local"] == {"logp": -1.0, "pmi": 1.5, "rank": 1}
    assert first["signals"]["retrieved"] == {"score": 0.7, "rank": 2}
    assert first["signals"]["fused"] == 0.7  # retrieval's own signals stay
    assert first["score"] == pytest.approx(0.1 / 0.3 + 2.0)
    assert relevance == pytest.approx(1.5)  # the best passage's log-likelihood over the question's alone
    assert hits[1]["rank"] == 2 and "local" not in hits[1]["signals"]  # the input hits are not changed


def test_relevance_is_the_likeliest_hits_not_the_first_ones() -> None:
    hits = [hit(1, "alpha", 1.0), hit(2, "beta", 0.0)]
    scorer = Written({"alpha": math.exp(-2.0), "beta": math.exp(-1.5)}, prior=math.exp(-3.0))
    out, relevance = rerank.Reranker(scorer, depth=2, weight=0.1).rerank("q", hits)
    assert [h["chunk_id"] for h in out] == ["d#alpha", "d#beta"]  # retrieval still wins the order
    assert relevance == pytest.approx(1.5)  # beta's PMI, the best, not the first hit's (1.0)


def test_scores_whose_spread_overflows_still_order() -> None:
    got = rerank.combined(np.array([1e308, -1e308, 0.0]), np.array([-1.0, -2.0, -3.0]), 1.0)
    assert np.isfinite(got).all() and got.tolist() == pytest.approx([2.0, 0.5, 0.5])


def test_no_hits_no_model() -> None:
    scorer = Written({})
    assert rerank.Reranker(scorer).rerank("q", []) == ([], None)
    assert scorer.read == []


def test_relevance_is_the_best_pmi() -> None:
    assert rerank.relevance([-3.0, -1.0], math.exp(-2.0)) == pytest.approx(1.0)
    assert rerank.relevance([], 0.5) < -60  # no passage explains anything


def staged(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, scorer: object) -> None:
    """rag-rerank with `scorer` for its model: no model file, no llama.cpp."""
    monkeypatch.setattr("ragline.local_models.model_file", lambda name: (tmp_path / "m.gguf", "sha-x"))
    monkeypatch.setattr("ragline.answer.local.LocalModel", lambda *a, **k: None)
    monkeypatch.setattr("ragline.answer.local.Judge", lambda model: scorer)


def records_file(tmp_path: Path, *questions: str) -> Path:
    hits = [hit(1, "alpha", 0.9), hit(2, "beta", 0.7), hit(3, "gamma", 0.6)]
    path = tmp_path / "hits.jsonl"
    path.write_text(
        "".join(json.dumps({"id": q, "question": q, "hits": hits, "confidence": 0.5, "retrieval": {"k": 3}}) + "\n" for q in questions)
    )
    return path


class TestTheStage:
    def test_records_come_back_reordered_whole(self, tmp_path, monkeypatch, capsysbinary):
        import rag_rerank

        staged(monkeypatch, tmp_path, Written({"alpha": math.exp(-4.0), "beta": math.exp(-1.0), "gamma": math.exp(-3.0)}))
        with pytest.raises(SystemExit) as done:
            rag_rerank.main([str(records_file(tmp_path, "q1", "q2")), "--depth", "5", "--weight", "2"])
        assert done.value.code == 0
        captured = capsysbinary.readouterr()
        out = [json.loads(x) for x in captured.out.splitlines()]
        assert [r["id"] for r in out] == ["q1", "q2"]
        assert [h["chunk_id"] for h in out[0]["hits"]] == ["d#beta", "d#alpha", "d#gamma"]
        assert out[0]["rerank"] == {
            "model": "qwen2.5-coder-0.5b-instruct",
            "model_sha256": "sha-x",
            "depth": 5,
            "weight": 2.0,
            "words": 120,
        }
        assert out[0]["retrieval"] == {"k": 3, "rerank_depth": 5} and out[0]["confidence"] == 0.5
        assert out[0]["relevance"] == pytest.approx(-1.0 - math.log(0.01))
        assert b"2 of 2 records hold fewer than --depth 5 hits: rag-search --k 5" in captured.err  # told, not refused

    @pytest.mark.parametrize(
        ("given", "weight"),
        [
            (None, rerank.FITTED_WEIGHTS["qwen2.5-coder-0.5b-instruct"]),
            ("qwen2.5-coder-1.5b-instruct", rerank.FITTED_WEIGHTS["qwen2.5-coder-1.5b-instruct"]),
            ("the 1.5b file", rerank.FITTED_WEIGHTS["qwen2.5-coder-1.5b-instruct"]),
            ("a file of ones own", rerank.WEIGHT),
        ],
    )
    def test_without_weight_each_model_gets_its_fitted_one(self, tmp_path, monkeypatch, capsysbinary, given, weight):
        import dataclasses
        import hashlib

        import rag_rerank
        from ragline import local_models

        staged(monkeypatch, tmp_path, Written({"alpha": 0.1, "beta": 0.2, "gamma": 0.3}))
        (tmp_path / "m.gguf").write_bytes(b"GGUF the 1.5b file" if given == "the 1.5b file" else b"GGUF another")
        known = dict(local_models.KNOWN)
        big = "qwen2.5-coder-1.5b-instruct"
        known[big] = dataclasses.replace(known[big], size=18, sha256=hashlib.sha256(b"GGUF the 1.5b file").hexdigest())
        monkeypatch.setattr("ragline.local_models.KNOWN", known)
        flag = [] if given is None else ["--local-model", given if given in known else str(tmp_path / "m.gguf")]
        with pytest.raises(SystemExit) as done:
            rag_rerank.main([str(records_file(tmp_path, "q1")), "--quiet", *flag])
        assert done.value.code == 0
        assert json.loads(capsysbinary.readouterr().out)["rerank"]["weight"] == weight

    def test_the_weight_help_names_every_fitted_weight(self):
        from ragline import options

        said = options.get("rerank_weight", "rerank").help
        assert all(f"{weight:g} for {model}" in said for model, weight in rerank.FITTED_WEIGHTS.items())

    def test_no_records_load_no_model(self, tmp_path, monkeypatch, capsysbinary):
        import rag_rerank

        monkeypatch.setattr("ragline.local_models.model_file", lambda name: pytest.fail("the model was looked for"))
        (tmp_path / "empty.jsonl").write_text("")
        with pytest.raises(SystemExit) as done:
            rag_rerank.main([str(tmp_path / "empty.jsonl")])
        assert done.value.code == 0 and capsysbinary.readouterr().out == b""

    def test_an_interrupt_writes_nothing(self, tmp_path, monkeypatch, capsysbinary):
        import rag_rerank

        class Interrupted(Written):
            def scores(self, question, pieces, budget=None):
                if question == "q2":
                    raise KeyboardInterrupt
                return super().scores(question, pieces)

        staged(monkeypatch, tmp_path, Interrupted({"alpha": 0.1, "beta": 0.2, "gamma": 0.3}))
        with pytest.raises(SystemExit) as done:
            rag_rerank.main([str(records_file(tmp_path, "q1", "q2")), "--quiet"])
        assert done.value.code == 130
        assert capsysbinary.readouterr().out == b""

    def test_hits_over_the_context_are_one_line_naming_the_record(self, tmp_path, monkeypatch, capsysbinary):
        import rag_rerank
        from ragline.answer.local import OverBudget

        class Full(Written):
            def scores(self, question, pieces, budget=None):
                raise OverBudget("a piece needs 900 tokens after the prompt's 20, over the local model's context of 512")

        staged(monkeypatch, tmp_path, Full({}))
        path = records_file(tmp_path, "q1")
        with pytest.raises(SystemExit) as done:
            rag_rerank.main([str(path), "--quiet"])
        assert done.value.code == 1
        captured = capsysbinary.readouterr()
        assert captured.out == b""
        assert captured.err.decode() == (
            f"rag-rerank: {path}:1: a piece needs 900 tokens after the prompt's 20, over the local model's context of 512: "
            "fewer --words or a larger --local-context\n"
        )


@pytest.mark.local
def test_rag_rerank_puts_the_models_choice_first(tmp_path: Path) -> None:
    """On the real model, through the stage: with the model alone deciding (a weight of 1000), the
    first hit is the one the model finds the question likeliest after; every hit says why."""
    idx = tmp_path / "idx"
    build = (
        f"{sys.executable} -m rag_chunk corpus | {sys.executable} -m rag_embed --model hash --quiet | "
        f"{sys.executable} -m rag_index --out {idx}"
    )
    subprocess.run(["bash", "-euo", "pipefail", "-c", build], cwd=ROOT, check=True, capture_output=True)
    question = "How can our server be sure a notification really came from you and not from an impostor?"
    hits = subprocess.run(
        [sys.executable, "-m", "rag_search", "--index", str(idx), "--k", "8", "--json", question], cwd=ROOT, check=True, capture_output=True
    ).stdout
    done = subprocess.run(
        [sys.executable, "-m", "rag_rerank", "--depth", "6", "--weight", "1000", "--quiet"], input=hits, cwd=ROOT, capture_output=True
    )
    assert done.returncode == 0, done.stderr.decode()
    (record,) = [json.loads(line) for line in done.stdout.splitlines()]
    got = record["hits"]
    assert len(got) == 6 and [h["rank"] for h in got] == list(range(1, 7))
    assert got[0]["signals"]["local"]["rank"] == 1
    logps = [h["signals"]["local"]["logp"] for h in got]
    assert logps[0] == max(logps) and all(lp < 0 for lp in logps)
    assert record["relevance"] == pytest.approx(max(h["signals"]["local"]["pmi"] for h in got), abs=1e-5)
    assert record["retrieval"]["rerank_depth"] == 6 and record["rerank"]["depth"] == 6
