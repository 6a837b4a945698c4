"""rerank: rag-search's best hits reordered by the local model's query likelihood (rag-rerank).

A library, not a stage: rag-rerank runs it, scripts/fit_rerank.py fits it. The questions
retrieval ranks worst are those asked in other words than the page's: the question and
the chunk that answers it share no words and little of their embedding, so neither BM25
nor MiniLM puts it first (issue 37). A small language model reads more of the passage
than a 384-number vector holds: asked how likely the question is as one the passage
answers, it scores the chunk that answers "our deploys keep breaking on Fridays" above
one that only shares its words. That is query likelihood (Sachan et al., 2022,
"Improving Passage Retrieval with Zero-Shot Question Generation", UPR): the
`likelihood` judge of `ragline.answer.local.Judge`, exp(mean log p(question token |
the instruction, the passage with its heading path, the question so far)).

`Reranker.rerank(question, hits)` scores the first `depth` hits (each its heading path
and its first `words` words: the cost is the tokens the model reads), and orders them by
the min-max normalised retrieval score plus `weight` times the min-max normalised mean
log-likelihood (`order`): retrieval keeps a say, so a question the model reads badly
(an error code, a flag) keeps the chunk that holds it. The hits past `depth` are
dropped: the order has no place for them. Each hit's `signals` gains `local` (its mean
log-likelihood, its pointwise mutual information with the question, and the model's
rank of it); `score` becomes the combined score. The question's likelihood with no
passage (`Judge.prior`) makes the PMI, log p(q | passage) - log p(q): how much the best
passage explains the question beyond how predictable its own words are, a score on one
scale across handbooks (`relevance`).

    >>> order(np.array([1.0, 0.5, 0.0]), np.array([-3.0, -1.0, -2.0]), 2.0).tolist()
    [1, 0, 2]
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from ragline import options
from ragline.ranking import topk

DEPTH = options.default("depth", "rerank")  # hits the model scores: chosen by scripts/fit_rerank.py (results/rerank-fit.json)
# the model's weight against retrieval's, for each local model fitted by scripts/fit_rerank.py on every kind of question
# (results/rerank-fit.json for the default model, results/rerank-fit-1.5b.json; tests/test_golden.py checks them): rag-rerank
# takes the weight of the model it runs unless told otherwise (`weight_for`)
FITTED_WEIGHTS = {"qwen2.5-coder-0.5b-instruct": 1.0, "qwen2.5-coder-1.5b-instruct": 2.0}
WEIGHT = FITTED_WEIGHTS[options.default("local_model", "rerank")]  # the default model's
WORDS = options.default("rerank_words", "rerank")  # words of each hit the model reads (its heading path besides)
FLOOR = 1e-30  # the least likelihood taken, so that log is finite


class Scorer(Protocol):
    """What the reranker asks of the model: `ragline.answer.local.Judge` (method "likelihood")."""

    def scores(self, question: str, pieces: Sequence[tuple[Sequence[str], str]], budget: Any = None) -> list[float]: ...

    def prior(self, question: str, budget: Any = None) -> float: ...


def weight_for(model: str) -> float:
    """The fitted weight of a known local model (`FITTED_WEIGHTS`); a model fitted for nowhere (a GGUF file of
    one's own) gets the default model's, WEIGHT."""
    return FITTED_WEIGHTS.get(model, WEIGHT)


def passage(hit: dict[str, Any], words: int = WORDS) -> tuple[list[str], str]:
    """(heading path, the first `words` words of its text) of a hit: what the model reads of it."""
    return list(hit.get("headings") or []), " ".join(hit["text"].split()[:words])


def normalised(values: np.ndarray) -> np.ndarray:
    """Min-max to [0, 1]; all equal: all 0 (they tell nothing apart). Scaled first, so finite values
    whose spread overflows a float (1e308 and -1e308) still normalise."""
    values = np.asarray(values, dtype=np.float64)
    if len(values) and (scale := float(np.abs(values).max())) > 1e300:
        values = values / scale
    spread = float(values.max() - values.min()) if len(values) else 0.0
    return (values - values.min()) / spread if spread > 0 else np.zeros_like(values, dtype=np.float64)


def combined(base: np.ndarray, logp: np.ndarray, weight: float) -> np.ndarray:
    """The score `order` sorts by: normalised retrieval score + weight x normalised log-likelihood."""
    return normalised(base) + weight * normalised(logp)


def best_first(score: np.ndarray) -> np.ndarray:
    """The indices of `score`, best first; ties keep the given order (retrieval's)."""
    return topk(score, len(score), np.arange(len(score)))


def order(base: np.ndarray, logp: np.ndarray, weight: float) -> np.ndarray:
    """The indices of the hits, best first by `combined`; ties keep retrieval's order."""
    return best_first(combined(base, logp, weight))


def relevance(logps: Sequence[float], prior: float) -> float:
    """The best hit's pointwise mutual information with the question, log p(q | passage) - log p(q),
    per token (both are means): above 0, some passage makes the question likelier than its own words do."""
    return max(logps, default=math.log(FLOOR)) - math.log(max(prior, FLOOR))


@dataclass
class Reranker:
    """The model's rerank of one question's hits at a time (`rerank`)."""

    scorer: Scorer
    depth: int = DEPTH
    weight: float = WEIGHT
    words: int = WORDS

    def rerank(self, question: str, hits: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], float | None]:
        """(the first `depth` hits in the model's order, renumbered, each with `signals.local` and the
        combined `score`; the best hit's PMI with the question, `relevance`, None with no hits)."""
        top = hits[: self.depth]
        if not top:
            return [], None
        likelihoods = self.scorer.scores(question, [passage(h, self.words) for h in top])
        logp = np.array([math.log(max(s, FLOOR)) for s in likelihoods])
        likely = self.scorer.prior(question)
        prior = math.log(max(likely, FLOOR))
        base = np.array([float(h["score"]) for h in top])
        score = combined(base, logp, self.weight)
        by_model = {int(i): r for r, i in enumerate(best_first(logp), 1)}
        out = []
        for rank, i in enumerate(best_first(score), 1):
            hit = dict(top[i])
            hit["signals"] = dict(hit.get("signals") or {}) | {
                "local": {"logp": round(float(logp[i]), 6), "pmi": round(float(logp[i] - prior), 6), "rank": by_model[int(i)]},
                "retrieved": {"score": hit["score"], "rank": hit.get("rank", i + 1)},
            }
            hit["rank"], hit["score"] = rank, round(float(score[i]), 6)
            out.append(hit)
        return out, round(relevance(logp.tolist(), likely), 6)
