"""failures: the answers that went wrong with the right block ranked first, as a markdown report.

A library, not a stage (rag_eval alone uses it). `rag-eval score --failures PATH` writes
`report(golden, result, records)` beside the result file; `just eval` keeps one for each
corpus's default run, `results/CORPUS/failures.md`.

    >>> gold_first({"answerable": True, "ranked": ["a#b", "c#d"], "gold": ["c#d", "a#b"]})
    True

A question is listed when it is answerable, its first-ranked chunk is one of its gold chunks
(`gold_first`: retrieval did its part) and its answer still fails the answer check (`answer_ok`
false: a phrase of its `answer_contains` missing, or a refusal). Each is shown with its
question, the phrases (each missing one marked), the answer as rag-answer wrote it with its
citations, and the words of the first-ranked gold block, the chunk's text as the hit carries
it. The report opens with the counts by kind: answerable questions, those with gold first,
and how many of those were answered wrong. Same records, same bytes: nothing in it depends on
the clock, the machine or the order of a set, and timings are left out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

import ragline.records
from ragline.eval.golden import ANSWERABLE_KINDS, Golden, Question

irmetrics = ragline.records.lazy_import("ragline.eval.metrics")  # answer_ok, the one answer check (it imports numpy)

MAX_WORDS = 400  # a block or an answer longer than this is cut after it (a chunk is ~180 words; a long one ~300)
WORD = re.compile(r"\S+")


def gold_first(row: Mapping[str, Any]) -> bool:
    """Is the first-ranked chunk of a result row one of its gold chunks? (Answerable rows only.)"""
    ranked = row.get("ranked") or []
    return bool(row.get("answerable")) and bool(ranked) and ranked[0] in (row.get("gold") or [])


def listed(row: Mapping[str, Any]) -> bool:
    """Does the row belong in the report: gold first, and the answer judged wrong?"""
    return gold_first(row) and not row["answer_ok"]


def tally(rows: Iterable[Mapping[str, Any]]) -> list[tuple[str, int, int, int]]:
    """(kind, answerable, gold first, of those answered wrong) per answerable kind that has a
    question, in ANSWERABLE_KINDS order, then ("all", ...) over them."""
    rows = [row for row in rows if row.get("answerable")]
    out = []
    for kind in ANSWERABLE_KINDS:
        mine = [row for row in rows if row.get("kind") == kind]
        if mine:
            out.append((kind, len(mine), sum(map(gold_first, mine)), sum(map(listed, mine))))
    return [*out, ("all", sum(t[1] for t in out), sum(t[2] for t in out), sum(t[3] for t in out))]


def bounded(text: str, limit: int = MAX_WORDS) -> tuple[str, int]:
    """`text` with its line ends stripped of trailing blanks and blank lines at either end, cut
    after its `limit`-th word (line breaks kept), and how many words the cut dropped (0: whole)."""
    words = list(WORD.finditer(text))
    cut = len(words) - limit
    if cut > 0:
        text = text[: words[limit - 1].end()]
    return "\n".join(line.rstrip() for line in text.strip("\n").split("\n")).strip("\n"), max(cut, 0)


def fenced(text: str) -> list[str]:
    """A ```text block holding `text` verbatim: the fence is longer than any run of backticks in it."""
    runs = [len(m.group()) for m in re.finditer(r"`+", text)]
    fence = "`" * max(3, max(runs, default=0) + 1)
    return [f"{fence}text", *text.split("\n"), fence]


def report(
    golden: Golden, result: Mapping[str, Any], records: Mapping[str, Mapping[str, Any]], texts: Mapping[str, str] | None = None
) -> str:
    """The failure report of one scored run, as markdown.

    `result` is `score_run`'s, on `golden`; `records` the answer records it scored, by question
    id; `texts` the chunks' texts (a `Chunking`'s), read only for a hit that carries no text.
    """
    questions = golden.by_id()
    rows = result["questions"]
    corpus = result.get("corpus")
    out = [
        f"# Gold block first, answer wrong: {corpus or golden.source}",
        "",
        f"The `{result['label']}` run on {f'{corpus} ({golden.source})' if corpus else golden.source}. Gold first: the "
        "first-ranked block is one of the question's gold blocks; answer wrong: the answer fails the answer check all "
        "the same (a phrase of its `answer_contains` missing, or a refusal); share: answer wrong / gold first. Below the "
        "counts, each such question in the golden file's order, with the answer as rag-answer wrote it and the gold "
        "block's words. Written by `rag-eval score --failures`; `just eval` regenerates it.",
        "",
        "| kind | answerable | gold first | answer wrong | share |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for kind, answerable, first, wrong in tally(rows):
        share = f"{wrong / first:.2f}" if first else "–"
        out.append(f"| {kind} | {answerable} | {first} | {wrong} | {share} |")
    failing = [row for row in rows if listed(row)]
    if not failing:
        out += ["", "None: every answerable question whose gold block ranked first was answered right."]
    for row in failing:
        out += ["", *failure(questions[row["id"]], row, records[row["id"]], texts)]
    return "\n".join(out) + "\n"


def failure(q: Question, row: Mapping[str, Any], record: Mapping[str, Any], texts: Mapping[str, str] | None = None) -> list[str]:
    """One listed question's section: its question, phrases, answer with citations, gold block."""
    answer = str(record.get("answer") or "")
    gold = set(row["gold"])
    missing = [p for p in q.answer_contains if not irmetrics.answer_ok(answer, False, [p], True)]
    phrases = ", ".join(f"`{p}`" + (" (missing)" if p in missing else "") for p in q.answer_contains) or "none"
    out = [f"## `{q.id}` ({q.kind}): {' '.join(q.question.split())}", "", f"Phrases a right answer holds: {phrases}."]
    confidence = record.get("confidence")
    shown = f" (confidence {confidence:.2f})" if isinstance(confidence, int | float) else ""
    if record.get("refused"):
        out += ["", f"Refused: {record.get('reason') or 'no reason given'}."]
    body, cut = bounded(answer)
    notes = [_citation(c, gold) for c in record.get("citations") or [] if isinstance(c, Mapping)]
    shown_answer = "\n".join([body, "", *notes]) if notes else body
    out += ["", f"The answer{shown}, {_count(len(notes), 'citation')}:", "", *fenced(shown_answer), *_cut_note(cut)]
    hit = (record.get("hits") or [{}])[0]
    cid = hit.get("chunk_id", row["ranked"][0])
    text = hit.get("text") if isinstance(hit.get("text"), str) else (texts or {}).get(cid, "")
    words = len(WORD.findall(text))
    block, cut = bounded(text)
    out += [
        "",
        f"The gold block, ranked first: `{cid}`{_headings(hit)}{_place(hit)}, {_count(words, 'word')}:",
        "",
        *fenced(block or "(no text)"),
    ]
    return out + _cut_note(cut)


def _citation(c: Mapping[str, Any], gold: set[str]) -> str:
    """`[1] doc#slug (gold) :: Heading > Sub (path:12-20)`: a footnote, naming the chunk and whether it is gold."""
    cid = c.get("chunk_id") or c.get("doc") or "?"
    return f"[{c.get('n', '?')}] {cid}{' (gold)' if cid in gold else ''}{_headings(c)}{_place(c)}"


def _headings(item: Mapping[str, Any]) -> str:
    """` :: Heading > Sub`, the heading path the record names, or nothing."""
    headings = item.get("headings")
    return " :: " + " > ".join(map(str, headings)) if isinstance(headings, list) and headings else ""


def _place(item: Mapping[str, Any]) -> str:
    """` (path:start-end)` as the record names it, or nothing."""
    path = item.get("path")
    if not isinstance(path, str):
        return ""
    start, end = item.get("start_line"), item.get("end_line")
    return f" ({path}:{start}-{end})" if start is not None and end is not None else f" ({path})"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _cut_note(cut: int) -> list[str]:
    return ["", f"(cut after {MAX_WORDS} words: {_count(cut, 'more word')} not shown)"] if cut else []
