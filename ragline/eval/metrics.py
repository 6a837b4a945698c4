"""metrics: the retrieval metrics, answer checks and statistics that rag-eval scores with.

A library, not a stage: pure functions over sequences and numpy arrays, with no I/O,
no click, no environment and no clock; it imports numpy and the standard library only.
Each function's docstring is its specification: the formula, the edge cases, and the
variant it implements where the literature has several. The ranking metrics are
cross-checked against ranx (tests/test_metrics.py, marked `reference`).

    >>> recall_at_k(["x", "a", "b"], {"a", "b"}, k=2)
    0.5
    >>> reciprocal_rank(["x", "a"], {"a"}, k=5)
    0.5

    ranking       recall_at_k, reciprocal_rank, ndcg_at_k
    answers       answer_ok, citations_on_target
    statistics    mean_or_none, bootstrap_interval, paired_randomisation, roc_auc,
                  macro_mean, macro_bootstrap_interval, macro_weights
    abstaining    thresholds, threshold_outcomes, choose_threshold, leave_one_group_out_choices, refusal_rates
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Sequence
from typing import Any

import numpy as np

_BATCH_VALUES = 4_000_000  # resampling draws at most this many values at once: bounded memory for large question sets

# --------------------------------------------------------------------------- ranking


def recall_at_k(ranked: Sequence[str], relevant: Collection[str], k: int) -> float:
    """Recall@k = |relevant ∩ ranked[:k]| / |relevant|.

    The share of the question's relevant (gold) ids that appear among the first k; an
    id listed twice counts once, and a ranking shorter than k is taken as it is.
    No relevant id: 0.0, not NaN. k < 1 is a ValueError.
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    gold = set(relevant)
    if not gold:
        return 0.0
    return len(gold.intersection(ranked[:k])) / len(gold)


def reciprocal_rank(ranked: Sequence[str], relevant: Collection[str], k: int) -> float:
    """RR@k = 1 / rank of the first relevant id within ranked[:k] (ranks from 1).

    No relevant id in the first k, or no relevant id at all: 0.0. The mean over
    questions is MRR@k (ranx's "mrr@k").
    """
    gold = set(relevant)
    for rank, item in enumerate(ranked[:k], 1):
        if item in gold:
            return 1.0 / rank
    return 0.0


def ndcg_at_k(ranked: Sequence[str], relevant: Collection[str], k: int) -> float:
    """nDCG@k with binary gain: DCG@k / IDCG@k.

        DCG@k  = sum over i = 1..k of rel_i / log2(i + 1),  rel_i = 1 if ranked[i] is relevant else 0
        IDCG@k = sum over i = 1..min(|relevant|, k) of 1 / log2(i + 1)

    Järvelin & Kekäläinen's (2002) cumulated gain with the log2(i + 1) discount from
    rank 1, as in trec_eval and ranx's `ndcg`; with binary gain it equals Burges et
    al.'s (2005) 2^rel - 1 variant. A relevant id listed twice gains only at its first
    rank, so the value stays in [0, 1]. No relevant id: 0.0, not NaN.
    """
    gold = set(relevant)
    if not gold:
        return 0.0
    seen: set[str] = set()
    dcg = 0.0
    for rank, item in enumerate(ranked[:k], 1):
        if item in gold and item not in seen:
            seen.add(item)
            dcg += 1.0 / math.log2(rank + 1)
    ideal = sum(1.0 / math.log2(rank + 1) for rank in range(1, min(len(gold), k) + 1))
    return dcg / ideal


# --------------------------------------------------------------------------- answers


def _fold(text: str) -> str:
    return " ".join(text.casefold().split())


LONG_WORDS = 100  # an answer longer than this holds its fact among filler: wrong (issue 36; the user's attention is ~60 words)


def answer_ok(answer: str, refused: bool, phrases: Sequence[str], answerable: bool, words: int | None = None) -> bool:
    """Did the answer stage do the right thing?

    Answerable: not refused, every phrase occurs in the answer, compared
    case-insensitively (casefold) with runs of whitespace folded to one space, and the
    answer's `words` (where given) at most LONG_WORDS. Unanswerable: refused. An
    answerable question with no phrases needs only an answer.
    """
    if not answerable:
        return refused
    if refused or (words is not None and words > LONG_WORDS):
        return False
    text = _fold(answer)
    return all(_fold(p) in text for p in phrases)


def citations_on_target(cited_docs: Sequence[str | None], gold_docs: Collection[str]) -> float | None:
    """The share of an answer's citations whose document holds a gold chunk:
    |{c : doc(c) in gold docs}| / |citations|. A citation with no document (None) is off target.

    No citations: None (nothing to judge; not 0.0, which would read as "all off target").
    """
    if not cited_docs:
        return None
    targets = set(gold_docs)
    return sum(1 for doc in cited_docs if doc in targets) / len(cited_docs)


# --------------------------------------------------------------------------- statistics


def mean_or_none(values: Iterable[float]) -> float | None:
    """The arithmetic mean, sum(values) / n; None for no values (never NaN)."""
    values = list(values)
    return sum(values) / len(values) if values else None


def bootstrap_interval(
    values: Sequence[float] | np.ndarray, *, seed: int, resamples: int = 10_000, level: float = 0.95
) -> tuple[float, float] | None:
    """Percentile bootstrap interval of the mean (Efron & Tibshirani 1993, ch. 13).

    Draws `resamples` samples of n values with replacement (numpy's default_rng(seed),
    so the same values and seed give the same interval), takes each sample's mean, and
    returns the (1 - level) / 2 and (1 + level) / 2 quantiles of those means (numpy's
    default linear interpolation). The percentile kind: not BCa, not the basic
    (reverse-percentile) interval. No values: None. One value v: (v, v).
    """
    data = np.asarray(values, dtype=np.float64)
    if not len(data):
        return None
    means = _resampled_means(data, np.random.default_rng(seed), resamples)
    lo, hi = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


def _resampled_means(data: np.ndarray, rng: np.random.Generator, resamples: int) -> np.ndarray:
    """The means of `resamples` samples of len(data) values drawn with replacement, in batches."""
    n = len(data)
    means = np.empty(resamples, dtype=np.float64)
    batch = max(1, _BATCH_VALUES // n)
    for start in range(0, resamples, batch):
        stop = min(resamples, start + batch)
        means[start:stop] = data[rng.integers(0, n, size=(stop - start, n))].mean(axis=1)
    return means


def macro_mean(groups: Sequence[Sequence[float]]) -> float | None:
    """The macro average: the mean of the group means, (1 / G) * sum over g of mean(groups[g]).

    Each group (a corpus) weighs the same whatever its size; the micro average, which
    pools the values, would let the largest group dominate. No groups, or a group with
    no values: None (a mean that leaves a group out would not be the macro average).
    """
    if not groups or any(len(g) == 0 for g in groups):
        return None
    return sum(sum(g) / len(g) for g in groups) / len(groups)


def macro_bootstrap_interval(
    groups: Sequence[Sequence[float]], *, seed: int, resamples: int = 10_000, level: float = 0.95
) -> tuple[float, float] | None:
    """Percentile bootstrap interval of `macro_mean`, resampling within each group (stratified).

    Each of the `resamples` draws takes n_g values with replacement from each group g
    (of size n_g) and averages the G sample means, so every group stays in every draw
    with its own size; the interval is the (1 - level) / 2 and (1 + level) / 2
    quantiles of those macro means. Groups are drawn one after another from one
    default_rng(seed), each as `bootstrap_interval` draws, so one group gives exactly
    `bootstrap_interval`'s interval. Where `macro_mean` is None: None.
    """
    if macro_mean(groups) is None:
        return None
    rng = np.random.default_rng(seed)
    means = np.mean([_resampled_means(np.asarray(g, dtype=np.float64), rng, resamples) for g in groups], axis=0)
    lo, hi = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


def paired_randomisation(
    a: Sequence[float], b: Sequence[float], *, seed: int, resamples: int = 10_000, weights: Sequence[float] | np.ndarray | None = None
) -> float:
    """Two-sided p-value of a paired (sign-flip) randomisation test for a weighted mean of b - a = 0.

    a[i] and b[i] are two runs' values on the same question i; d = b - a; the statistic
    is T(s) = |sum over i of w_i * s_i * d_i|, with w_i = 1 / n (the mean difference)
    unless `weights` are given (`macro_weights`: the macro-mean difference). Under the
    null hypothesis each d_i is as likely to have the other sign, so
        p = (1 + #{r : T(s_r) >= T(1) - 1e-12}) / (1 + resamples)
    over `resamples` draws of random signs s_r in {-1, +1}^n from default_rng(seed)
    (the approximate randomisation test that Smucker, Allan & Carterette, CIKM 2007,
    recommend for IR evaluation; the +1s count the observed signs as one draw, so p > 0).
    Two-sided: a difference either way counts. No pairs, or no difference at all: 1.0.
    """
    d = np.asarray(b, dtype=np.float64) - np.asarray(a, dtype=np.float64)
    n = len(d)
    if n == 0 or not np.any(d):
        return 1.0
    w = np.full(n, 1.0 / n) if weights is None else np.asarray(weights, dtype=np.float64)
    if w.shape != d.shape:
        raise ValueError(f"{len(w)} weights for {n} pairs")
    wd = w * d
    observed = abs(wd.sum())
    rng = np.random.default_rng(seed)
    hits = 0
    batch = max(1, _BATCH_VALUES // n)
    for start in range(0, resamples, batch):
        size = min(resamples, start + batch) - start
        signs = rng.integers(0, 2, size=(size, n), dtype=np.int8) * 2 - 1
        hits += int(np.count_nonzero(np.abs(signs @ wd) >= observed - 1e-12))
    return (1 + hits) / (1 + resamples)


def macro_weights(sizes: Sequence[int]) -> np.ndarray:
    """Per-item weights that turn a weighted sum into `macro_mean`: each of the n_g items of
    group g weighs 1 / (G * n_g), over the G groups with any items; concatenated in
    group order. For `paired_randomisation` over pairs listed group by group."""
    filled = [n for n in sizes if n > 0]
    return np.concatenate([np.full(n, 1.0 / (len(filled) * n) if n else 0.0) for n in sizes]) if filled else np.zeros(0)


def roc_auc(positive: Sequence[float] | np.ndarray, negative: Sequence[float] | np.ndarray) -> float | None:
    """ROC AUC of a score for telling positive from negative cases, in its Mann-Whitney form:

        AUC = (#{(p, n) : p > n} + #{(p, n) : p = n} / 2) / (|positive| * |negative|)

    over all pairs of a positive and a negative score (ties count half). 1.0: every
    positive scores above every negative; 0.5: no better than chance; 0.0: every one
    below. Either class empty: None.
    """
    pos = np.asarray(positive, dtype=np.float64)
    neg = np.asarray(negative, dtype=np.float64)
    if not len(pos) or not len(neg):
        return None
    greater = (pos[:, None] > neg[None, :]).sum()
    ties = (pos[:, None] == neg[None, :]).sum()
    return float((greater + ties / 2) / (len(pos) * len(neg)))


# --------------------------------------------------------------------------- abstaining


def thresholds(step: float) -> np.ndarray:
    """The grid 0, step, 2 step, ..., 1 (as i / steps, so 0.4 is exactly 0.4); `step`
    must divide 1, else ValueError."""
    steps = round(1 / step)
    if steps < 1 or abs(steps * step - 1) > 1e-9:
        raise ValueError(f"step {step} does not divide 1")
    return np.arange(steps + 1) / steps


def threshold_outcomes(
    grid: np.ndarray, confidence: np.ndarray, answerable: np.ndarray, ran_ok: np.ndarray, ran_refused: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """What each threshold t of `grid` would do to each question q: (refuse, ok), both [t, q].

        refuse[t, q] = confidence[q] < grid[t]  or  ran_refused[q]
        ok[t, q]     = not refuse[t, q] and ran_ok[q]       (answerable q)
                       refuse[t, q]                         (unanswerable q)

    The run is one made with no threshold (0): what it refused, it refused for its own
    reasons (a name the handbook never mentions, nothing in the context), at every t. An
    answerable question is ok when nothing refuses it and the run answered it right; an
    unanswerable one when something refuses it.
    """
    refuse = (confidence[None, :] < grid[:, None]) | ran_refused[None, :]
    ok = np.where(answerable[None, :], ~refuse & ran_ok[None, :], refuse)
    return refuse, ok


def choose_threshold(refuse: np.ndarray, answerable: np.ndarray, budget: float, groups: Sequence[Any] | np.ndarray | None = None) -> int:
    """The index of the threshold to ship on a grid, under the stated preference.

    `refuse[t, q]` says whether threshold t refuses question q (confidence < t);
    `groups` gives each question's group (its corpus; None: all one group).
      1. Budget, in every group: refused answerable <= budget * the group's answerable
         questions (+ 1e-9 for rounding). Pooled, one corpus's questions could pay for
         another's; each must hold on its own.
      2. Within it, the most unanswerable questions refused.
      3. Among those, the fewest answerable ones refused.
      4. What is left is a run of neighbouring thresholds that behave identically on
         these questions (both rates only grow with t); take its middle (the lower of
         two middles), which keeps the widest margin on both sides for questions not
         in the set, rather than an end that hugs one question's confidence.
    As refusals only grow with t, counting 2 and 3 pooled or as shares averaged over
    the groups picks the same thresholds. A population with no questions counts as
    nothing refused. Threshold 0 refuses nothing, so a grid that starts at 0 always
    has a choice; no threshold within the budget is a ValueError.
    """
    labels = np.zeros(refuse.shape[1], dtype=np.intp) if groups is None else np.asarray(groups)
    within = np.ones(refuse.shape[0], dtype=bool)
    for group in np.unique(labels):
        members = (labels == group) & answerable
        within &= refuse[:, members].sum(axis=1) <= budget * int(members.sum()) + 1e-9
    candidates = np.flatnonzero(within)
    if not len(candidates):
        raise ValueError("no threshold on the grid keeps within the budget")
    ref_a = refuse[:, answerable].sum(axis=1)
    ref_u = refuse[:, ~answerable].sum(axis=1)
    candidates = candidates[ref_u[candidates] == ref_u[candidates].max()]
    candidates = candidates[ref_a[candidates] == ref_a[candidates].min()]
    return int(candidates[(len(candidates) - 1) // 2])


def leave_one_group_out_choices(
    refuse: np.ndarray, answerable: np.ndarray, groups: Sequence[Any] | np.ndarray, budget: float
) -> dict[Any, int]:
    """For each group g (a corpus), the threshold index `choose_threshold` picks on the other
    groups alone, by the same rule, their budgets each held:
        choice[g] = choose_threshold(refuse[:, o], answerable[o], budget, groups[o]),  o = groups != g
    Applying choice[g] to g's questions measures the rule on a corpus it never saw
    (leave-one-corpus-out), less optimistic than choosing and measuring on the same
    questions. Fewer than two groups: {} (nothing to choose on).
    """
    labels = np.asarray(groups)
    names = np.unique(labels)
    if len(names) < 2:
        return {}
    out = {}
    for g in names:
        others = labels != g
        out[g.item()] = choose_threshold(refuse[:, others], answerable[others], budget, labels[others])
    return out


def refusal_rates(refused: np.ndarray, ok: np.ndarray, answerable: np.ndarray) -> dict[str, float | None]:
    """Three shares over one set of questions (boolean arrays, one entry per question):

        refused_when_unanswerable = mean(refused[~answerable])
        refused_when_answerable   = mean(refused[answerable])
        answer_ok                 = mean(ok)

    A share over no questions is None, not NaN.
    """

    def share(values: np.ndarray) -> float | None:
        return float(values.mean()) if len(values) else None

    return {
        "refused_when_unanswerable": share(refused[~answerable]),
        "refused_when_answerable": share(refused[answerable]),
        "answer_ok": share(ok),
    }
