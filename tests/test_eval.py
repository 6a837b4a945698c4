"""rag-eval: the golden file's checks, gold re-finding, scoring and its guards, the abstain
sweep, and each subcommand through click. The runs and their flags are tested in
test_evalruns.py, the tables in test_evaltables.py, the formulas (irmetrics) in
test_metrics.py; the shared fixtures are in evalfixtures.py."""

from __future__ import annotations

import sys
from pathlib import Path

import orjson
import pytest
from corpora import ROOT, SHARED
from evalfixtures import (
    CHUNKS,
    CORPUS_A,
    CORPUS_B,
    GOLDEN,
    MODEL_FILE,
    NO_INDEX,
    PERFECT,
    chunking,
    corpus_run,
    lines,
    perfect_run,
    record,
    score,
    write_jsonl,
)
from jsonl import jsonl, parse

import rag_chunk
import rag_eval
import rag_index
from rag_eval import main
from ragline.eval import failures as evalfailures
from ragline.eval import runs as evalruns
from ragline.eval import sweep as abstain
from ragline.eval import tables as evaltables
from ragline.eval.golden import KINDS, Relabel, load_golden, parse_golden, relabelled, resolve_gold
from ragline.eval.runs import RUNS
from ragline.records import StageError

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
        result = runner.invoke(main, ["score", "--golden", str(golden_path), "--label", " ", "--out", "x.json"])
        assert result.exit_code == 2
        assert "a label is a non-empty name on one line" in result.stderr


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
        assert (
            str(err.value)
            == "golden.yaml:22: fa-01: gold chunk payouts#how not in the chunks of chunks.jsonl and its evidence is found nowhere"
        )

    def test_one_lost_evidence_string_is_an_error_too(self, golden):
        chunks = [c for c in CHUNKS if c["id"] != "errors#why"]
        with pytest.raises(
            StageError, match=r'gold chunk errors#why not in the chunks of chunks.jsonl and evidence "retry under a new key" is found'
        ):
            resolve_gold(golden.by_id()["id-01"], chunking(chunks), "g")

    def test_a_mistyped_gold_id_is_named_with_the_id_found(self, golden):
        typo = parse_golden(GOLDEN.replace("gold: [idem#keys]", "gold: [idem#kyes]"), "golden.yaml")
        q = typo.by_id()["se-01"]
        resolved = {q.id: resolve_gold(q, chunking(), "g")[0]}
        assert resolved == {"se-01": ("idem#keys",)}
        (relabel,) = relabelled(typo, chunking(), resolved)
        assert relabel == Relabel(q, "idem#kyes", ("idem#keys",))
        assert relabel.message(typo, chunking()) == (
            "golden.yaml:10: question 'se-01': gold chunk 'idem#kyes' is not in chunks.jsonl; its evidence is in 'idem#keys', scored as gold"
        )
        assert relabelled(golden, chunking(), {}) == []  # labels that stand: nothing to say

    def test_each_missing_id_gets_the_ids_found_in_its_own_document(self):
        golden = parse_golden(GOLDEN.replace("gold: [errors#platform, errors#why]", "gold: [errors#platfrom, idem#why]"), "g.yaml")
        chunks = [*CHUNKS[:1], {"id": "idem#why", "doc": "idem", "text": "Other text."}, *CHUNKS[1:]]
        chunks = [c for c in chunks if c["id"] != "idem#why"]  # both labelled ids are gone
        q = golden.by_id()["id-01"]
        resolved = {q.id: resolve_gold(q, chunking(chunks), "g")[0]}
        assert [(r.given, r.found) for r in relabelled(golden, chunking(chunks), resolved)] == [
            ("errors#platfrom", ("errors#platform", "errors#why")),
            ("idem#why", ("errors#platform", "errors#why")),  # nothing of its document: every id found
        ]

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
        chunks = list(rag_chunk.chunk_paths([str(SHARED)], 180))
        labels = load_golden(str(ROOT / "eval" / "eng-practices.golden.yaml"))
        golden = rag_eval.cut_labels(labels, {c["id"] for c in chunks})  # labels written before ids were cut, as cut
        assert golden != labels  # one is (the test below shows how)
        assert not any(resolve_gold(q, chunking(chunks), "g")[1] for q in golden.questions)

    def test_a_label_written_before_ids_were_cut_is_read_as_cut(self):
        long_id = "standards/disaster-recovery#decide-on-manual-or-automatic-recovery-in-the-event-of-a-disaster"
        cut = "standards/disaster-recovery#decide-on-manual-or-automatic-recovery-in-the"
        assert rag_chunk.cut_ids(long_id) == [cut]
        assert rag_chunk.cut_ids(long_id + "-2") == [f"{cut}-2", cut]  # `-2`: a part, else the heading's own digits
        assert rag_chunk.cut_ids("errors#why") == ["errors#why"]
        golden = parse_golden(GOLDEN.replace("gold: [idem#keys]", f"gold: [{long_id}]"), "g.yaml")
        chunks = [c | {"id": cut} if c["id"] == "idem#keys" else c for c in CHUNKS]
        relabelled_golden = rag_eval.cut_labels(golden, {c["id"] for c in chunks})
        assert relabelled_golden.by_id()["se-01"].gold == (cut,)
        assert relabelled_golden.by_id()["id-01"] == golden.by_id()["id-01"]
        assert rag_eval.cut_labels(golden, {"idem#keys"}).by_id()["se-01"].gold == (long_id,)  # not there cut either: as written
        records = perfect_run()
        records[1]["hits"][0]["chunk_id"] = cut
        result = score(golden, records, chunks=chunks, resamples=10)
        assert (result["questions"][1]["gold"], result["counts"]["refound"]) == ([cut], 0)


# --------------------------------------------------------------------------- scoring and its guards


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
        assert result["run"] == {
            "k": 5,
            "rrf_k": 60,
            "candidates": 30,
            "index": NO_INDEX,
            "model_sha256": MODEL_FILE,
            "generator": "extractive",
        }
        assert result["golden"]["sha256"] == golden.sha256
        assert result["counts"] == {
            "questions": 5, "answerable": 4, "unanswerable": 1, "records": 5, "refound": 0, "empty_hits": 0, "refused": 1,
        }  # fmt: skip
        assert list(result["questions"][0]) == [
            "id", "kind", "answerable", "gold", "refound", "ranked", "recall@1", "recall@3", "recall@5", "rr", "ndcg@5",
            "answer_ok", "citations", "citations_on_target", "answer_words", "refused", "reason", "confidence", "signals", "ms", "search_ms",
            "answer_ms",
        ]  # fmt: skip
        assert [q["answer_words"] for q in result["questions"]] == [
            None if q["refused"] else len(q_record["answer"].replace("[1]", "").replace("[2]", "").split())
            for q, q_record in zip(result["questions"], perfect_run(), strict=True)
        ]
        overall = result["aggregates"]["overall"]
        assert overall["answer_ok_answerable"] == 1.0 and overall["words_p50"] is not None and overall["words_p90"] >= overall["words_p50"]
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

    def test_the_fact_among_filler_is_a_wrong_answer(self, golden):
        records = perfect_run()
        right = records[0]["answer"]
        records[0]["answer"] = right + " More." * (101 - len(right.split()))  # every phrase still in it, in 101 words
        assert not score(golden, records, resamples=50)["questions"][0]["answer_ok"]
        records[0]["answer"] = right + " More." * (100 - len(right.split()))  # 100 words: still an answer
        assert score(golden, records, resamples=50)["questions"][0]["answer_ok"]

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
            ({"k": 10}, "answers.jsonl:1: label 'default' expects k 5; the run has k 10 (no label in RUNS matches this run)"),
            (
                {"context": 3},
                "answers.jsonl:1: label 'default' expects context 5; the run has context 3 (no label in RUNS matches this run)",
            ),
        ],
    )
    def test_the_records_must_show_the_labels_configuration(self, golden, change, message):
        with pytest.raises(StageError) as err:
            score(golden, perfect_run(**change))
        assert str(err.value) == message

    def test_a_label_of_ones_own_that_is_a_built_in_run_says_so(self, runner, golden_path, tmp_path):
        answers = write_jsonl(tmp_path / "answers.jsonl", perfect_run())
        args = ["score", "--golden", str(golden_path), "--out", str(tmp_path / "r.json"), str(answers)]
        result = runner.invoke(main, [*args, "--label", "defualt"])
        assert (
            result.exit_code == 0
            and "'defualt' is a label of your own; this run's configuration is the built-in 'default' run's" in result.stderr
        )
        assert "label of your own" not in runner.invoke(main, [*args, "--label", "default"]).stderr
        assert runner.invoke(main, [*args, "--label", "k|10"]).exit_code == 2  # it would break the table's columns

    def test_a_label_of_ones_own_records_what_the_run_shows(self, golden):
        result = score(golden, perfect_run(k=10, candidates=50, threshold=0.4, context=3), label="k10", resamples=10)
        assert result["label"] == "k10" and result["expected"] is None
        assert result["actual"] == RUNS["default"] | {"k": 10, "candidates": 50, "threshold": 0.4, "context": 3}
        with pytest.raises(StageError, match="the run retrieved k=3 hits per question; recall@5 and nDCG@5 need k >= 5"):
            score(golden, perfect_run(k=3), label="k3")

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


# --------------------------------------------------------------------------- the failure report


def with_texts(records: list[dict]) -> list[dict]:
    """The records with each hit carrying its chunk's text, as rag-search writes it."""
    texts = {c["id"]: c["text"] for c in CHUNKS}
    for r in records:
        for hit in r["hits"]:
            hit["text"] = texts[hit["chunk_id"]]
    return records


def failing_run() -> list[dict]:
    """PERFECT but for two wrong answers: fa-01's with its gold block ranked first (listed), pr-01's
    with its gold block second (not listed). id-01 and se-01 have gold first and are right."""
    records = perfect_run()
    records[3] = record("fa-01", PERFECT["fa-01"][0], ["payouts#how", "misc#other"], "Payouts arrive next week [1].", ["payouts#how"], 0.9)
    records[3]["citations"][0] |= {"path": "corpus/payouts.md", "start_line": 3, "end_line": 4, "headings": ["Payouts", "How"]}
    records[2] = record("pr-01", PERFECT["pr-01"][0], ["misc#other", "runbook#steps"], "Wait it out [1].", ["misc#other"], 0.6)
    return with_texts(records)


FA_01 = """\
## `fa-01` (factual): When do payouts arrive?

Phrases a right answer holds: `T+1` (missing).

The answer (confidence 0.90), 1 citation:

```text
Payouts arrive next week [1].

[1] payouts#how (gold) :: Payouts > How (corpus/payouts.md:3-4)
```

The gold block, ranked first: `payouts#how` (corpus/payouts.md:1-5), 5 words:

```text
Payouts arrive T+1 after settlement.
```
"""


class TestFailures:
    def test_only_a_wrong_answer_with_gold_first_is_listed_with_its_words(self, golden):
        records = failing_run()
        result = score(golden, records, resamples=10)
        report = evalfailures.report(golden, result, {r["id"]: r for r in records})
        assert report.endswith("\n\n" + FA_01)  # the one failure, last, whole
        assert report.count("\n## ") == 1
        for right in ("id-01", "se-01", "pr-01", "un-01"):  # right with gold first; wrong, gold second; unanswerable
            assert f"`{right}`" not in report and PERFECT[right][0] not in report
        table = report[report.index("| kind |") : report.index("\n\n## ")].splitlines()
        assert table == [
            "| kind | answerable | gold first | answer wrong | share |",
            "| --- | ---: | ---: | ---: | ---: |",
            "| identifier | 1 | 1 | 0 | 0.00 |",
            "| semantic | 1 | 1 | 0 | 0.00 |",
            "| procedural | 1 | 0 | 0 | – |",
            "| factual | 1 | 1 | 1 | 1.00 |",
            "| all | 4 | 3 | 1 | 0.33 |",
        ]
        assert report.startswith("# Gold block first, answer wrong: golden.yaml\n\nThe `default` run on golden.yaml. Gold first:".replace(
            "golden.yaml", golden.source))  # fmt: skip
        assert evalfailures.report(golden, result, {r["id"]: r for r in records}) == report

    def test_a_right_run_lists_none_and_a_refusal_is_wrong(self, golden):
        records = with_texts(perfect_run())
        report = evalfailures.report(golden, score(golden, records, resamples=10), {r["id"]: r for r in records})
        assert report.endswith(
            "| all | 4 | 3 | 0 | 0.00 |\n\nNone: every answerable question whose gold block ranked first was answered right.\n"
        )
        records[1] = with_texts([record("se-01", PERFECT["se-01"][0], ["idem#keys"], "", [], 0.1)])[0]
        report = evalfailures.report(golden, score(golden, records, resamples=10), {r["id"]: r for r in records})
        assert "## `se-01` (semantic): How do I make sure a shopper is billed once?" in report
        assert "Phrases a right answer holds: `idempotency key` (missing).\n\nRefused: the handbook does not cover this.\n\n" in report
        assert "The answer (confidence 0.10), 0 citations:\n\n```text\n\n```" in report
        assert "`idem#keys` (corpus/idem.md:1-5), 8 words:\n\n```text\nAn idempotency key is a value you choose.\n```" in report

    def test_a_hit_without_text_shows_the_chunks(self, golden):
        records = failing_run()
        del records[3]["hits"][0]["text"]
        report = evalfailures.report(golden, score(golden, records, resamples=10), {r["id"]: r for r in records}, chunking().texts)
        assert report.endswith("\n\n" + FA_01)

    def test_a_long_block_is_cut_and_backticks_cannot_close_the_fence(self):
        text = "Run ```` this.\n\n" + " ".join(f"w{i}" for i in range(500)) + "  \n"
        assert evalfailures.bounded("a b  \n\n c\n\n") == ("a b\n\n c", 0)
        cut, dropped = evalfailures.bounded(text, 10)
        assert (cut, dropped) == ("Run ```` this.\n\nw0 w1 w2 w3 w4 w5 w6", 493)  # 3 words, then w0 ... w6
        assert evalfailures.fenced(cut) == ["`````text", "Run ```` this.", "", "w0 w1 w2 w3 w4 w5 w6", "`````"]
        records = failing_run()
        records[3]["hits"][0]["text"] = text
        golden = parse_golden(GOLDEN, "golden.yaml")
        report = evalfailures.report(golden, score(golden, records, resamples=10), {r["id"]: r for r in records})
        block = report[report.index("The gold block") :]
        assert block.startswith("The gold block, ranked first: `payouts#how` (corpus/payouts.md:1-5), 503 words:\n\n`````text\nRun")
        assert "w396\n`````\n\n(cut after 400 words: 103 more words not shown)\n" in block and "w397" not in block


# --------------------------------------------------------------------------- the abstain sweep


class TestSweep:
    def test_one_corpus_by_hand(self):
        # answerable a1 0.6, a2 0.8; unanswerable u1 0.2, u2 0.4; with two answerable, none may be refused.
        out = abstain.sweep([corpus_run("g", {"a1": 0.6, "a2": 0.8, "u1": 0.2, "u2": 0.4})])
        # t in (0.4, 0.6] refuses both unanswerable and no answerable: 0.41 ... 0.60 -> 0.50
        assert out["chosen"] == {"threshold": 0.5, "refused_when_unanswerable": 1.0, "refused_when_answerable": 0.0, "answer_ok": 1.0}
        (corpus,) = out["corpora"]
        assert corpus["alone"] == corpus["chosen"] == out["chosen"]
        assert corpus["loco"] is None and out["loco"] is None  # nothing to hold out
        assert corpus["run"] == {"refused_when_unanswerable": 0.0, "refused_when_answerable": 0.0, "answer_ok": 0.5}
        assert out["curve"][0] == {"threshold": 0.0, "refused_when_unanswerable": 0.0, "refused_when_answerable": 0.0, "answer_ok": 0.5}
        assert out["curve"][41]["refused_when_unanswerable"] == 1.0 and out["curve"][61]["refused_when_answerable"] == 0.5

    def test_one_threshold_for_all_corpora_and_leave_one_corpus_out(self):
        out = abstain.sweep([corpus_run("B", CORPUS_B), corpus_run("A", CORPUS_A)])
        assert out == abstain.sweep([corpus_run("A", CORPUS_A), corpus_run("B", CORPUS_B)])  # corpora in one order
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
            "| A (5) | 0.40 | 1.00 | 0.28 | 1.00 | 0.00 | 1.00 | 0.28 | 1.00 | 0.00 | 1.00 |",
            "| B (7) | 0.28 | 0.33 | 0.28 | 0.33 | 0.00 | 0.71 | 0.40 | 0.33 | 0.25 | 0.57 |",
            "| mean |  | 0.67 | 0.28 | 0.67 | 0.00 | 0.86 | 0.28–0.40 | 0.67 | 0.12 | 0.79 |",
        ]
        # the second column is what each corpus's own threshold refuses, not the shipped one's
        b["alone"] = b["alone"] | {"refused_when_unanswerable": 0.666667}
        assert [row.split(" | ")[2] for row in evaltables.sweep_table(out)[-3:]] == ["1.00", "0.67", "0.83"]
        a["alone"] = a["alone"] | {"refused_when_unanswerable": None}  # a corpus with no unanswerable question
        assert [row.split(" | ")[2] for row in evaltables.sweep_table(out)[-3:]] == ["–", "0.67", "0.67"]

    def test_one_run_one_result_per_corpus(self):
        a, b = corpus_run("A", CORPUS_A), corpus_run("B", CORPUS_B)
        with pytest.raises(StageError, match="a sweep takes one run's results, one per corpus"):
            abstain.sweep([a, a])
        with pytest.raises(StageError, match="a sweep takes one run's results, one per corpus"):
            abstain.sweep([a, (b[0], b[1] | {"label": "rrf"})])
        with pytest.raises(StageError, match=r"^A.yaml: sweep a run made with --threshold 0 \(the threshold-0 run\)"):
            abstain.sweep([(a[0], a[1] | {"actual": {"threshold": 0.3}}), b])

    def test_the_answer_stages_own_refusals_count_at_every_threshold(self):
        golden, result = corpus_run("g", {"a1": 0.6, "a2": 0.8, "u1": 0.2, "u2": 0.9})
        result["questions"][3] |= {"refused": True}  # u2: refused by the answer stage (a name the handbook never mentions)
        out = abstain.sweep([(golden, result)])
        assert out["curve"][0]["refused_when_unanswerable"] == 0.5  # at t = 0 already
        # t in (0.2, 0.6] refuses u1 by confidence, u2 stays refused: both, no answerable one -> 0.40
        assert out["chosen"] == {"threshold": 0.4, "refused_when_unanswerable": 1.0, "refused_when_answerable": 0.0, "answer_ok": 1.0}

    def test_another_golden_file_is_refused(self, golden):
        result = score(golden, perfect_run(threshold=0.0), label="threshold-0", resamples=10)
        other = parse_golden(GOLDEN + "\n", "other.yaml")
        with pytest.raises(StageError, match="scored against another golden file than other.yaml"):
            abstain.sweep([(other, result)])


# --------------------------------------------------------------------------- the commands end to end


class TestCommands:
    def test_questions(self, runner, golden_path):
        result = runner.invoke(main, ["questions", str(golden_path)])
        assert result.exit_code == 0, result.output
        got = parse(result.stdout_bytes)
        assert got[0] == {"id": "id-01", "question": "What does NW-5001 mean?", "kind": "identifier"}
        assert [r["kind"] for r in got] == ["identifier", "semantic", "procedural", "factual", "unanswerable"]

    def test_score_names_each_mistyped_gold_id_on_stderr(self, runner, tmp_path):
        golden = tmp_path / "golden.yaml"
        golden.write_text(GOLDEN.replace("gold: [idem#keys]", "gold: [idem#kyes]").replace("gold: [payouts#how]", "gold: [payout#how]"))
        out = tmp_path / "result.json"
        # under another window an id that is gone has moved: nothing to correct
        for label, window, said in (("default", 180, True), ("window-120", 120, False)):
            answers = write_jsonl(tmp_path / "answers.jsonl", perfect_run(window=window))
            chunks = write_jsonl(tmp_path / "chunks.jsonl", [c | {"window": window} for c in CHUNKS])
            args = ["score", "--golden", str(golden), "--label", label, "--out", str(out), "--corpus-chunks", str(chunks)]
            result = runner.invoke(main, [*args, str(answers)])
            assert result.exit_code == 0, result.output
            lines = [line for line in result.stderr.splitlines() if "gold chunk" in line]
            assert lines == (
                [
                    f"rag-eval: {golden}:10: question 'se-01': gold chunk 'idem#kyes' is not in {chunks}; "
                    "its evidence is in 'idem#keys', scored as gold",
                    f"rag-eval: {golden}:22: question 'fa-01': gold chunk 'payout#how' is not in {chunks}; "
                    "its evidence is in 'payouts#how', scored as gold",
                ]
                if said
                else []
            )
            assert orjson.loads(out.read_bytes())["counts"]["refound"] == 2

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

    def test_score_writes_the_failure_report_when_asked(self, runner, golden_path, tmp_path):
        answers = write_jsonl(tmp_path / "answers.jsonl", failing_run())
        chunks = write_jsonl(tmp_path / "chunks.jsonl", CHUNKS)
        out, failures = tmp_path / "results" / "default.json", tmp_path / "results" / "failures.md"
        args = [
            "score",
            "--golden",
            str(golden_path),
            "--label",
            "default",
            "--corpus",
            "tiny",
            "--out",
            str(out),
            "--corpus-chunks",
            str(chunks),
        ]
        result = runner.invoke(main, [*args, str(answers)])
        assert (result.exit_code, result.stdout, result.stderr) == (0, "", "")
        assert sorted(p.name for p in out.parent.iterdir()) == ["default.json"]  # not asked: not written

        result = runner.invoke(main, [*args, "--failures", str(failures), str(answers)])
        assert (result.exit_code, result.stdout, result.stderr) == (0, "", "")
        written = failures.read_bytes()
        assert written.decode().startswith(f"# Gold block first, answer wrong: tiny\n\nThe `default` run on tiny ({golden_path}). ")
        assert written.decode().endswith("\n\n" + FA_01) and "`se-01`" not in written.decode()
        assert "| all | 4 | 3 | 1 | 0.33 |" in written.decode()
        again = runner.invoke(main, [*args, "--failures", str(failures)], input=answers.read_bytes())  # from stdin: the same bytes
        assert again.exit_code == 0 and failures.read_bytes() == written
        assert sorted(p.name for p in out.parent.iterdir()) == ["default.json", "failures.md"]

    def test_a_bad_failures_path_is_one_line(self, runner, golden_path, tmp_path):
        answers = write_jsonl(tmp_path / "answers.jsonl", failing_run())
        args = ["score", "--golden", str(golden_path), "--label", "default", "--out", str(tmp_path / "default.json"), str(answers)]
        result = runner.invoke(main, [*args, "--failures", str(tmp_path)])
        assert result.exit_code == 2 and "Invalid value for '--failures'" in result.stderr and "is a directory" in result.stderr
        (tmp_path / "plain").write_text("a file\n")
        result = runner.invoke(main, [*args, "--failures", str(tmp_path / "plain" / "failures.md")])
        assert (result.exit_code, result.stdout) == (1, "")
        assert result.stderr.startswith("rag-eval: ") and result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
        failures = tmp_path / "failures.md"
        failures.write_text("the old report\n")
        write_jsonl(answers, [r | {"generator": r["generator"] | {"threshold": 0.0}} for r in failing_run()])
        result = runner.invoke(main, [*args, "--failures", str(failures)])
        assert result.exit_code == 1 and result.stderr.startswith(f"rag-eval: {answers}:1: label 'default' expects")
        assert failures.read_text() == "the old report\n"
        assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]

    def test_score_reads_the_chunking_from_the_records_index(self, runner, golden_path, tmp_path, monkeypatch):
        """Without --corpus-chunks the chunks come from the index the records name: gold is
        checked (no notice), and an index of another handbook is an error, not MRR 0."""
        monkeypatch.chdir(tmp_path)
        embedded = [c | {"vector": [1.0, float(n)], "model": "hash"} for n, c in enumerate(CHUNKS)]
        rag_index.write(tmp_path / "idx", *rag_index.collect(lines(embedded, "chunks.jsonl")))
        answers = write_jsonl(tmp_path / "answers.jsonl", perfect_run(index="idx"))
        args = ["score", "--golden", str(golden_path), "--label", "default", "--out", "default.json", str(answers)]
        result = runner.invoke(main, args)
        assert (result.exit_code, result.stderr) == (0, "")
        assert orjson.loads((tmp_path / "default.json").read_bytes())["gold_checked"] is True

        rebuilt = [c | {"text": c["text"] + " Edited."} for c in embedded]  # the same index folder, other chunks
        index_records = perfect_run(index="idx")
        for r in index_records:
            r["retrieval"]["corpus_digest"] = rag_index.load(tmp_path / "idx").manifest["corpus_digest"]
        write_jsonl(answers, index_records)
        assert runner.invoke(main, args).exit_code == 0
        rag_index.write(tmp_path / "idx", *rag_index.collect(lines(rebuilt, "chunks.jsonl")))
        result = runner.invoke(main, args)
        assert result.exit_code == 1 and "the index idx holds other chunks than when these records were searched" in result.stderr

        other = [{"id": "x#y", "doc": "x", "text": "nothing of the golden evidence", "vector": [1.0, 0.0], "model": "hash"}]
        rag_index.write(tmp_path / "other", *rag_index.collect(lines(other, "chunks.jsonl")))
        write_jsonl(answers, perfect_run(index="other"))
        result = runner.invoke(main, args)
        assert result.exit_code == 1 and "gold chunk errors#platform not in the chunks of other and" in result.stderr

    def test_score_without_any_chunking_says_so(self, runner, golden_path, tmp_path):
        answers = write_jsonl(tmp_path / "answers.jsonl", perfect_run())
        out = tmp_path / "default.json"
        result = runner.invoke(main, ["score", "--golden", str(golden_path), "--label", "default", "--out", str(out), str(answers)])
        assert result.exit_code == 0
        assert f'gold ids taken as labelled (no --corpus-chunks, and the records\' index "{NO_INDEX}" cannot be read here)' in result.stderr
        assert orjson.loads(out.read_bytes())["gold_checked"] is False

    def test_hits_from_another_handbook_are_an_error_not_zeros(self, runner, golden_path, tmp_path):
        records = [record(qid, q, ["elsewhere#a", "elsewhere#b"], a, [], c) for qid, (q, _, a, _, c) in PERFECT.items()]
        answers = write_jsonl(tmp_path / "answers.jsonl", records)
        out = tmp_path / "default.json"
        result = runner.invoke(main, ["score", "--golden", str(golden_path), "--label", "default", "--out", str(out), str(answers)])
        assert result.exit_code == 1 and not out.exists()
        assert "no hit comes from a document of" in result.stderr and "another handbook's index" in result.stderr

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
