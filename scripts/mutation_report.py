"""Summarise a mutmut run into results/mutation.json: counts and score per module, each survivor.

Called by scripts/mutate.py with the temporary copy mutmut ran in. For each scoped mutant
it reads mutmut's verdict (mutants/FILE.meta, mutmut's own exit-code meanings) and, for a
survivor, where it is and what it changed: the mutant function against mutmut's unmutated
copy of it (mutants/FILE), placed on the line of the source file. The JSON's `markdown`
is the `mutation` section of docs/development.md (scripts/docs.py copies it; never typed).

    score = (killed + timed out) / mutants       (a mutant no test runs counts as survived)

LEFT below says why each survivor that is left is left: "equivalent" (no input tells it from
the original) or "harmless" (observable only where it does not matter, said how). It is keyed
by the mutation itself, not mutmut's numbering, so a source change that alters the line
brings the survivor back for review.
"""

from __future__ import annotations

import ast
import difflib
import json
from collections.abc import Mapping
from importlib.metadata import version
from pathlib import Path
from typing import Any

_AS_FLOAT = "np.asarray of the numbers these take (float, int or bool) computes the same float64 results"
# (file:function, "old  ->  new") -> (kind, why it is left)
LEFT: dict[tuple[str, str], tuple[str, str]] = {
    ("ragline/eval/metrics.py:_fold", 'return " ".join(text.casefold().split())  ->  return "XX XX".join(text.casefold().split())'): (
        "equivalent",
        "phrase and answer are folded with the same joiner, and casefolded text holds no 'X', so 'XX XX' parts words exactly as a space does",
    ),
    (
        "ragline/eval/metrics.py:_resampled_means",
        "means = np.empty(resamples, dtype=np.float64)  ->  means = np.empty(resamples, dtype=None)",
    ): (
        "equivalent",
        "float64 is np.empty's default dtype",
    ),
    ("ragline/eval/metrics.py:_resampled_means", "means = np.empty(resamples, dtype=np.float64)  ->  means = np.empty(resamples, )"): (
        "equivalent",
        "float64 is np.empty's default dtype",
    ),
    ("ragline/eval/metrics.py:_resampled_means", "batch = max(1, _BATCH_VALUES // n)  ->  batch = max(2, _BATCH_VALUES // n)"): (
        "equivalent",
        "matters only past 2,000,000 values, and numpy draws the same int64 indices in batches of 1 or 2 (test_resampling_in_batches_draws_the_same_samples)",
    ),
    (
        "ragline/eval/metrics.py:_resampled_means",
        "means[start:stop] = data[rng.integers(0, n, size=(stop - start, n))].mean(axis=1)  ->  means[start:stop] = data[rng.integers(n, size=(stop - start, n))].mean(axis=1)",
    ): ("equivalent", "rng.integers(n) is rng.integers(0, n): the same call"),
    (
        "ragline/eval/metrics.py:bootstrap_interval",
        "data = np.asarray(values, dtype=np.float64)  ->  data = np.asarray(values, dtype=None)",
    ): (
        "equivalent",
        _AS_FLOAT,
    ),
    ("ragline/eval/metrics.py:bootstrap_interval", "data = np.asarray(values, dtype=np.float64)  ->  data = np.asarray(values, )"): (
        "equivalent",
        _AS_FLOAT,
    ),
    (
        "ragline/eval/metrics.py:macro_bootstrap_interval",
        "means = np.mean([_resampled_means(np.asarray(g, dtype=np.float64), rng, resamples) for g in groups], axis=0)  ->  means = np.mean([_resampled_means(np.asarray(g, dtype=None), rng, resamples) for g in groups], axis=0)",
    ): ("equivalent", _AS_FLOAT),
    (
        "ragline/eval/metrics.py:macro_bootstrap_interval",
        "means = np.mean([_resampled_means(np.asarray(g, dtype=np.float64), rng, resamples) for g in groups], axis=0)  ->  means = np.mean([_resampled_means(np.asarray(g, ), rng, resamples) for g in groups], axis=0)",
    ): ("equivalent", _AS_FLOAT),
    (
        "ragline/eval/metrics.py:choose_threshold",
        "labels = np.zeros(refuse.shape[1], dtype=np.intp) if groups is None else np.asarray(groups)  ->  labels = np.zeros(refuse.shape[1], dtype=np.intp) if (groups is None) and False else np.asarray(groups)",
    ): ("equivalent", "np.asarray(None) is one label that equals None for every question: one group, as the zeros are"),
    (
        "ragline/eval/metrics.py:choose_threshold",
        "labels = np.zeros(refuse.shape[1], dtype=np.intp) if groups is None else np.asarray(groups)  ->  labels = np.zeros(refuse.shape[1], dtype=None) if groups is None else np.asarray(groups)",
    ): ("equivalent", "float zeros are one group as integer zeros are"),
    (
        "ragline/eval/metrics.py:choose_threshold",
        "labels = np.zeros(refuse.shape[1], dtype=np.intp) if groups is None else np.asarray(groups)  ->  labels = np.zeros(refuse.shape[1], ) if groups is None else np.asarray(groups)",
    ): ("equivalent", "float zeros are one group as integer zeros are"),
    (
        "ragline/eval/metrics.py:choose_threshold",
        "within &= refuse[:, members].sum(axis=1) <= budget * int(members.sum()) + 1e-9  ->  within &= refuse[:, members].sum(axis=1) < budget * int(members.sum()) + 1e-9",
    ): ("equivalent", "a count of questions is an integer and never equals budget * n + 1e-9"),
    (
        "ragline/eval/metrics.py:macro_weights",
        "return np.concatenate([np.full(n, 1.0 / (len(filled) * n) if n else 0.0) for n in sizes]) if filled else np.zeros(0)  ->  return np.concatenate([np.full(n, 1.0 / (len(filled) * n) if n else 1.0) for n in sizes]) if filled else np.zeros(0)",
    ): ("equivalent", "the value fills an empty group's np.full(0, ...), which is empty whatever the value"),
    (
        "ragline/eval/metrics.py:paired_randomisation",
        "d = np.asarray(b, dtype=np.float64) - np.asarray(a, dtype=np.float64)  ->  d = np.asarray(b, dtype=None) - np.asarray(a, dtype=np.float64)",
    ): ("equivalent", _AS_FLOAT + " (the other operand is still float64)"),
    (
        "ragline/eval/metrics.py:paired_randomisation",
        "d = np.asarray(b, dtype=np.float64) - np.asarray(a, dtype=np.float64)  ->  d = np.asarray(b, ) - np.asarray(a, dtype=np.float64)",
    ): ("equivalent", _AS_FLOAT + " (the other operand is still float64)"),
    (
        "ragline/eval/metrics.py:paired_randomisation",
        "d = np.asarray(b, dtype=np.float64) - np.asarray(a, dtype=np.float64)  ->  d = np.asarray(b, dtype=np.float64) - np.asarray(a, dtype=None)",
    ): ("equivalent", _AS_FLOAT + " (the other operand is still float64)"),
    (
        "ragline/eval/metrics.py:paired_randomisation",
        "d = np.asarray(b, dtype=np.float64) - np.asarray(a, dtype=np.float64)  ->  d = np.asarray(b, dtype=np.float64) - np.asarray(a, )",
    ): ("equivalent", _AS_FLOAT + " (the other operand is still float64)"),
    ("ragline/eval/metrics.py:paired_randomisation", "if n == 0 or not np.any(d):  ->  if n == 0 and not np.any(d):"): (
        "equivalent",
        "with every difference 0 each draw's statistic is 0, as extreme as the observed 0, so the test itself gives p = 1",
    ),
    ("ragline/eval/metrics.py:paired_randomisation", "if n == 0 or not np.any(d):  ->  if n == 1 or not np.any(d):"): (
        "equivalent",
        "one pair: flipping its sign leaves |T| as it is, so every draw counts and the test itself gives p = 1",
    ),
    (
        "ragline/eval/metrics.py:paired_randomisation",
        "w = np.full(n, 1.0 / n) if weights is None else np.asarray(weights, dtype=np.float64)  ->  w = np.full(n, 1.0 / n) if weights is None else np.asarray(weights, dtype=None)",
    ): ("equivalent", _AS_FLOAT + " (the differences are float64)"),
    (
        "ragline/eval/metrics.py:paired_randomisation",
        "w = np.full(n, 1.0 / n) if weights is None else np.asarray(weights, dtype=np.float64)  ->  w = np.full(n, 1.0 / n) if weights is None else np.asarray(weights, )",
    ): ("equivalent", _AS_FLOAT + " (the differences are float64)"),
    ("ragline/eval/metrics.py:paired_randomisation", "batch = max(1, _BATCH_VALUES // n)  ->  batch = max(2, _BATCH_VALUES // n)"): (
        "harmless",
        "changes only which random signs are drawn (numpy buffers int8 draws per call), and only past 2,000,000 pairs; p keeps its distribution",
    ),
    (
        "ragline/eval/metrics.py:paired_randomisation",
        "signs = rng.integers(0, 2, size=(size, n), dtype=np.int8) * 2 - 1  ->  signs = rng.integers(2, size=(size, n), dtype=np.int8) * 2 - 1",
    ): ("equivalent", "rng.integers(2) is rng.integers(0, 2): the same call"),
    (
        "ragline/eval/metrics.py:paired_randomisation",
        "hits += int(np.count_nonzero(np.abs(signs @ wd) >= observed - 1e-12))  ->  hits += int(np.count_nonzero(np.abs(signs @ wd) > observed - 1e-12))",
    ): (
        "harmless",
        "differs only for a draw whose statistic is exactly the observed one minus 1e-12, to the last bit: the edge of a rounding tolerance",
    ),
    ("ragline/eval/metrics.py:roc_auc", "pos = np.asarray(positive, dtype=np.float64)  ->  pos = np.asarray(positive, dtype=None)"): (
        "equivalent",
        "comparisons of float, int or bool scores give the same counts",
    ),
    ("ragline/eval/metrics.py:roc_auc", "pos = np.asarray(positive, dtype=np.float64)  ->  pos = np.asarray(positive, )"): (
        "equivalent",
        "comparisons of float, int or bool scores give the same counts",
    ),
    ("ragline/eval/metrics.py:roc_auc", "neg = np.asarray(negative, dtype=np.float64)  ->  neg = np.asarray(negative, dtype=None)"): (
        "equivalent",
        "comparisons of float, int or bool scores give the same counts",
    ),
    ("ragline/eval/metrics.py:roc_auc", "neg = np.asarray(negative, dtype=np.float64)  ->  neg = np.asarray(negative, )"): (
        "equivalent",
        "comparisons of float, int or bool scores give the same counts",
    ),
    (
        "ragline/eval/metrics.py:thresholds",
        "if steps < 1 or abs(steps * step - 1) > 1e-9:  ->  if steps < 1 or abs(steps * step - 1) >= 1e-9:",
    ): (
        "harmless",
        "differs only for a step whose rounding error is exactly 1e-9, the edge of a rounding tolerance",
    ),
    (
        "ragline/ranking.py:dense_scores",
        "scores = queries @ vectors.T if len(queries) > 1 else (vectors @ queries[0])[None, :]  ->  scores = queries @ vectors.T if (len(queries) > 1) or True else (vectors @ queries[0])[None, :]",
    ): (
        "equivalent",
        "one query takes a matrix-vector product for speed; the matrix product gives the same cosines (bit for bit with numpy's BLAS here)",
    ),
    (
        "ragline/ranking.py:dense_scores",
        "scores = queries @ vectors.T if len(queries) > 1 else (vectors @ queries[0])[None, :]  ->  scores = queries @ vectors.T if len(queries) >= 1 else (vectors @ queries[0])[None, :]",
    ): (
        "equivalent",
        "one query takes a matrix-vector product for speed; the matrix product gives the same cosines (bit for bit with numpy's BLAS here)",
    ),
    (
        "ragline/ranking.py:dense_scores",
        'order = np.argsort(rows, kind="stable")  # rag-index writes them in chunk order already: a no-op then  ->  order = np.argsort(rows, kind=None)  # rag-index writes them in chunk order already: a no-op then',
    ): (
        "equivalent",
        "a chunk's dense score is the max over its own passages, which no order among them changes; the sort only groups them by chunk (numpy reads the kind case-insensitively)",
    ),
    (
        "ragline/ranking.py:dense_scores",
        'order = np.argsort(rows, kind="stable")  # rag-index writes them in chunk order already: a no-op then  ->  order = np.argsort(rows, )  # rag-index writes them in chunk order already: a no-op then',
    ): (
        "equivalent",
        "a chunk's dense score is the max over its own passages, which no order among them changes; the sort only groups them by chunk (numpy reads the kind case-insensitively)",
    ),
    (
        "ragline/ranking.py:dense_scores",
        'order = np.argsort(rows, kind="stable")  # rag-index writes them in chunk order already: a no-op then  ->  order = np.argsort(rows, kind="STABLE")  # rag-index writes them in chunk order already: a no-op then',
    ): (
        "equivalent",
        "a chunk's dense score is the max over its own passages, which no order among them changes; the sort only groups them by chunk (numpy reads the kind case-insensitively)",
    ),
    ("ragline/ranking.py:topk", "if k < n:  ->  if k <= n:"): (
        "equivalent",
        "with k = n the k-th best score is the lowest, so every row survives, as in the other branch",
    ),
    **{
        ("ragline/answer/citations.py:check_citations", f"if any(not 1 <= n <= n_blocks for n in numbers):  ->  {new}"): (
            "harmless",
            "the branch keeps every marker of a block sent and removes only the others, so entering it where no marker is out of "
            "range changes nothing but runs of spaces, which a written sentence does not hold",
        )
        for new in (
            "if any(1 <= n <= n_blocks for n in numbers):",
            "if any(not 2 <= n <= n_blocks for n in numbers):",
            "if any(not 1 < n <= n_blocks for n in numbers):",
            "if any(not 1 <= n < n_blocks for n in numbers):",
        )
    },
    (
        "ragline/answer/citations.py:check_citations",
        "other = _supporter(sentence, sources, prompt, valid)  ->  other = _supporter(sentence, sources, prompt, )",
    ): (
        "equivalent",
        "the blocks in `valid` together do not support the sentence, and one of them alone holds fewer of its terms and facts "
        "than all of them, so none of them alone supports it: leaving them out of the search changes nothing",
    ),
    (
        "ragline/answer/choice.py:first_sentence",
        "return cut[0] if len(cut) > 1 else text  ->  return cut[0] if (len(cut) > 1) or True else text",
    ): (
        "harmless",
        "a one-sentence item comes back as `sentences` gives it: the same words, a run of spaces after its ordinal made one ('1.  Run it.' read without unwrap), which no quote shows",
    ),
    ("ragline/answer/choice.py:first_sentence", "return cut[0] if len(cut) > 1 else text  ->  return cut[0] if len(cut) >= 1 else text"): (
        "harmless",
        "a one-sentence item comes back as `sentences` gives it: the same words, a run of spaces after its ordinal made one ('1.  Run it.' read without unwrap), which no quote shows",
    ),
    (
        "ragline/answer/choice.py:fit_list",
        "keep = cut[top.index(keep)] if keep in top else None  ->  keep = cut[top.index(keep)] if (keep in top) or True else None",
    ): (
        "equivalent",
        "`keep`, where not None, is in `top` here: a nested item was replaced by its top-level item just before, and a top-level item is in `top` by definition",
    ),
    ("ragline/answer/choice.py:fit_list", "if size(cut) <= most:  ->  if size(cut) < most:"): (
        "equivalent",
        "clip_items returns a list of exactly `most` words as it is (its own first check), so the same pieces come back",
    ),
    (
        "ragline/answer/choice.py:minmax",
        "low, high = min(values, default=0.0), max(values, default=0.0)  ->  low, high = min(values, default=None), max(values, default=0.0)",
    ): (
        "equivalent",
        "the defaults matter only for no values, where the list comprehension returns [] whatever they are",
    ),
    (
        "ragline/answer/choice.py:minmax",
        "low, high = min(values, default=0.0), max(values, default=0.0)  ->  low, high = min(values, default=1.0), max(values, default=0.0)",
    ): (
        "equivalent",
        "the defaults matter only for no values, where the list comprehension returns [] whatever they are",
    ),
    (
        "ragline/answer/choice.py:minmax",
        "low, high = min(values, default=0.0), max(values, default=0.0)  ->  low, high = min(values, default=0.0), max(values, default=None)",
    ): (
        "equivalent",
        "the defaults matter only for no values, where the list comprehension returns [] whatever they are",
    ),
    (
        "ragline/answer/choice.py:minmax",
        "low, high = min(values, default=0.0), max(values, default=0.0)  ->  low, high = min(values, default=0.0), max(values, default=1.0)",
    ): (
        "equivalent",
        "the defaults matter only for no values, where the list comprehension returns [] whatever they are",
    ),
    ("ragline/answer/choice.py:relative", "top = max(values, default=0.0)  ->  top = max(values, default=1.0)"): (
        "equivalent",
        "the default matters only for no values, where the comprehension returns [] whatever it is",
    ),
    (
        "ragline/answer/choice.py:span_choice",
        "total = [(s / top if top > 0 else 0.0) + weight * v for s, v in zip(scores, minmax(pmi), strict=True)]  ->  total = [(s / top if top > 0 else 1.0) + weight * v for s, v in zip(scores, minmax(pmi), strict=True)]",
    ): (
        "harmless",
        "with no positive score every candidate gets the same constant, so only the PMI orders them, as with 0.0; adding 1.0 can round two PMIs 2**-52 apart to a tie, so only float ties tell them apart",
    ),
    (
        "ragline/answer/choice.py:with_leads",
        'lead = at.get((p.block, p.lead)) if p.kind == "item" and p.lead >= 0 else None  ->  lead = at.get((p.block, p.lead)) if (p.kind == "item" and p.lead >= 0) or True else None',
    ): (
        "equivalent",
        "a piece that is not an item has lead -1, and no piece sits at position -1: the lookup finds nothing, as the None does",
    ),
    (
        "ragline/answer/choice.py:with_leads",
        'lead = at.get((p.block, p.lead)) if p.kind == "item" and p.lead >= 0 else None  ->  lead = at.get((p.block, p.lead)) if p.kind == "item" or p.lead >= 0 else None',
    ): (
        "equivalent",
        "only items have a lead >= 0 (context.pieces), so the two conditions agree on every piece",
    ),
    (
        "ragline/answer/choice.py:asking",
        'return text.rstrip(" *_`)\\"\'\\u201d\\u2019").endswith("?")  ->  return text.rstrip("XX *_`)\\"\'\\u201d\\u2019XX").endswith("?")',
    ): (
        "harmless",
        "the strip set gains 'X': only a text ending in a question mark and then capital X's reads otherwise, and no sentence ends so",
    ),
    (
        "ragline/answer/choice.py:item_step",
        'return step if prose_words(_LIST_MARK.sub("", first, count=1)) >= STEP_WORDS_LEAST else None  ->  return step if prose_words(_LIST_MARK.sub("", first, )) >= STEP_WORDS_LEAST else None',
    ): ("equivalent", "_LIST_MARK is anchored at the text's start: it matches once at most, whatever the count"),
    (
        "ragline/answer/choice.py:item_step",
        'return step if prose_words(_LIST_MARK.sub("", first, count=1)) >= STEP_WORDS_LEAST else None  ->  return step if prose_words(_LIST_MARK.sub("", first, count=2)) >= STEP_WORDS_LEAST else None',
    ): ("equivalent", "_LIST_MARK is anchored at the text's start: it matches once at most, whatever the count"),
    (
        "ragline/answer/choice.py:item_step",
        'return step if prose_words(_LIST_MARK.sub("", first, count=1)) >= STEP_WORDS_LEAST else None  ->  return step if prose_words(_LIST_MARK.sub("XXXX", first, count=1)) >= STEP_WORDS_LEAST else None',
    ): (
        "equivalent",
        "the marker's trailing blanks go with it, so XXXX joins the first word of the step and the words are as many; a "
        "step of nothing but its marker has 0 or 1 words, under STEP_WORDS_LEAST either way",
    ),
    (
        "ragline/answer/choice.py:pictures",
        'text = _LIST_MARK.sub("", piece.text, count=1) if piece.kind == "item" else piece.text  ->  text = _LIST_MARK.sub("", piece.text, ) if piece.kind == "item" else piece.text',
    ): ("equivalent", "_LIST_MARK is anchored at the text's start: it matches once at most, whatever the count"),
    (
        "ragline/answer/choice.py:pictures",
        'text = _LIST_MARK.sub("", piece.text, count=1) if piece.kind == "item" else piece.text  ->  text = _LIST_MARK.sub("", piece.text, count=2) if piece.kind == "item" else piece.text',
    ): ("equivalent", "_LIST_MARK is anchored at the text's start: it matches once at most, whatever the count"),
    (
        "ragline/answer/choice.py:pictures",
        'text = _LIST_MARK.sub("", piece.text, count=1) if piece.kind == "item" else piece.text  ->  text = _LIST_MARK.sub("", piece.text, count=1) if (piece.kind == "item") or True else piece.text',
    ): (
        "harmless",
        "a sentence that opens with a list marker is an item (context.pieces); only a paragraph opening with a number and "
        'a dot before a picture ("2019. ![a](b)") reads otherwise',
    ),
    (
        "ragline/answer/choice.py:asks",
        'return piece.kind == "sentence" and piece.text.rstrip(" *_`)\\"\'\\u201d\\u2019").endswith("?")  ->  return piece.kind == "sentence" and piece.text.rstrip("XX *_`)\\"\'\\u201d\\u2019XX").endswith("?")',
    ): (
        "harmless",
        "the strip set gains 'X': only a sentence whose text ends in a question mark and then capital X's reads otherwise, and no sentence ends so",
    ),
    (
        "ragline/answer/choice.py:clip_items",
        'while len(kept) > 1 and not balanced(" ".join(kept)):  # no link or code span cut open  ->  while len(kept) > 1 and not balanced("XX XX".join(kept)):  # no link or code span cut open',
    ): ("equivalent", "`balanced` reads backticks, brackets and parentheses only; the X's joined in open and close none of them"),
    (
        "ragline/answer/choice.py:clip_items",
        'longest = max((prose_words(p.text) for p in items if p.kind == "item" and p is not keep), default=0)  ->  longest = max((prose_words(p.text) for p in items if p.kind == "item" or p is not keep), default=0)',
    ): (
        "equivalent",
        "a larger start only tries cuts at or above every clipped item's prose (keep is never clipped), which clip nothing: the whole list's words, over `most` by the check above, so the first cut that fits is the same",
    ),
    (
        "ragline/answer/choice.py:clip_items",
        'longest = max((prose_words(p.text) for p in items if p.kind == "item" and p is not keep), default=0)  ->  longest = max((prose_words(p.text) for p in items if p.kind == "item" and p is not keep), default=1)',
    ): ("equivalent", "with no item to clip both starts give an empty range (CLIP_WORDS is 10)"),
    (
        "ragline/answer/choice.py:clip_items",
        "for k in range(longest - 1, CLIP_WORDS - 1, -1):  ->  for k in range(longest + 1, CLIP_WORDS - 1, -1):",
    ): (
        "equivalent",
        "k = longest + 1 and k = longest clip nothing (every item's prose fits): the whole list's words, over `most` by the check above, so the first cut that fits is the same",
    ),
    ("ragline/answer/choice.py:fit_row", 'if piece.kind != "row" or not piece.header:  ->  if piece.kind != "row" and not piece.header:'): (
        "equivalent",
        "only rows have a header, and a row with none fails the `all(names)` check the line after, returned as it is either way",
    ),
    (
        "ragline/answer/choice.py:fit_row",
        "if sum(_cell_size(n, c) for n, c in zip(names, cells, strict=True) if c) <= most:  ->  if sum(_cell_size(n, c) for n, c in zip(names, cells, strict=None) if c) <= most:",
    ): ("equivalent", "names and cells are checked equal in number the line before"),
    (
        "ragline/answer/choice.py:fit_row",
        "if sum(_cell_size(n, c) for n, c in zip(names, cells, strict=True) if c) <= most:  ->  if sum(_cell_size(n, c) for n, c in zip(names, cells, ) if c) <= most:",
    ): ("equivalent", "names and cells are checked equal in number the line before"),
    (
        "ragline/answer/choice.py:fit_row",
        "if sum(_cell_size(n, c) for n, c in zip(names, cells, strict=True) if c) <= most:  ->  if sum(_cell_size(n, c) for n, c in zip(names, cells, strict=False) if c) <= most:",
    ): ("equivalent", "names and cells are checked equal in number the line before"),
    (
        "ragline/answer/choice.py:with_remedy",
        "while len(out) > 2 and out[-1].block != first.block and size(out) > budget:  ->  while len(out) >= 2 and out[-1].block != first.block and size(out) > budget:",
    ): (
        "equivalent",
        "two pieces left are the first and the one after it, both of the first's block, so the loop stops on its block test either way",
    ),
    (
        "ragline/answer/choice.py:with_remedy",
        "while len(out) > 2 and out[-1].block != first.block and leads_in(out[-1].text):  ->  while len(out) >= 2 and out[-1].block != first.block and leads_in(out[-1].text):",
    ): (
        "equivalent",
        "two pieces left are the first and the one after it, both of the first's block, so the loop stops on its block test either way",
    ),
}


def _functions(path: Path) -> dict[str, tuple[int, list[str]]]:
    """Top-level function name -> (first line, its lines), for a Python file."""
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    return {
        node.name: (node.lineno, lines[node.lineno - 1 : node.end_lineno])
        for node in ast.parse(text).body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    }


def _where(work: Path, file: str, key: str, mutated: dict[str, tuple[int, list[str]]]) -> tuple[int, str]:
    """(line in the source file, "old -> new") of one mutant, from mutmut's generated functions."""
    generated = key.rpartition(".")[2]
    _, orig = mutated[generated.partition("__mutmut_")[0] + "__mutmut_orig"]
    _, mutant = mutated[generated]
    source_name = generated.partition("__mutmut_")[0].removeprefix("x_")
    source_start, source = _functions(work / file)[source_name]
    # mutmut's copies differ from the source in the name on the def line: give them the source's
    orig = [orig[0].replace(generated.partition("__mutmut_")[0] + "__mutmut_orig(", source_name + "(", 1), *orig[1:]]
    mutant = [mutant[0].replace(generated + "(", source_name + "(", 1), *mutant[1:]]
    first = next((op for op in difflib.SequenceMatcher(None, orig, mutant, autojunk=False).get_opcodes() if op[0] != "equal"), None)
    if first is None:
        return source_start, "(no textual change)"
    _, i1, i2, j1, j2 = first
    old = " ".join(line.strip() for line in orig[i1:i2]) or "(nothing)"
    new = " ".join(line.strip() for line in mutant[j1:j2]) or "(nothing)"
    line = source_start + i1
    assert source[i1:i2] == orig[i1:i2], f"{file}: mutmut's copy of {source_name} does not match the source"
    return line, f"{old}  ->  {new}"


def build(
    work: Path, scope: Mapping[str, tuple[str, ...] | None], constants: Mapping[str, dict[str, Any]], *, seconds: float, tests: list[str]
) -> dict[str, Any]:
    """The report for a finished run in `work` (a copy of the tree holding mutmut's mutants/)."""
    from mutmut.stats import status_by_exit_code

    modules: dict[str, dict[str, Any]] = {}
    survivors: list[dict[str, Any]] = []
    for file, functions in scope.items():
        codes = json.loads((work / "mutants" / f"{file}.meta").read_text(encoding="utf-8"))["exit_code_by_key"]
        mutated = _functions(work / "mutants" / file)
        verdicts: list[tuple[str, str, str, int | None]] = []  # (key, function, status, line)
        for key, code in codes.items():
            function = key.rpartition(".")[2].partition("__mutmut_")[0].removeprefix("x_")
            if functions is None or function in functions:
                verdicts.append((key, function, status_by_exit_code[code], None))
        for key, result in constants.items():
            if result["file"] == file:
                verdicts.append((key, result["function"], result["status"], result["line"]))
        counts = {"mutants": len(verdicts), "killed": 0, "timeouts": 0, "survived": 0, "no_tests": 0}
        for key, function, status, line in sorted(verdicts, key=lambda v: (v[1], int(v[0].rpartition("_")[2]))):
            if status == "not checked":
                raise RuntimeError(f"{key}: mutmut did not run it")
            bucket = {"killed": "killed", "timeout": "timeouts", "survived": "survived", "no tests": "no_tests"}.get(status)
            if bucket is None:
                raise RuntimeError(f"{key}: mutmut's verdict is {status!r}")
            counts[bucket] += 1
            if bucket in ("survived", "no_tests"):
                if line is None:
                    line, mutation = _where(work, file, key, mutated)
                else:
                    mutation = constants[key]["mutation"]
                survivors.append(
                    {
                        "mutant": key,
                        "where": f"{file}:{line}",
                        "function": function,
                        "mutation": mutation,
                        "no_tests": bucket == "no_tests",
                        "left": dict(zip(("kind", "reason"), LEFT[(f"{file}:{function}", mutation)], strict=True))
                        if (f"{file}:{function}", mutation) in LEFT
                        else None,
                    }
                )
        counts["score"] = round((counts["killed"] + counts["timeouts"]) / counts["mutants"], 4) if counts["mutants"] else None
        names = [*(functions or ()), *dict.fromkeys(c["function"] for c in constants.values() if c["file"] == file)]
        counts["scope"] = ", ".join(names) if functions is not None else "the whole module"
        modules[file] = counts
    report = {
        "schema": "mutation/1",
        "tool": f"mutmut {version('mutmut')}",
        "tests": tests,
        "seconds": round(seconds),
        "modules": modules,
        "survivors": survivors,
    }
    report["markdown"] = markdown(report)
    return report


def markdown(report: dict[str, Any]) -> str:
    rows = [
        "| module | mutated | mutants | killed | timed out | survived | score |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for file, m in report["modules"].items():
        survived = m["survived"] + m["no_tests"]
        rows.append(f"| `{file}` | {m['scope']} | {m['mutants']} | {m['killed']} | {m['timeouts']} | {survived} | {m['score']:.0%} |")
    survivors = report["survivors"]
    kinds = [s["left"]["kind"] if s["left"] else "unexamined" for s in survivors]
    tests = ", ".join(f"`{t}`" for t in report["tests"])
    minutes, seconds = divmod(report["seconds"], 60)
    return "\n".join(rows) + (
        f"\n\n{report['tool']} against the fast tests of {tests}; score = (killed + timed out) / mutants. "
        f"{len(survivors)} survivors: {kinds.count('equivalent')} equivalent (no input tells them from the original), "
        f"{kinds.count('harmless')} harmless (observable only where it does not matter), {kinds.count('unexamined')} not yet examined; "
        "`results/mutation.json` lists each with its file:line, the mutation and why it is left. "
        f"Regenerated by `just mutate` ({minutes} min {seconds} s on this machine)."
    )
