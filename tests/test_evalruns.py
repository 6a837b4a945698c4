"""rag-eval's runs: each configuration's flags, what the stages make of them, the plan."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from corpora import ROOT, load_minilm
from evalfixtures import perfect_run, score

import rag_chunk
from rag_eval import main
from ragline.eval import runs as evalruns
from ragline.eval.golden import load_golden
from ragline.eval.runs import RUNS
from ragline.records import StageError

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
    "exact": [("search", "exact")],
    "threshold": [("answer", "threshold")],
    "k": [("search", "k")],
    "candidates": [("search", "candidates")],
    "rrf_k": [("search", "rrf_k")],
    "context": [("answer", "size")],
    "reader": [("answer", "reader")],
    "local_model": [("answer", "local_model")],
}


def stage_params(flags: dict[str, list[str]]) -> dict[str, dict]:
    """What each stage's command line makes of the flags: its parsed parameters (click, no run)."""
    import rag_answer
    import rag_embed
    import rag_expand
    import rag_index
    import rag_rerank
    import rag_search

    commands = {"chunk": (rag_chunk, ["x"]), "expand": (rag_expand, []), "embed": (rag_embed, []), "index": (rag_index, ["--out", "x"])}
    commands |= {"search": (rag_search, ["--index", "x"]), "rerank": (rag_rerank, []), "answer": (rag_answer, ["--index", "x"])}
    return {stage: module.main.make_context(stage, [*base, *flags[stage]]).params for stage, (module, base) in commands.items()}


class TestRuns:
    def test_flags_from_the_configuration(self):
        assert evalruns.run_flags(RUNS["default"]) == {
            "chunk": [], "expand": [], "embed": [], "index": [], "search": [], "rerank": [], "answer": [],
        }  # fmt: skip
        assert evalruns.run_flags(RUNS["expand"])["expand"] == ["--questions", "4"]
        assert evalruns.run_flags(RUNS["hash-dense"]) == {
            "chunk": [], "expand": [], "embed": ["--model", "hash"], "index": [], "search": ["--no-sparse"], "rerank": [], "answer": [],
        }  # fmt: skip
        reranked = evalruns.run_flags(RUNS["local-rerank"])
        assert (reranked["search"], reranked["rerank"]) == (["--k", "20"], ["--depth", "20"])  # as many hits as the model scores
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
        if config.get("reader") in ("write", "openai"):  # a writer uses no extractive feature: its records show none, whatever --off says
            assert config["features"] == [] and params["answer"]["off"] == ()
        else:
            assert [f for f in evalruns.FEATURES if f not in params["answer"]["off"]] == config["features"]
        # rag-expand runs only where a run has flags for it (the justfile's _run): without, a chunk has no questions
        flags = evalruns.run_flags(config)
        assert (params["expand"]["questions"] if flags["expand"] else 0) == config["questions"]
        # and rag-rerank likewise: without flags for it, the hits are retrieval's order
        assert (params["rerank"]["depth"] if flags["rerank"] else 0) == config["rerank_depth"]
        assert set(OPTIONS) | {"features", "questions", "rerank_depth"} == {k.name for k in evalruns.CONFIG_KEYS}

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
        assert len(runs) == len(evalruns.CORPORA) * (len(RUNS) - len(evalruns.LOCAL_RUNS)) and absent == []
        assert not {r.label for r in runs} & set(evalruns.LOCAL_RUNS)  # the local reader's runs only when named
        runs, _ = evalruns.plan(["local-judge"], present=lambda docs: True)
        assert [r.label for r in runs] == ["local-judge"] * len(evalruns.CORPORA) and runs[0].flags["answer"] == ["--reader", "judge"]
        runs, absent = evalruns.plan(["bm25", "gds-way", "default"], present=lambda docs: True)
        assert [(r.corpus.name, r.label) for r in runs] == [("gds-way", "default"), ("gds-way", "bm25")]  # RUNS' order
        assert runs[1].tsv() == "gds-way\tbm25\t../shared/corpora/gds-way/docs\teval/gds-way.golden.yaml\t\t\t\t\t--no-dense\t\t"
        runs, absent = evalruns.plan(["hash"], present=lambda docs: docs == "corpus")
        assert [r.corpus.name for r in runs] == ["northwind"] and [c.name for c in absent] == [
            "eng-practices",
            "gds-way",
            "sourcegraph",
            "gitlab",
        ]
        with pytest.raises(ValueError, match="'nope' is neither a run"):
            evalruns.plan(["nope"])

    def test_the_plan_command(self, runner, tmp_path, monkeypatch):
        (tmp_path / "repo" / "corpus").mkdir(parents=True)
        monkeypatch.chdir(tmp_path / "repo")  # no ../shared here
        result = runner.invoke(main, ["plan", "answer-no-idf", "dense"])
        assert result.exit_code == 0, result.output
        assert result.stdout == (
            "northwind\tdense\tcorpus\tgolden.yaml\t\t\t\t\t--no-sparse\t\t\nnorthwind\tanswer-no-idf\tcorpus\tgolden.yaml\t\t\t\t\t\t\t--off idf\n"
        )
        assert result.stderr == (
            "rag-eval: ../shared/corpora/eng-practices/docs is absent: no runs on eng-practices\n"
            "rag-eval: ../shared/corpora/gds-way/docs is absent: no runs on gds-way\n"
            "rag-eval: eval/corpora/sourcegraph/docs is absent: no runs on sourcegraph\n"
            "rag-eval: eval/corpora/gitlab/docs is absent: no runs on gitlab\n"
        )
        nothing = runner.invoke(main, ["plan", "gds-way"])
        assert nothing.exit_code == 1 and nothing.stderr.endswith("rag-eval: nothing to run: every corpus named is absent\n")
        assert runner.invoke(main, ["plan", "nope"]).exit_code == 2

    def test_every_corpus_has_its_golden_file(self):
        assert [c.name for c in evalruns.CORPORA] == ["northwind", "eng-practices", "gds-way", "sourcegraph", "gitlab"]
        for corpus in evalruns.CORPORA:
            assert load_golden(str(ROOT / corpus.golden)).questions


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
    """rag_eval's FEATURES are the switches the answer's code really has (rag_answer and the
    ragline.answer modules it calls), in the order its generator records them, and every run's
    feature list is one the generator records."""
    import rag_answer

    sources = [Path(rag_answer.__file__), *sorted((Path(rag_answer.__file__).parent / "ragline" / "answer").glob("*.py"))]
    assert set().union(*(switched_on(p) for p in sources)) == set(evalruns.FEATURES)
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


@pytest.mark.skipif(shutil.which("just") is None, reason="just is not installed (pip install -e '.[just]')")
def test_only_the_default_run_writes_a_failure_report():
    """`just _run`'s score line (dry run: nothing runs) asks for OUT/CORPUS/failures.md on the default run only."""

    def score_line(label: str) -> str:
        args = ["--justfile", str(ROOT / "justfile"), "--dry-run", "_run", "my corpus", label, "corpus", "golden.yaml"]
        done = subprocess.run([str(shutil.which("just")), *args], capture_output=True, text=True, check=True)
        return next(line for line in done.stderr.splitlines() if "rag-eval score" in line)

    assert score_line("default").endswith(""" --out "results/my corpus/default.json" --failures 'results/my corpus/failures.md'""")
    assert score_line("bm25").endswith(""" --out "results/my corpus/bm25.json" """)
    assert "--failures" not in score_line("my-own")


@pytest.mark.model
def test_eval_corpus_writes_only_under_its_output_folder(tmp_path):
    """`just eval-corpus DIR GOLDEN OUT` on a handbook of one's own: the result, the index
    and the tables, with nothing written outside OUT (the tracked tree untouched)."""
    import shutil

    load_minilm()  # the recipe's `just model` would fetch a missing model: skip here (fail in CI) as every model test does

    docs = tmp_path / "my docs"  # a space in a path is one argument
    docs.mkdir()
    (docs / "sweep.md").write_text("# Sweep\n\n## When\n\nThe settlement sweep runs at 23:40 every night.\n")
    (docs / "refunds.md").write_text("# Refunds\n\n## Timing\n\nRefunds reach the card within five days.\n")
    golden = tmp_path / "mine.golden.yaml"
    golden.write_text(
        "version: 1\nquestions:\n"
        "  - {id: a1, kind: factual, question: 'When does the sweep run?', gold: ['sweep#when'],"
        " evidence: [runs at 23:40], answer_contains: ['23:40']}\n"
        "  - {id: a2, kind: factual, question: 'How long do refunds take?', gold: ['refunds#timing'],"
        " evidence: [within five days], answer_contains: [five days]}\n"
        "  - {id: u1, kind: unanswerable, question: 'Is there a mobile app?'}\n"
    )
    out = tmp_path / "out"
    marker = tmp_path / "marker"
    marker.write_text("")
    env = {k: v for k, v in os.environ.items() if k != "RAG_EMBED_CACHE"}
    just = shutil.which("just") or str(Path(sys.prefix) / "bin" / "just")
    result = subprocess.run(
        [just, "--justfile", str(ROOT / "justfile"), "eval-corpus", str(docs), str(golden), str(out)],
        env=env,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    assert "| `default`" in result.stdout
    assert (out / "mine" / "default.json").is_file() and (out / "build" / "mine" / "default" / "idx").is_dir()
    assert (out / "mine" / "failures.md").read_text(encoding="utf-8").startswith("# Gold block first, answer wrong: mine\n")
    assert (out / "cache.sqlite").is_file()
    since = marker.stat().st_mtime_ns
    written = [
        p for p in ROOT.rglob("*")
        if p.is_file() and p.stat().st_mtime_ns > since and not {"__pycache__", ".pytest_cache", ".venv"} & set(p.relative_to(ROOT).parts)
    ]  # fmt: skip
    assert written == []
