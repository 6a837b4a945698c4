"""rag-eval: answers -> scores, tables and an abstain sweep, against golden question sets, corpus by corpus.

    rag-eval plan > build/plan.tsv                     # every run on every corpus, with its flags
    rag-eval questions golden.yaml | rag-search --index build/idx | rag-answer > build/default.jsonl
    rag-eval score --golden golden.yaml --corpus northwind --label default \\
        --corpus-chunks build/chunks.jsonl --out results/northwind/default.json \\
        --failures results/northwind/failures.md build/default.jsonl
    rag-eval sweep results/*/default.json --out results/abstain-sweep.json
    rag-eval table results/*/*.json results/abstain-sweep.json --into docs/evaluation.md   # --check in CI

`plan` prints the runs `just eval` makes: each RUNS label (evalruns: a label and the
configuration its records must show, so a result can never be filed under the wrong
name) on each corpus of CORPORA, with the stages' flags that configuration needs.
`questions` reads a golden file (the `golden` module owns its format) and writes query
records `{"id", "question", "kind"}`. `score` reads answer records (one per question,
from `rag-search | rag-answer`: `id`, `question`, `hits`, `confidence`, `retrieval`,
`ms`, `answer`, `citations`, `refused`, `reason`, `generator`, `answer_ms`) and writes one
result file, `"schema": "eval-result/1"` (its layout is in `score_run`), and with
`--failures` a markdown report of the answerable questions whose gold block ranked first
and whose answer is still wrong, with the answer's and the block's words
(`ragline.eval.failures`). `sweep` reads
one run's result files, one per corpus, and writes the abstain curves and the one
threshold to ship, `"schema": "abstain-sweep/2"` (layout in `sweep`). `table` reads
result and sweep files and writes markdown (`ragline.eval.tables`), to stdout or between
`<!-- tables:begin -->` and `<!-- tables:end -->` in a markdown file (docs/evaluation.md).

The formulas (recall@k, MRR, nDCG, the answer checks, the bootstrap intervals, the
paired randomisation test, macro averages, ROC AUC, the abstain threshold rule) live in
`ragline.eval.metrics`, each specified in its docstring; this module applies them to golden
questions and runs.
"""

from __future__ import annotations

import itertools
import math
import os
import sys
from collections.abc import Collection, Iterable, Sequence
from pathlib import Path
from typing import Any

import click
import orjson

import ragline
import ragline.answer.citations
import ragline.records
from ragline.eval import failures as evalfailures
from ragline.eval import runs as evalruns
from ragline.eval.golden import (
    ANSWERABLE_KINDS,
    KINDS,
    Chunking,
    Golden,
    Question,
    gold_docs,
    load_golden,
    query_records,
    read_chunking,
    relabelled,
    resolve_gold,
    show,
)
from ragline.eval.runs import (
    CUTOFF,
    HEADLINE,
    INTERVAL_METRICS,
    LEVEL,
    METRICS,
    RESAMPLES,
    RUNS,
    SEED,
    check_config,
    config_differences,
    matching_labels,
    metric_values,
    rounded,
    run_config,
)
from ragline.eval.sweep import SWEEP_SCHEMA, plot_sweep, sweep
from ragline.eval.tables import BEGIN, END, compare, paired, paired_table, render_tables, replace_tables
from ragline.records import Line, StageError

np = ragline.records.lazy_import("numpy")  # imported on first use: `rag-eval --help` stays fast
irmetrics = ragline.records.lazy_import("ragline.eval.metrics")  # the formulas and statistics (it imports numpy)

STAGE = "rag-eval"
RESULT_SCHEMA = "eval-result/1"


# --------------------------------------------------------------------------- scoring


def score_run(
    golden: Golden,
    records: Iterable[tuple[Line, dict[str, Any]]],
    label: str,
    chunking: Chunking | None = None,
    inputs: str = ragline.records.STDIN,
    resamples: int = RESAMPLES,
    seed: int = SEED,
    corpus: str | None = None,
) -> dict[str, Any]:
    """Score one run's answer records against the golden questions: the result file's content.

    Guards (each a StageError, never a result full of zeros): a label RUNS names must
    match the configuration the records show (any other label is the user's own name
    for what the records show), and all records must show the same one; records must
    retrieve k >= 5; one record per golden question, none for an unknown id, with the
    golden question's text; at least one non-empty hits list; with a chunking, every
    hit must be one of its chunks and its window the run's; without one, at least one
    hit somewhere must come from a document that holds gold (else the run searched
    another handbook's index).

    The result (`"schema": "eval-result/1"`):
        label, corpus (the name given, or null), expected (RUNS[label]; null for a label of the user's own),
        actual (the records' configuration, CONFIG_KEYS),
        run {k, rrf_k, candidates, index, generator}: the rest of what ran,
        golden {source, sha256}, gold_checked (was a chunking given),
        settings {cutoff, resamples, seed, level},
        counts {questions, answerable, unanswerable, records, refound, empty_hits, refused},
        questions: per question, in golden order: {id, kind, answerable, gold (resolved
            ids), refound, ranked (top-5 chunk ids), recall@1, recall@3, recall@5, rr,
            ndcg@5 (null when unanswerable), answer_ok, citations, citations_on_target,
            refused, reason, confidence, ms (search + answer), search_ms, answer_ms},
        aggregates {overall: {every METRICS name, ms_p50, ms_p95, search_ms_p50,
            answer_ms_p50}, by_kind: {kind: {n, METRICS names but refused_when_unanswerable}}},
        intervals {overall: {INTERVAL_METRICS name: [lo, hi]}, by_kind: {kind: {HEADLINE name: [lo, hi]}}}.
    Retrieval metrics and citations_on_target average over answerable questions,
    answer_ok over all; a metric with nothing to average is null.
    """
    if chunking is not None:
        golden = cut_labels(golden, chunking.texts)
    seen, actual, run = _one_run(golden, records, label, chunking, inputs)
    rows = []
    for q in golden.questions:
        where, record = seen[q.id]
        gold, refound = resolve_gold(q, chunking, golden.where(q))
        rows.append(score_question(q, record, where, gold, refound, gold_docs(gold, chunking), chunking))
    if all(not row["ranked"] for row in rows):
        raise StageError("every hits list is empty: retrieval returned nothing (an empty index?)", inputs)
    if chunking is None:
        _check_some_gold_doc(golden, seen)
    return {
        "schema": RESULT_SCHEMA,
        "label": label,
        "corpus": corpus,
        "expected": RUNS.get(label),
        "actual": actual,
        "run": run,
        "golden": {"source": golden.source, "sha256": golden.sha256},
        "gold_checked": chunking is not None,
        "settings": {"cutoff": CUTOFF, "resamples": resamples, "seed": seed, "level": LEVEL},
        "counts": {
            "questions": len(rows),
            "answerable": sum(r["answerable"] for r in rows),
            "unanswerable": sum(not r["answerable"] for r in rows),
            "records": len(seen),
            "refound": sum(r["refound"] for r in rows),
            "empty_hits": sum(not r["ranked"] for r in rows),
            "refused": sum(r["refused"] for r in rows),
        },
        "questions": rows,
        "aggregates": aggregate(rows),
        "intervals": intervals(rows, resamples, seed),
    }


def _one_run(
    golden: Golden, records: Iterable[tuple[Line, dict[str, Any]]], label: str, chunking: Chunking | None, inputs: str
) -> tuple[dict[str, tuple[Line, dict[str, Any]]], dict[str, Any], dict[str, Any]]:
    """The records by question id, the configuration they all show, and the rest of what
    ran; every guard of `score_run` on the records themselves is here."""
    questions = golden.by_id()
    seen: dict[str, tuple[Line, dict[str, Any]]] = {}
    actual: dict[str, Any] | None = None
    first: Line | None = None
    run: dict[str, Any] = {}
    for where, record in records:
        rid = ragline.records.require_field(record, "id", str, where)
        if rid not in questions:
            raise StageError(f"record id '{rid}' is not a question in {golden.source}", str(where))
        if rid in seen:
            raise StageError(f"a second record for question '{rid}' (the first is at {seen[rid][0]})", str(where))
        text = ragline.records.require_field(record, "question", str, where)
        if " ".join(text.split()) != " ".join(questions[rid].question.split()):
            raise StageError(f"record '{rid}' asks {show(text)}, not the golden question: stale answers?", str(where))
        config = run_config(record, where)
        if actual is None:
            check_config(label, config, str(where))
            actual, first = config, where
            run = _run_info(record, where)
            if chunking is not None and chunking.windows and chunking.windows != {config["window"]}:
                windows = ", ".join(show(w) for w in sorted(chunking.windows, key=str))
                raise StageError(
                    f"{chunking.source} was cut with window {windows}, the run's index with {show(config['window'])}", str(where)
                )
        elif config != actual:
            keys = ", ".join(f"{k} {show(config[k])}, not {show(actual[k])}" for k in config_differences(actual, config))
            raise StageError(f"this record's run differs from {first}'s ({keys}): one run per result", str(where))
        seen[rid] = (where, record)
    if not seen:
        raise StageError("no answer records: the run measured nothing", inputs)
    missing = [q for q in golden.questions if q.id not in seen]
    if missing:
        names = ", ".join(q.id for q in missing[:5]) + (", ..." if len(missing) > 5 else "")
        raise StageError(
            f"{len(missing)} of {len(questions)} questions have no answer record ({names}): the run is incomplete",
            golden.where(missing[0]),
        )
    assert actual is not None
    return seen, actual, run


def _check_some_gold_doc(golden: Golden, seen: dict[str, tuple[Line, dict[str, Any]]]) -> None:
    """StageError when no hit of any record comes from a document that holds a gold
    chunk: the hits are another handbook's, and every metric would read 0."""
    gold = {doc for q in golden.questions for doc in gold_docs(q.gold, None)}
    hit_docs = {hit.get("doc") for _, record in seen.values() for hit in record.get("hits") or [] if isinstance(hit, dict)}
    if gold and not gold & hit_docs:
        index = next(iter(seen.values()))[1].get("retrieval", {}).get("index")
        raise StageError(
            f"no hit comes from a document of {golden.source}'s gold chunks: the run searched another handbook's index ({show(index)})",
            golden.source,
        )


def _run_info(record: dict[str, Any], where: Line) -> dict[str, Any]:
    retrieval, generator = record["retrieval"], record["generator"]
    k = retrieval.get("k")
    if not isinstance(k, int) or isinstance(k, bool) or k < CUTOFF:
        raise StageError(f"the run retrieved k={show(k)} hits per question; recall@5 and nDCG@5 need k >= {CUTOFF}", str(where))
    return {
        "k": k,
        "rrf_k": retrieval.get("rrf_k"),
        "candidates": retrieval.get("candidates"),
        "index": retrieval.get("index"),
        "model_sha256": retrieval.get("model_sha256"),
        "generator": generator.get("name"),
    }


def cut_labels(golden: Golden, ids: Collection[str]) -> Golden:
    """`golden` with each gold id that is not in `ids` and is longer than rag_chunk.ID_MAX read
    as rag-chunk cuts it now (`rag_chunk.cut_ids`, the first of them in `ids`): labels written
    before ids were cut stand without an edit, and are not re-found or reported as typos."""
    import dataclasses

    import rag_chunk

    def now(cid: str) -> str:
        return cid if cid in ids else next((c for c in rag_chunk.cut_ids(cid) if c in ids), cid)

    questions = tuple(dataclasses.replace(q, gold=tuple(now(g) for g in q.gold)) for q in golden.questions)
    return dataclasses.replace(golden, questions=questions)


def score_question(
    q: Question,
    record: dict[str, Any],
    where: Line,
    gold: Sequence[str],
    refound: bool,
    docs: Collection[str],
    chunking: Chunking | None = None,
) -> dict[str, Any]:
    """One question's row of the result (see `score_run`)."""
    hits = ragline.records.require_field(record, "hits", list, where)
    ranked = []
    for rank, hit in enumerate(hits, 1):
        if not isinstance(hit, dict) or not isinstance(hit.get("chunk_id"), str):
            raise StageError(f"hit {rank} has no string 'chunk_id'", str(where))
        if hit.get("rank", rank) != rank:
            raise StageError(f"hits are not in rank order (hit {rank} has rank {show(hit.get('rank'))})", str(where))
        if chunking is not None and hit["chunk_id"] not in chunking.texts:
            raise StageError(f"hit '{hit['chunk_id']}' is not in {chunking.source}: not the chunks the index was built from", str(where))
        ranked.append(hit["chunk_id"])
    confidence = _number(record, "confidence", where)
    if not 0.0 <= confidence <= 1.0:
        raise StageError(f"confidence {confidence} is outside [0, 1]", str(where))
    answer = ragline.records.require_field(record, "answer", str, where)
    refused = ragline.records.require_field(record, "refused", bool, where)
    citations = ragline.records.require_field(record, "citations", list, where)
    if not all(isinstance(c, dict) for c in citations):
        raise StageError("citations must be objects", str(where))
    search_ms, answer_ms = _number(record, "ms", where), _number(record, "answer_ms", where)
    top = ranked[:CUTOFF]
    row: dict[str, Any] = {"id": q.id, "kind": q.kind, "answerable": q.answerable, "gold": list(gold), "refound": refound, "ranked": top}
    for name, value in (
        ("recall@1", irmetrics.recall_at_k(top, gold, 1)),
        ("recall@3", irmetrics.recall_at_k(top, gold, 3)),
        ("recall@5", irmetrics.recall_at_k(top, gold, 5)),
        ("rr", irmetrics.reciprocal_rank(top, gold, CUTOFF)),
        ("ndcg@5", irmetrics.ndcg_at_k(top, gold, CUTOFF)),
    ):
        row[name] = rounded(value) if q.answerable else None
    on_target = irmetrics.citations_on_target([c.get("doc") for c in citations], docs) if q.answerable else None
    words = None if refused else len(ragline.answer.citations.CITATION.sub("", answer).split())
    row |= {
        "answer_ok": irmetrics.answer_ok(answer, refused, q.answer_contains, q.answerable, words),
        "citations": len(citations),
        "citations_on_target": rounded(on_target),
        "answer_words": words,
        "refused": refused,
        "reason": record.get("reason"),
        "confidence": confidence,
        "signals": _abstain_signals(record, hits),
        "ms": rounded(search_ms + answer_ms),
        "search_ms": search_ms,
        "answer_ms": answer_ms,
    }
    return row


def _abstain_signals(record: dict[str, Any], hits: list[dict[str, Any]]) -> dict[str, float]:
    """Candidate abstain signals seen on one record, for `signal_auc`: the confidence's
    parts, the top hit's final score, and its reciprocal-rank-fusion score when fused."""
    out: dict[str, float] = {}
    parts = record.get("confidence_parts")
    if isinstance(parts, dict):
        out |= {f"part:{k}": float(v) for k, v in parts.items() if isinstance(v, int | float)}
    if hits:
        top = hits[0]
        if isinstance(top.get("score"), int | float):
            out["top score"] = float(top["score"])
        rrf = (top.get("signals") or {}).get("rrf")
        if isinstance(rrf, int | float):
            out["top RRF score"] = float(rrf)
    return out


def _number(record: dict[str, Any], name: str, where: Line) -> float:
    value = float(ragline.records.require_field(record, name, float, where))
    if not math.isfinite(value):
        raise StageError(f"field '{name}' is not finite", str(where))
    return value


def aggregate(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Means of every METRICS name overall and per answerable kind, and latency percentiles."""
    overall: dict[str, Any] = {m: rounded(irmetrics.mean_or_none(metric_values(rows, m).values())) for m in METRICS}
    for name, key in (("ms", "ms"), ("search_ms", "search_ms"), ("answer_ms", "answer_ms")):
        values = np.array([r[key] for r in rows], dtype=np.float64)
        overall[f"{name}_p50"] = rounded(np.percentile(values, 50))
        if name == "ms":
            overall["ms_p95"] = rounded(np.percentile(values, 95))
    words = np.array([r["answer_words"] for r in rows if r.get("answer_words") is not None], dtype=np.float64)
    for q in (50, 90):  # the length of the answers given (refusals aside), markers not counted
        overall[f"words_p{q}"] = rounded(np.percentile(words, q)) if len(words) else None
    by_kind = {}
    for kind in ANSWERABLE_KINDS:
        n = sum(r["kind"] == kind for r in rows)
        if n:
            by_kind[kind] = {"n": n} | {
                m: rounded(irmetrics.mean_or_none(metric_values(rows, m, kind).values()))
                for m in METRICS
                if m != "refused_when_unanswerable"
            }
    return {"overall": overall, "by_kind": by_kind}


def intervals(rows: list[dict[str, Any]], resamples: int = RESAMPLES, seed: int = SEED) -> dict[str, Any]:
    """95% percentile-bootstrap intervals over questions (see `irmetrics.bootstrap_interval`)."""

    def interval(values: dict[str, float]) -> list[float | None] | None:
        found = irmetrics.bootstrap_interval(list(values.values()), resamples=resamples, seed=seed, level=LEVEL)
        return None if found is None else [rounded(found[0]), rounded(found[1])]

    overall = {m: interval(metric_values(rows, m)) for m in INTERVAL_METRICS}
    kinds = sorted({r["kind"] for r in rows if r["answerable"]}, key=KINDS.index)
    by_kind = {kind: {m: interval(metric_values(rows, m, kind)) for m in HEADLINE} for kind in kinds}
    return {"overall": overall, "by_kind": by_kind}


def load_result(path: str, schemas: Collection[str] = (RESULT_SCHEMA,)) -> dict[str, Any]:
    """A JSON file written by `score` (or `sweep`, where `schemas` allows it); anything else
    is a StageError."""
    try:
        data = Path(path).read_bytes()
    except OSError as err:
        raise StageError(err.strerror or str(err), path) from None
    try:
        result = orjson.loads(data)
    except orjson.JSONDecodeError as err:
        raise StageError(f"not valid JSON: {err.msg} (line {err.lineno})", path) from None
    got = result.get("schema") if isinstance(result, dict) else None
    if got not in schemas:
        want = " or ".join(show(s) for s in schemas)
        raise StageError(f"not a rag-eval {'score result' if len(schemas) == 1 else 'file'} (schema {show(got)}, expected {want})", path)
    shape = RESULT_SHAPE if got == RESULT_SCHEMA else SWEEP_SHAPE
    for dotted, kind in shape.items():
        value: Any = result
        for key in dotted.split("."):
            value = value.get(key) if isinstance(value, dict) else None
        if not isinstance(value, kind):
            raise StageError(f"a {got} file without a valid '{dotted}': regenerate it", path)
    return result


# The fields `table` and `sweep` read from each kind of file, checked by `load_result`.
RESULT_SHAPE: dict[str, type | tuple[type, ...]] = {
    "label": str,
    "actual": dict,
    "golden.sha256": str,
    "golden.source": str,
    "counts.questions": int,
    "counts.answerable": int,
    "counts.unanswerable": int,
    "questions": list,
    "aggregates.overall": dict,
    "aggregates.by_kind": dict,
    "intervals.overall": dict,
    "intervals.by_kind": dict,
    "settings.resamples": int,
}
SWEEP_SHAPE: dict[str, type | tuple[type, ...]] = {
    "label": str,
    "rule.budget": (int, float),
    "chosen.threshold": (int, float),
    "corpora": list,
    "curve": list,
}


def dump_json(value: dict[str, Any]) -> bytes:
    """A result file's bytes: indented JSON (diffable in git), key order kept."""
    return orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE | orjson.OPT_SERIALIZE_NUMPY)


# --------------------------------------------------------------------------- the commands


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@ragline.records.version_option(STAGE)
def main() -> None:
    """Evaluate ragline against golden question sets, corpus by corpus.

    \b
      rag-eval plan                      # the runs `just eval` makes, with their flags
      rag-eval questions golden.yaml | rag-search --index IDX | rag-answer --index IDX \\
        | rag-eval score --golden golden.yaml --corpus northwind --label default --out results/northwind/default.json \\
          --failures results/northwind/failures.md   # also the wrong answers with the gold block ranked first
      rag-eval sweep results/*/default.json --out results/abstain-sweep.json
      rag-eval table results/*/*.json results/abstain-sweep.json --into docs/evaluation.md
    """


@main.command("plan")
@click.argument("names", nargs=-1, metavar="[LABEL|CORPUS]...")
def plan_command(names: tuple[str, ...]) -> None:
    """The runs to make: every RUNS label on every corpus whose folder is here.

    One line a run, tab-separated: corpus, label, markdown folder, golden file, then
    the flags of rag-chunk, rag-embed, rag-index, rag-search and rag-answer (shell
    words; a field may be empty). LABELs and CORPUS names narrow the plan to those. An
    absent corpus folder is skipped with a notice on stderr.
    """
    try:
        runs, absent = evalruns.plan(names)
    except ValueError as err:
        raise click.UsageError(str(err)) from None
    with ragline.records.stage(STAGE):
        for corpus in absent:
            ragline.records.note(f"{STAGE}: {corpus.docs} is absent: no runs on {corpus.name}")
        if not runs:
            raise StageError("nothing to run: every corpus named is absent")
        sys.stdout.write("".join(run.tsv() + "\n" for run in runs))


@main.command("questions")
@click.argument("golden", type=click.Path(dir_okay=False))
@ragline.records.stage_main(STAGE)
def questions_command(golden: str) -> None:
    """Query records for GOLDEN's questions, to pipe into rag-search.

    One {"id", "question", "kind"} line per question, in the file's order.
    """
    ragline.records.write_records(query_records(load_golden(golden)), sys.stdout.buffer)


@main.command("score")
@click.argument("answers", nargs=-1, type=click.Path(dir_okay=False, allow_dash=True))
@click.option("--golden", required=True, type=click.Path(dir_okay=False), help="The golden question file.")
@click.option(
    "--label",
    required=True,
    metavar="LABEL",
    callback=lambda ctx, param, value: _check_label(value),
    help="The run's name: a RUNS label (default, bm25, ...), whose configuration is checked, or any name of yours.",
)
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="The result file to write (atomically).")
@click.option(
    "--corpus-chunks",
    type=click.Path(dir_okay=False),
    help="The rag-chunk output the index was built from [default: the chunks of the index the records name].",
)
@click.option("--corpus", "corpus_name", metavar="NAME", help="The corpus's name, which groups results in the tables (northwind, ...).")
@click.option(
    "--failures",
    "failures_path",
    metavar="FILE",
    type=click.Path(dir_okay=False),
    help="Also write the failure report here (markdown, atomically): the answerable questions whose gold block "
    "ranked first and whose answer is wrong, with the answer's and the block's words.",
)
@ragline.records.stage_main(STAGE)
def score_command(
    answers: tuple[str, ...],
    golden: str,
    label: str,
    out: str,
    corpus_chunks: str | None,
    corpus_name: str | None,
    failures_path: str | None,
) -> None:
    """Score one run's answer records into a result file.

    ANSWERS are answer records (rag-search | rag-answer), from files or stdin. The
    configuration the records show (retrieval and generator fields) is stored in the
    result; a RUNS label must match it. Gold chunk ids are checked against the chunks the
    run's index was built from: --corpus-chunks, else the index named in the records.
    A labelled id those chunks lack is found again through its evidence and scored; under
    the default window each such id is named on stderr with the id found (a label to fix).
    A run that is incomplete, empty, mixes configurations or searched another handbook
    is an error, not a row of zeros. --failures also writes, from the same records, the
    questions retrieval got right and the answer got wrong (gold block ranked first,
    answer check failed), each with its answer and the gold block's text, under counts
    by kind (`just eval` keeps it for the default run: results/CORPUS/failures.md).
    """
    gold = load_golden(golden)
    records: Iterable[tuple[ragline.records.Line, dict[str, Any]]] = ragline.records.read_records(
        answers, usage="no input: pipe answer records (rag-search | rag-answer) into rag-eval score"
    )
    if corpus_chunks:
        chunking: Chunking | None = read_chunking(ragline.records.read_records([corpus_chunks]), corpus_chunks)
    else:
        records, chunking = index_chunking(records)
    if chunking is not None:
        gold = cut_labels(gold, chunking.texts)
    kept: list[tuple[Line, dict[str, Any]]] = []
    records = _keeping(records, kept) if failures_path else records
    result = score_run(gold, records, label, chunking, inputs=", ".join(answers) or ragline.records.STDIN, corpus=corpus_name)
    if failures_path:
        texts = chunking.texts if chunking is not None else None
        failures = evalfailures.report(gold, result, {r["id"]: r for _, r in kept}, texts)
    with ragline.records.atomic_file(out) as handle:
        handle.write(dump_json(result))
    if failures_path:
        with ragline.records.atomic_file(failures_path) as handle:
            handle.write(failures.encode("utf-8"))
    if label not in RUNS and (same := matching_labels(result["actual"])):
        ragline.records.note(f"{STAGE}: '{label}' is a label of your own; this run's configuration is the built-in '{same[0]}' run's")
    if chunking is not None and _labels_chunking(chunking):
        resolved = {row["id"]: row["gold"] for row in result["questions"] if row["refound"]}
        for relabel in relabelled(gold, chunking, resolved):
            ragline.records.note(f"{STAGE}: {relabel.message(gold, chunking)}")
    if chunking is None:
        index = result["run"].get("index")
        ragline.records.note(
            f"{STAGE}: gold ids taken as labelled (no --corpus-chunks, and the records' index {show(index)} cannot be read here)"
        )
    if sys.stderr.isatty():
        o = result["aggregates"]["overall"]
        ragline.records.note(f"{STAGE}: {label}: MRR {o['mrr']:.3f}, answer ok {o['answer_ok']:.3f} -> {out}")


def _keeping(
    records: Iterable[tuple[Line, dict[str, Any]]], into: list[tuple[Line, dict[str, Any]]]
) -> Iterable[tuple[Line, dict[str, Any]]]:
    """The records as they pass, each also appended to `into` (the failure report reads them
    after scoring; read lazily, the records keep their errors in line order)."""
    for item in records:
        into.append(item)
        yield item


def _labels_chunking(chunking: Chunking) -> bool:
    """Was `chunking` cut as golden labels are (rag-chunk's default window, or no window
    recorded)? Under another window a gold id that is gone has moved, not been mistyped."""
    import rag_chunk

    return chunking.windows <= {rag_chunk.DEFAULT_WORDS}


def _check_label(label: str) -> str:
    if not label.strip() or any(not ch.isprintable() or ch in "|`" for ch in label):
        raise click.BadParameter(f"{show(label)}: a label is a non-empty name on one line, without | or ` (it names a table row)")
    return label


def index_chunking(
    records: Iterable[tuple[Line, dict[str, Any]]],
) -> tuple[Iterable[tuple[Line, dict[str, Any]]], Chunking | None]:
    """The records again, and the chunking of the index the first record's `retrieval.index`
    names (rag_index.load), or None when it names none or that index cannot be loaded."""
    stream = iter(records)
    first = next(stream, None)
    if first is None:
        return (), None
    rest = itertools.chain([first], stream)
    retrieval = first[1].get("retrieval") if isinstance(first[1], dict) else None
    path = retrieval.get("index") if isinstance(retrieval, dict) else None
    if not isinstance(path, str) or not Path(path).is_dir():
        return rest, None
    import rag_index

    try:
        index = rag_index.load(path)
    except StageError:
        return rest, None
    digest = retrieval.get("corpus_digest") if isinstance(retrieval, dict) else None
    if isinstance(digest, str) and digest != index.manifest.get("corpus_digest"):
        raise StageError(
            f"the index {path} holds other chunks than when these records were searched (rebuilt since?): "
            "score with --corpus-chunks, the chunks the run's index was built from",
            str(first[0]),
        )
    window = index.manifest.get("chunking", {}).get("window")
    chunks = ({"window": window} | c if window is not None else c for c in index.chunks)
    return rest, read_chunking(((ragline.records.Line(path, n), c) for n, c in enumerate(chunks, 1)), path)


@main.command("sweep")
@click.argument("result_paths", metavar="RESULT...", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option(
    "--golden",
    "goldens",
    multiple=True,
    type=click.Path(dir_okay=False),
    help="Each RESULT's golden file, in order [default: the one it records].",
)
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="The sweep file to write (atomically).")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), help="Also draw the curves as a PNG (needs matplotlib).")
@ragline.records.stage_main(STAGE)
def sweep_command(result_paths: tuple[str, ...], goldens: tuple[str, ...], out: str, plot_path: str | None) -> None:
    """Choose one abstain threshold from one run's results on one or more corpora.

    Walks t from 0 to 1 in steps of 0.01 (refuse when confidence < t) and keeps, within
    one wrongly refused answerable question in eight on every corpus, the t that refuses
    the most unanswerable ones; writes the curves, the choice, each corpus's own choice
    and the leave-one-corpus-out check.
    """
    if goldens and len(goldens) != len(result_paths):
        raise click.UsageError(f"{len(goldens)} --golden files for {len(result_paths)} results: give one each, or none")
    results = [load_result(path) for path in result_paths]
    curve = sweep([(load_golden(g), r) for g, r in zip(goldens or [r["golden"]["source"] for r in results], results, strict=True)])
    with ragline.records.atomic_file(out) as handle:
        handle.write(dump_json(curve))
    if plot_path:
        try:
            with ragline.records.atomic_file(plot_path) as handle:
                if not plot_sweep(curve, handle):
                    raise ImportError
        except ImportError:
            ragline.records.note(f"{STAGE}: matplotlib is not installed (pip install 'ragline[plot]'): no plot written")


@main.command("table")
@click.argument("results", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option(
    "--into",
    "--readme",
    "into",
    metavar="FILE",
    type=click.Path(dir_okay=False),
    help=f"Write the tables into this markdown file, between {BEGIN} and {END} (--readme: the old name).",
)
@click.option("--check", is_flag=True, help="With --into: exit 1 if its tables differ from what RESULTS give.")
@ragline.records.stage_main(STAGE)
def table_command(results: tuple[str, ...], into: str | None, check: bool) -> None:
    """Markdown tables from result and sweep files.

    To stdout, or with --into between the file's tables markers. Results group by
    corpus; with more than one, a table of the mean across corpora leads. A row whose
    run is not what RUNS says its label is, is refused.
    """
    if check and not into:
        raise click.UsageError("--check needs --into")
    files = [(path, load_result(path, (RESULT_SCHEMA, SWEEP_SCHEMA))) for path in results]
    scored = [(path, r) for path, r in files if r["schema"] == RESULT_SCHEMA]
    tables = render_tables(compare(scored, [(path, r) for path, r in files if r["schema"] == SWEEP_SCHEMA]))
    if into is None:
        sys.stdout.write(tables)
        return
    try:
        current = Path(into).read_text(encoding="utf-8")
    except OSError as err:
        raise StageError(err.strerror or str(err), into) from None
    updated = replace_tables(current, tables, into)
    if check:
        if updated != current:
            raise StageError(f"the tables are out of date with the {len(results)} files given: run 'just tables'", into)
    elif updated != current:
        with ragline.records.atomic_file(into, "w") as handle:
            handle.write(updated)


@main.command("compare")
@click.argument("first", metavar="A", type=click.Path(dir_okay=False))
@click.argument("second", metavar="B", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="The numbers as one JSON object instead of markdown.")
@ragline.records.stage_main(STAGE)
def compare_command(first: str, second: str, as_json: bool) -> None:
    """Two runs' result files question by question: each metric with the paired test, and
    which questions moved, which way.

    \b
      rag-eval compare results/northwind/default.json build/k10.json
    """
    if os.path.realpath(first) == os.path.realpath(second):
        raise click.UsageError("A and B are one file: compare two runs")
    c = paired((first, load_result(first)), (second, load_result(second)))
    if as_json:
        sys.stdout.buffer.write(dump_json(c.as_json()))
    else:
        sys.stdout.write("\n".join(paired_table(c)) + "\n")


if __name__ == "__main__":
    main()
