"""runs: what `just eval` runs and measures: the corpora, each run's configuration and flags, the metrics.

A library, not a stage (rag_eval alone uses it). Everything that names a run lives
here, once: `rag-eval plan` prints CORPORA x RUNS with each run's flags, and the
justfile's `eval` recipe loops over that, so a run is declared as a configuration in
RUNS and nowhere else.

    >>> run_flags(RUNS["bm25"])["search"]
    ['--no-dense']

A configuration maps each CONFIG_KEYS name to a value. Answer records show it: the
retrieval keys in their `retrieval` field, the answer stage's (`features`, `threshold`,
`context`) in `generator` (`Key.holder`). A key added after some records were written
has a value for its absence (`Key.absent`), so an older record reads as that value. The
keys come from the options declared in `ragline.options` that answer records show
(`recorded`): to add a key, declare the option there; to add a run: one line in RUNS. A run
scored under a label of its own (not in RUNS) is recorded with the configuration its
records show, and nothing is checked against a name.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ragline import options
from ragline.answer import reader
from ragline.eval.golden import show
from ragline.records import ANSWER_FEATURES, Line, StageError, require_field

CUTOFF = 5  # every retrieval metric looks at the top 5 hits at most; runs must retrieve k >= 5
RESAMPLES = 10_000  # bootstrap resamples and randomisation-test permutations
SEED = 20_240_611
LEVEL = 0.95  # interval coverage

FEATURES = ANSWER_FEATURES  # the extractive generator's switches, one ablation each
QUESTIONS = 0  # rag-expand's questions a chunk in the shipped pipeline: none (README's pipeline has no rag-expand)
RERANK_DEPTH = 0  # rag-rerank's depth in the shipped pipeline: none (README's pipeline has no rag-rerank)
STAGES = options.PIPELINE  # rag-chunk ... rag-answer: the plan's flag columns

# --------------------------------------------------------------------------- corpora


@dataclass(frozen=True)
class Corpus:
    """A handbook and its golden set: results go to results/NAME/, paths are from the repository's root."""

    name: str
    docs: str
    golden: str


CORPORA = (
    Corpus("northwind", "corpus", "golden.yaml"),
    Corpus("eng-practices", "../shared/corpora/eng-practices/docs", "eval/eng-practices.golden.yaml"),
    Corpus("gds-way", "../shared/corpora/gds-way/docs", "eval/gds-way.golden.yaml"),
    Corpus("sourcegraph", "eval/corpora/sourcegraph/docs", "eval/sourcegraph.golden.yaml"),
    Corpus("gitlab", "eval/corpora/gitlab/docs", "eval/gitlab.golden.yaml"),
)


def corpus_order(name: str) -> tuple[int, str]:
    """A sort key: CORPORA's order, then any other corpus by name."""
    known = [c.name for c in CORPORA]
    return (known.index(name), "") if name in known else (len(known), name)


# --------------------------------------------------------------------------- configuration keys

REQUIRED = options.REQUIRED  # a Key.absent: records must show the key


def _features_off(value: Sequence[str]) -> list[str]:
    off = options.get("off").flag
    return [flag for f in FEATURES if f not in value for flag in (off, f)]


@dataclass(frozen=True)
class Key:
    """One configuration key: its name in answer records; its shipped value (the stages'
    own default, DEFAULT_RUN's); the stages (of STAGES) that take its flags, and those
    flags for a value; the value a record without the key means (one written before
    the key existed; REQUIRED: none, the record is refused); and the answer record's
    field that holds it."""

    name: str
    default: Any
    stages: tuple[str, ...]
    flags: Callable[[Any], list[str]]
    absent: Any = REQUIRED
    holder: str = "retrieval"


# The order result files show the keys in (their `actual`), kept from the files already
# written; a key not named here follows, in the declarations' order.
ORDER = (
    "model", "dense", "sparse", "rerank", "embed_headings", "embed_long", "window", "fusion", "dense_weight",
    "passages", "questions", "exact", "k", "candidates", "rrf_k", "features", "threshold", "context",
)  # fmt: skip


def _keys() -> tuple[Key, ...]:
    """A key per recorded option (`ragline.options.recorded`): its default, its absent value, the
    record field that shows it; its flags go to the first pipeline stage that takes it (rag-search,
    not rag-answer, for a retrieval option), and to each stage with an option of that name
    (--no-passages: rag-embed makes no passage vectors, rag-search uses none). Then `features`,
    which records the extractive features left on by --off."""
    declared: dict[str, list[options.Option]] = {}
    for option in options.recorded():
        declared.setdefault(option.name, []).append(option)
    keys = []
    for name, same in declared.items():
        first = same[0]
        if any((o.default, o.absent, o.recorded) != (first.default, first.absent, first.recorded) for o in same):
            raise ValueError(f"the options named {name!r} must agree on their default, absent value and record field")
        stages = tuple(next(s for s in STAGES if s in o.stages) for o in same)
        keys.append(Key(name, first.default, stages, first.args, first.absent, first.recorded or "retrieval"))
    keys.append(Key("features", list(FEATURES), ("answer",), _features_off, holder="generator"))
    # rag-expand's questions a chunk (0: the pipeline has no rag-expand, its default); the index records them
    keys.append(Key("questions", QUESTIONS, ("expand",), lambda n: ["--questions", str(n)], absent=0))
    # rag-rerank's depth (0: the pipeline has no rag-rerank, its default); a run with it retrieves as many (its `k`)
    keys.append(Key("rerank_depth", RERANK_DEPTH, ("rerank",), lambda n: ["--depth", str(n)], absent=0))
    rank = {name: n for n, name in enumerate(ORDER)}
    return tuple(sorted(keys, key=lambda k: rank.get(k.name, len(ORDER))))


CONFIG_KEYS: tuple[Key, ...] = _keys()

# The shipped configuration: each key's default, which is the stages' own, so a run's
# flags are the keys where it differs from this. Every other run is this with one thing
# changed, so moving the default (once measurement decides it) is an edit of a Key's
# default here and of the stage's option.
DEFAULT_RUN: dict[str, Any] = {key.name: key.default for key in CONFIG_KEYS}


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
    # the shipped default before score fusion and passage vectors: dense alone over chunk vectors, then the rerank
    "old-default": _variant(sparse=False, passages=False, fusion="rrf", dense_weight=0.5),
    "no-passages": _variant(passages=False),  # chunk vectors only
    "dense": _variant(sparse=False),  # no BM25: dense (with passages) and the rerank
    "rrf": _variant(fusion="rrf"),  # BM25 fused by reciprocal rank instead of by score
    "exact": _variant(exact=True),  # chunks holding the question's identifiers whole lifted
    **{f"dense-{w:g}": _variant(dense_weight=w) for w in (0.7, 0.8, 0.95)},  # the fitted weight's neighbours
    "threshold-0": _variant(threshold=0.0),  # what the abstain sweep walks: only the answer stage's own refusals
    "bm25": _variant(dense=False),  # BM25 alone over the default index
    "hash": _variant(model="hash"),
    "hash-dense": _variant(model="hash", sparse=False),
    "window-120": _variant(window=120),
    "window-300": _variant(window=300),
    **{f"answer-no-{f}": _variant(features=_without(f)) for f in FEATURES},
    # rag-expand at its default count of questions a chunk, written by the local model and embedded as passages;
    # and the same without BM25: what the questions do for dense alone
    "expand": _variant(questions=options.default("questions", "expand")),
    "expand-dense": _variant(questions=options.default("questions", "expand"), sparse=False),
    # every reader of the registry that runs the local model (`just eval-llm`), as `local-NAME`: the model judging
    # the extractive reader's best pieces, scoring spans, or writing the answer (a writer uses no extractive feature)
    **{f"local-{k.name}": _variant(reader=k.name, **({"features": []} if k.writes else {})) for k in reader.REGISTRY.values() if k.local},
    # rag-rerank at its default depth over as many hits of rag-search: the local model reordering what retrieval found
    "local-rerank": _variant(k=options.default("depth", "rerank"), rerank_depth=options.default("depth", "rerank")),
}

# The runs of the local model: minutes to hours where the others take seconds, and a model of ~0.5-1.1 GB
# (`just llm-model`), so the plan leaves them out unless named (`rag-eval plan local-judge`, `just eval-llm`):
# the local readers, and rag-expand's questions written for every chunk (an index's build, once a corpus: cached).
LOCAL_RUNS: tuple[str, ...] = tuple(
    label
    for label, config in RUNS.items()
    if (config.get("reader") in reader.REGISTRY and reader.REGISTRY[config["reader"]].local)
    or config.get("questions", QUESTIONS) != QUESTIONS
    or config.get("rerank_depth", RERANK_DEPTH) != RERANK_DEPTH
)

# Runs of the default configuration on another file of the default model, made beside the plan
# (`just eval-qint8`), each labelled with the RAG_MODEL_WEIGHTS it ran with. Their results record
# the file that ran (`run.model_sha256`); the configuration keys cannot tell them from `default`.
WEIGHTS_RUNS: tuple[str, ...] = ("qint8",)

# aggregate name -> (per-question row field, population it is averaged over)
METRICS: dict[str, tuple[str, str]] = {
    "recall@1": ("recall@1", "answerable"),
    "recall@3": ("recall@3", "answerable"),
    "recall@5": ("recall@5", "answerable"),
    "mrr": ("rr", "answerable"),
    "ndcg@5": ("ndcg@5", "answerable"),
    "answer_ok": ("answer_ok", "all"),
    "answer_ok_answerable": ("answer_ok", "answerable"),
    "citations_on_target": ("citations_on_target", "answerable"),
    "refused_when_unanswerable": ("refused", "unanswerable"),
    "refused_when_answerable": ("refused", "answerable"),
}
HEADLINE = ("recall@1", "recall@3", "mrr", "ndcg@5", "answer_ok", "citations_on_target")
INTERVAL_METRICS = (*HEADLINE, "refused_when_unanswerable", "refused_when_answerable")


# --------------------------------------------------------------------------- flags and the plan


def _value(config: dict[str, Any], key: Key) -> Any:
    return config.get(key.name, None if key.absent is REQUIRED else key.absent)


def _same(key: str, a: Any, b: Any) -> bool:
    if key == "features":
        return sorted(a or []) == sorted(b or [])
    return a == b and type(a) is type(b)


def run_flags(config: dict[str, Any]) -> dict[str, list[str]]:
    """Each stage's flags (STAGES) for a configuration: the flags of every key whose value
    differs from DEFAULT_RUN's, since the stages' defaults are DEFAULT_RUN. A key the
    configuration lacks takes its `absent` value. A reader that writes (`Kind.writes` in the
    registry) uses none of the extractive features and its records show none: no `--off` flags
    say so."""
    flags: dict[str, list[str]] = {stage: [] for stage in STAGES}
    kind = reader.REGISTRY.get(config.get("reader", "extractive"))
    writes = kind is not None and kind.writes
    for key in CONFIG_KEYS:
        value = _value(config, key)
        if key.name == "features" and writes:
            continue
        if not _same(key.name, value, DEFAULT_RUN[key.name]):
            for stage in key.stages:
                flags[stage] += key.flags(value)
    return flags


@dataclass(frozen=True)
class Planned:
    """One run of the plan: a RUNS label on a corpus, with its stages' flags."""

    corpus: Corpus
    label: str
    flags: dict[str, list[str]]

    def tsv(self) -> str:
        """corpus, label, docs, golden, then the flags of each of STAGES (shell-quoted), tab-separated."""
        fields = [self.corpus.name, self.label, self.corpus.docs, self.corpus.golden]
        return "\t".join(fields + [shlex.join(self.flags[stage]) for stage in STAGES])


def plan(names: Iterable[str] = (), present: Callable[[str], bool] = os.path.isdir) -> tuple[list[Planned], list[Corpus]]:
    """The runs to make, corpus by corpus in CORPORA order, label by label in RUNS order,
    and the corpora skipped because `present(corpus.docs)` is false.

    `names` narrows the plan: a RUNS label keeps only the labels named, a corpus name
    only the corpora named; none of either kind keeps all of that kind, but the LOCAL_RUNS,
    which run only when named. A name that is neither is a ValueError.
    """
    names = list(names)
    corpora = {c.name: c for c in CORPORA}
    unknown = [n for n in names if n not in RUNS and n not in corpora]
    if unknown:
        raise ValueError(f"'{unknown[0]}' is neither a run ({', '.join(RUNS)}) nor a corpus ({', '.join(corpora)})")
    labels = [label for label in RUNS if label in names] or [label for label in RUNS if label not in LOCAL_RUNS]
    chosen = [c for c in CORPORA if c.name in names] or list(CORPORA)
    absent = [c for c in chosen if not present(c.docs)]
    runs = [Planned(c, label, run_flags(RUNS[label])) for c in chosen if c not in absent for label in labels]
    return runs, absent


# --------------------------------------------------------------------------- the configuration a run shows


def run_config(record: dict[str, Any], where: Line | str) -> dict[str, Any]:
    """The configuration an answer record shows: the CONFIG_KEYS in its `retrieval`, and
    its `generator.features` (in FEATURES order, unknown names after them, sorted). A key
    the record lacks is its `absent` value, or a StageError where it is REQUIRED."""
    retrieval = require_field(record, "retrieval", dict, where)
    generator = legacy_reader(require_field(record, "generator", dict, where))
    config = {}
    for key in CONFIG_KEYS:
        name, holder = key.holder, generator if key.holder == "generator" else retrieval
        if key.name in holder:
            config[key.name] = holder[key.name]
        elif key.absent is REQUIRED:
            raise StageError(f"field '{name}' has no '{key.name}'", str(where))
        else:
            config[key.name] = key.absent
    features = config["features"]
    if not isinstance(features, list) or not all(isinstance(f, str) for f in features) or len(set(features)) != len(features):
        raise StageError(f"generator.features must be distinct names, got {show(features)}", str(where))
    config["features"] = sorted(features, key=lambda f: (FEATURES.index(f), "") if f in FEATURES else (len(FEATURES), f))
    return config


def legacy_reader(generator: dict[str, Any]) -> dict[str, Any]:
    """A record's `generator` with its `reader`: one written before the registry shows `llm` and
    `local_mode` instead (`llm` local with `local_mode` judge is the reader judge)."""
    if "reader" in generator or "llm" not in generator:
        return generator
    try:
        named = reader.from_legacy(generator.get("llm"), generator.get("local_mode"))
    except KeyError:
        return generator
    return {k: v for k, v in generator.items() if k not in ("llm", "local_mode")} | {"reader": named}


def config_differences(expected: dict[str, Any], actual: dict[str, Any]) -> list[str]:
    """The CONFIG_KEYS on which two configurations differ (features compared as sets); a
    key either lacks is its `absent` value; one from before the reader registry reads as its reader
    (`legacy_reader`)."""
    expected, actual = legacy_reader(expected), legacy_reader(actual)
    return [key.name for key in CONFIG_KEYS if not _same(key.name, _value(expected, key), _value(actual, key))]


def matching_labels(actual: dict[str, Any]) -> list[str]:
    """The RUNS labels whose configuration the run shows."""
    return [label for label, config in RUNS.items() if not config_differences(config, actual)]


def check_config(label: str, actual: dict[str, Any], where: str, whose: str = "the run has") -> None:
    """StageError unless `actual` is what RUNS says `label` must be. A label RUNS does not
    name is the user's own: any configuration is its own."""
    if label not in RUNS:
        return
    expected = RUNS[label]
    keys = config_differences(expected, actual)
    if not keys:
        return
    differ = [key for key in CONFIG_KEYS if key.name in keys]
    want = ", ".join(f"{k.name} {show(_value(expected, k))}" for k in differ)
    got = ", ".join(f"{k.name} {show(_value(actual, k))}" for k in differ)
    others = matching_labels(actual)
    hint = f"label '{others[0]}' matches this run" if others else "no label in RUNS matches this run"
    raise StageError(f"label '{label}' expects {want}; {whose} {got} ({hint})", where)


def rounded(value: float | None) -> float | None:
    """A number as result files store it: six decimals (None stays None)."""
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
