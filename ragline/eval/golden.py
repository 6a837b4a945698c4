"""golden: the golden question file that rag-eval scores against, and its gold chunks under a chunking.

A library, not a stage (rag_eval alone uses it; it owns the golden file's format):

    version: 1
    questions:
      - id: se-02
        kind: semantic            # identifier | semantic | procedural | factual | unanswerable
        question: When does the cash actually show up in our company's bank?
        gold: [07-payouts#how-payouts-work]       # chunk ids under the default chunking
        evidence: ["Payouts arrive T+1 after settlement."]   # verbatim corpus text
        answer_contains: [business day]           # phrases a right answer contains

An unanswerable question has no gold, evidence or answer_contains. `parse_golden` reads
the file strictly (safe YAML loading only; every fault names its line); `resolve_gold`
finds a question's gold chunks again under a chunking that moved text (the window
ablations), from its evidence strings; `relabelled` names the labelled ids it had to
replace, which under the default chunking are labels to correct.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

import ragline
import ragline.records

if TYPE_CHECKING:
    import yaml
from ragline.records import Line, StageError, place

yaml = ragline.records.lazy_import("yaml")  # imported on first use: `rag-eval --help` stays fast

KINDS = ("identifier", "semantic", "procedural", "factual", "unanswerable")
ANSWERABLE_KINDS = KINDS[:4]
QUESTION_FIELDS = ("id", "kind", "question", "gold", "evidence", "answer_contains")
LABEL_FIELDS = ("gold", "evidence", "answer_contains")

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
        raise StageError(f"not valid YAML: {ragline.records.one_line(str(err) or type(err).__name__, 200)}", source) from None
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
        got = "none" if "version" not in document else show(document["version"])
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
    qline = _line(node) or 1  # a composed node always has its mark
    if not isinstance(node, yaml.MappingNode) or not isinstance(item, dict):
        raise StageError("a question must be a mapping of id, kind, question, ...", place(source, qline))
    lines: dict[str, int | None] = {}
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
            raise fail(f"field '{name}' must be a non-empty string, got {show(item[name])}", name)
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
                raise fail(f"field '{name}' must be a non-empty list, got {show(value)}", name)
            for entry in value:
                if not isinstance(entry, str) or not entry.strip():
                    raise fail(f"field '{name}' holds {show(entry)}: entries must be non-empty strings (quote numbers)", name)
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


def show(value: Any) -> str:
    """A value as it would appear in JSON: "hash", true, 180, ["idf"]."""
    try:
        return orjson.dumps(value).decode()
    except TypeError:
        return repr(value)


def query_records(golden: Golden) -> Iterator[dict[str, Any]]:
    """One query record `{"id", "question", "kind"}` per golden question, in file order."""
    for q in golden.questions:
        yield {"id": q.id, "question": q.question, "kind": q.kind}


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
        cid = ragline.records.require_field(record, "id", str, where)
        text = ragline.records.require_field(record, "text", str, where)
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
        what = (
            f"gold chunk {missing[0]} not in the chunks of {chunking.source}" if missing else "its gold chunks no longer hold its evidence"
        )
        which = "its evidence is found nowhere" if len(lost) == len(evidence) else f"evidence {show(lost[0])} is found nowhere"
        raise StageError(f"{question.id}: {what} and {which}", where)
    return tuple(found), True


@dataclass(frozen=True)
class Relabel:
    """A labelled gold id the chunking lacks, and the ids its question's evidence was found in."""

    question: Question
    given: str
    found: tuple[str, ...]

    def message(self, golden: Golden, chunking: Chunking) -> str:
        """`golden.yaml:12: question 'se-01': gold chunk 'idem#kyes' is not in chunks.jsonl; its evidence is in 'idem#keys', scored as gold`."""
        head = f"{golden.where(self.question)}: question '{self.question.id}': gold chunk '{self.given}' is not in {chunking.source}"
        if not self.found:
            return f"{head}; its evidence is in its other gold chunks, scored without it"
        return f"{head}; its evidence is in {', '.join(repr(c) for c in self.found)}, scored as gold"


def relabelled(golden: Golden, chunking: Chunking, resolved: dict[str, Sequence[str]]) -> list[Relabel]:
    """Every labelled gold id the chunking lacks, in file order, with the ids scored in its place.

    `resolved` is each question's gold as `resolve_gold` found it (a result's `gold`). The
    ids found in a missing id's place are the resolved ids its question did not label; where
    a question lacks several, each gets those of its own document (all of them when none is).
    Under the chunking the labels name (the default window) each one is a label to correct:
    a typo, or a heading renamed since.
    """
    out: list[Relabel] = []
    for q in golden.questions:
        missing = [g for g in q.gold if g not in chunking.texts]
        if not missing or q.id not in resolved:
            continue
        new = [c for c in resolved[q.id] if c not in q.gold]
        for given in missing:
            doc = given.partition("#")[0]
            same = [c for c in new if (chunking.docs.get(c) or c.partition("#")[0]) == doc]
            out.append(Relabel(q, given, tuple(same if same and len(missing) > 1 else new)))
    return out


def gold_docs(gold: Iterable[str], chunking: Chunking | None) -> set[str]:
    """The documents holding the gold chunks: the chunking's `doc`, else the DOC of a
    rag-chunk id `DOC#SLUG`."""
    out = set()
    for cid in gold:
        doc = chunking.docs.get(cid) if chunking is not None else None
        out.add(doc if isinstance(doc, str) else cid.partition("#")[0])
    return out
