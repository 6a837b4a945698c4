"""rag-eval: the golden file's checks, gold re-finding, scoring and its guards, the abstain
sweep, the tables, and each subcommand through click. The formulas themselves (irmetrics)
are tested in test_irmetrics.py."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from conftest import ROOT, SHARED, jsonl, parse

import evalruns
import evaltables
import rag_chunk
import rag_eval
from evalruns import RUNS
from golden import ANSWERABLE_KINDS, KINDS, Chunking, Golden, load_golden, parse_golden, read_chunking, resolve_gold
from rag_eval import main
from ragline import Line, StageError

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

# id -> (question, hits, answer, cited chunk ids, confidence): every answer right.
PERFECT = {
    "id-01": ("What does NW-5001 mean?", ["errors#platform", "errors#why", "misc#other"], "Status unknown: poll it.", ["errors#why"], 0.8),
    "se-01": ("How do I make sure a shopper is billed once?", ["idem#keys"], "Send an Idempotency Key.", ["idem#keys"], 0.7),
    "pr-01": ("How do I recover a stalled batch?", ["misc#other", "runbook#steps"], "Release the lock.", ["runbook#steps"], 0.6),
    "fa-01": ("When do payouts arrive?", ["payouts#how"], "They arrive T+1.", ["payouts#how"], 0.9),
    "un-01": ("Does Northwind support Apple Pay?", ["misc#other"], "", [], 0.2),
}


def record(qid: str, question: str, hits: list[str], answer: str = "", cited: list[str] = (), confidence: float = 0.5, **config) -> dict:
    """An answer record as rag-search | rag-answer writes it; `config` overrides RUNS['default']."""
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
            "index": "build/idx",
            "embed_headings": cfg["embed_headings"],
            "embed_long": cfg["embed_long"],
            "window": cfg["window"],
            "dense": cfg["dense"],
            "sparse": cfg["sparse"],
            "rerank": cfg["rerank"],
            "fusion": cfg["fusion"],
            "dense_weight": cfg["dense_weight"],
            "passages": cfg["passages"],
            "k": cfg.get("k", 5),
            "rrf_k": 60,
            "candidates": 30,
        },
        "ms": 10.0,
        "answer": answer,
        "citations": [{"n": n, "chunk_id": c, "doc": c.partition("#")[0]} for n, c in enumerate(cited, 1)],
        "refused": refused,
        "reason": "the handbook does not cover this" if refused else None,
        "dropped": 0,
        "generator": {"name": "extractive", "features": list(cfg["features"]), "threshold": cfg["threshold"]},
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


# --------------------------------------------------------------------------- the runs, their flags and the plan

# Which option of which stage each configuration key is, as the stages' click commands name it (test-only knowledge).
OPTIONS = {
    "window": [("chunk", "window")],
    "model": [("embed", "model")],
    "embed_headings": [("embed", "headings")],
    "embed_long": [("embed", "long_mode")],
    "passages": [("embed", "passages"), ("search", "passages")],
    "dense": [("search", "dense")],
    "sparse": [("search", "sparse")],
    "rerank": [("search", "rerank")],
    "fusion": [("search", "fusion")],
    "dense_weight": [("search", "dense_weight")],
    "threshold": [("answer", "threshold")],
}


def stage_params(flags: dict[str, list[str]]) -> dict[str, dict]:
    """What each stage's command line makes of the flags: its parsed parameters (click, no run)."""
    import rag_answer
    import rag_embed
    import rag_index
    import rag_search

    commands = {"chunk": (rag_chunk, ["x"]), "embed": (rag_embed, []), "index": (rag_index, ["--out", "x"])}
    commands |= {"search": (rag_search, ["--index", "x"]), "answer": (rag_answer, ["--index", "x"])}
    return {stage: module.main.make_context(stage, [*base, *flags[stage]]).params for stage, (module, base) in commands.items()}


class TestRuns:
    def test_flags_from_the_configuration(self):
        assert evalruns.run_flags(RUNS["default"]) == {"chunk": [], "embed": [], "index": [], "search": [], "answer": []}
        assert evalruns.run_flags(RUNS["hash-dense"]) == {
            "chunk": [], "embed": ["--model", "hash"], "index": [], "search": ["--no-sparse"], "answer": [],
        }  # fmt: skip
        assert evalruns.run_flags(RUNS["threshold-0"])["answer"] == ["--threshold", "0"]
        assert evalruns.run_flags(RUNS["window-120"])["chunk"] == ["--words", "120"]
        assert evalruns.run_flags(RUNS["answer-no-cue"])["answer"] == ["--off", "cue"]
        no_passages = evalruns.run_flags(RUNS["no-passages"])
        assert no_passages["embed"] == no_passages["search"] == ["--no-passages"]  # no passage vectors made, none used
        old = evalruns.run_flags(RUNS["old-default"])
        assert old["search"] == ["--no-sparse", "--fusion", "rrf", "--dense-weight", "0.5", "--no-passages"]

    @pytest.mark.parametrize("label", list(RUNS))
    def test_the_stages_make_of_the_flags_the_runs_configuration(self, label, monkeypatch):
        """Each run's flags, parsed by the stages' own command lines, ask for its configuration;
        for `default`, no flags: the stages' defaults are DEFAULT_RUN."""
        for name in [n for n in os.environ if n.startswith("RAG_")]:
            monkeypatch.delenv(name)
        config = RUNS[label]
        params = stage_params(evalruns.run_flags(config))
        for key, places in OPTIONS.items():
            for stage, option in places:
                assert params[stage][option] == config[key], (key, stage)
        assert [f for f in evalruns.FEATURES if f not in params["answer"]["off"]] == config["features"]
        assert set(OPTIONS) | {"features"} == {k.name for k in evalruns.CONFIG_KEYS}

    def test_a_record_without_a_newer_key_reads_as_its_absent_value(self, golden):
        old = perfect_run(sparse=False)  # written before fusion, dense_weight and passages existed
        for r in old:
            for key in ("fusion", "dense_weight", "passages"):
                del r["retrieval"][key]
        assert evalruns.run_config(old[0], "x") == RUNS["old-default"]
        with pytest.raises(StageError, match=r"label 'default' expects sparse true, .*passages true; the run has .*\(label 'old-default'"):
            score(golden, old)
        assert score(golden, old, label="old-default", resamples=10)["actual"]["fusion"] == "rrf"
        written_before = {k: v for k, v in RUNS["old-default"].items() if k not in ("fusion", "dense_weight", "passages")}
        evalruns.check_config("old-default", written_before, "old.json")  # a result file from before the keys: the tables read it so
        with pytest.raises(StageError, match=r"^old.json: label 'default' expects sparse true"):
            evalruns.check_config("default", written_before, "old.json")
        del old[0]["retrieval"]["rerank"]  # a key every record must show
        with pytest.raises(StageError, match=r"^answers.jsonl:1: field 'retrieval' has no 'rerank'$"):
            score(golden, old, label="old-default")

    def test_the_plan(self):
        runs, absent = evalruns.plan(present=lambda docs: True)
        assert [(r.corpus.name, r.label) for r in runs[:2]] == [("northwind", "default"), ("northwind", "no-rerank")]
        assert len(runs) == len(evalruns.CORPORA) * len(RUNS) and absent == []
        runs, absent = evalruns.plan(["bm25", "gds-way", "default"], present=lambda docs: True)
        assert [(r.corpus.name, r.label) for r in runs] == [("gds-way", "default"), ("gds-way", "bm25")]  # RUNS' order
        assert runs[1].tsv() == "gds-way\tbm25\t../shared/corpora/gds-way/docs\teval/gds-way.golden.yaml\t\t\t\t--no-dense\t"
        runs, absent = evalruns.plan(["hash"], present=lambda docs: docs == "corpus")
        assert [r.corpus.name for r in runs] == ["northwind"] and [c.name for c in absent] == ["eng-practices", "gds-way"]
        with pytest.raises(ValueError, match="'nope' is neither a run"):
            evalruns.plan(["nope"])

    def test_the_plan_command(self, runner, tmp_path, monkeypatch):
        (tmp_path / "repo" / "corpus").mkdir(parents=True)
        monkeypatch.chdir(tmp_path / "repo")  # no ../shared here
        result = runner.invoke(main, ["plan", "answer-no-idf", "dense"])
        assert result.exit_code == 0, result.output
        assert result.stdout == (
            "northwind\tdense\tcorpus\tgolden.yaml\t\t\t\t--no-sparse\t\nnorthwind\tanswer-no-idf\tcorpus\tgolden.yaml\t\t\t\t\t--off idf\n"
        )
        assert result.stderr == (
            "rag-eval: ../shared/corpora/eng-practices/docs is absent: no runs on eng-practices\n"
            "rag-eval: ../shared/corpora/gds-way/docs is absent: no runs on gds-way\n"
        )
        nothing = runner.invoke(main, ["plan", "gds-way"])
        assert nothing.exit_code == 1 and nothing.stderr.endswith("rag-eval: nothing to run: every corpus named is absent\n")
        assert runner.invoke(main, ["plan", "nope"]).exit_code == 2

    def test_every_corpus_has_its_golden_file(self):
        assert [c.name for c in evalruns.CORPORA] == ["northwind", "eng-practices", "gds-way"]
        for corpus in evalruns.CORPORA:
            assert load_golden(str(ROOT / corpus.golden)).questions


# --------------------------------------------------------------------------- the golden file


def run_questions(runner, tmp_path: Path, text: str):
    path = tmp_path / "golden.yaml"
    path.write_text(text)
    return path, runner.invoke(main, ["questions", str(path)])


class TestGolden:
    def test_the_repository_golden_files_parse(self):
        for name, total in (("golden.yaml", 42), ("eval/eng-practices.golden.yaml", 71)):
            golden = load_golden(str(ROOT / name))
            assert len(golden.questions) == total
            assert {q.kind for q in golden.questions} == set(KINDS)
            assert all(q.gold and q.evidence and q.answer_contains for q in golden.questions if q.answerable)

    def test_lines_are_kept(self, golden):
        assert [q.line for q in golden.questions] == [4, 10, 16, 22, 28]
        assert golden.questions[0].gold == ("errors#platform", "errors#why")

    @pytest.mark.parametrize(
        ("edit", "line", "message"),
        [
            (
                ("kind: semantic", "kind: semntic"),
                11,
                "question 'se-01' has unknown kind 'semntic' (one of identifier, semantic, procedural, factual, unanswerable)",
            ),
            (("id: se-01", "id: id-01"), 10, "duplicate question id 'id-01' (first at line 4)"),
            (
                ("How do I make sure a shopper is billed once?", "what does nw-5001   mean?"),
                10,
                "question 'se-01' repeats the question of 'id-01' (line 4)",
            ),
            (
                ("question: Does Northwind support Apple Pay?", "question: Does Northwind support Apple Pay?\n    gold: [idem#keys]"),
                31,
                "question 'un-01' is unanswerable but has gold (unanswerable questions carry no gold, evidence or answer_contains)",
            ),
            (
                ("    gold: [idem#keys]\n", ""),
                10,
                "question 'se-01' has no 'gold' (answerable questions need gold, evidence and answer_contains)",
            ),
            (("gold: [idem#keys]", "gold: []"), 13, "question 'se-01' field 'gold' must be a non-empty list, got []"),
            (
                ("answer_contains: [release]", "answer_contains: [48]"),
                21,
                "question 'pr-01' field 'answer_contains' holds 48: entries must be non-empty strings (quote numbers)",
            ),
            (
                ("answer_contains: [T+1]", "answer_contain: [T+1]"),
                27,
                "question 'fa-01' has unknown field 'answer_contain' (fields: id, kind, question, gold, evidence, answer_contains)",
            ),
            (("    kind: factual\n", ""), 22, "question 'fa-01' has no 'kind'"),
            (("version: 1", "version: 2"), 2, "version must be 1, got 2"),
            (
                ("question: How do I recover a stalled batch?", "question: !!python/object/apply:os.system [echo pwned]"),
                18,
                "YAML tag '!!python/object/apply:os.system' is not allowed (golden files are read with safe loading)",
            ),
            (
                ("kind: factual", "kind: factual\n   bad: indent"),
                24,
                "not valid YAML: expected <block end>, but found '<block mapping start>' (while parsing a block collection)",
            ),
        ],
    )
    def test_a_bad_golden_file_is_one_line_with_its_place(self, runner, tmp_path, edit, line, message):
        assert edit[0] in GOLDEN
        path, result = run_questions(runner, tmp_path, GOLDEN.replace(edit[0], edit[1], 1))
        assert result.exit_code == 1, result.output
        assert result.stderr == f"rag-eval: {path}:{line}: {message}\n"
        assert result.stdout == ""

    def test_a_python_tag_is_never_constructed(self, runner, tmp_path):
        marker = tmp_path / "pwned"
        text = GOLDEN.replace("question: When do payouts arrive?", f"question: !!python/object/apply:os.system ['touch {marker}']")
        _, result = run_questions(runner, tmp_path, text)
        assert result.exit_code == 1
        assert not marker.exists()

    def test_empty_and_missing_files(self, runner, tmp_path):
        path, result = run_questions(runner, tmp_path, "# nothing\n")
        assert (result.exit_code, result.stderr) == (1, f"rag-eval: {path}: empty golden file\n")
        result = runner.invoke(main, ["questions", str(tmp_path / "nope.yaml")])
        assert (result.exit_code, result.stderr) == (1, f"rag-eval: {tmp_path / 'nope.yaml'}: No such file or directory\n")

    def test_usage_errors_exit_2(self, runner, golden_path):
        assert runner.invoke(main, ["questions"]).exit_code == 2
        assert runner.invoke(main, ["score", "--golden", str(golden_path), "--out", "x.json"]).exit_code == 2  # no --label
        result = runner.invoke(main, ["score", "--golden", str(golden_path), "--label", "minilm", "--out", "x.json"])
        assert result.exit_code == 2
        assert "'minilm' is not one of 'default'" in result.stderr


# --------------------------------------------------------------------------- gold under another chunking


class TestResolveGold:
    def test_labels_stand_when_ids_and_evidence_agree(self, golden):
        q = golden.by_id()["id-01"]
        assert resolve_gold(q, chunking(), "g") == (("errors#platform", "errors#why"), False)
        assert resolve_gold(q, None, "g") == (("errors#platform", "errors#why"), False)

    def test_a_renamed_chunk_is_found_again_by_its_evidence(self, golden):
        chunks = [c | {"id": "idem#keys-2"} if c["id"] == "idem#keys" else c for c in CHUNKS]
        assert resolve_gold(golden.by_id()["se-01"], chunking(chunks), "g") == (("idem#keys-2",), True)

    def test_text_that_moved_under_a_surviving_id_is_followed(self, golden):
        # a smaller window: errors#why still exists, but the evidence now lies in errors#why-2
        chunks = [c for c in CHUNKS if c["id"] != "errors#why"] + [
            {"id": "errors#why", "doc": "errors", "text": "Why NW-5001 is different."},
            {"id": "errors#why-2", "doc": "errors", "text": "A retry under a new\nkey creates a second charge."},
        ]
        assert resolve_gold(golden.by_id()["id-01"], chunking(chunks), "g") == (("errors#platform", "errors#why-2"), True)

    def test_a_gold_chunk_without_evidence_stands_while_nothing_moved(self):
        golden = parse_golden(GOLDEN.replace("gold: [idem#keys]", "gold: [idem#keys, misc#other]"), "g.yaml")
        assert resolve_gold(golden.by_id()["se-01"], chunking(), "g") == (("idem#keys", "misc#other"), False)

    def test_nothing_found_anywhere_is_an_error_not_a_zero(self, golden):
        chunks = [c for c in CHUNKS if c["id"] != "payouts#how"]
        with pytest.raises(StageError) as err:
            resolve_gold(golden.by_id()["fa-01"], chunking(chunks), "golden.yaml:22")
        assert str(err.value) == "golden.yaml:22: fa-01: gold chunk payouts#how not in this chunking and its evidence is found nowhere"

    def test_one_lost_evidence_string_is_an_error_too(self, golden):
        chunks = [c for c in CHUNKS if c["id"] != "errors#why"]
        with pytest.raises(StageError, match=r'gold chunk errors#why not in this chunking and evidence "retry under a new key" is found'):
            resolve_gold(golden.by_id()["id-01"], chunking(chunks), "g")

    def test_the_repository_golden_holds_under_the_default_chunking_and_refinds_under_others(self):
        golden = load_golden(str(ROOT / "golden.yaml"))
        for window in (180, 120, 300):
            chunks = list(rag_chunk.chunk_paths([str(ROOT / "corpus")], window))
            found = [resolve_gold(q, chunking(chunks), "g") for q in golden.questions]
            assert all(gold or not q.answerable for (gold, _), q in zip(found, golden.questions, strict=True))
            if window == 180:
                assert not any(refound for _, refound in found)

    @pytest.mark.skipif(not SHARED.exists(), reason="the eng-practices corpus is not in ../shared")
    def test_the_second_golden_file_holds_under_its_corpus(self):
        golden = load_golden(str(ROOT / "eval" / "eng-practices.golden.yaml"))
        chunks = list(rag_chunk.chunk_paths([str(SHARED)], 180))
        assert not any(resolve_gold(q, chunking(chunks), "g")[1] for q in golden.questions)


# --------------------------------------------------------------------------- scoring and its guards


def score(golden, records, label="default", chunks=CHUNKS, **kw):
    return rag_eval.score_run(golden, lines(records), label, chunking(chunks) if chunks else None, inputs="answers.jsonl", **kw)


class TestScore:
    def test_a_perfect_run(self, golden):
        result = score(golden, perfect_run(), resamples=200)
        overall = result["aggregates"]["overall"]
        assert overall["recall@1"] == (0.5 + 1 + 0 + 1) / 4  # id-01 has two gold chunks, pr-01's is at rank 2
        assert overall["recall@3"] == overall["recall@5"] == 1.0
        assert overall["mrr"] == pytest.approx((1 + 1 + 0.5 + 1) / 4)
        assert overall["answer_ok"] == 1.0
        assert overall["citations_on_target"] == 1.0
        assert overall["refused_when_unanswerable"] == 1.0
        assert overall["refused_when_answerable"] == 0.0
        assert overall["ms_p50"] == 12.0
        assert result["aggregates"]["by_kind"]["procedural"]["mrr"] == 0.5
        assert set(result["aggregates"]["by_kind"]) == {"identifier", "semantic", "procedural", "factual"}
        assert result["intervals"]["overall"]["mrr"][0] <= overall["mrr"] <= result["intervals"]["overall"]["mrr"][1]
        un = result["questions"][-1]
        assert (un["id"], un["recall@1"], un["citations_on_target"], un["answer_ok"]) == ("un-01", None, None, True)

    def test_the_result_layout(self, golden):
        result = score(golden, perfect_run(), resamples=50)
        assert list(result) == [
            "schema", "label", "corpus", "expected", "actual", "run", "golden", "gold_checked", "settings", "counts", "questions", "aggregates", "intervals",
        ]  # fmt: skip
        assert result["schema"] == "eval-result/1"
        assert result["expected"] == result["actual"] == RUNS["default"]
        assert result["run"] == {"k": 5, "rrf_k": 60, "candidates": 30, "index": "build/idx", "generator": "extractive"}
        assert result["golden"]["sha256"] == golden.sha256
        assert result["counts"] == {
            "questions": 5, "answerable": 4, "unanswerable": 1, "records": 5, "refound": 0, "empty_hits": 0, "refused": 1,
        }  # fmt: skip
        assert list(result["questions"][0]) == [
            "id", "kind", "answerable", "gold", "refound", "ranked", "recall@1", "recall@3", "recall@5", "rr", "ndcg@5",
            "answer_ok", "citations", "citations_on_target", "refused", "reason", "confidence", "signals", "ms", "search_ms", "answer_ms",
        ]  # fmt: skip
        assert set(result["intervals"]["overall"]) == set(evalruns.INTERVAL_METRICS)
        assert orjson.loads(rag_eval.dump_json(result)) == result

    def test_wrong_answers_and_citations(self, golden):
        records = perfect_run()
        records[1] = record("se-01", PERFECT["se-01"][0], ["misc#other"], "Try again later.", ["misc#other", "idem#keys"], 0.7)
        records[4] = record("un-01", PERFECT["un-01"][0], ["misc#other"], "Yes.", ["misc#other"], 0.2)
        result = score(golden, records, resamples=50)
        se, un = result["questions"][1], result["questions"][4]
        assert (se["recall@5"], se["rr"], se["answer_ok"], se["citations_on_target"]) == (0.0, 0.0, False, 0.5)
        assert (un["answer_ok"], un["refused"]) == (False, False)
        assert result["aggregates"]["overall"]["refused_when_unanswerable"] == 0.0
        assert result["aggregates"]["overall"]["answer_ok"] == 0.6

    def test_refound_gold_is_what_is_scored(self, golden):
        chunks = [c | {"id": "idem#keys-2"} if c["id"] == "idem#keys" else c for c in CHUNKS]
        records = perfect_run()
        records[1]["hits"][0]["chunk_id"] = "idem#keys-2"
        result = score(golden, records, chunks=chunks, resamples=50)
        assert result["questions"][1]["gold"] == ["idem#keys-2"]
        assert result["questions"][1]["recall@1"] == 1.0
        assert result["counts"]["refound"] == 1

    @pytest.mark.parametrize(
        ("change", "message"),
        [
            (
                {"model": "hash"},
                "answers.jsonl:1: label 'default' expects model \"all-MiniLM-L6-v2\"; the run has model \"hash\" (label 'hash' matches this run)",
            ),
            (
                {"features": ["unwrap", "idf", "headings", "dense", "names"]},
                "answers.jsonl:1: label 'default' expects features "
                '["unwrap","idf","headings","cue","dense","names"]; the run has features ["unwrap","idf","headings","dense","names"] '
                "(label 'answer-no-cue' matches this run)",
            ),
            (
                {"window": 240, "sparse": False},
                "answers.jsonl:1: label 'default' expects sparse true, window 180; the run has sparse false, window 240 "
                "(no label in RUNS matches this run)",
            ),
            ({"k": 3}, "answers.jsonl:1: the run retrieved k=3 hits per question; recall@5 and nDCG@5 need k >= 5"),
        ],
    )
    def test_the_records_must_show_the_labels_configuration(self, golden, change, message):
        with pytest.raises(StageError) as err:
            score(golden, perfect_run(**change))
        assert str(err.value) == message

    def test_the_hash_run_passes_under_its_own_label(self, golden):
        assert score(golden, perfect_run(model="hash"), label="hash", resamples=10)["actual"]["model"] == "hash"

    def test_one_run_per_result(self, golden):
        records = perfect_run()
        records[2] = perfect_run(rerank="none")[2]
        with pytest.raises(StageError, match=r"^answers.jsonl:3: this record's run differs from answers.jsonl:1's \(rerank \"none\", not"):
            score(golden, records)

    @pytest.mark.parametrize(
        ("records", "message"),
        [
            ([], "answers.jsonl: no answer records: the run measured nothing"),
            (perfect_run()[:3], "golden.yaml:22: 2 of 5 questions have no answer record (fa-01, un-01): the run is incomplete"),
            (
                [*perfect_run(), record("zz-99", "What?", ["misc#other"])],
                "answers.jsonl:6: record id 'zz-99' is not a question in golden.yaml",
            ),
            (perfect_run() + perfect_run()[:1], "answers.jsonl:6: a second record for question 'id-01' (the first is at answers.jsonl:1)"),
            (
                [record(qid, q, [], a, [], c) for qid, (q, _, a, _, c) in PERFECT.items()],
                "answers.jsonl: every hits list is empty: retrieval returned nothing (an empty index?)",
            ),
            (
                [record("id-01", "What does NW-4021 mean?", ["errors#platform"])],
                "answers.jsonl:1: record 'id-01' asks \"What does NW-4021 mean?\", not the golden question: stale answers?",
            ),
        ],
    )
    def test_a_run_that_measured_nothing_fails_loudly(self, records, message):
        golden = parse_golden(GOLDEN, "golden.yaml")
        with pytest.raises(StageError) as err:
            score(golden, records)
        assert str(err.value) == message

    def test_answer_fields_are_required(self, golden):
        records = perfect_run()
        del records[0]["answer"]
        records[0]["schema"] = "hits/1"
        with pytest.raises(StageError, match=r"^answers.jsonl:1: missing field 'answer' \(got a hits/1 record\)$"):
            score(golden, records)

    def test_the_chunks_must_be_the_indexs(self, golden):
        with pytest.raises(StageError, match=r"^answers.jsonl:1: chunks.jsonl was cut with window 120, the run's index with 180$"):
            score(golden, perfect_run(), chunks=[c | {"window": 120} for c in CHUNKS])
        records = perfect_run()
        records[0]["hits"][2]["chunk_id"] = "elsewhere#x"
        with pytest.raises(StageError, match=r"hit 'elsewhere#x' is not in chunks.jsonl: not the chunks the index was built from$"):
            score(golden, records)


# --------------------------------------------------------------------------- the abstain sweep


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


class TestSweep:
    def test_one_corpus_by_hand(self):
        # answerable a1 0.6, a2 0.8; unanswerable u1 0.2, u2 0.4; with two answerable, none may be refused.
        out = rag_eval.sweep([corpus_run("g", {"a1": 0.6, "a2": 0.8, "u1": 0.2, "u2": 0.4})])
        # t in (0.4, 0.6] refuses both unanswerable and no answerable: 0.41 ... 0.60 -> 0.50
        assert out["chosen"] == {"threshold": 0.5, "refused_when_unanswerable": 1.0, "refused_when_answerable": 0.0, "answer_ok": 1.0}
        (corpus,) = out["corpora"]
        assert corpus["alone"] == corpus["chosen"] == out["chosen"]
        assert corpus["loco"] is None and out["loco"] is None  # nothing to hold out
        assert corpus["run"] == {"refused_when_unanswerable": 0.0, "refused_when_answerable": 0.0, "answer_ok": 0.5}
        assert out["curve"][0] == {"threshold": 0.0, "refused_when_unanswerable": 0.0, "refused_when_answerable": 0.0, "answer_ok": 0.5}
        assert out["curve"][41]["refused_when_unanswerable"] == 1.0 and out["curve"][61]["refused_when_answerable"] == 0.5

    def test_one_threshold_for_all_corpora_and_leave_one_corpus_out(self):
        out = rag_eval.sweep([corpus_run("B", CORPUS_B), corpus_run("A", CORPUS_A)])
        assert out == rag_eval.sweep([corpus_run("A", CORPUS_A), corpus_run("B", CORPUS_B)])  # corpora in one order
        a, b = out["corpora"]
        # the budget holds on each corpus: B's 0.3 must stand, so t in (0.25, 0.3] -> 0.28 (pooled it would be 0.55)
        assert out["chosen"]["threshold"] == 0.28
        assert (a["chosen"]["refused_when_unanswerable"], b["chosen"]["refused_when_unanswerable"]) == (1.0, 0.333333)
        assert out["chosen"]["refused_when_unanswerable"] == 0.666667  # the mean over corpora, not 2 of 4 pooled
        assert (a["alone"]["threshold"], b["alone"]["threshold"]) == (0.4, 0.28)
        # A held out: chosen on B (0.28), A refuses its 0.2 and nothing else.  B held out: chosen on A (0.40),
        # B loses its answerable 0.3 and refuses only its 0.25.
        assert a["loco"] == {"threshold": 0.28, "refused_when_unanswerable": 1.0, "refused_when_answerable": 0.0, "answer_ok": 1.0}
        assert b["loco"] == {
            "threshold": 0.4,
            "refused_when_unanswerable": 0.333333,
            "refused_when_answerable": 0.25,
            "answer_ok": 0.571429,
        }
        assert out["loco"] == {"refused_when_unanswerable": 0.666667, "refused_when_answerable": 0.125, "answer_ok": 0.785714}
        assert [c["counts"] for c in out["corpora"]] == [
            {"questions": 5, "answerable": 4, "unanswerable": 1},
            {"questions": 7, "answerable": 4, "unanswerable": 3},
        ]
        table = evaltables.sweep_table(out)
        assert table[-3:] == [
            "| A (5) | 0.40 | 0.28 | 1.00 | 0.00 | 1.00 | 0.28 | 1.00 | 0.00 | 1.00 |",
            "| B (7) | 0.28 | 0.28 | 0.33 | 0.00 | 0.71 | 0.40 | 0.33 | 0.25 | 0.57 |",
            "| mean |  | 0.28 | 0.67 | 0.00 | 0.86 | 0.28–0.40 | 0.67 | 0.12 | 0.79 |",
        ]

    def test_one_run_one_result_per_corpus(self):
        a, b = corpus_run("A", CORPUS_A), corpus_run("B", CORPUS_B)
        with pytest.raises(StageError, match="a sweep takes one run's results, one per corpus"):
            rag_eval.sweep([a, a])
        with pytest.raises(StageError, match="a sweep takes one run's results, one per corpus"):
            rag_eval.sweep([a, (b[0], b[1] | {"label": "rrf"})])
        with pytest.raises(StageError, match=r"^A.yaml: sweep a run made with --threshold 0 \(the threshold-0 run\)"):
            rag_eval.sweep([(a[0], a[1] | {"actual": {"threshold": 0.3}}), b])

    def test_the_answer_stages_own_refusals_count_at_every_threshold(self):
        golden, result = corpus_run("g", {"a1": 0.6, "a2": 0.8, "u1": 0.2, "u2": 0.9})
        result["questions"][3] |= {"refused": True}  # u2: refused by the answer stage (a name the handbook never mentions)
        out = rag_eval.sweep([(golden, result)])
        assert out["curve"][0]["refused_when_unanswerable"] == 0.5  # at t = 0 already
        # t in (0.2, 0.6] refuses u1 by confidence, u2 stays refused: both, no answerable one -> 0.40
        assert out["chosen"] == {"threshold": 0.4, "refused_when_unanswerable": 1.0, "refused_when_answerable": 0.0, "answer_ok": 1.0}

    def test_another_golden_file_is_refused(self, golden):
        result = score(golden, perfect_run(threshold=0.0), label="threshold-0", resamples=10)
        other = parse_golden(GOLDEN + "\n", "other.yaml")
        with pytest.raises(StageError, match="scored against another golden file than other.yaml"):
            rag_eval.sweep([(other, result)])


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


class TestTable:
    def test_renders_in_runs_order_and_marks_significance(self, runner, results):
        _, paths = results
        result = runner.invoke(main, ["table", *map(str, paths)])
        assert result.exit_code == 0, result.output
        text = result.stdout
        rows = {line.split(" | ")[0]: line for line in text.splitlines()[:8] if line.startswith("| `")}  # the main table
        assert text.index("| `default` °") < text.index("| `no-rerank` °") < text.index("| `hash` °")
        assert rows["| `default` °"].startswith("| `default` ° | 1.00 [1.00, 1.00] | 1.00 [1.00, 1.00] |")
        assert rows["| `hash` °"].startswith("| `hash` ° | 0.00 [0.00, 0.00] † |")
        assert rows["| `hash` °"].endswith("| 0.00 [0.00, 0.00] † | 12.0 |")  # citations off target, latency untested
        assert "†" not in rows["| `no-rerank` °"] and "†" not in rows["| `default` °"]
        assert "MRR by kind of question (how many in parentheses):" in text
        assert "| run | identifier (8) | semantic (8) | procedural (7) | factual (7) |" in text
        assert "| `default` ° | 1.00 [1.00, 1.00] | 0.00 [0.00, 0.00] |" in text  # refusals
        assert "† differs from `default` at p < 0.05 (two-sided paired randomisation test" in text
        assert "° gold chunk ids taken as labelled" in text
        assert runner.invoke(main, ["table", *map(str, reversed(paths))]).stdout == text  # deterministic, order-free

    def test_the_numbers_come_before_the_markdown(self, results):
        _, paths = results
        t = evaltables.compare([(str(p), rag_eval.load_result(str(p))) for p in reversed(paths)])
        assert len(t.corpora) == 1 and t.mean == ()  # one corpus: no mean across corpora
        c = t.corpora[0]
        assert [r.label for r in c.rows] == ["default", "no-rerank", "hash"]  # RUNS' order
        default, no_rerank, hash_run = c.rows
        assert default.overall["mrr"].p is None  # the default row is not tested against itself
        assert no_rerank.overall["mrr"] == evaltables.Cell(1.0, (1.0, 1.0), 1.0)  # the same per-question values
        assert hash_run.overall["mrr"].p < 0.05 and hash_run.overall["mrr"].differs
        assert hash_run.by_kind["factual"].value == 0.0 and hash_run.by_kind["factual"].differs
        assert c.kinds == {"identifier": 8, "semantic": 8, "procedural": 7, "factual": 7}
        assert default.auc is not None and no_rerank.auc is None  # the signal table compares SIGNAL_RUNS only

    def test_rendering_only_formats(self):
        cell, empty = evaltables.Cell(0.5, (0.25, 0.75), 0.01), evaltables.Cell(None, None, None)
        metrics = [m for _, m in evaltables.MAIN_COLUMNS + evaltables.REFUSAL_COLUMNS]
        row = evaltables.Row("no-rerank", False, dict.fromkeys(metrics, cell), {"factual": empty}, None, None)
        counts = {"questions": 3, "answerable": 2, "unanswerable": 1}
        c = evaltables.Comparison("g", {"source": "g.yaml", "sha256": "ab" * 32}, counts, 100, (row,), {"factual": 2})
        assert evaltables.main_table(c)[-1] == "| `no-rerank` ° | " + " | ".join(["0.50 [0.25, 0.75] †"] * 6) + " | – |"
        assert evaltables.kind_table(c)[-3:] == ["| run | factual (2) |", "| --- | ---: |", "| `no-rerank` ° | – |"]
        assert evaltables.refusal_table(c)[-1] == "| `no-rerank` ° | 0.50 [0.25, 0.75] † | 0.50 [0.25, 0.75] † |"
        assert evaltables.signal_table(c) == []
        t = evaltables.Tables((c, c), (row,), ())
        assert evaltables.mean_table(t)[-1] == "| `no-rerank` ° | " + " | ".join(["0.50 [0.25, 0.75] †"] * 8) + " |"
        assert evaltables.mean_table(evaltables.Tables((c,), (), ())) == []
        notes = evaltables.table_notes(t)
        assert notes[0][0].startswith("† differs from `default` at p < 0.05") and "100 seeded sign flips" in notes[0][0]
        assert notes[1][0].startswith("° gold chunk ids taken as labelled")

    def test_refuses_a_row_whose_run_is_not_its_label(self, runner, results):
        _, paths = results
        hash_path = paths[0]
        data = orjson.loads(hash_path.read_bytes())
        data["label"] = "default"  # the hash run filed under MiniLM's name
        bad = hash_path.with_name("bad.json")
        bad.write_bytes(rag_eval.dump_json(data))
        result = runner.invoke(main, ["table", str(bad)])
        assert result.exit_code == 1
        assert result.stderr == (
            f'rag-eval: {bad}: label \'default\' expects model "all-MiniLM-L6-v2"; the file\'s run has model "hash" '
            "(label 'hash' matches this run)\n"
        )

    def test_refuses_mixed_golden_files_and_duplicate_labels(self, runner, results, tmp_path):
        golden, paths = results
        data = orjson.loads(paths[1].read_bytes())
        data["label"], data["golden"]["sha256"] = "no-rerank", "0" * 64
        data["actual"]["rerank"] = "none"
        other = tmp_path / "other.json"
        other.write_bytes(rag_eval.dump_json(data))
        result = runner.invoke(main, ["table", str(paths[1]), str(other)])
        assert result.exit_code == 1 and "scored against different golden files" in result.stderr
        result = runner.invoke(main, ["table", str(paths[1]), str(paths[1])])
        assert result.stderr == f"rag-eval: {paths[1]}: a second result for label 'default' on {golden}\n"

    def test_readme_is_written_between_the_markers_and_checked(self, runner, results, tmp_path):
        _, paths = results
        readme = tmp_path / "README.md"
        readme.write_text(f"# ragline\n\nBefore.\n\n{evaltables.BEGIN}\nstale\n{evaltables.END}\n\nAfter.\n")
        args = ["table", *map(str, paths), "--readme", str(readme)]
        check = runner.invoke(main, [*args, "--check"])
        assert check.exit_code == 1
        assert check.stderr == f"rag-eval: {readme}: the tables are out of date with the 3 files given: run 'just tables'\n"
        assert runner.invoke(main, args).exit_code == 0
        text = readme.read_text()
        assert text.startswith(f"# ragline\n\nBefore.\n\n{evaltables.BEGIN}\nScored against")
        assert text.endswith(f"{evaltables.END}\n\nAfter.\n") and "stale" not in text
        assert runner.invoke(main, [*args, "--check"]).exit_code == 0
        assert runner.invoke(main, ["table", *map(str, paths[1:]), "--readme", str(readme), "--check"]).exit_code == 1  # drift

    def test_readme_usage_and_markers(self, runner, results, tmp_path):
        _, paths = results
        assert runner.invoke(main, ["table", str(paths[0]), "--check"]).exit_code == 2
        readme = tmp_path / "README.md"
        readme.write_text("# no markers\n")
        result = runner.invoke(main, ["table", str(paths[0]), "--readme", str(readme)])
        assert result.exit_code == 1
        assert result.stderr == f"rag-eval: {readme}: needs one '{evaltables.BEGIN}' line and one '{evaltables.END}' line after it\n"

    def test_not_a_result_file(self, runner, tmp_path):
        path = write_jsonl(tmp_path / "answers.jsonl", perfect_run())
        result = runner.invoke(main, ["table", str(path)])
        assert result.exit_code == 1 and result.stderr.startswith(f"rag-eval: {path}: not valid JSON")
        path.write_text('{"schema": "chunk/1"}')
        result = runner.invoke(main, ["table", str(path)])
        assert result.stderr == f'rag-eval: {path}: not a rag-eval file (schema "chunk/1", expected "eval-result/1" or "abstain-sweep/2")\n'

    def test_a_sweep_file_among_the_results_adds_the_abstain_table(self, runner, results, tmp_path):
        golden, paths = results
        swept = tmp_path / "abstain-sweep.json"
        parsed = load_golden(str(golden))
        zero = tmp_path / "threshold-0.json"
        zero.write_bytes(
            rag_eval.dump_json(rag_eval.score_run(parsed, lines(big_run(parsed, True, threshold=0.0)), "threshold-0", resamples=50))
        )
        assert runner.invoke(main, ["sweep", "--golden", str(golden), str(zero), "--out", str(swept)]).exit_code == 0
        result = runner.invoke(main, ["table", *map(str, paths), str(swept)])
        assert result.exit_code == 0, result.output
        # answerable at 0.7; the unanswerable ones (0.1) the run refused itself, at every t: t in [0, 0.7] -> 0.35
        assert f"| {golden} (34) | 0.35 | 0.35 | 1.00 | 0.00 | 1.00 | – | – | – | – |" in result.stdout
        assert "| mean |" not in result.stdout and "###" not in result.stdout  # one corpus: no mean, no headings
        only_sweep = runner.invoke(main, ["table", str(swept)])
        assert only_sweep.stderr == "rag-eval: no score result among the files\n"
        other = tmp_path / "other.yaml"
        other.write_text(big_golden(31))
        data = orjson.loads(swept.read_bytes())
        data["corpora"][0]["golden"]["sha256"] = rag_eval.load_golden(str(other)).sha256
        swept.write_bytes(rag_eval.dump_json(data))
        stale = runner.invoke(main, ["table", *map(str, paths), str(swept)])
        assert stale.stderr == f"rag-eval: {swept}: the sweep was made on another golden file than the results'\n"

    def test_the_mean_across_corpora(self, runner, tmp_path, monkeypatch):
        # corpus a (30 answerable) and b (10): default finds everything on both, hash finds everything on a, nothing on b
        paths = []
        for name, n, hash_found in (("a", 30, True), ("b", 10, False)):
            golden = tmp_path / f"{name}.yaml"
            golden.write_text(big_golden(n))
            parsed = load_golden(str(golden))
            for label, found, config in (("default", True, {}), ("hash", hash_found, {"model": "hash"})):
                result = rag_eval.score_run(parsed, lines(big_run(parsed, found, **config)), label, resamples=500, corpus=name)
                paths.append(tmp_path / f"{name}-{label}.json")
                paths[-1].write_bytes(rag_eval.dump_json(result))
            zero = rag_eval.score_run(parsed, lines(big_run(parsed, True, threshold=0.0)), "threshold-0", resamples=50, corpus=name)
            (tmp_path / f"{name}-threshold-0.json").write_bytes(rag_eval.dump_json(zero))
        b_only = rag_eval.score_run(parsed, lines(big_run(parsed, True, rerank="none")), "no-rerank", resamples=500, corpus="b")
        paths.append(tmp_path / "b-no-rerank.json")
        paths[-1].write_bytes(rag_eval.dump_json(b_only))
        import irmetrics

        calls = []
        real = irmetrics.paired_randomisation
        monkeypatch.setattr(
            irmetrics, "paired_randomisation", lambda a, b, **kw: calls.append((len(a), kw.get("weights"))) or real(a, b, **kw)
        )
        t = evaltables.compare([(str(p), rag_eval.load_result(str(p))) for p in paths])
        macro_calls = [w for n, w in calls if n == 40]  # the mean row's tests pair all 30 + 10 questions
        assert macro_calls and all(list(w) == [1 / 60] * 30 + [1 / 20] * 10 for w in macro_calls)  # each 1/n of its corpus, halved
        assert [c.corpus for c in t.corpora] == ["a", "b"] and [r.label for r in t.mean] == ["default", "hash"]  # no-rerank: b only
        mrr = t.mean[1].overall["mrr"]
        assert mrr.value == 0.5  # (1 + 0) / 2: each corpus weighs the same; pooled it would be 30/40
        assert mrr.interval == (0.5, 0.5)  # within each corpus every question agrees, so no draw moves it
        # the 10 questions of b, each weighted 1/20, carry the whole difference: only all-equal signs reach it (2 in 1024)
        assert mrr.p == pytest.approx(2 / 1024, abs=0.004) and mrr.differs
        assert t.mean[0].overall["mrr"] == evaltables.Cell(1.0, (1.0, 1.0), None)
        text = runner.invoke(main, ["table", *map(str, paths)]).stdout
        assert text.startswith("### Mean across the 2 corpora\n\nThe macro average over a, b:")
        assert "| `hash` ° | 0.50 [0.50, 0.50] † | 0.50 [0.50, 0.50] † | 0.50 [0.50, 0.50] † |" in text
        assert text.index("### Mean across") < text.index("### a\n") < text.index("### b\n")
        swept = tmp_path / "sweep.json"
        zeros = [str(tmp_path / "a-threshold-0.json"), str(tmp_path / "b-threshold-0.json")]
        args = ["sweep", *zeros, "--golden", str(tmp_path / "a.yaml"), "--golden", str(tmp_path / "b.yaml")]
        assert runner.invoke(main, [*args, "--out", str(swept)]).exit_code == 0
        result = runner.invoke(main, ["table", *map(str, paths), str(swept)])
        assert result.exit_code == 0, result.output
        # answerable at 0.7 on both, the unanswerable ones refused by the run itself: [0, 0.7] -> 0.35 everywhere
        assert "| a (34) | 0.35 | 0.35 | 1.00 | 0.00 | 1.00 | 0.35 | 1.00 | 0.00 | 1.00 |" in result.stdout
        assert "| mean |  | 0.35 | 1.00 | 0.00 | 1.00 | 0.35–0.35 | 1.00 | 0.00 | 1.00 |" in result.stdout
        assert result.stdout.index("### b\n") < result.stdout.index("### Abstain threshold")
        one_golden = runner.invoke(main, ["sweep", str(paths[0]), str(paths[2]), "--golden", str(tmp_path / "a.yaml"), "--out", "x"])
        assert one_golden.exit_code == 2 and "1 --golden files for 2 results" in one_golden.stderr


# --------------------------------------------------------------------------- the commands end to end


class TestCommands:
    def test_questions(self, runner, golden_path):
        result = runner.invoke(main, ["questions", str(golden_path)])
        assert result.exit_code == 0, result.output
        got = parse(result.stdout_bytes)
        assert got[0] == {"id": "id-01", "question": "What does NW-5001 mean?", "kind": "identifier"}
        assert [r["kind"] for r in got] == ["identifier", "semantic", "procedural", "factual", "unanswerable"]

    def test_score_sweep_table(self, runner, golden_path, tmp_path):
        answers = write_jsonl(tmp_path / "answers.jsonl", perfect_run())
        chunks = write_jsonl(tmp_path / "chunks.jsonl", CHUNKS)
        out = tmp_path / "results" / "default.json"
        args = ["score", "--golden", str(golden_path), "--label", "default", "--out", str(out), "--corpus-chunks", str(chunks)]
        result = runner.invoke(main, [*args, str(answers)])
        assert result.exit_code == 0, result.output
        assert (result.stdout, result.stderr) == ("", "")
        scored = orjson.loads(out.read_bytes())
        assert scored["schema"] == "eval-result/1" and scored["gold_checked"] is True
        assert scored["aggregates"]["overall"]["answer_ok"] == 1.0

        from_stdin = runner.invoke(main, args, input=answers.read_bytes())
        assert from_stdin.exit_code == 0, from_stdin.output
        assert orjson.loads(out.read_bytes())["questions"] == scored["questions"]

        sweep_out, png = tmp_path / "results" / "abstain-sweep.json", tmp_path / "results" / "abstain-sweep.png"
        refused_by_t = runner.invoke(main, ["sweep", "--golden", str(golden_path), str(out), "--out", str(sweep_out)])
        assert refused_by_t.exit_code == 1 and "sweep a run made with --threshold 0" in refused_by_t.stderr
        zero = tmp_path / "results" / "threshold-0.json"
        write_jsonl(tmp_path / "zero.jsonl", perfect_run(threshold=0.0))
        args0 = ["score", "--golden", str(golden_path), "--label", "threshold-0", "--out", str(zero), str(tmp_path / "zero.jsonl")]
        assert runner.invoke(main, args0).exit_code == 0
        result = runner.invoke(main, ["sweep", "--golden", str(golden_path), str(zero), "--out", str(sweep_out), "--plot", str(png)])
        assert result.exit_code == 0, result.output
        swept = orjson.loads(sweep_out.read_bytes())
        assert swept["schema"] == "abstain-sweep/2" and len(swept["curve"]) == 101
        assert swept["chosen"]["threshold"] == 0.3  # un-01 refused by the run itself; answer pr-01 (0.6): 0 ... 0.60, the middle
        if _has_matplotlib():
            assert png.read_bytes().startswith(b"\x89PNG")
        else:
            assert "matplotlib is not installed" in result.stderr and not png.exists()

        result = runner.invoke(main, ["table", str(out)])
        assert result.exit_code == 0 and "| `default` | 0.62 [" in result.stdout

    def test_score_without_chunks_says_so(self, runner, golden_path, tmp_path):
        answers = write_jsonl(tmp_path / "answers.jsonl", perfect_run())
        out = tmp_path / "default.json"
        result = runner.invoke(main, ["score", "--golden", str(golden_path), "--label", "default", "--out", str(out), str(answers)])
        assert result.exit_code == 0
        assert "gold ids taken as labelled (no --corpus-chunks)" in result.stderr
        assert orjson.loads(out.read_bytes())["gold_checked"] is False

    def test_a_failed_score_writes_nothing(self, runner, golden_path, tmp_path):
        answers = write_jsonl(tmp_path / "answers.jsonl", perfect_run(model="hash"))
        out = tmp_path / "default.json"
        out.write_text("the old result\n")
        result = runner.invoke(main, ["score", "--golden", str(golden_path), "--label", "default", "--out", str(out), str(answers)])
        assert result.exit_code == 1
        assert result.stderr.startswith(f"rag-eval: {answers}:1: label 'default' expects model")
        assert out.read_text() == "the old result\n"
        assert sorted(p.name for p in tmp_path.iterdir()) == ["answers.jsonl", "default.json", "golden.yaml"]

    def test_a_malformed_answer_line(self, runner, golden_path, tmp_path):
        out = tmp_path / "default.json"
        args = ["score", "--golden", str(golden_path), "--label", "default", "--out", str(out)]
        result = runner.invoke(main, args, input=jsonl(*perfect_run()[:2]) + b"{not json\n")
        assert result.exit_code == 1
        assert result.stderr.startswith("rag-eval: <stdin>:3: not valid JSON")
        assert not out.exists()

    def test_sweep_without_matplotlib_skips_the_plot(self, runner, golden_path, tmp_path, monkeypatch):
        answers = write_jsonl(tmp_path / "answers.jsonl", perfect_run())
        out = tmp_path / "default.json"
        write_jsonl(answers, perfect_run(threshold=0.0))
        runner.invoke(main, ["score", "--golden", str(golden_path), "--label", "threshold-0", "--out", str(out), str(answers)])
        monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
        png = tmp_path / "sweep.png"
        result = runner.invoke(
            main, ["sweep", "--golden", str(golden_path), str(out), "--out", str(tmp_path / "s.json"), "--plot", str(png)]
        )
        assert result.exit_code == 0, result.output
        assert result.stderr == "rag-eval: matplotlib is not installed (pip install 'ragline[plot]'): no plot written\n"
        assert not png.exists() and (tmp_path / "s.json").exists()


def _has_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def switched_on(path: Path) -> set[str]:
    """The names a module's code tests with `"name" in features` or `"name" in x.features`."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.In):
            left, right = node.left, node.comparators[0]
            name = right.attr if isinstance(right, ast.Attribute) else getattr(right, "id", None)
            if name == "features" and isinstance(left, ast.Constant) and isinstance(left.value, str):
                found.add(left.value)
    return found


def test_features_are_rag_answers():
    """rag_eval's FEATURES are the switches rag_answer's code really has, in the order its
    generator records them, and every run's feature list is one the generator records."""
    import rag_answer

    assert switched_on(Path(rag_answer.__file__)) == set(evalruns.FEATURES)
    assert rag_answer.Extractive(evalruns.FEATURES).features == tuple(evalruns.FEATURES)
    for label, config in RUNS.items():
        assert list(rag_answer.Extractive(config["features"]).features) == config["features"], label
    assert {f for config in RUNS.values() for f in evalruns.FEATURES if f not in config["features"]} == set(evalruns.FEATURES)


def test_runs_table_and_no_heavy_import():
    assert evalruns.RUNS["answer-no-idf"]["features"] == ["unwrap", "headings", "cue", "dense", "names"]
    assert evalruns.RUNS["bm25"] | {"dense": True} == RUNS["default"]
    code = "import sys, rag_eval; print(sorted(m for m in ('matplotlib', 'ranx') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout == "[]\n"


def test_signal_auc_by_hand():
    rows = [
        {"answerable": True, "confidence": 0.9, "signals": {"top RRF score": 1 / 61}},
        {"answerable": True, "confidence": 0.4, "signals": {"top RRF score": 1 / 61}},
        {"answerable": False, "confidence": 0.5, "signals": {"top RRF score": 1 / 61}},
        {"answerable": False, "confidence": 0.1, "signals": {"top RRF score": 2 / 62}},
    ]
    # confidence: pairs (0.9>0.5, 0.9>0.1, 0.4<0.5, 0.4>0.1) -> 3 of 4
    assert evaltables.signal_auc(rows, "confidence") == pytest.approx(0.75)
    # the RRF score: 1/61 = 1/61 tie (0.5), 1/61 < 2/62 (0) for both answerable rows -> 1 of 4
    assert evaltables.signal_auc(rows, "top RRF score") == pytest.approx(0.25)
    assert evaltables.signal_auc(rows, "missing") is None
    assert evaltables.signal_auc(rows[:2], "confidence") is None
