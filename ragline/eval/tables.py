"""tables: the result tables of docs/evaluation.md, from rag-eval's result and sweep files.

A library, not a stage (rag_eval alone uses it). `compare` computes every number the
tables show, p-values included; the `*_table` functions only format them, one function
per table. For each corpus: the headline metrics, MRR by kind of question, refusals
and the abstain signals; across corpora: the macro mean of every run made on all of
them; and the abstain threshold chosen across corpora with its leave-one-corpus-out
check. Each cell is "mean [95% interval]", with † where the paired test against the
default run gives p < ALPHA.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import ragline
import ragline.records
from ragline.eval.golden import ANSWERABLE_KINDS
from ragline.eval.runs import CORPORA, CUTOFF, LEVEL, RUNS, SEED, check_config, corpus_order, metric_values
from ragline.records import StageError

irmetrics = ragline.records.lazy_import("ragline.eval.metrics")  # the statistics (it imports numpy)

ALPHA = 0.05  # significance level of the paired test
MARK = "†"  # differs from the default run at p < ALPHA
BEGIN = "<!-- tables:begin -->"
END = "<!-- tables:end -->"

MAIN_COLUMNS = (
    ("recall@1", "recall@1"),
    ("recall@3", "recall@3"),
    ("MRR", "mrr"),
    ("nDCG@5", "ndcg@5"),
    ("answer ok", "answer_ok"),
    ("citations on target", "citations_on_target"),
)
REFUSAL_COLUMNS = (("refused when unanswerable", "refused_when_unanswerable"), ("refused when answerable", "refused_when_answerable"))
RATE_COLUMNS = (*REFUSAL_COLUMNS, ("answer ok", "answer_ok"))  # a sweep's rates
KIND_METRIC = "mrr"  # the by-kind table's metric
SIGNALS = ("confidence", "part:best", "part:coverage", "part:dense", "top score", "top RRF score")
SIGNAL_RUNS = ("default", "old-default", "bm25", "hash")  # the runs whose abstain signals the tables compare
# a fitted value -> the runs that differ only in it (default among them): the table of its leave-one-corpus-out check
FITTED: dict[str, tuple[str, ...]] = {"dense_weight": ("dense-0.7", "dense-0.8", "default", "dense-0.95")}
FIT_METRIC = "mrr"
BEFORE = "old-default"  # the shipped default before this one: the verdict table sets the two side by side
# metric -> (the target, "min" or "max"): what the verdict table checks each corpus and the mean against
TARGETS: dict[str, tuple[float, str]] = {
    "mrr": (0.75, "min"),
    "recall@3": (0.80, "min"),
    "semantic": (0.50, "min"),
    "answer_ok": (0.65, "min"),
    "refused_when_unanswerable": (0.50, "min"),
    "refused_when_answerable": (0.125, "max"),
}


def corpus_of(result: Mapping[str, Any]) -> str:
    """The corpus a result or sweep entry belongs to: its `corpus`, else its golden file's name."""
    return result.get("corpus") or result["golden"]["source"]


# --------------------------------------------------------------------------- the numbers


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
    """One corpus's tables, computed: its rows in RUNS' order, the question counts of its
    golden file, and the size of each answerable kind any run has."""

    corpus: str
    golden: dict[str, str]
    counts: dict[str, int]
    resamples: int
    rows: tuple[Row, ...]
    kinds: dict[str, int]


@dataclass(frozen=True)
class Tables:
    """Everything the tables show: each corpus (CORPORA's order, others after), the macro
    mean rows (none for a single corpus), and the sweeps."""

    corpora: tuple[Comparison, ...]
    mean: tuple[Row, ...]
    sweeps: tuple[dict[str, Any], ...]
    defaults: tuple[tuple[str, dict[str, Any]], ...] = ()  # each corpus's `default` run: (corpus, its overall aggregates)

    @property
    def rows(self) -> tuple[Row, ...]:
        return tuple(r for c in self.corpora for r in c.rows) + self.mean


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


def compare(results: Sequence[tuple[str, dict[str, Any]]], sweeps: Sequence[tuple[str, dict[str, Any]]] = ()) -> Tables:
    """The tables' numbers from (path, result) and (path, sweep) pairs.

    Results group by corpus (`corpus_of`). A row is named by its label, or by its label
    and file where the label is on more than one file of a corpus (`row_names`); rows
    follow RUNS' order, then labels of the user's own in the order given. A RUNS label
    whose recorded configuration is not what RUNS says, one file given twice, results on
    one corpus scored against different golden files, or a sweep made on other golden
    files: StageError. Each cell but the default run's carries the p-value of the paired
    randomisation test (`irmetrics.paired_randomisation`, two-sided, pairs by question
    id, the result's own resamples, seed SEED) of its per-question values against the
    first result labelled `default`. The mean rows (`macro_row`) cover the rows named on every
    corpus.
    """
    groups = _checked_results(results, sweeps)
    corpora = tuple(_corpus_comparison(name, by_label) for name, by_label in groups.items())
    first = next(iter(groups.values()))
    labels = [label for label in first if all(label in by_label for by_label in groups.values())]
    mean = tuple(macro_row(label, list(groups.values())) for label in labels) if len(groups) > 1 else ()
    order = list(RUNS)
    ordered = sorted((s for _, s in sweeps), key=lambda s: order.index(s["label"]) if s["label"] in order else len(order))
    defaults = tuple(
        (name, next(r for r in by_label.values() if r.get("label") == "default")["aggregates"]["overall"])
        for name, by_label in groups.items()
        if any(r.get("label") == "default" for r in by_label.values())
    )
    return Tables(corpora, mean, tuple(ordered), defaults)


def row_names(results: Sequence[tuple[str, dict[str, Any]]]) -> list[str]:
    """Each result's row name: its label, or "label (path)" where another result of the
    same corpus has that label too."""
    seen: dict[tuple[str, str], int] = {}
    for _, result in results:
        key = (corpus_of(result), str(result.get("label")))
        seen[key] = seen.get(key, 0) + 1
    names = []
    for path, result in results:
        label = str(result.get("label"))
        names.append(label if seen[(corpus_of(result), label)] == 1 else f"{label} ({path})")
    return names


def _corpus_comparison(corpus: str, by_label: dict[str, dict[str, Any]]) -> Comparison:
    ordered = list(by_label.items())
    base = next((r for r in by_label.values() if r.get("label") == "default"), None)  # the first `default` given
    kinds = {
        k: next(r["aggregates"]["by_kind"][k]["n"] for _, r in ordered if k in r["aggregates"]["by_kind"])
        for k in ANSWERABLE_KINDS
        if any(k in r["aggregates"]["by_kind"] for _, r in ordered)
    }
    metrics = [m for _, m in MAIN_COLUMNS + REFUSAL_COLUMNS]
    rows = []
    for name, r in ordered:
        rows.append(
            Row(
                label=name,
                gold_checked=bool(r.get("gold_checked")),
                overall={m: _cell(r, base, m) for m in metrics},
                by_kind={k: _cell(r, base, KIND_METRIC, k) for k in kinds},
                ms_p50=r["aggregates"]["overall"].get("ms_p50"),
                auc=tuple(signal_auc(r["questions"], s) for s in SIGNALS) if r.get("label") in SIGNAL_RUNS else None,
            )
        )
    first = ordered[0][1]
    return Comparison(corpus, first["golden"], first["counts"], first["settings"]["resamples"], tuple(rows), kinds)


def _checked_results(
    results: Sequence[tuple[str, dict[str, Any]]], sweeps: Sequence[tuple[str, dict[str, Any]]]
) -> dict[str, dict[str, dict[str, Any]]]:
    """The score results by corpus (in table order) and row name (RUNS' order, then the
    order given), once they are known to belong in one set of tables."""
    if not results:
        raise StageError("no score result among the files")
    paths = [os.path.realpath(path) for path, _ in results]
    twice = next((results[i][0] for i, p in enumerate(paths) if p in paths[:i]), None)
    if twice is not None:
        raise StageError("this file is given twice", twice)
    order = list(RUNS)
    named = sorted(
        zip(row_names(results), results, range(len(results)), strict=True),
        key=lambda item: (order.index(item[1][1]["label"]) if item[1][1].get("label") in order else len(order), item[2]),
    )
    groups: dict[str, dict[str, dict[str, Any]]] = {}
    for name, (path, result), _ in named:
        corpus = corpus_of(result)
        by_label = groups.setdefault(corpus, {})
        check_config(str(result.get("label")), result.get("actual") or {}, path, whose="the file's run has")
        by_label[name] = result
        if result["golden"]["sha256"] != next(iter(by_label.values()))["golden"]["sha256"]:
            raise StageError(f"the results on {corpus} were scored against different golden files: one table per golden file", path)
    digests = {corpus: next(iter(by_label.values()))["golden"]["sha256"] for corpus, by_label in groups.items()}
    for path, swept in sweeps:
        if any(digests.get(c["name"]) != c["golden"]["sha256"] for c in swept["corpora"]):
            raise StageError("the sweep was made on another golden file than the results'", path)
    return {name: groups[name] for name in sorted(groups, key=corpus_order)}


def _pairs(result: dict[str, Any], base: dict[str, Any], metric: str, kind: str | None = None) -> tuple[list[float], list[float]]:
    """(the base run's values, this run's values) of a metric on the questions both have, by question id."""
    mine, theirs = metric_values(result["questions"], metric, kind), metric_values(base["questions"], metric, kind)
    common = sorted(set(mine) & set(theirs))
    return [theirs[i] for i in common], [mine[i] for i in common]


def _cell(result: dict[str, Any], base: dict[str, Any] | None, metric: str, kind: str | None = None) -> Cell:
    aggregates, ivs = result["aggregates"], result["intervals"]
    value = (aggregates["overall"] if kind is None else aggregates["by_kind"].get(kind, {})).get(metric)
    if value is None:
        return Cell(None, None, None)
    interval = (ivs["overall"] if kind is None else ivs["by_kind"].get(kind, {})).get(metric)
    p = None
    if base is not None and result is not base:
        theirs, mine = _pairs(result, base, metric, kind)
        p = irmetrics.paired_randomisation(theirs, mine, resamples=result["settings"]["resamples"], seed=SEED)
    return Cell(value, None if interval is None else (interval[0], interval[1]), p)


def macro_row(label: str, groups: Sequence[dict[str, dict[str, Any]]]) -> Row:
    """One run's mean across corpora (each group: one corpus's results by label).

    Each cell is `irmetrics.macro_mean` of the per-question values, corpus by corpus,
    with `irmetrics.macro_bootstrap_interval` (questions resampled within each corpus)
    and, against the default run, `irmetrics.paired_randomisation` on the macro-mean
    difference: pairs by question id within each corpus, weighted by
    `irmetrics.macro_weights`, so signs flip per question and each question weighs
    1/n of its corpus. The first corpus's resamples, seed SEED.
    """
    runs = [by_label[label] for by_label in groups]
    bases = None if label == "default" or any("default" not in g for g in groups) else [g["default"] for g in groups]
    resamples = runs[0]["settings"]["resamples"]
    overall = {}
    for _, metric in MAIN_COLUMNS + REFUSAL_COLUMNS:
        values = [list(metric_values(r["questions"], metric).values()) for r in runs]
        value = irmetrics.macro_mean(values)
        interval = irmetrics.macro_bootstrap_interval(values, seed=SEED, resamples=resamples, level=LEVEL)
        p = None
        if bases is not None and value is not None:
            pairs = [_pairs(r, b, metric) for r, b in zip(runs, bases, strict=True)]
            theirs, mine = [v for t, _ in pairs for v in t], [v for _, m in pairs for v in m]
            weights = irmetrics.macro_weights([len(t) for t, _ in pairs])
            p = irmetrics.paired_randomisation(theirs, mine, resamples=resamples, seed=SEED, weights=weights)
        overall[metric] = Cell(value, interval, p)
    return Row(label, all(r.get("gold_checked") for r in runs), overall, {}, None, None)


@dataclass(frozen=True)
class Moved:
    """One question on which two runs differ: its rank of the first gold chunk (None: not in
    the top CUTOFF, or unanswerable) and whether its answer was right, in each run."""

    id: str
    kind: str
    rank: tuple[int | None, int | None]
    answer_ok: tuple[bool, bool]

    @property
    def better(self) -> int:
        """+1 when the second run did better on this question (a higher first gold rank, a
        right answer, or one of them and the other unchanged), -1 worse, 0 mixed."""
        ranks = [-(r or CUTOFF + 1) for r in self.rank]
        ways = {(ranks[1] > ranks[0]) - (ranks[1] < ranks[0]), int(self.answer_ok[1]) - int(self.answer_ok[0])} - {0}
        return ways.pop() if len(ways) == 1 else 0


@dataclass(frozen=True)
class Paired:
    """Two runs on the same questions: per metric (MAIN_COLUMNS, REFUSAL_COLUMNS) the
    first run's mean, the second's, and the paired test's p-value; the questions that moved."""

    names: tuple[str, str]
    questions: int
    metrics: dict[str, tuple[float | None, float | None, float | None]]
    moved: tuple[Moved, ...]

    def as_json(self) -> dict[str, Any]:
        """`rag-eval compare --json`: every number, named."""
        return {
            "a": self.names[0],
            "b": self.names[1],
            "questions": self.questions,
            "metrics": {m: {"a": a, "b": b, "p": p} for m, (a, b, p) in self.metrics.items()},
            "moved": [
                {"id": m.id, "kind": m.kind, "rank": {"a": m.rank[0], "b": m.rank[1]},
                 "answer_ok": {"a": m.answer_ok[0], "b": m.answer_ok[1]}, "b_is": _way(m.better)}
                for m in self.moved
            ],
        }  # fmt: skip


def paired(a: tuple[str, dict[str, Any]], b: tuple[str, dict[str, Any]]) -> Paired:
    """Compare two score results question by question: same golden file, else StageError.
    The p-value is `irmetrics.paired_randomisation` on the questions both have a value for
    (the first result's resamples, seed SEED)."""
    (path_a, ra), (path_b, rb) = a, b
    if ra["golden"]["sha256"] != rb["golden"]["sha256"]:
        raise StageError(f"scored against another golden file than {path_a} (sha256 differs): nothing to pair", path_b)
    metrics = {}
    for _, metric in MAIN_COLUMNS + REFUSAL_COLUMNS:
        theirs, mine = _pairs(rb, ra, metric)
        p = irmetrics.paired_randomisation(theirs, mine, resamples=ra["settings"]["resamples"], seed=SEED) if theirs else None
        metrics[metric] = (ra["aggregates"]["overall"].get(metric), rb["aggregates"]["overall"].get(metric), p)
    rows_b = {row["id"]: row for row in rb["questions"]}
    moved = []
    for row in ra["questions"]:
        other = rows_b.get(row["id"])
        if other is None:
            continue
        ranks = (_first_gold_rank(row), _first_gold_rank(other))
        oks = (bool(row["answer_ok"]), bool(other["answer_ok"]))
        if ranks[0] != ranks[1] or oks[0] != oks[1]:
            moved.append(Moved(row["id"], row["kind"], ranks, oks))
    moved.sort(key=lambda m: (-m.better, m.id))
    names = (_display(path_a, ra), _display(path_b, rb))
    return Paired(names, len(set(rows_b) & {r["id"] for r in ra["questions"]}), metrics, tuple(moved))


def _first_gold_rank(row: dict[str, Any]) -> int | None:
    rr = row.get("rr")
    return round(1 / rr) if rr else None


def _display(path: str, result: dict[str, Any]) -> str:
    return f"{result.get('label')} ({path})"


def paired_table(c: Paired) -> list[str]:
    """`rag-eval compare`: the metrics side by side, then the questions that moved."""
    a, b = c.names
    head = ["metric", f"A: {a}", f"B: {b}", "B - A", "p"]
    rows = []
    for title, metric in MAIN_COLUMNS + REFUSAL_COLUMNS:
        va, vb, p = c.metrics[metric]
        change = "–" if va is None or vb is None else f"{vb - va:+.3f}"
        rows.append([title, _share(va), _share(vb), change, "–" if p is None else f"{p:.3f}"])
    better = sum(m.better > 0 for m in c.moved)
    worse = sum(m.better < 0 for m in c.moved)
    lines = [f"{c.questions} questions paired; p from a paired randomisation test on per-question values.", "", *_table(head, rows)]
    lines += ["", f"{len(c.moved)} questions moved: {better} better in B, {worse} worse, {len(c.moved) - better - worse} mixed."]
    if c.moved:

        def rank(r: int | None) -> str:
            return "–" if r is None else str(r)

        moved = [
            [
                f"`{m.id}`",
                m.kind,
                f"{rank(m.rank[0])} → {rank(m.rank[1])}",
                f"{_ok(m.answer_ok[0])} → {_ok(m.answer_ok[1])}",
                _way(m.better),
            ]
            for m in c.moved
        ]
        lines += ["", *_table(["question", "kind", f"first gold rank (top {CUTOFF})", "answer ok", "B is"], moved)]
    return lines


def _ok(value: bool) -> str:
    return "yes" if value else "no"


def _way(better: int) -> str:
    return {1: "better", -1: "worse", 0: "mixed"}[better]


# --------------------------------------------------------------------------- the markdown


def render_tables(t: Tables) -> str:
    """Markdown for all the tables: the mean across corpora (with more than one corpus),
    then each corpus's main, by-kind, refusal and signal tables (under a heading, with
    more than one corpus), the abstain threshold of each sweep, and the notes."""
    many = len(t.corpora) > 1
    sections = [[f"### Mean across the {len(t.corpora)} corpora"], mean_table(t)] if many else []
    verdict = verdict_table(t)
    sections += [[f"### `default` against `{BEFORE}`, and the targets"], verdict] if verdict else []
    for key in FITTED:
        fitted = fitted_table(t, key)
        sections += [[f"### `{key}`, fitted: leave-one-corpus-out"], fitted] if fitted else []
    for c in t.corpora:
        sections += [[f"### {_corpus_title(c.corpus)}"]] if many else []
        sections += [main_table(c), kind_table(c), refusal_table(c), signal_table(c)]
    for swept in t.sweeps:
        sections += [["### Abstain threshold"]] if many else []
        sections.append(sweep_table(swept))
    answers = answer_targets_table(t)
    if answers:
        sections += ([["### Answers: the fact, short, and a refusal each handbook fits"]] if many else []) + [answers]
    sections += table_notes(t)
    return "\n\n".join("\n".join(section) for section in sections if section) + "\n"


def _corpus_title(name: str) -> str:
    docs = next((c.docs for c in CORPORA if c.name == name), None)
    return name if docs is None else f"{name} (`{docs}`)"


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


def _share(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


def _run_name(row: Row) -> str:
    return f"`{row.label}`" + ("" if row.gold_checked else " °")


def verdict_table(t: Tables) -> list[str]:
    """For each corpus and the mean: the headline metrics of `default` and of BEFORE (the
    shipped default before it), the change with the paired test's p-value, and each
    TARGETS entry, met or missed by how much. None without both runs."""
    groups = [(c.corpus, {r.label: r for r in c.rows}) for c in t.corpora]
    if t.mean:
        groups.append(("mean", {r.label: r for r in t.mean}))
    if not all("default" in rows and BEFORE in rows for _, rows in groups):
        return []
    intro = (
        f"Each corpus and the mean across them: `{BEFORE}` (the shipped default before passage vectors and score fusion) and "
        "`default` (95% intervals), the change and the p-value of the paired test, and the target: met (✓) or missed by how much. "
        "Answer ok is over all questions, as in every table here: an unanswerable question is answered right by a refusal."
    )
    lines = []
    for name, rows in groups:
        new, old = rows["default"], rows[BEFORE]
        for metric in TARGETS:
            if metric == "semantic":
                a, b = old.by_kind.get("semantic"), new.by_kind.get("semantic")
            else:
                a, b = old.overall[metric], new.overall[metric]
            if a is None or b is None or a.value is None or b.value is None:
                continue
            goal, sense = TARGETS[metric]
            short = (goal - b.value) if sense == "min" else (b.value - goal)
            target = f"{'≥' if sense == 'min' else '≤'} {goal:g}: " + ("✓" if short <= 1e-9 else f"missed by {short:.2f}")
            p = "–" if a.p is None else f"{a.p:.3f}"
            label = "semantic MRR" if metric == "semantic" else next(h for h, m in MAIN_COLUMNS + REFUSAL_COLUMNS if m == metric)
            lines.append(
                [
                    name,
                    label,
                    _show_cell(Cell(a.value, a.interval, None)),
                    _show_cell(Cell(b.value, b.interval, None)),
                    f"{b.value - a.value:+.2f}",
                    p,
                    target,
                ]
            )
    return [intro, "", *_table(["corpus", "metric", f"`{BEFORE}`", "`default`", "change", "p", "target"], lines)]


# The answer stage's targets (issue 22): answer ok of answerable questions at least recall@1 + ANSWER_OVER_RECALL
# on every corpus and ANSWER_OK_MEAN on the mean; answers' median and nine-in-ten lengths; and, from the
# sweep, each corpus left out: refused unanswerable at least REFUSED_UNANSWERABLE at most REFUSAL_BUDGET
# of its answerable ones refused.
ANSWER_OVER_RECALL = 0.10
ANSWER_OK_MEAN = 0.65
WORDS_P50, WORDS_P90 = 60, 120
REFUSED_UNANSWERABLE = 0.50
REFUSAL_BUDGET_TARGET = 0.125


def _goal(value: float | None, goal: float, sense: str, digits: int = 2) -> str:
    if value is None:
        return "–"
    short = (goal - value) if sense == "min" else (value - goal)
    return f"{value:.{digits}f} " + ("✓" if short <= 1e-9 else f"(missed by {short:.{digits}f})")


def answer_targets_table(t: Tables) -> list[str]:
    """For each corpus's `default` run: answer ok of answerable questions against recall@1 +
    ANSWER_OVER_RECALL, the answers' median and 90th-percentile length in words (refusals aside,
    markers not counted), and the refusal rates with the abstain threshold chosen on the other
    corpora (the first sweep's `loco`); the mean of answer ok against ANSWER_OK_MEAN. Each
    target met (✓) or missed by how much. None without default runs that record answer lengths."""
    rows = [(name, agg) for name, agg in t.defaults if agg.get("answer_ok_answerable") is not None and "words_p50" in agg]
    if not rows:
        return []
    loco = {c["name"]: c.get("loco") for c in t.sweeps[0]["corpora"]} if t.sweeps else {}
    lines = []
    for name, agg in rows:
        r1 = agg["recall@1"]
        held = loco.get(name) or {}
        lines.append(
            [
                name,
                f"{r1:.2f}",
                _goal(agg["answer_ok_answerable"], r1 + ANSWER_OVER_RECALL, "min"),
                _goal(agg["words_p50"], WORDS_P50, "max", 0),
                _goal(agg["words_p90"], WORDS_P90, "max", 0),
                _goal(held.get("refused_when_unanswerable"), REFUSED_UNANSWERABLE, "min"),
                _goal(held.get("refused_when_answerable"), REFUSAL_BUDGET_TARGET, "max"),
            ]
        )
    if len(rows) > 1:
        mean = sum(agg["answer_ok_answerable"] for _, agg in rows) / len(rows)
        lines.append(["mean", "", _goal(mean, ANSWER_OK_MEAN, "min"), "", "", "", ""])
    intro = (
        f"The `default` run. Answer ok here is over answerable questions, against recall@1 + {ANSWER_OVER_RECALL:g} (the answer should "
        f"hold the fact more often than the right section is ranked first) and {ANSWER_OK_MEAN:g} on the mean; words: the answers' "
        f"median and 90th percentile (refusals aside, `[n]` not counted), against {WORDS_P50} and {WORDS_P90}; refusals: each corpus "
        f"left out, at the abstain threshold chosen on the others (the sweep's leave-one-corpus-out), against {REFUSED_UNANSWERABLE:g} "
        f"of the unanswerable refused at most {REFUSAL_BUDGET_TARGET:g} of the answerable. ✓ met, else missed by how much."
    )
    head = [
        "corpus",
        "recall@1",
        "answer ok (answerable)",
        "words p50",
        "words p90",
        "unanswerable refused (left out)",
        "answerable refused (left out)",
    ]
    return [intro, "", *_table(head, lines)]


def fitted_table(t: Tables, key: str) -> list[str]:
    """A fitted value's leave-one-corpus-out check: for each corpus, the value (among the
    FITTED runs) with the best mean FIT_METRIC on the other corpora, and its FIT_METRIC on
    the corpus left out, next to the shipped value's (in-sample). None with fewer than three
    corpora or a run missing."""
    labels = FITTED[key]
    measured = {c.corpus: {r.label: r.overall[FIT_METRIC].value for r in c.rows if r.label in labels} for c in t.corpora}
    if len(measured) < 3 or any(set(by) != set(labels) or None in by.values() for by in measured.values()):
        return []
    scores = {corpus: {label: float(v) for label, v in by.items() if v is not None} for corpus, by in measured.items()}
    value = {label: RUNS[label][key] for label in labels}
    lines = []
    for held, by in scores.items():
        others = [o for o in scores if o != held]
        pick = max(labels, key=lambda label: (sum(scores[o][label] for o in others), -labels.index(label)))
        alone = max(labels, key=lambda label: (by[label], -labels.index(label)))
        lines.append(
            [held, f"{value[alone]:g}", f"{value[pick]:g}", f"{by[pick]:.2f}", f"{by['default']:.2f}", f"{by[pick] - by['default']:+.2f}"]
        )
    metric = next(h for h, m in MAIN_COLUMNS if m == FIT_METRIC)
    intro = (
        f"`{key}` is chosen among {', '.join(f'{value[label]:g}' for label in labels)} (runs {', '.join(f'`{x}`' for x in labels)}) by the "
        f"mean {metric} across corpora; the shipped value is `default`'s, {value['default']:g}. Left out in turn, each corpus gets the value "
        f"the other corpora choose:"
    )
    head = ["corpus", "best on it alone", "chosen on the others", f"{metric} at that value", f"{metric} at the shipped value", "difference"]
    return [intro, "", *_table(head, lines)]


def mean_table(t: Tables) -> list[str]:
    """The headline metrics and refusals averaged over the corpora; none for one corpus."""
    if not t.mean:
        return []
    names = ", ".join(c.corpus for c in t.corpora)
    intro = (
        f"The macro average over {names}: each corpus weighs the same, "
        "whatever its number of questions; runs made on every corpus. 95% intervals from a bootstrap that resamples questions "
        f"within each corpus; {MARK} where a paired randomisation test on the macro-mean difference against `default` (signs "
        "flipped per question, each question weighted 1/n of its corpus) gives p < 0.05."
    )
    columns = MAIN_COLUMNS + REFUSAL_COLUMNS
    rows = [[_run_name(r), *(_show_cell(r.overall[m]) for _, m in columns)] for r in t.mean]
    return [intro, "", *_table(["run", *(title for title, _ in columns)], rows)]


def main_table(c: Comparison) -> list[str]:
    """The headline metrics, one row a run, with the median latency."""
    counts = c.counts
    intro = (
        f"Scored against `{c.golden['source']}` (sha256 `{c.golden['sha256'][:12]}`): {counts['questions']} questions, "
        f"{counts['answerable']} answerable and {counts['unanswerable']} unanswerable. Retrieval metrics and citations on target "
        f"over the answerable questions at cutoff {CUTOFF}; answer ok over all (every `answer_contains` phrase in at most "
        f"{irmetrics.LONG_WORDS} words; refusing is the right answer to an unanswerable one); ms p50 is the median time per question, search and answer. 95% percentile-bootstrap intervals over questions in "
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
    """The abstain threshold: chosen on all corpora, and left out corpus by corpus.

    A row per corpus: the threshold its own questions alone would choose and the share of its
    unanswerable questions refused there (the most a threshold fitted to each handbook on this
    signal could refuse within the budget: the ceiling of a per-handbook calibration); the shipped
    threshold (chosen on all) and its rates there; the threshold chosen on the other
    corpora and its rates there. Then the mean over the corpora."""
    corpora, chosen, loco = swept["corpora"], swept["chosen"], swept.get("loco")
    intro = (
        f"From the `{swept['label']}` runs; refuse when confidence < t. The rule: on every corpus, at "
        f"most {swept['rule']['budget']:g} of its answerable questions wrongly refused; within that, the most unanswerable "
        "questions refused, then the fewest answerable ones. Chosen on "
        f"{f'all {len(corpora)} corpora' if len(corpora) > 1 else 'this corpus'} (in-sample, the shipped threshold), and on the "
        "others alone, measured on the corpus left out (leave-one-corpus-out). The threshold each corpus's own questions "
        "would choose, and the unanswerable share it refuses there, is the most any threshold fitted to one handbook could reach:"
    )
    rates = [title for title, _ in RATE_COLUMNS]
    head = ["corpus", "t on it alone", "unanswerable refused there", "t on all", *rates, "t on the others", *rates]
    rows = []
    for c in corpora:
        held = c.get("loco")
        out = [
            f"{c['name']} ({c['counts']['questions']})",
            f"{c['alone']['threshold']:.2f}",
            _share(c["alone"]["refused_when_unanswerable"]),
            f"{chosen['threshold']:.2f}",
        ]
        out += [_share(c["chosen"][k]) for _, k in RATE_COLUMNS]
        out += ["–"] * 4 if held is None else [f"{held['threshold']:.2f}", *(_share(held[k]) for _, k in RATE_COLUMNS)]
        rows.append(out)
    if len(corpora) > 1:
        spread = [c["loco"]["threshold"] for c in corpora if c.get("loco")]
        # None: a corpus with no unanswerable question
        ceiling = _share(irmetrics.mean_or_none(r for c in corpora if (r := c["alone"]["refused_when_unanswerable"]) is not None))
        mean = ["mean", "", ceiling, f"{chosen['threshold']:.2f}", *(_share(chosen[k]) for _, k in RATE_COLUMNS)]
        mean += ["–"] * 4 if not loco else [f"{min(spread):.2f}–{max(spread):.2f}", *(_share(loco[k]) for _, k in RATE_COLUMNS)]
        rows.append(mean)
    return [intro, "", *_table(head, rows)]


def table_notes(t: Tables) -> list[list[str]]:
    """The footnotes the marks in the tables need, each a section of one line."""
    notes = []
    if any(cell.differs for r in t.rows for cell in (*r.overall.values(), *r.by_kind.values())):
        resamples = t.corpora[0].resamples
        notes.append(
            f"{MARK} differs from `default` at p < {ALPHA} (two-sided paired randomisation test on per-question values, "
            f"{resamples:,} seeded sign flips)."
        )
    if any(not r.gold_checked for r in t.rows):
        notes.append("° gold chunk ids taken as labelled, not checked against this run's chunking (scored without --corpus-chunks).")
    return [[note] for note in notes]


def replace_tables(page: str, tables: str, source: str) -> str:
    """The markdown `page` with the text between BEGIN and END replaced by `tables`."""
    start, end = page.find(BEGIN), page.find(END)
    if start < 0 or end < start or page.count(BEGIN) != 1 or page.count(END) != 1:
        raise StageError(f"needs one '{BEGIN}' line and one '{END}' line after it", source)
    return page[: start + len(BEGIN)] + "\n" + tables + page[end:]
