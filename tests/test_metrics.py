"""irmetrics: each formula by hand, its invariants, and the cross-checks against reference
implementations (ranx for the ranking metrics, scipy for ROC AUC; marked `reference`)."""

from __future__ import annotations

import ast
import doctest
import math
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ragline.eval import metrics as irmetrics
from ragline.eval.metrics import (
    answer_ok,
    bootstrap_interval,
    choose_threshold,
    citations_on_target,
    leave_one_group_out_choices,
    macro_bootstrap_interval,
    macro_mean,
    macro_weights,
    mean_or_none,
    ndcg_at_k,
    paired_randomisation,
    recall_at_k,
    reciprocal_rank,
    refusal_rates,
    roc_auc,
    threshold_outcomes,
    thresholds,
)

SEED = 20_240_611  # rag_eval's seed: the intervals below are the ones rag-eval would report

# --------------------------------------------------------------------------- ranking


class TestRanking:
    def test_recall_counts_the_share_of_gold_in_the_top_k(self):
        ranked = ["x", "a", "y", "b"]
        assert recall_at_k(ranked, {"a", "b"}, 1) == 0.0
        assert recall_at_k(ranked, {"a", "b"}, 3) == 0.5
        assert recall_at_k(ranked, {"a", "b"}, 5) == 1.0  # a ranking shorter than k is taken as it is
        assert recall_at_k(["a"], {"a"}, 1) == 1.0

    def test_recall_edge_cases(self):
        assert recall_at_k(["a", "b"], set(), 3) == 0.0  # no relevant chunk: 0.0, not NaN
        assert recall_at_k([], {"a"}, 3) == 0.0
        assert recall_at_k(["a", "a", "x"], {"a", "b"}, 3) == 0.5  # listed twice, counted once
        with pytest.raises(ValueError):
            recall_at_k(["a"], {"a"}, 0)

    def test_reciprocal_rank(self):
        assert reciprocal_rank(["a", "x"], {"a"}, 5) == 1.0
        assert reciprocal_rank(["x", "y", "a", "b"], {"a", "b"}, 5) == pytest.approx(1 / 3)
        assert reciprocal_rank(["x", "y"], {"a"}, 5) == 0.0
        assert reciprocal_rank(["v", "w", "x", "y", "z", "a"], {"a"}, 5) == 0.0  # rank 6 is past the cutoff of 5
        assert reciprocal_rank(["v", "w", "x", "y", "z", "a"], {"a"}, 6) == pytest.approx(1 / 6)
        assert reciprocal_rank(["a"], set(), 5) == 0.0

    def test_ndcg_with_one_gold_chunk(self):
        assert ndcg_at_k(["a", "x"], {"a"}, 5) == 1.0
        assert ndcg_at_k(["x", "a"], {"a"}, 5) == pytest.approx(1 / math.log2(3))  # 0.6309
        assert ndcg_at_k(["x", "y", "z", "w", "a"], {"a"}, 5) == pytest.approx(1 / math.log2(6))  # 0.3869
        assert ndcg_at_k(["x", "y", "z", "w", "v", "a"], {"a"}, 5) == 0.0

    def test_ndcg_with_two_gold_chunks(self):
        ideal = 1 + 1 / math.log2(3)  # two ones at ranks 1 and 2: 1.6309
        assert ndcg_at_k(["a", "b"], {"a", "b"}, 5) == 1.0
        assert ndcg_at_k(["a", "x", "b"], {"a", "b"}, 5) == pytest.approx((1 + 0.5) / ideal)  # 0.9197
        assert ndcg_at_k(["x", "a", "y", "b"], {"a", "b"}, 5) == pytest.approx((1 / math.log2(3) + 1 / math.log2(5)) / ideal)
        assert ndcg_at_k(["a", "x"], {"a", "b"}, 5) == pytest.approx(1 / ideal)  # 0.6131

    def test_ndcg_edge_cases(self):
        assert ndcg_at_k(["a"], set(), 5) == 0.0  # no relevant chunk: 0.0, not NaN
        assert ndcg_at_k([], {"a"}, 5) == 0.0
        assert ndcg_at_k(["a", "a"], {"a", "b"}, 5) == pytest.approx(1 / (1 + 1 / math.log2(3)))  # a gains once
        six = ["a", "b", "c", "d", "e", "f"]
        assert ndcg_at_k(six[:5], set(six), 5) == 1.0  # the ideal has min(6, 5) = 5 ones
        assert ndcg_at_k(["x", "a"], {"a"}, 1) == 0.0  # k cuts the ranking, not only the ideal


@given(
    ranked=st.lists(st.sampled_from("abcdefgh"), max_size=8, unique=True),
    gold=st.sets(st.sampled_from("abcdefgh"), min_size=1, max_size=4),
)
def test_recall_is_monotone_in_k_and_ndcg_stays_in_0_1(ranked, gold):
    recalls = [recall_at_k(ranked, gold, k) for k in range(1, 9)]
    assert recalls == sorted(recalls)
    assert 0.0 <= ndcg_at_k(ranked, gold, 5) <= 1.0
    assert reciprocal_rank(ranked, gold, 5) > 0 or recall_at_k(ranked, gold, 5) == 0


@pytest.mark.reference
def test_metrics_agree_with_ranx():
    ranx = pytest.importorskip("ranx", reason="ranx is the reference implementation (pip install -e '.[reference]')")
    rng = np.random.default_rng(7)
    docs = [f"d{i:02d}" for i in range(30)]
    qrels, run, ours = {}, {}, {m: [] for m in ("recall@1", "recall@3", "recall@5", "mrr@5", "ndcg@5")}
    for q in range(50):
        qid = f"q{q:03d}"
        gold = list(rng.choice(docs, size=int(rng.integers(1, 5)), replace=False))
        ranked = list(rng.choice(docs, size=int(rng.integers(1, 11)), replace=False))
        qrels[qid] = {d: 1 for d in gold}
        run[qid] = {d: float(len(ranked) - i) for i, d in enumerate(ranked)}  # distinct scores, best first
        ours["recall@1"].append(recall_at_k(ranked, gold, 1))
        ours["recall@3"].append(recall_at_k(ranked, gold, 3))
        ours["recall@5"].append(recall_at_k(ranked, gold, 5))
        ours["mrr@5"].append(reciprocal_rank(ranked, gold, 5))
        ours["ndcg@5"].append(ndcg_at_k(ranked, gold, 5))
    theirs = ranx.evaluate(ranx.Qrels(qrels), ranx.Run(run), list(ours), return_mean=False)
    for metric, values in ours.items():
        assert np.allclose(values, theirs[metric]), metric
    assert 0.1 < np.mean(ours["recall@5"]) < 0.9  # the synthetic run is neither empty nor perfect


# --------------------------------------------------------------------------- answers


def test_answer_ok():
    assert answer_ok("Send an  IDEMPOTENCY\nkey.", False, ["idempotency key"], True)
    assert not answer_ok("Send a key.", False, ["idempotency key"], True)
    assert not answer_ok("Send an idempotency key.", False, ["idempotency key", "retry"], True)  # every phrase
    assert not answer_ok("idempotency key", True, ["idempotency key"], True)  # refused: not ok
    assert answer_ok("Anything.", False, [], True)  # no phrases: an answer is enough
    assert answer_ok("", True, [], False)  # unanswerable and refused
    assert not answer_ok("Yes, Apple Pay works.", False, [], False)
    assert answer_ok("Send an idempotency key.", False, ["idempotency key"], True, words=100)  # 100 words: short enough
    assert not answer_ok("Send an idempotency key.", False, ["idempotency key"], True, words=101)  # the fact among filler
    assert answer_ok("", True, [], False, words=500)  # a refusal has no length to judge


def test_citations_on_target():
    assert citations_on_target([], {"a"}) is None
    assert citations_on_target(["a", "b", "a"], {"a"}) == pytest.approx(2 / 3)
    assert citations_on_target(["b"], {"a"}) == 0.0
    assert citations_on_target([None], {"a"}) == 0.0


# --------------------------------------------------------------------------- statistics


class TestStatistics:
    def test_mean_or_none(self):
        assert mean_or_none([]) is None
        assert mean_or_none(iter([1.0, 0.0, 0.5])) == 0.5

    def test_bootstrap_interval(self):
        assert bootstrap_interval([], seed=SEED) is None
        assert bootstrap_interval([0.5], seed=SEED) == (0.5, 0.5)
        assert bootstrap_interval([1.0] * 10, seed=SEED) == (1.0, 1.0)
        values = [0.0] * 5 + [1.0] * 15
        lo, hi = bootstrap_interval(values, seed=SEED)
        assert 0.5 < lo < 0.75 < hi < 0.95
        assert bootstrap_interval(values, seed=SEED) == (lo, hi)  # seeded
        narrow = bootstrap_interval(values, seed=SEED, level=0.5)
        assert lo < narrow[0] < narrow[1] < hi  # the level is the coverage

    def test_bootstrap_batches_do_not_change_the_draws(self, monkeypatch):
        values = np.linspace(0, 1, 40)
        whole = bootstrap_interval(values, seed=3, resamples=500)
        monkeypatch.setattr(irmetrics, "_BATCH_VALUES", 40 * 7)  # 7 resamples a batch
        assert bootstrap_interval(values, seed=3, resamples=500) == whole

    def test_paired_randomisation(self):
        assert paired_randomisation([1, 0, 1], [1, 0, 1], seed=SEED) == 1.0
        assert paired_randomisation([], [], seed=SEED) == 1.0
        assert paired_randomisation([0.0] * 30, [1.0] * 30, seed=SEED) == 1 / 10_001  # only the observed signs are as extreme
        assert paired_randomisation([1.0] * 30, [0.0] * 30, seed=SEED) == 1 / 10_001  # two-sided: worse counts too
        assert paired_randomisation([0.0] * 30, [1.0, -1.0] * 15, seed=SEED) == 1.0  # mean difference 0
        one_better = [0.0] * 29 + [1.0]
        assert paired_randomisation([0.0] * 30, one_better, seed=SEED) > 0.5  # one question of thirty is no evidence
        assert paired_randomisation([0.0] * 30, one_better, seed=SEED) == paired_randomisation([0.0] * 30, one_better, seed=SEED)

    def test_paired_randomisation_approaches_the_exact_test(self):
        d = np.array([0.3, 0.1, -0.2, 0.5, 0.4, 0.2, -0.1, 0.6])
        signs = np.array(np.meshgrid(*[[-1, 1]] * len(d))).reshape(len(d), -1).T  # all 2^8 sign vectors
        exact = np.mean(np.abs((signs * d).mean(axis=1)) >= abs(d.mean()) - 1e-12)
        assert paired_randomisation(np.zeros(8), d, seed=SEED) == pytest.approx(exact, abs=0.01)

    def test_macro_mean_weighs_each_group_the_same(self):
        assert macro_mean([[1.0, 0.0], [1.0]]) == 0.75  # (0.5 + 1) / 2; the pooled mean would be 2/3
        assert macro_mean([[0.25, 0.75, 0.5]]) == 0.5  # one group: its mean
        assert macro_mean([]) is None and macro_mean([[1.0], []]) is None

    def test_macro_bootstrap_resamples_within_each_group(self):
        # every draw keeps each group whole in size: an all-0 and an all-1 group always average 0.5,
        # where a pooled bootstrap of the same five values would wander
        assert macro_bootstrap_interval([[0.0, 0.0, 0.0], [1.0, 1.0]], seed=SEED) == (0.5, 0.5)
        assert bootstrap_interval([0.0, 0.0, 0.0, 1.0, 1.0], seed=SEED) != (0.5, 0.5)
        values = [0.0] * 5 + [1.0] * 15
        assert macro_bootstrap_interval([values], seed=SEED) == bootstrap_interval(values, seed=SEED)  # one group
        lo, hi = macro_bootstrap_interval([values, [0.0, 1.0] * 10], seed=SEED)
        assert lo < macro_mean([values, [0.0, 1.0] * 10]) == 0.625 < hi
        assert macro_bootstrap_interval([values, []], seed=SEED) is None

    def test_macro_weights(self):
        assert macro_weights([2, 1]).tolist() == [0.25, 0.25, 0.5]
        assert macro_weights([2, 0, 1]).tolist() == [0.25, 0.25, 0.5]  # an empty group is no group
        assert macro_weights([0]).tolist() == [] and macro_weights([]).tolist() == []

    def test_paired_randomisation_on_the_macro_mean(self):
        # corpus A: four questions each 1 better; corpus B: one question 1 worse. Each corpus's mean moves
        # by as much the other way: the macro-mean difference is 0, so p = 1; the pooled mean (3/5) is not 0.
        a, b = np.zeros(5), np.array([1.0, 1.0, 1.0, 1.0, -1.0])
        assert paired_randomisation(a, b, seed=SEED, weights=macro_weights([4, 1])) == 1.0
        assert paired_randomisation(a, b, seed=SEED) == pytest.approx(12 / 32, abs=0.02)  # |sum of 5 signs| >= 3
        # exact: d = (1, 1 | 1), weights (1/4, 1/4 | 1/2); |T| >= 1 only when all three signs agree: 2 of 8
        assert paired_randomisation(np.zeros(3), np.ones(3), seed=SEED, weights=macro_weights([2, 1])) == pytest.approx(0.25, abs=0.015)
        # weights 1/n are the plain test, to the draw
        d = [0.3, -0.1, 0.5, 0.2, 0.0, 0.4]
        assert paired_randomisation(np.zeros(6), d, seed=SEED, weights=np.full(6, 1 / 6)) == paired_randomisation(np.zeros(6), d, seed=SEED)
        with pytest.raises(ValueError, match="2 weights for 3 pairs"):
            paired_randomisation(np.zeros(3), np.ones(3), seed=SEED, weights=[0.5, 0.5])

    def test_roc_auc_by_hand(self):
        # pairs (0.9>0.5, 0.9>0.1, 0.4<0.5, 0.4>0.1): 3 of 4
        assert roc_auc([0.9, 0.4], [0.5, 0.1]) == pytest.approx(0.75)
        assert roc_auc([0.5], [0.5]) == 0.5  # a tie counts half
        assert roc_auc([1, 2], [3]) == 0.0
        assert roc_auc([], [0.1]) is None and roc_auc([0.1], []) is None


@pytest.mark.reference
def test_roc_auc_agrees_with_scipys_mann_whitney_u():
    stats = pytest.importorskip("scipy.stats", reason="scipy (pulled in by ranx) is the reference for the Mann-Whitney U")
    rng = np.random.default_rng(11)
    for _ in range(20):
        pos = rng.integers(0, 6, size=int(rng.integers(1, 15))) / 5  # coarse values: many ties
        neg = rng.integers(0, 6, size=int(rng.integers(1, 15))) / 5
        u = stats.mannwhitneyu(pos, neg, alternative="two-sided").statistic
        assert roc_auc(pos, neg) == pytest.approx(u / (len(pos) * len(neg)))


# --------------------------------------------------------------------------- abstaining


def grid_choice(answerable_conf: list[float], unanswerable_conf: list[float], budget: float = 0.125) -> float:
    conf = np.array(answerable_conf + unanswerable_conf)
    answerable = np.array([True] * len(answerable_conf) + [False] * len(unanswerable_conf))
    grid = thresholds(0.01)
    return float(grid[choose_threshold(conf[None, :] < grid[:, None], answerable, budget)])


def two_corpora() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(confidence, answerable, corpus, grid) of two small corpora, A and B."""
    conf = np.array([0.6, 0.7, 0.8, 0.9, 0.2, 0.3, 0.7, 0.8, 0.9, 0.25, 0.4, 0.5])
    answerable = np.array([True] * 4 + [False] + [True] * 4 + [False] * 3)
    return conf, answerable, np.array(["A"] * 5 + ["B"] * 7), thresholds(0.01)


class TestAbstaining:
    def test_the_grid(self):
        grid = thresholds(0.01)
        assert len(grid) == 101 and grid[0] == 0.0 and grid[-1] == 1.0 and grid[40] == 0.4
        assert list(thresholds(0.25)) == [0.0, 0.25, 0.5, 0.75, 1.0]
        with pytest.raises(ValueError):
            thresholds(0.03)

    def test_one_answerable_in_eight_may_be_refused(self):
        # refusing both unanswerable (0.3, 0.5) costs the answerable 0.1: 1/8, within budget.
        # t in (0.5, 0.6] behaves the same: 0.51 ... 0.60, the lower middle is 0.55
        assert grid_choice([0.1, 0.6, 0.7, 0.7, 0.8, 0.8, 0.9, 0.9], [0.3, 0.5]) == 0.55

    def test_two_in_eight_is_over_budget(self):
        # a second answerable at 0.2: no threshold refuses an unanswerable question within budget,
        # so refuse none, and refuse no answerable one either: t in [0, 0.1], the middle is 0.05
        assert grid_choice([0.1, 0.2, 0.7, 0.7, 0.8, 0.8, 0.9, 0.9], [0.3, 0.5]) == 0.05
        # with a budget of two in eight, t in (0.5, 0.7] refuses both: 0.51 ... 0.70, the lower middle is 0.60
        assert grid_choice([0.1, 0.2, 0.7, 0.7, 0.8, 0.8, 0.9, 0.9], [0.3, 0.5], budget=0.25) == 0.6

    def test_no_unanswerable_questions(self):
        assert grid_choice([0.3, 0.9], []) == 0.15  # t in [0, 0.3] refuses nothing

    def test_no_threshold_within_the_budget(self):
        refuse = np.array([[True, False], [True, True]])  # a grid that does not start at 0
        with pytest.raises(ValueError, match="^no threshold on the grid keeps within the budget$"):
            choose_threshold(refuse, np.array([True, False]), 0.125)

    def test_threshold_outcomes(self):
        grid = np.array([0.0, 0.5, 1.0])
        confidence = np.array([0.7, 0.3, 0.7, 0.3])
        answerable = np.array([True, True, False, False])
        ran_ok = np.array([True, True, False, False])
        ran_refused = np.array([False, True, True, False])  # the run (no threshold) refused q1 and q2 on its own grounds
        ran_ok = np.array([True, False, False, False])
        refuse, ok = threshold_outcomes(grid, confidence, answerable, ran_ok, ran_refused)
        # refused at every t by the run itself, or by t
        assert refuse.tolist() == [[False, True, True, False], [False, True, True, True], [True, True, True, True]]
        # answerable: ok when nothing refuses it and the run answered it right; unanswerable: ok when refused
        assert ok.tolist() == [[True, False, True, False], [True, False, True, True], [False, False, True, True]]

    def test_the_budget_holds_on_every_group(self):
        # A: answerable 0.6 0.7 0.8 0.9, unanswerable 0.2.  B: answerable 0.3 0.7 0.8 0.9, unanswerable 0.25 0.4 0.5.
        # With four answerable each, no corpus may lose one (0 <= 0.125 * 4 < 1).
        conf, answerable, groups, grid = two_corpora()
        refuse = conf[None, :] < grid[:, None]
        # pooled, eight answerable allow one: refusing B's 0.3 buys every unanswerable one: (0.5, 0.6] -> 0.55
        assert grid[choose_threshold(refuse, answerable, 0.125)] == 0.55
        # per corpus, B's 0.3 must stand: t in (0.25, 0.3] refuses A's 0.2 and B's 0.25 -> 0.26 ... 0.30, the middle 0.28
        assert grid[choose_threshold(refuse, answerable, 0.125, groups)] == 0.28
        # one group is the pooled rule
        assert choose_threshold(refuse, answerable, 0.125, np.zeros(len(conf))) == choose_threshold(refuse, answerable, 0.125)

    def test_leave_one_group_out_by_hand(self):
        conf, answerable, groups, grid = two_corpora()
        refuse = conf[None, :] < grid[:, None]
        held = leave_one_group_out_choices(refuse, answerable, groups, 0.125)
        # A left out: chosen on B alone -> 0.28.  B left out: chosen on A alone, (0.2, 0.6] -> 0.21 ... 0.60, the lower middle 0.40
        assert {g: float(grid[t]) for g, t in held.items()} == {"A": 0.28, "B": 0.4}
        # a third corpus: leaving it out chooses on A and B, each with its own budget
        third = np.concatenate([groups, ["C", "C"]])
        refuse3 = np.concatenate([conf, [0.9, 0.1]])[None, :] < grid[:, None]
        held3 = leave_one_group_out_choices(refuse3, np.concatenate([answerable, [True, False]]), third, 0.125)
        assert grid[held3["C"]] == 0.28
        assert leave_one_group_out_choices(refuse, answerable, np.zeros(len(conf)), 0.125) == {}  # one group: nothing to hold out

    def test_refusal_rates(self):
        refused = np.array([True, False, True, True])
        ok = np.array([False, True, True, False])
        answerable = np.array([True, True, False, False])
        assert refusal_rates(refused, ok, answerable) == {
            "refused_when_unanswerable": 1.0,
            "refused_when_answerable": 0.5,
            "answer_ok": 0.5,
        }
        none = np.array([], dtype=bool)
        assert refusal_rates(none, none, none) == {"refused_when_unanswerable": None, "refused_when_answerable": None, "answer_ok": None}


# --------------------------------------------------------------------------- the module


def test_imports_only_numpy_and_the_standard_library():
    tree = ast.parse(Path(irmetrics.__file__).read_text(encoding="utf-8"))
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    outside = {n for n in names if n.split(".")[0] not in sys.stdlib_module_names and n != "__future__"}
    assert outside == {"numpy"}


def test_the_docstring_examples_run():
    failed, tried = doctest.testmod(irmetrics)
    assert (failed, tried >= 2) == (0, True)


# --------------------------------------------------------------------------- what `just mutate` found untested


def _plain_percentile_bootstrap(values, seed, resamples, level=0.95):
    """The docstring's interval written out: every draw at once from default_rng(seed)."""
    data = np.asarray(values, dtype=np.float64)
    means = data[np.random.default_rng(seed).integers(0, len(data), size=(resamples, len(data)))].mean(axis=1)
    lo, hi = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


def test_bootstrap_interval_is_the_plain_percentile_bootstrap():
    values = [0.13, 0.58, 0.91, 0.27, 0.66, 0.04, 0.39, 0.82]  # spread out, so one draw more or less moves a quantile
    assert bootstrap_interval(values, seed=SEED) == _plain_percentile_bootstrap(values, SEED, 10_000)  # 10,000 draws by default
    assert bootstrap_interval(values, seed=SEED, resamples=5, level=0.5) == _plain_percentile_bootstrap(values, SEED, 5, 0.5)
    assert macro_bootstrap_interval([values], seed=SEED) == _plain_percentile_bootstrap(values, SEED, 10_000)
    assert macro_bootstrap_interval([values], seed=SEED, resamples=5, level=0.5) == _plain_percentile_bootstrap(values, SEED, 5, 0.5)


def test_resampling_in_batches_draws_the_same_samples(monkeypatch):
    # a large question set is resampled a few draws at a time; each draw is still n values, and there are `resamples` of them
    monkeypatch.setattr(irmetrics, "_BATCH_VALUES", 6)  # 3 values: 2 draws a batch
    data = np.array([0.0, 3.0, 6.0])
    got = irmetrics._resampled_means(data, np.random.default_rng(1), 7)
    assert got.tolist() == data[np.random.default_rng(1).integers(0, 3, size=(7, 3))].mean(axis=1).tolist()


def _plain_randomisation(a, b, seed, resamples):
    """The docstring's p-value written out: every sign draw at once, as rag-eval's committed p-values were drawn."""
    d = np.asarray(b, dtype=np.float64) - np.asarray(a, dtype=np.float64)
    wd = d / len(d)
    signs = np.random.default_rng(seed).integers(0, 2, size=(resamples, len(d)), dtype=np.int8) * 2 - 1
    return (1 + int(np.count_nonzero(np.abs(signs @ wd) >= abs(wd.sum()) - 1e-12))) / (1 + resamples)


def test_paired_randomisation_is_the_plain_sign_flip_test(monkeypatch):
    a, b = [0.0, 0.5, 1.0, 0.0, 1.0, 0.25], [1.0, 0.5, 1.0, 1.0, 0.0, 1.0]
    assert paired_randomisation(a, b, seed=SEED) == _plain_randomisation(a, b, SEED, 10_000)  # 10,000 draws by default
    # drawn a batch at a time (a large question set): still `resamples` draws. One pair: every draw is as extreme as the observed, p = 1
    monkeypatch.setattr(irmetrics, "_BATCH_VALUES", 2)
    assert paired_randomisation([0.0], [1.0], seed=SEED, resamples=9) == 1.0


def test_paired_randomisation_counts_a_mean_difference_within_1e_12_as_a_tie():
    # b - a = (1, 0.8e-12): flipping the second sign moves the mean difference by 0.8e-12, a tie; 4e-12 is not
    assert paired_randomisation([0.0, 0.0], [1.0, 0.8e-12], seed=SEED, resamples=99) == 1.0
    assert paired_randomisation([0.0, 0.0], [1.0, 4e-12], seed=SEED, resamples=99) < 0.75


def test_thresholds_and_outcomes_at_the_edges():
    assert thresholds(1.0).tolist() == [0.0, 1.0]  # one step: the ends only
    with pytest.raises(ValueError, match="does not divide 1"):
        thresholds(0.3)
    with pytest.raises(ValueError, match="k must be >= 1"):
        recall_at_k(["a"], {"a"}, 0)
    # a confidence equal to the threshold is not below it: answered
    refuse, _ = threshold_outcomes(
        np.array([0.5]), np.array([0.5, 0.49]), np.array([True, True]), np.array([True, True]), np.array([False, False])
    )
    assert refuse.tolist() == [[False, True]]


def test_choose_threshold_holds_the_budget_in_every_group():
    # q0 answerable, q1 unanswerable; threshold 1 refuses both: the most unanswerable refused, but over a budget of 0
    refuse = np.array([[False, False], [True, True]])
    answerable = np.array([True, False])
    assert choose_threshold(refuse, answerable, 0.0) == 0  # one group (groups=None) has a budget too
    # two groups: threshold 1 keeps B's budget (B has no answerable question refused) but breaks A's
    refuse = np.array([[False, False, False], [True, True, False]])
    assert choose_threshold(refuse, np.array([True, False, True]), 0.0, ["A", "A", "B"]) == 0
    with pytest.raises(ValueError, match="^no threshold on the grid keeps within the budget$"):
        choose_threshold(np.array([[True, False]]), np.array([True, False]), 0.0)
