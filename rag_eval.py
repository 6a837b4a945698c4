"""rag-eval: answers -> scores, tables and an abstain sweep, against a golden question set.

    rag-eval questions golden.yaml | rag-search --index build/idx | rag-answer > build/default.jsonl
    rag-eval score --golden golden.yaml --label default --corpus-chunks build/chunks.jsonl \\
        --out results/default.json build/default.jsonl
    rag-eval sweep --golden golden.yaml results/default.json --out results/abstain-sweep.json
    rag-eval table results/*.json --readme README.md            # --check in CI

`questions` reads a golden file and writes query records `{"id", "question", "kind"}`.
`score` reads answer records (one per question, from `rag-search | rag-answer`: `id`,
`question`, `hits`, `confidence`, `retrieval`, `ms`, `answer`, `citations`, `refused`,
`reason`, `generator`, `answer_ms`) and writes one result file, `"schema":
"eval-result/1"` (its layout is in `score_run`). `sweep` reads a result file and writes
the abstain curve, `"schema": "abstain-sweep/1"`. `table` reads result files and writes
markdown, to stdout or between `<!-- tables:begin -->` and `<!-- tables:end -->` in a
README.

The golden file (rag_eval alone reads it; safe YAML loading only):

    version: 1
    questions:
      - id: se-02
        kind: semantic            # identifier | semantic | procedural | factual | unanswerable
        question: When does the cash actually show up in our company's bank?
        gold: [07-payouts#how-payouts-work]       # chunk ids under the default chunking
        evidence: ["Payouts arrive T+1 after settlement."]   # verbatim corpus text
        answer_contains: [business day]           # phrases a right answer contains

An unanswerable question has no gold, evidence or answer_contains. Each label in
`RUNS` names the configuration its records must show, so a result can never be
filed under the wrong name (the hash embedder's run reported as MiniLM's).

The formulas (recall@k, MRR, nDCG, the answer checks, the bootstrap interval, the
paired randomisation test, ROC AUC, the abstain threshold rule) live in `irmetrics`,
each specified in its docstring; this module applies them to golden questions and runs.
"""

from __future__ import annotations

import hashlib
import math
import sys
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import orjson

import ragline
from ragline import Line, StageError, place

np = ragline.lazy_import("numpy")  # imported on first use: `rag-eval --help` stays fast
yaml = ragline.lazy_import("yaml")
irmetrics = ragline.lazy_import("irmetrics")  # the formulas and statistics (it imports numpy)

STAGE = "rag-eval"
RESULT_SCHEMA = "eval-result/1"
SWEEP_SCHEMA = "abstain-sweep/1"

KINDS = ("identifier", "semantic", "procedural", "factual", "unanswerable")
ANSWERABLE_KINDS = KINDS[:4]
QUESTION_FIELDS = ("id", "kind", "question", "gold", "evidence", "answer_contains")
LABEL_FIELDS = ("gold", "evidence", "answer_contains")

CUTOFF = 5  # every retrieval metric looks at the top 5 hits at most; runs must retrieve k >= 5
RESAMPLES = 10_000  # bootstrap resamples and randomisation-test permutations
SEED = 20_240_611
LEVEL = 0.95  # interval coverage
ALPHA = 0.05  # significance level of the paired test
STEP = 0.01  # abstain sweep: thresholds 0, 0.01, ..., 1
REFUSAL_BUDGET = 0.125  # at most one answerable question in eight wrongly refused

BEGIN = "<!-- tables:begin -->"
END = "<!-- tables:end -->"
MARK = "†"  # differs from the default run at p < ALPHA

# --------------------------------------------------------------------------- runs

FEATURES = ragline.ANSWER_FEATURES  # the extractive generator's switches, one ablation each
MINILM = "all-MiniLM-L6-v2"
CONFIG_KEYS = ("model", "dense", "sparse", "rerank", "embed_headings", "embed_long", "window", "features")

# The shipped configuration. Every other run is this with one thing changed, so moving
# the default (once measurement decides it) is an edit here and nowhere else.
DEFAULT_RUN: dict[str, Any] = {
    "model": MINILM,
    "dense": True,
    "sparse": False,
    "rerank": "lexical",
    "embed_headings": True,
    "embed_long": "windows",
    "window": 180,
    "features": list(FEATURES),
}


def _variant(**changes: Any) -> dict[str, Any]:
    return DEFAULT_RUN | changes


def _without(feature: str) -> list[str]:
    return [f for f in FEATURES if f != feature]


# label -> the configuration its answer records must show (retrieval + generator.features).
RUNS: dict[str, dict[str, Any]] = {
    "default": DEFAULT_RUN,
    "no-rerank": _variant(rerank="none"),
    "no-headings": _variant(embed_headings=False),
    "truncate": _variant(embed_long="truncate"),
    "hybrid": _variant(sparse=True),
    "bm25": _variant(dense=False, sparse=True),  # BM25 alone over the default index
    "hash": _variant(model="hash"),
    "hash-hybrid": _variant(model="hash", sparse=True),
    "window-120": _variant(window=120),
    "window-300": _variant(window=300),
    **{f"answer-no-{f}": _variant(features=_without(f)) for f in FEATURES},
}

# aggregate name -> (per-question row field, population it is averaged over)
METRICS: dict[str, tuple[str, str]] = {
    "recall@1": ("recall@1", "answerable"),
    "recall@3": ("recall@3", "answerable"),
    "recall@5": ("recall@5", "answerable"),
    "mrr": ("rr", "answerable"),
    "ndcg@5": ("ndcg@5", "answerable"),
    "answer_ok": ("answer_ok", "all"),
    "citations_on_target": ("citations_on_target", "answerable"),
    "refused_when_unanswerable": ("refused", "unanswerable"),
    "refused_when_answerable": ("refused", "answerable"),
}
HEADLINE = ("recall@1", "recall@3", "mrr", "ndcg@5", "answer_ok", "citations_on_target")
INTERVAL_METRICS = (*HEADLINE, "refused_when_unanswerable", "refused_when_answerable")


# --------------------------------------------------------------------------- the golden file


@dataclass(frozen=True)
class Question:
    """One golden question; `line` is where it starts in the golden file."""

    id: str
    kind: str
    question: str
    gold: tuple[str, ...]
    evidence: tuple[str, ...]
    answer_contains: tuple[str, ...]
    line: int

    @property
    def answerable(self) -> bool:
        return self.kind != "unanswerable"


@dataclass(frozen=True)
class Golden:
    """A parsed golden file: its name, the sha256 of its bytes, its questions in order."""

    source: str
    sha256: str
    questions: tuple[Question, ...]

    def by_id(self) -> dict[str, Question]:
        return {q.id: q for q in self.questions}

    def where(self, question: Question) -> str:
        return place(self.source, question.line)


def load_golden(path: str) -> Golden:
    """Read and validate a golden file (see `parse_golden`)."""
    try:
        data = Path(path).read_bytes()
    except OSError as err:
        raise StageError(err.strerror or str(err), path) from None
    return parse_golden(data, path)


def parse_golden(data: bytes | str, source: str) -> Golden:
    """Parse a golden file strictly; every fault is a StageError naming `source:line`.

    Loading is exactly `yaml.safe_load` (SafeLoader: compose, then construct) but keeps
    the node tree, whose marks give each question's and each field's line. A python tag
    (`!!python/object...`) has no safe constructor and is refused with its line.
    Checked: `version: 1`; a non-empty `questions` list; known fields only, none twice;
    `id`, `kind`, `question` present, non-empty strings; a known kind; ids unique;
    question texts unique (whitespace and case folded); an answerable question has
    non-empty `gold`, `evidence` and `answer_contains` lists of non-empty strings; an
    unanswerable one has none of them.
    """
    raw = data.encode() if isinstance(data, str) else data
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise StageError(f"not UTF-8 (byte 0x{raw[err.start]:02x})", place(source, raw.count(b"\n", 0, err.start) + 1)) from None
    if "\x00" in text:
        raise StageError("a NUL byte: not a YAML text file", place(source, text.count("\n", 0, text.index("\x00")) + 1))
    loader = None
    try:
        loader = yaml.SafeLoader(text)
        root = loader.get_single_node()
        document = loader.construct_document(root) if root is not None else None
    except yaml.YAMLError as err:
        raise _yaml_error(err, source) from None
    except Exception as err:  # the safe constructors raise more than YAMLError: !!timestamp 2020-99-99, deep nesting
        raise StageError(f"not valid YAML: {ragline.one_line(str(err) or type(err).__name__, 200)}", source) from None
    finally:
        if loader is not None:
            loader.dispose()
    if root is None:
        raise StageError("empty golden file", source)
    if not isinstance(root, yaml.MappingNode) or not isinstance(document, dict):
        raise StageError("expected a mapping with 'version' and 'questions'", place(source, _line(root)))
    top = {key.value: value for key, value in root.value if isinstance(key, yaml.ScalarNode)}
    for key in document:
        if key not in ("version", "questions"):
            raise StageError(f"unknown top-level field '{key}' (fields: version, questions)", place(source, _line(top.get(key, root))))
    if document.get("version") != 1:
        got = "none" if "version" not in document else _show(document["version"])
        raise StageError(f"version must be 1, got {got}", place(source, _line(top.get("version", root))))
    node, items = top.get("questions"), document.get("questions")
    if not isinstance(node, yaml.SequenceNode) or not isinstance(items, list) or not items:
        raise StageError("'questions' must be a non-empty list", place(source, _line(node or root)))
    questions: list[Question] = []
    first_id: dict[str, Question] = {}
    first_text: dict[str, Question] = {}
    for qnode, item in zip(node.value, items, strict=True):
        q = _question(qnode, item, source)
        if q.id in first_id:
            raise StageError(f"duplicate question id '{q.id}' (first at line {first_id[q.id].line})", place(source, q.line))
        text = " ".join(q.question.casefold().split())
        if text in first_text:
            other = first_text[text]
            raise StageError(f"question '{q.id}' repeats the question of '{other.id}' (line {other.line})", place(source, q.line))
        first_id[q.id] = first_text[text] = q
        questions.append(q)
    return Golden(source, hashlib.sha256(raw).hexdigest(), tuple(questions))


def _question(node: yaml.Node, item: Any, source: str) -> Question:
    qline = _line(node)
    if not isinstance(node, yaml.MappingNode) or not isinstance(item, dict):
        raise StageError("a question must be a mapping of id, kind, question, ...", place(source, qline))
    lines: dict[str, int] = {}
    for key, value in node.value:
        name = key.value if isinstance(key, yaml.ScalarNode) else str(key)
        if name in lines:
            raise StageError(f"field '{name}' given twice in one question", place(source, _line(key)))
        lines[name] = _line(value)
    label = f"question '{item['id']}'" if isinstance(item.get("id"), str) else "question"

    def fail(message: str, name: str | None = None) -> StageError:
        return StageError(f"{label} {message}", place(source, lines.get(name, qline) if name else qline))

    for name in item:
        if name not in QUESTION_FIELDS:
            raise fail(f"has unknown field '{name}' (fields: {', '.join(QUESTION_FIELDS)})", name)
    for name in ("id", "kind", "question"):
        if name not in item:
            raise fail(f"has no '{name}'")
        if not isinstance(item[name], str) or not item[name].strip():
            raise fail(f"field '{name}' must be a non-empty string, got {_show(item[name])}", name)
    kind = item["kind"]
    if kind not in KINDS:
        raise fail(f"has unknown kind '{kind}' (one of {', '.join(KINDS)})", "kind")
    labels: dict[str, tuple[str, ...]] = {}
    if kind == "unanswerable":
        for name in LABEL_FIELDS:
            if name in item:
                raise fail(f"is unanswerable but has {name} (unanswerable questions carry no gold, evidence or answer_contains)", name)
    else:
        for name in LABEL_FIELDS:
            if name not in item:
                raise fail(f"has no '{name}' (answerable questions need gold, evidence and answer_contains)")
            value = item[name]
            if not isinstance(value, list) or not value:
                raise fail(f"field '{name}' must be a non-empty list, got {_show(value)}", name)
            for entry in value:
                if not isinstance(entry, str) or not entry.strip():
                    raise fail(f"field '{name}' holds {_show(entry)}: entries must be non-empty strings (quote numbers)", name)
            if len(set(value)) != len(value):
                raise fail(f"field '{name}' lists an entry twice", name)
            labels[name] = tuple(value)
    return Question(
        id=item["id"],
        kind=kind,
        question=item["question"],
        gold=labels.get("gold", ()),
        evidence=labels.get("evidence", ()),
        answer_contains=labels.get("answer_contains", ()),
        line=qline,
    )


def _line(node: yaml.Node | None) -> int | None:
    return node.start_mark.line + 1 if node is not None and node.start_mark is not None else None


def _yaml_error(err: yaml.YAMLError, source: str) -> StageError:
    mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
    where = place(source, mark.line + 1 if mark is not None else None)
    problem = (getattr(err, "problem", None) or str(err)).replace("tag:yaml.org,2002:", "!!")
    if isinstance(err, yaml.constructor.ConstructorError) and "constructor for the tag" in problem:
        tag = problem.split("the tag ", 1)[1]
        return StageError(f"YAML tag {tag} is not allowed (golden files are read with safe loading)", where)
    context = getattr(err, "context", None)
    return StageError(f"not valid YAML: {problem}" + (f" ({context})" if context else ""), where)


def _show(value: Any) -> str:
    """A value as it would appear in JSON: "hash", true, 180, ["idf"]."""
    try:
        return orjson.dumps(value).decode()
    except TypeError:
        return repr(value)


def query_records(golden: Golden) -> Iterator[dict[str, Any]]:
    """One query record `{"id", "question", "kind"}` per golden question, in file order."""
    for q in golden.questions:
        yield {"id": q.id, "question": q.question, "kind": q.kind}


# --------------------------------------------------------------------------- run configuration


def run_config(record: dict[str, Any], where: Line | str) -> dict[str, Any]:
    """The configuration an answer record shows: its `retrieval` fields that RUNS fixes, and
    its `generator.features` (in FEATURES order, unknown names after them, sorted)."""
    retrieval = ragline.field(record, "retrieval", dict, where)
    generator = ragline.field(record, "generator", dict, where)
    config = {}
    for key in CONFIG_KEYS[:-1]:
        if key not in retrieval:
            raise StageError(f"field 'retrieval' has no '{key}'", str(where))
        config[key] = retrieval[key]
    if "features" not in generator:
        raise StageError("field 'generator' has no 'features'", str(where))
    features = generator["features"]
    if not isinstance(features, list) or not all(isinstance(f, str) for f in features) or len(set(features)) != len(features):
        raise StageError(f"generator.features must be distinct names, got {_show(features)}", str(where))
    config["features"] = sorted(features, key=lambda f: (FEATURES.index(f), "") if f in FEATURES else (len(FEATURES), f))
    return config


def config_differences(expected: dict[str, Any], actual: dict[str, Any]) -> list[str]:
    """The CONFIG_KEYS on which two configurations differ (features compared as sets)."""
    out = []
    for key in CONFIG_KEYS:
        want, got = expected.get(key), actual.get(key)
        same = sorted(want or []) == sorted(got or []) if key == "features" else want == got and type(want) is type(got)
        if not same:
            out.append(key)
    return out


def matching_labels(actual: dict[str, Any]) -> list[str]:
    """The RUNS labels whose configuration the run shows."""
    return [label for label, config in RUNS.items() if not config_differences(config, actual)]


def check_config(label: str, actual: dict[str, Any], where: str, whose: str = "the run has") -> None:
    """StageError unless `actual` is what RUNS says `label` must be."""
    if label not in RUNS:
        raise StageError(f"label '{label}' has no entry in RUNS (rag_eval.py): one of {', '.join(RUNS)}", where)
    expected = RUNS[label]
    keys = config_differences(expected, actual)
    if not keys:
        return
    want = ", ".join(f"{k} {_show(expected[k])}" for k in keys)
    got = ", ".join(f"{k} {_show(actual.get(k))}" for k in keys)
    others = matching_labels(actual)
    hint = f"label '{others[0]}' matches this run" if others else "no label in RUNS matches this run"
    raise StageError(f"label '{label}' expects {want}; {whose} {got} ({hint})", where)


# --------------------------------------------------------------------------- gold under this chunking


@dataclass(frozen=True)
class Chunking:
    """The chunks an index was built from: id -> doc, and id -> text with whitespace folded."""

    source: str
    docs: dict[str, str | None]
    texts: dict[str, str]
    windows: frozenset[Any]


def read_chunking(records: Iterable[tuple[Line, dict[str, Any]]], source: str) -> Chunking:
    """Index rag-chunk records (`id`, `text`, optional `doc` and `window`) by id."""
    docs: dict[str, str | None] = {}
    texts: dict[str, str] = {}
    windows = set()
    for where, record in records:
        cid = ragline.field(record, "id", str, where)
        text = ragline.field(record, "text", str, where)
        if cid in texts:
            raise StageError(f"chunk id '{cid}' appears twice", str(where))
        docs[cid] = record.get("doc")
        texts[cid] = " ".join(text.split())
        if "window" in record:
            windows.add(record["window"])
    if not texts:
        raise StageError("no chunk records", source)
    return Chunking(source, docs, texts, frozenset(windows))


def resolve_gold(question: Question, chunking: Chunking | None, where: str) -> tuple[tuple[str, ...], bool]:
    """The question's gold chunk ids under the run's chunking, and whether they were re-found.

    Without a chunking the labelled ids are taken as they are. With one, the labels
    stand when every gold id exists and every evidence string (whitespace folded,
    case kept) lies in one of the gold chunks. Otherwise the chunking has moved text
    (a missing id, or a `-2` part that now holds other text) and gold is found again:
    the labelled chunks that still hold some evidence, plus every chunk that holds an
    evidence string none of those holds. A labelled chunk that holds no evidence is
    then dropped: nothing identifies where its text went. An evidence string found in
    no chunk at all, in that case, is a StageError, never a silent zero.
    """
    if not question.answerable or chunking is None:
        return question.gold, False
    texts = chunking.texts
    evidence = list(dict.fromkeys(" ".join(e.split()) for e in question.evidence))
    present = [g for g in question.gold if g in texts]
    held = {e for e in evidence if any(e in texts[g] for g in present)}
    if len(present) == len(question.gold) and len(held) == len(evidence):
        return question.gold, False
    kept = [g for g in present if any(e in texts[g] for e in evidence)]
    found = list(kept)
    lost = []
    for e in evidence:
        if e in held:
            continue
        holders = [cid for cid, text in texts.items() if e in text]
        if not holders:
            lost.append(e)
        found.extend(cid for cid in holders if cid not in found)
    if lost:
        missing = [g for g in question.gold if g not in texts]
        what = f"gold chunk {missing[0]} not in this chunking" if missing else "its gold chunks no longer hold its evidence"
        which = "its evidence is found nowhere" if len(lost) == len(evidence) else f"evidence {_show(lost[0])} is found nowhere"
        raise StageError(f"{question.id}: {what} and {which}", where)
    return tuple(found), True


def gold_docs(gold: Iterable[str], chunking: Chunking | None) -> set[str]:
    """The documents holding the gold chunks: the chunking's `doc`, else the DOC of a
    rag-chunk id `DOC#SLUG`."""
    out = set()
    for cid in gold:
        doc = chunking.docs.get(cid) if chunking is not None else None
        out.add(doc if isinstance(doc, str) else cid.partition("#")[0])
    return out


# --------------------------------------------------------------------------- scoring


def score_run(
    golden: Golden,
    records: Iterable[tuple[Line, dict[str, Any]]],
    label: str,
    chunking: Chunking | None = None,
    inputs: str = ragline.STDIN,
    resamples: int = RESAMPLES,
    seed: int = SEED,
) -> dict[str, Any]:
    """Score one run's answer records against the golden questions: the result file's content.

    Guards (each a StageError, never a result full of zeros): the label's RUNS entry
    must match the configuration the records show, and all records must show the
    same one; records must retrieve k >= 5; one record per golden question, none for
    an unknown id, with the golden question's text; at least one non-empty hits list;
    with a chunking, every hit must be one of its chunks and its window the run's.

    The result (`"schema": "eval-result/1"`):
        label, expected (RUNS[label]), actual (the records' configuration, same keys),
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
    seen, actual, run = _one_run(golden, records, label, chunking, inputs)
    rows = []
    for q in golden.questions:
        where, record = seen[q.id]
        gold, refound = resolve_gold(q, chunking, golden.where(q))
        rows.append(score_question(q, record, where, gold, refound, gold_docs(gold, chunking), chunking))
    if all(not row["ranked"] for row in rows):
        raise StageError("every hits list is empty: retrieval returned nothing (an empty index?)", inputs)
    return {
        "schema": RESULT_SCHEMA,
        "label": label,
        "expected": RUNS[label],
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
        rid = ragline.field(record, "id", str, where)
        if rid not in questions:
            raise StageError(f"record id '{rid}' is not a question in {golden.source}", str(where))
        if rid in seen:
            raise StageError(f"a second record for question '{rid}' (the first is at {seen[rid][0]})", str(where))
        text = ragline.field(record, "question", str, where)
        if " ".join(text.split()) != " ".join(questions[rid].question.split()):
            raise StageError(f"record '{rid}' asks {_show(text)}, not the golden question: stale answers?", str(where))
        config = run_config(record, where)
        if actual is None:
            check_config(label, config, str(where))
            actual, first = config, where
            run = _run_info(record, where)
            if chunking is not None and chunking.windows and chunking.windows != {config["window"]}:
                windows = ", ".join(_show(w) for w in sorted(chunking.windows, key=str))
                raise StageError(
                    f"{chunking.source} was cut with window {windows}, the run's index with {_show(config['window'])}", str(where)
                )
        elif config != actual:
            keys = ", ".join(f"{k} {_show(config[k])}, not {_show(actual[k])}" for k in config_differences(actual, config))
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


def _run_info(record: dict[str, Any], where: Line) -> dict[str, Any]:
    retrieval, generator = record["retrieval"], record["generator"]
    k = retrieval.get("k")
    if not isinstance(k, int) or isinstance(k, bool) or k < CUTOFF:
        raise StageError(f"the run retrieved k={_show(k)} hits per question; recall@5 and nDCG@5 need k >= {CUTOFF}", str(where))
    return {
        "k": k,
        "rrf_k": retrieval.get("rrf_k"),
        "candidates": retrieval.get("candidates"),
        "index": retrieval.get("index"),
        "generator": generator.get("name"),
    }


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
    hits = ragline.field(record, "hits", list, where)
    ranked = []
    for rank, hit in enumerate(hits, 1):
        if not isinstance(hit, dict) or not isinstance(hit.get("chunk_id"), str):
            raise StageError(f"hit {rank} has no string 'chunk_id'", str(where))
        if hit.get("rank", rank) != rank:
            raise StageError(f"hits are not in rank order (hit {rank} has rank {_show(hit.get('rank'))})", str(where))
        if chunking is not None and hit["chunk_id"] not in chunking.texts:
            raise StageError(f"hit '{hit['chunk_id']}' is not in {chunking.source}: not the chunks the index was built from", str(where))
        ranked.append(hit["chunk_id"])
    confidence = _number(record, "confidence", where)
    if not 0.0 <= confidence <= 1.0:
        raise StageError(f"confidence {confidence} is outside [0, 1]", str(where))
    answer = ragline.field(record, "answer", str, where)
    refused = ragline.field(record, "refused", bool, where)
    citations = ragline.field(record, "citations", list, where)
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
        row[name] = _round(value) if q.answerable else None
    on_target = irmetrics.citations_on_target([c.get("doc") for c in citations], docs) if q.answerable else None
    row |= {
        "answer_ok": irmetrics.answer_ok(answer, refused, q.answer_contains, q.answerable),
        "citations": len(citations),
        "citations_on_target": _round(on_target),
        "refused": refused,
        "reason": record.get("reason"),
        "confidence": confidence,
        "signals": _abstain_signals(record, hits),
        "ms": _round(search_ms + answer_ms),
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


def signal_auc(rows: Sequence[dict[str, Any]], signal: str) -> float | None:
    """ROC AUC of an abstain signal for telling answerable (positive) from unanswerable
    questions (`irmetrics.roc_auc`: ties count half, 0.5 is chance), over result rows.
    `signal` is "confidence" or a name in the rows' `signals`. None when either class is
    missing or the signal is absent from a row.
    """
    values = [(r["answerable"], r["confidence"] if signal == "confidence" else (r.get("signals") or {}).get(signal)) for r in rows]
    if any(v is None for _, v in values):
        return None
    return irmetrics.roc_auc([v for a, v in values if a], [v for a, v in values if not a])


def _number(record: dict[str, Any], name: str, where: Line) -> float:
    value = float(ragline.field(record, name, float, where))
    if not math.isfinite(value):
        raise StageError(f"field '{name}' is not finite", str(where))
    return value


def _round(value: float | None) -> float | None:
    return None if value is None else round(float(value), 6)


def metric_values(rows: Iterable[dict[str, Any]], metric: str, kind: str | None = None) -> dict[str, float]:
    """Per-question values of an aggregate metric, by question id, over its population
    (answerable, unanswerable or all questions; of one kind if given); nulls left out."""
    key, population = METRICS[metric]
    out = {}
    for row in rows:
        if kind is not None and row["kind"] != kind:
            continue
        if (population == "answerable" and not row["answerable"]) or (population == "unanswerable" and row["answerable"]):
            continue
        if row[key] is not None:
            out[row["id"]] = float(row[key])
    return out


def aggregate(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Means of every METRICS name overall and per answerable kind, and latency percentiles."""
    overall: dict[str, Any] = {m: _round(irmetrics.mean_or_none(metric_values(rows, m).values())) for m in METRICS}
    for name, key in (("ms", "ms"), ("search_ms", "search_ms"), ("answer_ms", "answer_ms")):
        values = np.array([r[key] for r in rows], dtype=np.float64)
        overall[f"{name}_p50"] = _round(np.percentile(values, 50))
        if name == "ms":
            overall["ms_p95"] = _round(np.percentile(values, 95))
    by_kind = {}
    for kind in ANSWERABLE_KINDS:
        n = sum(r["kind"] == kind for r in rows)
        if n:
            by_kind[kind] = {"n": n} | {
                m: _round(irmetrics.mean_or_none(metric_values(rows, m, kind).values()))
                for m in METRICS
                if m != "refused_when_unanswerable"
            }
    return {"overall": overall, "by_kind": by_kind}


def intervals(rows: list[dict[str, Any]], resamples: int = RESAMPLES, seed: int = SEED) -> dict[str, Any]:
    """95% percentile-bootstrap intervals over questions (see `irmetrics.bootstrap_interval`)."""

    def interval(values: dict[str, float]) -> list[float] | None:
        found = irmetrics.bootstrap_interval(list(values.values()), resamples=resamples, seed=seed, level=LEVEL)
        return None if found is None else [_round(found[0]), _round(found[1])]

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
        want = " or ".join(_show(s) for s in schemas)
        raise StageError(f"not a rag-eval {'score result' if len(schemas) == 1 else 'file'} (schema {_show(got)}, expected {want})", path)
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
    "golden.sha256": str,
    "rule.budget": (int, float),
    "counts.questions": int,
    "chosen.threshold": (int, float),
    "loo.thresholds.min": (int, float),
    "loo.thresholds.max": (int, float),
    "curve": list,
}


def dump_json(value: dict[str, Any]) -> bytes:
    """A result file's bytes: indented JSON (diffable in git), key order kept."""
    return orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE | orjson.OPT_SERIALIZE_NUMPY)


# --------------------------------------------------------------------------- the abstain sweep


def sweep(golden: Golden, result: dict[str, Any], step: float = STEP, budget: float = REFUSAL_BUDGET) -> dict[str, Any]:
    """Walk the abstain threshold t over [0, 1] and pick the one to ship.

    At threshold t a question is refused when its confidence < t. The curve gives, for
    each t, refused_when_unanswerable and refused_when_answerable (from the threshold
    alone), and answer_ok: an answerable question is ok when t lets it through and the
    run answered it right; an unanswerable one when t refuses it or the run did
    (`irmetrics.threshold_outcomes`). So the run should be made with the answer stage's
    own threshold at 0, or its refusals stay in the answer-level column.

    `chosen` is `irmetrics.choose_threshold` on all questions. `loo` is its leave-one-out
    estimate (`irmetrics.leave_one_out_choices`): for each question, the threshold chosen
    on the others by the same rule, applied to that question alone; its rates are less
    optimistic than in-sample.
    """
    rows = result["questions"]
    if result.get("golden", {}).get("sha256") != golden.sha256:
        raise StageError(f"the result was scored against another golden file than {golden.source} (sha256 differs)", golden.source)
    by_id = golden.by_id()
    if sorted(r["id"] for r in rows) != sorted(by_id):
        raise StageError(f"the result's questions are not {golden.source}'s", golden.source)
    answerable = np.array([by_id[r["id"]].answerable for r in rows], dtype=bool)
    confidence = np.array([r["confidence"] for r in rows], dtype=np.float64)
    ran_ok = np.array([bool(r["answer_ok"]) for r in rows])
    ran_refused = np.array([bool(r["refused"]) for r in rows])
    grid = irmetrics.thresholds(step)
    refuse, ok = irmetrics.threshold_outcomes(grid, confidence, answerable, ran_ok, ran_refused)
    curve = [{"threshold": float(t)} | _rates(refuse[i], ok[i], answerable) for i, t in enumerate(grid)]
    best = irmetrics.choose_threshold(refuse, answerable, budget)
    held = irmetrics.leave_one_out_choices(refuse, answerable, budget)
    questions = np.arange(len(rows))
    held_threshold, held_refused, held_ok = grid[held], refuse[held, questions], ok[held, questions]
    return {
        "schema": SWEEP_SCHEMA,
        "label": result.get("label"),
        "golden": {"source": golden.source, "sha256": golden.sha256},
        "rule": {
            "budget": budget,
            "step": step,
            "statement": (
                f"refused_when_answerable <= {budget}; within that, the most unanswerable questions refused, then the fewest "
                "answerable; ties: the middle of the run of equivalent thresholds (the lower middle)"
            ),
        },
        "counts": {"questions": len(rows), "answerable": int(answerable.sum()), "unanswerable": int((~answerable).sum())},
        "run": _rates(ran_refused, ran_ok, answerable),
        "chosen": {"threshold": float(grid[best])} | _rates(refuse[best], ok[best], answerable),
        "loo": _rates(held_refused, held_ok, answerable)
        | {
            "thresholds": {
                "min": float(held_threshold.min()),
                "median": float(np.median(held_threshold)),
                "max": float(held_threshold.max()),
            },
            "held_out": [
                {"id": r["id"], "threshold": float(t), "refused": bool(f)}
                for r, t, f in zip(rows, held_threshold, held_refused, strict=True)
            ],
        },
        "curve": curve,
    }


def _rates(refused: np.ndarray, ok: np.ndarray, answerable: np.ndarray) -> dict[str, float | None]:
    """`irmetrics.refusal_rates`, rounded as the result files store numbers."""
    return {name: _round(value) for name, value in irmetrics.refusal_rates(refused, ok, answerable).items()}


def plot_sweep(result: dict[str, Any], out: Any) -> bool:
    """Draw the sweep's two refusal curves as a PNG into the binary stream `out`.
    False (and nothing written) when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    t = [p["threshold"] for p in result["curve"]]
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=120)
    for key, name in (("refused_when_unanswerable", "unanswerable refused"), ("refused_when_answerable", "answerable refused")):
        ax.plot(t, [p[key] if p[key] is not None else float("nan") for p in result["curve"]], label=name, drawstyle="steps-post")
    ax.axhline(result["rule"]["budget"], color="grey", linestyle=":", label=f"budget {result['rule']['budget']:g}")
    ax.axvline(result["chosen"]["threshold"], color="black", linestyle="--", label=f"chosen {result['chosen']['threshold']:.2f}")
    ax.set(xlabel="abstain threshold (refuse when confidence < t)", ylabel="share refused", xlim=(0, 1), ylim=(-0.02, 1.02))
    ax.set_title(f"abstain sweep: {result.get('label')}")
    ax.legend(loc="center right", fontsize="small")
    fig.tight_layout()
    fig.savefig(out, format="png")
    plt.close(fig)
    return True


# --------------------------------------------------------------------------- tables: the numbers

MAIN_COLUMNS = (
    ("recall@1", "recall@1"),
    ("recall@3", "recall@3"),
    ("MRR", "mrr"),
    ("nDCG@5", "ndcg@5"),
    ("answer ok", "answer_ok"),
    ("citations on target", "citations_on_target"),
)
REFUSAL_COLUMNS = (("refused when unanswerable", "refused_when_unanswerable"), ("refused when answerable", "refused_when_answerable"))
KIND_METRIC = "mrr"  # the by-kind table's metric
SIGNALS = ("confidence", "part:best", "part:coverage", "part:dense", "top score", "top RRF score")
SIGNAL_RUNS = ("default", "hybrid", "bm25", "hash")  # the runs whose abstain signals the tables compare


@dataclass(frozen=True)
class Cell:
    """One table cell: a run's mean of a metric, its bootstrap interval, and the p-value of
    the paired test against the default run (None in the default row, without a default
    run, or where there is no mean)."""

    value: float | None
    interval: tuple[float, float] | None
    p: float | None

    @property
    def differs(self) -> bool:
        return self.p is not None and self.p < ALPHA


@dataclass(frozen=True)
class Row:
    """One run's numbers in the tables: `overall` by metric (MAIN_COLUMNS and
    REFUSAL_COLUMNS), `by_kind` the KIND_METRIC by answerable kind, `auc` one ROC AUC per
    SIGNALS entry (None for runs not in SIGNAL_RUNS)."""

    label: str
    gold_checked: bool
    overall: dict[str, Cell]
    by_kind: dict[str, Cell]
    ms_p50: float | None
    auc: tuple[float | None, ...] | None


@dataclass(frozen=True)
class Comparison:
    """Everything the tables show, computed: the rows in RUNS' order, the question counts
    of the golden file, the size of each answerable kind any run has, and the sweeps."""

    golden: dict[str, str]
    counts: dict[str, int]
    resamples: int
    rows: tuple[Row, ...]
    kinds: dict[str, int]
    sweeps: tuple[dict[str, Any], ...]


def compare(results: Sequence[tuple[str, dict[str, Any]]]) -> Comparison:
    """The tables' numbers from (path, result) pairs, score results and sweeps mixed.

    Rows follow RUNS' order. A row whose recorded configuration is not what RUNS says
    its label is, two results with one label, or results scored against different
    golden files: StageError. Each non-default cell carries the p-value of the paired
    randomisation test (`irmetrics.paired_randomisation`, two-sided, pairs by question
    id, the result's own resamples, seed SEED) of its per-question values against the
    default run's.
    """
    by_label, sweeps = _checked_results(results)
    ordered = [by_label[label] for label in RUNS if label in by_label]
    base = by_label.get("default")
    kinds = {
        k: next(r["aggregates"]["by_kind"][k]["n"] for r in ordered if k in r["aggregates"]["by_kind"])
        for k in ANSWERABLE_KINDS
        if any(k in r["aggregates"]["by_kind"] for r in ordered)
    }
    metrics = [m for _, m in MAIN_COLUMNS + REFUSAL_COLUMNS]
    rows = []
    for r in ordered:
        rows.append(
            Row(
                label=r["label"],
                gold_checked=bool(r.get("gold_checked")),
                overall={m: _cell(r, base, m) for m in metrics},
                by_kind={k: _cell(r, base, KIND_METRIC, k) for k in kinds},
                ms_p50=r["aggregates"]["overall"].get("ms_p50"),
                auc=tuple(signal_auc(r["questions"], s) for s in SIGNALS) if r["label"] in SIGNAL_RUNS else None,
            )
        )
    order = list(RUNS)
    sweeps.sort(key=lambda swept: order.index(swept["label"]) if swept["label"] in order else len(order))
    first = ordered[0]
    return Comparison(first["golden"], first["counts"], first["settings"]["resamples"], tuple(rows), kinds, tuple(sweeps))


def _checked_results(results: Sequence[tuple[str, dict[str, Any]]]) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    """The score results by label and the sweeps, once they are known to belong in one table."""
    sweeps = [(path, r) for path, r in results if r.get("schema") == SWEEP_SCHEMA]
    results = [(path, r) for path, r in results if r.get("schema") != SWEEP_SCHEMA]
    if not results:
        raise StageError("no score result among the files")
    by_label: dict[str, dict[str, Any]] = {}
    for path, result in results:
        label = result.get("label")
        if label in by_label:
            raise StageError(f"a second result for label '{label}'", path)
        check_config(str(label), result.get("actual") or {}, path, whose="the file's run has")
        by_label[label] = result
    digests = {r["golden"]["sha256"] for r in by_label.values()}
    if len(digests) > 1:
        raise StageError("the results were scored against different golden files: one table per golden file", results[0][0])
    for path, swept in sweeps:
        if swept["golden"]["sha256"] not in digests:
            raise StageError("the sweep was made on another golden file than the results'", path)
    return by_label, [swept for _, swept in sweeps]


def _cell(result: dict[str, Any], base: dict[str, Any] | None, metric: str, kind: str | None = None) -> Cell:
    aggregates, ivs = result["aggregates"], result["intervals"]
    value = (aggregates["overall"] if kind is None else aggregates["by_kind"].get(kind, {})).get(metric)
    if value is None:
        return Cell(None, None, None)
    interval = (ivs["overall"] if kind is None else ivs["by_kind"].get(kind, {})).get(metric)
    p = None
    if base is not None and result is not base:
        mine, theirs = metric_values(result["questions"], metric, kind), metric_values(base["questions"], metric, kind)
        common = sorted(set(mine) & set(theirs))
        p = irmetrics.paired_randomisation(
            [theirs[i] for i in common], [mine[i] for i in common], resamples=result["settings"]["resamples"], seed=SEED
        )
    return Cell(value, None if interval is None else (interval[0], interval[1]), p)


# --------------------------------------------------------------------------- tables: the markdown


def render_tables(results: Sequence[tuple[str, dict[str, Any]]]) -> str:
    """Markdown tables from (path, result) pairs (see `compare`): the main table, MRR by
    kind, refusals, the abstain signals, the abstain threshold for each sweep file among
    them, and the notes. Each cell is "mean [95% interval]", with † where it differs from
    the default row at p < ALPHA."""
    c = compare(results)
    sections = [main_table(c), kind_table(c), refusal_table(c), signal_table(c), *map(sweep_table, c.sweeps), *table_notes(c)]
    return "\n\n".join("\n".join(section) for section in sections if section) + "\n"


def _table(head: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    """A markdown table: the first column (the run) left-aligned, the others right-aligned."""

    def line(cells: Sequence[str]) -> str:
        return f"| {cells[0]} | " + " | ".join(cells[1:]) + " |"

    return [line(head), "| --- |" + " ---: |" * (len(head) - 1), *map(line, rows)]


def _show_cell(cell: Cell) -> str:
    if cell.value is None:
        return "–"
    text = f"{cell.value:.2f}"
    if cell.interval is not None:
        text += f" [{cell.interval[0]:.2f}, {cell.interval[1]:.2f}]"
    return text + (f" {MARK}" if cell.differs else "")


def _run_name(row: Row) -> str:
    return f"`{row.label}`" + ("" if row.gold_checked else " °")


def main_table(c: Comparison) -> list[str]:
    """The headline metrics, one row a run, with the median latency."""
    counts = c.counts
    intro = (
        f"Scored against `{c.golden['source']}` (sha256 `{c.golden['sha256'][:12]}`): {counts['questions']} questions, "
        f"{counts['answerable']} answerable and {counts['unanswerable']} unanswerable. Retrieval metrics and citations on target "
        f"over the answerable questions at cutoff {CUTOFF}; answer ok over all (refusing is the right answer to an unanswerable "
        "one); ms p50 is the median time per question, search and answer. 95% percentile-bootstrap intervals over questions in "
        "brackets."
    )
    head = ["run", *(title for title, _ in MAIN_COLUMNS), "ms p50"]
    rows = [
        [_run_name(r), *(_show_cell(r.overall[m]) for _, m in MAIN_COLUMNS), "–" if r.ms_p50 is None else f"{r.ms_p50:.1f}"] for r in c.rows
    ]
    return [intro, "", *_table(head, rows)]


def kind_table(c: Comparison) -> list[str]:
    """MRR by kind of question."""
    head = ["run", *(f"{k} ({n})" for k, n in c.kinds.items())]
    rows = [[_run_name(r), *(_show_cell(r.by_kind[k]) for k in c.kinds)] for r in c.rows]
    return ["MRR by kind of question (how many in parentheses):", "", *_table(head, rows)]


def refusal_table(c: Comparison) -> list[str]:
    """How often each run refused, by whether the question was answerable."""
    rows = [[_run_name(r), *(_show_cell(r.overall[m]) for _, m in REFUSAL_COLUMNS)] for r in c.rows]
    return ["Refusals:", "", *_table(["run", *(title for title, _ in REFUSAL_COLUMNS)], rows)]


def signal_table(c: Comparison) -> list[str]:
    """ROC AUC of each candidate abstain signal, for the SIGNAL_RUNS present; none: no table."""
    rows = [[_run_name(r), *("–" if v is None else f"{v:.2f}" for v in r.auc)] for r in c.rows if r.auc is not None]
    if not rows:
        return []
    title = "How well each candidate abstain signal tells answerable from unanswerable questions (ROC AUC; 0.5 is chance):"
    return [title, "", *_table(["run", *(s.removeprefix("part:") for s in SIGNALS)], rows)]


def sweep_table(swept: dict[str, Any]) -> list[str]:
    """The abstain section of the tables: the chosen threshold in-sample and leave-one-out."""

    def share(value: float | None) -> str:
        return "–" if value is None else f"{value:.2f}"

    chosen, loo, counts = swept["chosen"], swept["loo"], swept["counts"]
    spread = loo["thresholds"]
    cols = ("refused_when_unanswerable", "refused_when_answerable", "answer_ok")
    intro = (
        f"Abstain threshold, from the `{swept['label']}` run (refuse when confidence < t; wrongly refused answerable questions "
        f"at most {swept['rule']['budget']:g}, then the most unanswerable ones refused):"
    )
    head = ["threshold chosen on", "t", "refused when unanswerable", "refused when answerable", "answer ok"]
    rows = [
        [f"all {counts['questions']} questions (in-sample)", f"{chosen['threshold']:.2f}", *(share(chosen[k]) for k in cols)],
        [
            f"the other {counts['questions'] - 1}, for each question (leave-one-out)",
            f"{spread['min']:.2f}–{spread['max']:.2f}",
            *(share(loo[k]) for k in cols),
        ],
    ]
    return [intro, "", *_table(head, rows)]


def table_notes(c: Comparison) -> list[list[str]]:
    """The footnotes the marks in the tables need, each a section of one line."""
    notes = []
    if any(cell.differs for r in c.rows for cell in (*r.overall.values(), *r.by_kind.values())):
        notes.append(
            f"{MARK} differs from `default` at p < {ALPHA} (two-sided paired randomisation test on per-question values, "
            f"{c.resamples:,} seeded sign flips)."
        )
    if any(not r.gold_checked for r in c.rows):
        notes.append("° gold chunk ids taken as labelled, not checked against this run's chunking (scored without --corpus-chunks).")
    return [[note] for note in notes]


def replace_tables(readme: str, tables: str, source: str) -> str:
    """The README with the text between BEGIN and END replaced by `tables`."""
    start, end = readme.find(BEGIN), readme.find(END)
    if start < 0 or end < start or readme.count(BEGIN) != 1 or readme.count(END) != 1:
        raise StageError(f"needs one '{BEGIN}' line and one '{END}' line after it", source)
    return readme[: start + len(BEGIN)] + "\n" + tables + readme[end:]


# --------------------------------------------------------------------------- the commands


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """Evaluate ragline against a golden question set.

    \b
      rag-eval questions golden.yaml | rag-search --index IDX | rag-answer --index IDX \\
        | rag-eval score --golden golden.yaml --label default --out results/default.json
      rag-eval sweep --golden golden.yaml results/default.json --out results/abstain-sweep.json
      rag-eval table results/*.json --readme README.md
    """


@main.command("questions")
@click.argument("golden", type=click.Path(dir_okay=False))
def questions_command(golden: str) -> None:
    """Query records for GOLDEN's questions, to pipe into rag-search.

    One {"id", "question", "kind"} line per question, in the file's order.
    """
    ragline.die_on_sigterm()
    with ragline.stage(STAGE):
        ragline.write_records(query_records(load_golden(golden)), sys.stdout.buffer)


@main.command("score")
@click.argument("answers", nargs=-1, type=click.Path(dir_okay=False, allow_dash=True))
@click.option("--golden", required=True, type=click.Path(dir_okay=False), help="The golden question file.")
@click.option("--label", required=True, metavar="LABEL", type=click.Choice(list(RUNS)), help="The run's name in RUNS (default, hash, ...).")
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="The result file to write (atomically).")
@click.option("--corpus-chunks", type=click.Path(dir_okay=False), help="The rag-chunk output the index was built from.")
def score_command(answers: tuple[str, ...], golden: str, label: str, out: str, corpus_chunks: str | None) -> None:
    """Score one run's answer records into a result file.

    ANSWERS are answer records (rag-search | rag-answer), from files or stdin. The
    records must show the configuration RUNS gives for --label; a run that is
    incomplete, empty, or mixes configurations is an error, not a row of zeros.
    """
    ragline.die_on_sigterm()
    with ragline.stage(STAGE):
        gold = load_golden(golden)
        chunking = read_chunking(ragline.read_records([corpus_chunks]), corpus_chunks) if corpus_chunks else None
        records = ragline.read_records(answers, usage="no input: pipe answer records (rag-search | rag-answer) into rag-eval score")
        result = score_run(gold, records, label, chunking, inputs=", ".join(answers) or ragline.STDIN)
        with ragline.atomic_file(out) as handle:
            handle.write(dump_json(result))
        if chunking is None:
            ragline.note(f"{STAGE}: gold ids taken as labelled (no --corpus-chunks): a chunking that moved text scores wrong")
        if sys.stderr.isatty():
            o = result["aggregates"]["overall"]
            ragline.note(f"{STAGE}: {label}: MRR {o['mrr']:.3f}, answer ok {o['answer_ok']:.3f} -> {out}")


@main.command("sweep")
@click.argument("result_path", metavar="RESULT", type=click.Path(dir_okay=False))
@click.option("--golden", required=True, type=click.Path(dir_okay=False), help="The golden file the result was scored against.")
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="The sweep file to write (atomically).")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), help="Also draw the curves as a PNG (needs matplotlib).")
def sweep_command(result_path: str, golden: str, out: str, plot_path: str | None) -> None:
    """Choose the abstain threshold from a result's confidences.

    Walks t from 0 to 1 in steps of 0.01 (refuse when confidence < t) and keeps, within
    one wrongly refused answerable question in eight, the t that refuses the most
    unanswerable ones; writes the curve, the choice and its leave-one-out estimate.
    """
    ragline.die_on_sigterm()
    with ragline.stage(STAGE):
        curve = sweep(load_golden(golden), load_result(result_path))
        with ragline.atomic_file(out) as handle:
            handle.write(dump_json(curve))
        if plot_path:
            try:
                with ragline.atomic_file(plot_path) as handle:
                    if not plot_sweep(curve, handle):
                        raise ImportError
            except ImportError:
                ragline.note(f"{STAGE}: matplotlib is not installed (pip install 'ragline[plot]'): no plot written")


@main.command("table")
@click.argument("results", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--readme", type=click.Path(dir_okay=False), help=f"Write the tables into this file, between {BEGIN} and {END}.")
@click.option("--check", is_flag=True, help="With --readme: exit 1 if its tables differ from what RESULTS give.")
def table_command(results: tuple[str, ...], readme: str | None, check: bool) -> None:
    """Markdown tables from result and sweep files.

    To stdout, or with --readme between the README's tables markers. A row whose run
    is not what RUNS says its label is, is refused.
    """
    if check and not readme:
        raise click.UsageError("--check needs --readme")
    ragline.die_on_sigterm()
    with ragline.stage(STAGE):
        tables = render_tables([(path, load_result(path, (RESULT_SCHEMA, SWEEP_SCHEMA))) for path in results])
        if readme is None:
            sys.stdout.write(tables)
            return
        try:
            current = Path(readme).read_text(encoding="utf-8")
        except OSError as err:
            raise StageError(err.strerror or str(err), readme) from None
        updated = replace_tables(current, tables, readme)
        if check:
            if updated != current:
                raise StageError(f"the tables are out of date with the {len(results)} files given: run 'just tables'", readme)
        elif updated != current:
            with ragline.atomic_file(readme, "w") as handle:
                handle.write(updated)


if __name__ == "__main__":
    main()
