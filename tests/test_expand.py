"""rag-expand and what follows it: the reply parsed into questions, the question cache, the
questions embedded as passage vectors of their chunk, the index and the search records that
say so. The model here is a scripted one (its replies given): what is tested is the machinery
around it; tests/test_local_model.py runs the real model through rag-expand."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
import pytest
from corpora import build_index

import rag_chunk
import rag_embed
import rag_expand
import rag_index
from rag_search import Config, Searcher
from ragline import expand, options, ranking
from ragline.records import Line, StageError


class Scripted:
    """A model double: the chat it was given, and a reply per call (taken in turn)."""

    def __init__(self, *replies: str):
        self.replies, self.prompts = list(replies), []

    def chat(self, messages):
        return "\n".join(f"<{role}>{content}" for role, content in messages)

    def generate(self, prompt, max_tokens, stop=(), deadline=None):
        self.prompts.append(prompt)
        return self.replies.pop(0)


CHUNK = {
    "id": "payouts#timing",
    "text": "## Timing\n\nPayouts reach the bank two working days after settlement.",
    "headings": ["Payouts", "Timing"],
}


class TestParse:
    def test_numbering_bullets_and_quotes_go(self):
        reply = (
            '1. When does the money reach our bank?\n2) "How long do payouts take?"\n- Is there a delay?\n* Q3: What day do funds arrive?'
        )
        assert expand.parse(reply, 4) == [
            "When does the money reach our bank?",
            "How long do payouts take?",
            "Is there a delay?",
            "What day do funds arrive?",
        ]

    def test_only_questions_of_a_sensible_length_at_most_n_and_distinct(self):
        reply = (
            "Here are questions:\nWhy?\nWhen does the money reach our bank?\nwhen does the money reach our bank?\n"
            + "word " * 50
            + "?\nIs it fast?\nIs it slow?"
        )
        assert expand.parse(reply, 2) == ["When does the money reach our bank?", "Is it fast?"]
        assert expand.parse("", 3) == []

    def test_the_prompt_shows_the_heading_path_and_bounded_text(self):
        long = {"id": "x", "text": "word " * 2000, "headings": ["A", "B"]}
        shown = expand.shown_text(long)
        assert shown.startswith("A > B\n\n") and len(shown.split()) == expand.MAX_WORDS + 3
        user = expand.messages(CHUNK, 3)[1][1]
        assert "Payouts > Timing" in user and "two working days" in user and "Write 3 different questions" in user


class TestExpander:
    def test_the_cache_answers_a_second_run_and_the_model_is_not_loaded(self, tmp_path):
        loads = []
        model = Scripted("When do payouts land?\nHow long until the money arrives?")

        def load():
            loads.append(1)
            return model

        cache = expand.QuestionCache(tmp_path / "q.sqlite", "sha-a")
        first = expand.Expander(load, 2, cache).questions(dict(CHUNK))
        assert first == expand.Written(["When do payouts land?", "How long until the money arrives?"], False)
        again = expand.Expander(
            lambda: pytest.fail("the model was loaded on a warm cache"), 2, expand.QuestionCache(tmp_path / "q.sqlite", "sha-a")
        )
        assert again.questions(dict(CHUNK)) == expand.Written(first.questions, True)
        assert loads == [1]

    def test_an_edit_another_model_or_another_n_asks_again(self, tmp_path):
        path = tmp_path / "q.sqlite"
        expand.Expander(lambda: Scripted("Is it first?"), 2, expand.QuestionCache(path, "sha-a")).questions(dict(CHUNK))
        edited = dict(CHUNK, text=CHUNK["text"] + " Weekends do not count.")
        for record, sha, n in ((edited, "sha-a", 2), (CHUNK, "sha-b", 2), (CHUNK, "sha-a", 3)):
            got = expand.Expander(lambda: Scripted("Is it another one?"), n, expand.QuestionCache(path, sha)).questions(dict(record))
            assert got == expand.Written(["Is it another one?"], False)

    def test_no_cache_writes_every_time(self):
        model = Scripted("Is it one?", "Is it two?")
        e = expand.Expander(lambda: model, 2, None)
        assert [e.questions(dict(CHUNK)).questions for _ in range(2)] == [["Is it one?"], ["Is it two?"]]

    def test_a_file_that_is_not_a_cache_is_one_line(self, tmp_path):
        bad = tmp_path / "notes.txt"
        bad.write_text("x" * 5000)
        with pytest.raises(StageError, match="not a question cache .* RAG_EXPAND_CACHE"):
            expand.QuestionCache(bad, "sha").get(b"k")


class TestTheStage:
    def test_records_get_questions_and_expand_and_the_output_is_whole(self, tmp_path, monkeypatch, capsysbinary):
        model = Scripted("When do payouts land?", "Is a charge retried?")
        monkeypatch.setattr(rag_expand, "model_identity", lambda name: (tmp_path / "m.gguf", name, "sha-x"))
        monkeypatch.setattr("ragline.answer.local.LocalModel", lambda *a, **k: model)
        second = {"id": "charges#retry", "text": "A charge is retried once."}
        (tmp_path / "in.jsonl").write_bytes(orjson.dumps(CHUNK) + b"\n" + orjson.dumps(second) + b"\n")
        monkeypatch.setenv("RAG_EXPAND_CACHE", str(tmp_path / "q.sqlite"))
        with pytest.raises(SystemExit) as done:
            rag_expand.main([str(tmp_path / "in.jsonl"), "--questions", "2", "--quiet"])
        assert done.value.code == 0
        out = [orjson.loads(x) for x in capsysbinary.readouterr().out.splitlines()]
        assert [r["questions"] for r in out] == [["When do payouts land?"], ["Is a charge retried?"]]
        assert out[0]["expand"] == {
            "model": "qwen2.5-coder-0.5b-instruct",
            "model_sha256": "sha-x",
            "questions": 2,
            "prompt": expand.PROMPT_VERSION,
        }
        assert {k: v for k, v in out[1].items() if k not in ("questions", "expand")} == second

    def test_an_interrupt_writes_nothing_and_keeps_the_finished_chunks(self, tmp_path, monkeypatch, capsysbinary):
        class Interrupted(Scripted):
            def generate(self, prompt, max_tokens, stop=(), deadline=None):
                if len(self.prompts) == 1:
                    raise KeyboardInterrupt
                return super().generate(prompt, max_tokens)

        monkeypatch.setattr(rag_expand, "model_identity", lambda name: (tmp_path / "m.gguf", name, "sha-x"))
        monkeypatch.setattr("ragline.answer.local.LocalModel", lambda *a, **k: Interrupted("When do payouts land?"))
        second = {"id": "charges#retry", "text": "A charge is retried once."}
        (tmp_path / "in.jsonl").write_bytes(orjson.dumps(CHUNK) + b"\n" + orjson.dumps(second) + b"\n")
        cache = tmp_path / "q.sqlite"
        with pytest.raises(SystemExit) as done:
            rag_expand.main([str(tmp_path / "in.jsonl"), "--cache", str(cache), "--quiet"])
        assert done.value.code == 130
        assert capsysbinary.readouterr().out == b""
        kept = expand.QuestionCache(cache, "sha-x")
        assert kept.get(kept.key(expand.shown_text(CHUNK), options.default("questions", "expand"))) == ["When do payouts land?"]


DOCS = {
    "payouts": "# Payouts\n\n## Timing\n\nFunds are transferred two working days after settlement. Weekends are not counted.\n",
    "other": "# Kitchen\n\n## Onions\n\nChop the onions finely and fry them in butter until golden.\n",
}


def _index(tmp_path: Path, questions: dict[str, list[str]] | None, embed_questions: bool = True) -> Path:
    chunks = list(rag_chunk.chunk_paths([str(_corpus(tmp_path))], 180))
    for c in chunks:
        if questions is not None:
            c["questions"] = questions.get(c["id"], [])
            c["expand"] = {"model": "m", "model_sha256": "s", "questions": 2, "prompt": 1}
    embedder = rag_embed.load_embedder("hash")
    records = list(
        rag_embed.embed_records(((Line("x", i), c) for i, c in enumerate(chunks, 1)), embedder, passages=True, questions=embed_questions)
    )
    for r in records:
        r["vector"] = r["vector"].tolist()
        r["passage_vectors"] = np.asarray(r.get("passage_vectors", np.zeros((0, 384)))).tolist()
    out = tmp_path / ("idx-q" if questions else "idx")
    rows, vectors, facts = rag_index.collect((Line("x", i), r) for i, r in enumerate(records, 1))
    rag_index.write(out, rows, vectors, facts)
    return out


def _corpus(tmp_path: Path) -> Path:
    corpus = tmp_path / "corpus"
    corpus.mkdir(exist_ok=True)
    for name, text in DOCS.items():
        (corpus / f"{name}.md").write_text(text)
    return corpus


ASKED = "when does the cash hit our bank account"


class TestQuestionsAsPassages:
    def test_a_question_in_the_askers_words_brings_its_chunk_first(self, tmp_path):
        plain = rag_index.load(_index(tmp_path, None))
        expanded = rag_index.load(_index(tmp_path, {"payouts#timing": ["When does the cash hit our bank account?"]}))
        config = Config(sparse=False, rerank="none")
        before = Searcher(plain, config).search([ASKED])[0]
        after = Searcher(expanded, config).search([ASKED])[0]
        assert before["hits"][0]["chunk_id"] != "payouts#timing"  # the words are not the page's: the hash embedder misses it
        assert after["hits"][0]["chunk_id"] == "payouts#timing"
        assert after["retrieval"]["questions"] == 2 and before["retrieval"]["questions"] == 0
        assert Searcher(expanded, Config(passages=False)).search([ASKED])[0]["retrieval"]["questions"] == 0

    def test_the_index_records_the_questions_and_keeps_them_with_the_chunk(self, tmp_path):
        index = rag_index.load(_index(tmp_path, {"payouts#timing": ["When does the cash hit our bank account?", "Are weekends counted?"]}))
        assert index.manifest["counts"]["questions"] == 2
        assert index.manifest["expand"]["model"] == "m"
        row = index.ids.index("payouts#timing")
        assert index.chunks[row]["questions"] == ["When does the cash hit our bank account?", "Are weekends counted?"]
        assert int((index.passage_rows == row).sum()) == 2  # the chunk is one passage long: its questions are its passages

    def test_no_questions_switch_embeds_none(self, tmp_path):
        index = rag_index.load(_index(tmp_path, {"payouts#timing": ["When does the cash hit our bank account?"]}, embed_questions=False))
        assert index.manifest["counts"]["questions"] == 0 and index.manifest["expand"] is None
        q = rag_embed.load_embedder("hash").embed([ASKED], query=True)
        assert ranking.dense_scores(index, q, passages=True)[0].tolist() == ranking.dense_scores(index, q, passages=False)[0].tolist()

    def test_questions_that_are_not_strings_are_refused_by_rag_index(self):
        with pytest.raises(StageError, match="field 'questions' must be an array of strings"):
            rag_index.check_chunk({"id": "a", "text": "x", "questions": [1]}, "<stdin>:1")


def test_build_index_is_unchanged_by_the_questions_machinery(tmp_path):
    """An index built without rag-expand has no question vectors and says so."""
    index = rag_index.load(build_index(tmp_path, passages=True))
    assert index.manifest["counts"]["questions"] == 0 and index.manifest["expand"] is None


def test_explain_names_the_question_that_matched(tmp_path):
    from rag_search import explain_dense

    index = rag_index.load(_index(tmp_path, {"payouts#timing": ["Are weekends counted?", "When does the cash hit our bank account?"]}))
    got = explain_dense(Searcher(index, Config()), ASKED, "payouts#timing")
    assert got["question"] == "When does the cash hit our bank account?" and got["question_cosine"] == got["passage_cosine"]
    assert "question" not in explain_dense(Searcher(index, Config()), ASKED, "other#onions")
