"""The readers' one registry (ragline.answer.reader), the flags before it, and the span and PMI
readers without the model (a fake stands for llama.cpp; the real one is in tests/test_local_model.py)."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest
from answer_records import hit
from answer_records import hits_record as record
from click.testing import CliRunner

import rag_answer
from ragline.answer import choice, reader
from ragline.answer.context import ContextBlock
from ragline.answer.extractive import Extractive
from ragline.answer.local import Bounds
from ragline.answer.pmi import PmiScored
from ragline.answer.span import SpanScored, spans
from ragline.eval import runs as evalruns

FEATURES = ("unwrap", "idf", "headings", "cue")


# --------------------------------------------------------------------------- the registry


class Echo(Extractive):
    """A reader of the test's own: the extractive one under another name."""

    name = "echo"


@pytest.fixture
def echo_reader(monkeypatch):
    """A reader module made here, registered with one line, gone after the test."""
    module = types.ModuleType("tests_echo_reader")
    module.build = lambda setup: Echo(setup.features, setup.bm25, setup.embed)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "tests_echo_reader", module)
    monkeypatch.setattr(reader, "REGISTRY", dict(reader.REGISTRY))
    monkeypatch.setattr(evalruns, "RUNS", dict(evalruns.RUNS) | {"echo": evalruns._variant(reader="echo")})
    reader.register(reader.Kind("echo", "tests_echo_reader", "the extractive reader again"))  # the one line
    return "echo"


def test_a_registered_reader_is_a_choice_of_the_command_and_answers(echo_reader, tmp_path):
    from corpora import build_index

    runner = CliRunner()
    shown = runner.invoke(rag_answer.main, ["--help"]).stdout
    assert "--reader [extractive|judge|span|pmi|write|openai|echo]" in " ".join(shown.split())
    index = build_index(tmp_path)
    result = runner.invoke(
        rag_answer.main, ["--index", str(index), "--reader", "echo", "--threshold", "0", "--json", "When does the sweep run?"]
    )
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["generator"]["name"] == out["generator"]["reader"] == "echo" and not out["refused"]
    unknown = runner.invoke(rag_answer.main, ["--index", str(index), "--reader", "nope", "x"])
    assert unknown.exit_code == 2 and "'nope' is not one of" in unknown.stderr


def test_a_registered_reader_is_in_the_eval_plan_and_the_bench(echo_reader):
    runs, _ = evalruns.plan(["echo", "northwind"], present=lambda docs: True)
    assert [r.label for r in runs] == ["echo"] and runs[0].flags["answer"] == ["--reader", "echo"]
    from bench import reader as bench_reader

    assert bench_reader.readers()["echo"] == (["--reader", "echo"], None)
    assert "openai" not in bench_reader.readers()  # it needs a server of the user's own


def test_the_registry_decides_what_writes_and_what_runs_the_local_model():
    assert evalruns.run_flags(evalruns.RUNS["local-write"])["answer"] == ["--reader", "write"]  # a writer: no --off
    assert set(evalruns.LOCAL_RUNS) == {f"local-{k.name}" for k in reader.REGISTRY.values() if k.local} | {
        "expand",
        "expand-dense",
        "local-rerank",
    }
    assert evalruns.RUNS["local-span"]["features"] == evalruns.RUNS["default"]["features"]
    with pytest.raises(KeyError, match="no reader named 'nope'"):
        reader.kind_of("nope")


# --------------------------------------------------------------------------- the flags before --reader


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--llm", "extractive"], "extractive"),
        (["--llm", "local"], "judge"),
        (["--llm", "local", "--local-mode", "write"], "write"),
        (["--llm", "openai"], "openai"),
        (["--reader", "span", "--llm", "local", "--local-mode", "write"], None),  # they disagree: a usage error
        (["--reader", "write", "--llm", "local", "--local-mode", "write"], "write"),
    ],
)
def test_the_old_flags_name_the_same_readers(flags, named, monkeypatch):
    seen: list[str] = []
    monkeypatch.setattr(rag_answer, "make_reader", lambda args, *a, **k: seen.append(args.reader) or (_ for _ in ()).throw(SystemExit(0)))
    monkeypatch.setattr(rag_answer.rag_index, "load", lambda path: types.SimpleNamespace(path=path))
    monkeypatch.setattr(rag_answer.rag_index, "stale_notice", lambda index: None)
    result = CliRunner().invoke(rag_answer.main, ["--index", ".", *flags], input="")
    if named is None:
        assert result.exit_code == 2 and "disagree" in result.stderr
    else:
        assert seen == [named], result.stderr


def test_the_old_variables_yield_to_reader(monkeypatch):
    seen: list[str] = []
    monkeypatch.setattr(rag_answer, "make_reader", lambda args, *a, **k: seen.append(args.reader) or (_ for _ in ()).throw(SystemExit(0)))
    monkeypatch.setattr(rag_answer.rag_index, "load", lambda path: types.SimpleNamespace(path=path))
    monkeypatch.setattr(rag_answer.rag_index, "stale_notice", lambda index: None)
    CliRunner().invoke(rag_answer.main, ["--index", "."], input="", env={"RAG_LLM": "local", "RAG_LOCAL_MODE": "write"})
    CliRunner().invoke(rag_answer.main, ["--index", ".", "--reader", "span"], input="", env={"RAG_LLM": "local"})
    assert seen == ["write", "span"]


def test_a_result_file_from_before_the_registry_reads_as_its_reader():
    old = {"name": "local", "llm": "local", "local_mode": "write", "features": []}
    assert evalruns.legacy_reader(old) == {"name": "local", "features": [], "reader": "write"}
    written_before = {k: v for k, v in evalruns.RUNS["local-judge"].items() if k != "reader"} | {"llm": "local", "local_mode": "judge"}
    evalruns.check_config("local-judge", written_before, "old.json")  # no error: the tables read the old file
    with pytest.raises(Exception, match="label 'local-write' expects"):
        evalruns.check_config("local-write", written_before, "old.json")


# --------------------------------------------------------------------------- the span reader


class FakeModel:
    """Stands for LocalModel.logprobs: log p of a tail is `bonus` for a tail holding `likely` after a
    head that asks the question, else a length penalty; it records the prefixes and pairs."""

    def __init__(self, likely: str):
        self.likely = likely
        self.calls: list[tuple[str, list[tuple[str, str]]]] = []
        self.path, self.name, self.sha256 = Path("fake.gguf"), "fake", None

    def logprobs(self, prefix, pairs, budget=None):
        if budget is not None:  # as the model does, before it decodes
            budget.spend(len(prefix.split()) + sum(len(h.split()) + len(t.split()) for h, t in pairs))
        self.calls.append((prefix, list(pairs)))
        out = []
        for head, tail in pairs:
            base = -2.0 * len(tail.split())
            lift = 5.0 if head.strip().startswith("Question:") and self.likely in tail else 0.0
            out.append((base + lift, len(tail.split())))
        return out

    def record(self):
        return {"local_model": self.name, "local_model_sha256": self.sha256}

    def take_counts(self):
        return (sum(len(p) for p, _ in self.calls), 0)


STEPS = hit(
    "deploy#steps",
    "To release a build, follow these steps:\n\n1. Tag the commit.\n2. Run `make release` on the build host.\n3. Announce it in #releases.\n\n"
    "Releases happen on weekdays. Nobody releases after Thursday noon, because the weekend has no on-call cover.",
)


def test_spans_are_made_from_the_blocks_structure():
    block = ContextBlock(1, STEPS).quotes(True)
    by_text = {p.text: p for p in block}
    made = spans(block, [by_text["2. Run `make release` on the build host."], by_text["Releases happen on weekdays."]], 60)
    shapes = {s.shape: [p.text for p in s.pieces] for s in made}
    assert shapes["item+lead"][0] == "To release a build, follow these steps:"
    assert len(shapes["list"]) == 4  # the lead-in and its three steps
    assert shapes["pair"] == [
        "Releases happen on weekdays.",
        "Nobody releases after Thursday noon, because the weekend has no on-call cover.",
    ]
    assert len({tuple(p.position for p in s.pieces) for s in made}) == len(made)  # no span twice
    assert all(s.words <= 60 for s in made)
    assert not [s for s in spans(block, [by_text["Releases happen on weekdays."]], 8) if s.shape == "pair"]  # over the budget


def test_the_span_the_question_makes_likely_is_quoted():
    question = "Why is there no release on Friday?"
    plain = rag_answer.answer(record(question, STEPS), Extractive(FEATURES), 0.0)
    model = FakeModel("weekend has no on-call cover")
    wide = choice.SpanWeights(pieces=6, blocks=2, spans=8, weight=1.0)  # the mechanism, not the fitted point
    out = rag_answer.answer(record(question, STEPS), SpanScored(model, FEATURES, spanning=wide), 0.0)  # type: ignore[arg-type]
    assert "because the weekend has no on-call cover" in out["answer"] and not out["refused"]
    assert out["generator"]["reader"] == "span" and out["llm_tokens"]["prompt"] > 0
    prefix, pairs = model.calls[0]
    assert prefix.startswith("Read the passage") and "Thursday noon" in prefix  # the block is the shared prefix
    assert [h.strip() for h, _ in pairs[:2]] == [f"Question: {question}\nAnswer:", "Answer:"]  # with and without the question
    assert "on-call cover" not in plain["answer"]  # the extractive reader quotes the steps instead


def test_a_span_reader_past_its_budget_quotes_the_extractive_choice_and_says_why():
    question = "Why is there no release on Friday?"
    plain = rag_answer.answer(record(question, STEPS), Extractive(FEATURES), 0.0)
    model = FakeModel("weekend has no on-call cover")
    ticks = iter([0.0, 61.0])  # made at 0, read at 61 at the first decode: a deadline that has passed
    late = SpanScored(model, FEATURES, bounds=Bounds(60, clock=lambda: next(ticks, 61.0)))  # type: ignore[arg-type]
    out = rag_answer.answer(record(question, STEPS), late, 0.0)
    assert out["answer"] == plain["answer"] and not out["refused"] and model.calls == []
    assert (
        out["fallback"]
        == "the local model did not finish within 60 s (RAG_LOCAL_TIMEOUT raises the limit): the extractive choice is quoted, unscored"
    )
    capped = SpanScored(FakeModel("weekend has no on-call cover"), FEATURES, bounds=Bounds(tokens=20))  # type: ignore[arg-type]
    out = rag_answer.answer(record(question, STEPS), capped, 0.0)
    assert out["answer"] == plain["answer"] and "RAG_LOCAL_TOKENS" in out["fallback"]


def test_pmi_not_likelihood_decides():
    """A span likely with or without the question gains nothing: the one the question lifts wins."""
    assert choice.span_choice([1.0, 1.0], [-3.0, -20.0], 1.0) == 0
    assert choice.span_choice([1.0, 0.8], [0.0, 5.0], 1.0) == 1  # the PMI lifts the second over the extractive best
    assert choice.span_choice([1.0, 0.8], [0.0, 5.0], 0.0) == 0  # weight 0: the extractive order
    assert choice.span_choice([1.0, 0.9], [2.0, 2.0], 1.0) == 0  # equal PMI: the extractive order
    with pytest.raises(ValueError):
        choice.span_choice([], [], 1.0)


# --------------------------------------------------------------------------- the PMI reader


def test_the_piece_the_question_makes_likely_is_quoted_by_the_pmi_reader():
    question = "Why is there no release on Friday?"
    plain = rag_answer.answer(record(question, STEPS), Extractive(FEATURES), 0.0)
    assert "on-call cover" not in plain["answer"]  # the extractive reader quotes the steps instead
    model = FakeModel("weekend has no on-call cover")
    heavy = choice.PmiWeights(blocks=1, weight=4.0)  # the mechanism, not the fitted point
    out = rag_answer.answer(record(question, STEPS), PmiScored(model, FEATURES, weighing=heavy), 0.0)  # type: ignore[arg-type]
    assert "because the weekend has no on-call cover" in out["answer"] and not out["refused"]
    assert out["generator"]["reader"] == "pmi" and out["llm_tokens"]["prompt"] > 0
    prefix, pairs = model.calls[0]
    assert prefix.startswith("Read the passage") and "Thursday noon" in prefix  # the block is the shared prefix
    assert [h.strip() for h, _ in pairs[:2]] == [f"Question: {question}\nAnswer:", "Answer:"]  # with and without the question
    assert len({t for _, t in pairs}) == len(pairs) // 2 >= 4  # every candidate piece of the block, each twice
    off = rag_answer.answer(record(question, STEPS), PmiScored(FakeModel("x"), FEATURES, weighing=choice.PmiWeights(1, 0.0)), 0.0)  # type: ignore[arg-type]
    assert off["answer"] == plain["answer"]  # weight 0: the extractive choice


def test_the_pmi_reader_weighs_only_the_best_blocks():
    question = "Why is there no release on Friday?"
    other = hit("deploy#other", "Releases happen from the build host. Nobody releases on Friday, because the weekend has no on-call cover.")
    model = FakeModel("weekend has no on-call cover")
    one = PmiScored(model, FEATURES, weighing=choice.PmiWeights(blocks=1, weight=1.0))  # type: ignore[arg-type]
    rag_answer.answer(record(question, STEPS, other), one, 0.0)
    assert len({p for p, _ in model.calls}) == 1  # one block's prefix: the second block is not weighed
    two = PmiScored(model := FakeModel("weekend has no on-call cover"), FEATURES, weighing=choice.PmiWeights(blocks=2, weight=1.0))  # type: ignore[arg-type]
    rag_answer.answer(record(question, STEPS, other), two, 0.0)
    assert len({p for p, _ in model.calls}) == 2


def test_a_pmi_reader_past_its_budget_quotes_the_extractive_choice_and_says_why():
    question = "Why is there no release on Friday?"
    plain = rag_answer.answer(record(question, STEPS), Extractive(FEATURES), 0.0)
    capped = PmiScored(FakeModel("weekend has no on-call cover"), FEATURES, weighing=choice.PmiWeights(1, 4.0), bounds=Bounds(tokens=20))  # type: ignore[arg-type]
    out = rag_answer.answer(record(question, STEPS), capped, 0.0)
    assert out["answer"] == plain["answer"] and "RAG_LOCAL_TOKENS" in out["fallback"] and "unweighed" in out["fallback"]


def test_pmi_rescore_lifts_the_weighed_pieces_by_scaled_pmi():
    block = ContextBlock(1, STEPS).quotes(True)
    ranked = [choice.Scored(1.0 - 0.1 * i, p) for i, p in enumerate(block)]
    last, first = block[-1], block[0]
    out = choice.pmi_rescore(ranked, [first, last], [0.0, 7.0], 0.8)  # scaled: first 0, last 1 -> +0.8
    assert out[0].piece == last and out[0].score == pytest.approx(ranked[-1].score + 0.8) and out[0].score > ranked[0].score
    assert [s.piece for s in out[1:]] == [s.piece for s in ranked[:-1]]  # the rest keep their order and scores
    assert choice.pmi_rescore(ranked, [first, last], [3.0, 3.0], 9.0) == ranked  # equal PMI tells nothing apart
    assert choice.minmax([2.0, 4.0, 3.0]) == [0.0, 1.0, 0.5] and choice.minmax([]) == [] and choice.minmax([5.0]) == [0.0]
