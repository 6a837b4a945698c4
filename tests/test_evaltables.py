"""rag-eval's tables: the numbers before the markdown, the mean across corpora, the verdict."""

from __future__ import annotations

import orjson
import pytest
from evalfixtures import big_golden, big_run, lines, perfect_run, write_jsonl

import rag_eval
from rag_eval import main
from ragline.eval import tables as evaltables
from ragline.eval.golden import load_golden


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

    def test_refuses_mixed_golden_files_and_one_file_twice(self, runner, results, tmp_path):
        _, paths = results
        data = orjson.loads(paths[1].read_bytes())
        data["label"], data["golden"]["sha256"] = "no-rerank", "0" * 64
        data["actual"]["rerank"] = "none"
        other = tmp_path / "other.json"
        other.write_bytes(rag_eval.dump_json(data))
        result = runner.invoke(main, ["table", str(paths[1]), str(other)])
        assert result.exit_code == 1 and "scored against different golden files" in result.stderr
        again = paths[1].parent / "." / paths[1].name  # another spelling of the same file
        result = runner.invoke(main, ["table", str(paths[1]), str(again)])
        assert result.stderr == f"rag-eval: {again}: this file is given twice\n"

    def test_any_labels_and_one_label_on_two_files(self, runner, results, tmp_path):
        """A user's own labels are rows after RUNS' (in the order given); one label on two
        files names each row by its file too; p-values are against the `default` row."""
        _, (hash_path, default_path, _) = results
        mine = tmp_path / "mine"
        mine.mkdir()
        again = mine / "default.json"
        again.write_bytes(default_path.read_bytes())
        k10 = orjson.loads(hash_path.read_bytes())
        k10["label"] = "k10"
        (mine / "k10.json").write_bytes(rag_eval.dump_json(k10))
        result = runner.invoke(main, ["table", str(mine / "k10.json"), str(default_path), str(again)])
        assert result.exit_code == 0, result.output
        rows = [line.split(" | ")[0] for line in result.stdout.splitlines() if line.startswith("| `")][:3]
        assert rows == [f"| `default ({default_path})` °", f"| `default ({again})` °", "| `k10` °"]
        t = evaltables.compare([(str(default_path), rag_eval.load_result(str(default_path))), (str(mine / "k10.json"), k10)])
        assert [r.label for r in t.corpora[0].rows] == ["default", "k10"]
        assert t.corpora[0].rows[1].overall["mrr"].differs  # tested against the default row
        both = evaltables.compare([(str(p), rag_eval.load_result(str(p))) for p in (default_path, again, mine / "k10.json")])
        rows = {r.label: r for r in both.corpora[0].rows}
        assert rows["k10"].overall["mrr"].differs  # still tested: against the first `default` given
        assert rows[f"default ({again})"].overall["mrr"].p == 1.0 and rows[f"default ({default_path})"].overall["mrr"].p is None
        assert rows[f"default ({default_path})"].auc is not None  # the signal table knows a default by its label

    def test_compare_two_runs_question_by_question(self, runner, results):
        _, (hash_path, default_path, no_rerank_path) = results
        result = runner.invoke(main, ["compare", str(default_path), str(hash_path)])
        assert result.exit_code == 0, result.output
        text = result.stdout
        assert "| MRR | 1.00 | 0.00 | -1.000 | " in text
        assert "questions moved: 0 better in B, 30 worse, 0 mixed." in text
        assert "| `q28` | identifier | 1 → – | yes → no | worse |" in text
        same = runner.invoke(main, ["compare", str(default_path), str(no_rerank_path), "--json"])
        data = orjson.loads(same.stdout_bytes)
        assert data["moved"] == [] and data["metrics"]["mrr"] == {"a": 1.0, "b": 1.0, "p": 1.0}
        worse = orjson.loads(runner.invoke(main, ["compare", str(default_path), str(hash_path), "--json"]).stdout_bytes)
        assert worse["moved"][0]["b_is"] == "worse" and worse["moved"][0]["rank"] == {"a": 1, "b": None}
        same_file = runner.invoke(main, ["compare", str(default_path), str(default_path.parent / "." / default_path.name)])
        assert same_file.exit_code == 2 and "A and B are one file" in same_file.stderr
        c = evaltables.paired(
            (str(hash_path), rag_eval.load_result(str(hash_path))), (str(default_path), rag_eval.load_result(str(default_path)))
        )
        assert c.metrics["mrr"][2] < 0.05 and all(m.better == 1 for m in c.moved)

    def test_compare_refuses_two_golden_files(self, runner, results, tmp_path):
        _, paths = results
        data = orjson.loads(paths[1].read_bytes())
        data["golden"]["sha256"] = "0" * 64
        other = tmp_path / "other.json"
        other.write_bytes(rag_eval.dump_json(data))
        result = runner.invoke(main, ["compare", str(paths[1]), str(other)])
        assert result.exit_code == 1
        assert result.stderr == f"rag-eval: {other}: scored against another golden file than {paths[1]} (sha256 differs): nothing to pair\n"

    def test_tables_are_written_into_a_page_between_the_markers_and_checked(self, runner, results, tmp_path):
        _, paths = results
        page = tmp_path / "evaluation.md"
        page.write_text(f"# Evaluation\n\nBefore.\n\n{evaltables.BEGIN}\nstale\n{evaltables.END}\n\nAfter.\n")
        args = ["table", *map(str, paths), "--into", str(page)]
        check = runner.invoke(main, [*args, "--check"])
        assert check.exit_code == 1
        assert check.stderr == f"rag-eval: {page}: the tables are out of date with the 3 files given: run 'just tables'\n"
        assert runner.invoke(main, args).exit_code == 0
        text = page.read_text()
        assert text.startswith(f"# Evaluation\n\nBefore.\n\n{evaltables.BEGIN}\nScored against")
        assert text.endswith(f"{evaltables.END}\n\nAfter.\n") and "stale" not in text
        assert runner.invoke(main, [*args, "--check"]).exit_code == 0
        assert runner.invoke(main, ["table", *map(str, paths[1:]), "--into", str(page), "--check"]).exit_code == 1  # drift

    def test_readme_is_the_old_name_of_into(self, runner, results, tmp_path):
        _, paths = results
        page = tmp_path / "README.md"
        page.write_text(f"{evaltables.BEGIN}\nstale\n{evaltables.END}\n")
        assert runner.invoke(main, ["table", *map(str, paths), "--readme", str(page)]).exit_code == 0
        assert "stale" not in page.read_text()
        assert runner.invoke(main, ["table", *map(str, paths), "--into", str(page), "--check"]).exit_code == 0

    def test_into_usage_and_markers(self, runner, results, tmp_path):
        _, paths = results
        usage = runner.invoke(main, ["table", str(paths[0]), "--check"])
        assert usage.exit_code == 2 and "--check needs --into" in usage.stderr
        page = tmp_path / "evaluation.md"
        page.write_text("# no markers\n")
        result = runner.invoke(main, ["table", str(paths[0]), "--into", str(page)])
        assert result.exit_code == 1
        assert result.stderr == f"rag-eval: {page}: needs one '{evaltables.BEGIN}' line and one '{evaltables.END}' line after it\n"

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
        assert f"| {golden} (34) | 0.35 | 1.00 | 0.35 | 1.00 | 0.00 | 1.00 | – | – | – | – |" in result.stdout
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
        from ragline.eval import metrics as irmetrics

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
        assert "| a (34) | 0.35 | 1.00 | 0.35 | 1.00 | 0.00 | 1.00 | 0.35 | 1.00 | 0.00 | 1.00 |" in result.stdout
        assert "| mean |  | 1.00 | 0.35 | 1.00 | 0.00 | 1.00 | 0.35–0.35 | 1.00 | 0.00 | 1.00 |" in result.stdout
        assert result.stdout.index("### b\n") < result.stdout.index("### Abstain threshold")
        one_golden = runner.invoke(main, ["sweep", str(paths[0]), str(paths[2]), "--golden", str(tmp_path / "a.yaml"), "--out", "x"])
        assert one_golden.exit_code == 2 and "1 --golden files for 2 results" in one_golden.stderr


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


def test_the_answer_targets_table_says_met_or_missed_by_how_much():
    t = evaltables.Tables(
        (),
        (),
        (
            {
                "corpora": [
                    {"name": "a", "loco": {"refused_when_unanswerable": 0.5, "refused_when_answerable": 0.2}},
                    {"name": "b", "loco": None},
                ]
            },
        ),
        (
            ("a", {"recall@1": 0.5, "answer_ok_answerable": 0.7, "words_p50": 40.0, "words_p90": 130.0}),
            ("b", {"recall@1": 0.6, "answer_ok_answerable": 0.6, "words_p50": 61.0, "words_p90": 90.0}),
        ),
    )
    lines = evaltables.answer_targets_table(t)
    assert "| a | 0.50 | 0.70 ✓ | 40 ✓ | 130 (missed by 10) | 0.50 ✓ | 0.20 (missed by 0.08) |" in lines
    assert "| b | 0.60 | 0.60 (missed by 0.10) | 61 (missed by 1) | 90 ✓ | – | – |" in lines
    assert "| mean |  | 0.65 ✓ |  |  |  |  |" in lines
    assert evaltables.answer_targets_table(evaltables.Tables((), (), (), ())) == []
