"""sweep: the abstain-threshold sweep over one run's results, one per corpus, and its plot.

A library, not a stage (rag_eval's `sweep` command uses it). `sweep` walks the threshold
over [0, 1] and picks the one to ship with the rule in its docstring, checked corpus by
corpus and left out corpus by corpus; the formulas are `irmetrics`'.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import ragline
import ragline.records

if TYPE_CHECKING:
    import numpy as np
from ragline.eval.golden import Golden
from ragline.eval.runs import corpus_order, rounded
from ragline.eval.tables import corpus_of
from ragline.records import StageError

np = ragline.records.lazy_import("numpy")
irmetrics = ragline.records.lazy_import("ragline.eval.metrics")

SWEEP_SCHEMA = "abstain-sweep/2"
STEP = 0.01  # thresholds 0, 0.01, ..., 1
REFUSAL_BUDGET = 0.125  # at most one answerable question in eight wrongly refused


def sweep(runs: Sequence[tuple[Golden, dict[str, Any]]], step: float = STEP, budget: float = REFUSAL_BUDGET) -> dict[str, Any]:
    """Walk the abstain threshold t over [0, 1] on one run's results, one per corpus, and pick the one to ship.

    The run must be one made with no threshold (`--threshold 0`, the `threshold-0` run):
    what it refused, the answer stage refused on its own grounds (a name the handbook
    never mentions, a number question with no number in context), and those refusals
    count at every t. At threshold t a question is refused when its confidence < t or
    the run refused it; for each t, each corpus has refused_when_unanswerable,
    refused_when_answerable and answer_ok (`irmetrics.threshold_outcomes`).

    Corpora come in CORPORA's order. `chosen` is `irmetrics.choose_threshold` on all
    corpora's questions, the budget held on each corpus; its rates are the mean over
    corpora (each weighs the same). Per corpus: `alone`, the threshold the rule picks on that corpus by itself; `chosen`,
    the shipped threshold's rates there; `loco`, the threshold picked on the other
    corpora (`irmetrics.leave_one_group_out_choices`) and its rates on this one (null
    with one corpus). `loco` at the top: the mean of those rates. `curve`: the mean
    rates at every t; each corpus has its own `curve`.
    """
    runs = sorted(runs, key=lambda run: corpus_order(corpus_of(run[1])))
    for golden, result in runs:
        if (result.get("actual") or {}).get("threshold") != 0:
            raise StageError(
                "sweep a run made with --threshold 0 (the threshold-0 run): its refusals must be the answer stage's own", golden.source
            )
    names = [corpus_of(result) for _, result in runs]
    if len(set(names)) != len(names) or len({result.get("label") for _, result in runs}) != 1:
        raise StageError("a sweep takes one run's results, one per corpus", runs[0][0].source if runs else ragline.records.STDIN)
    arrays = [_sweep_arrays(golden, result) for golden, result in runs]
    answerable, confidence, ran_ok, ran_refused = (np.concatenate([a[i] for a in arrays]) for i in range(4))
    groups = np.repeat(np.arange(len(runs)), [len(a[0]) for a in arrays])
    grid = irmetrics.thresholds(step)
    refuse, ok = irmetrics.threshold_outcomes(grid, confidence, answerable, ran_ok, ran_refused)
    best = irmetrics.choose_threshold(refuse, answerable, budget, groups)
    held = irmetrics.leave_one_group_out_choices(refuse, answerable, groups, budget)

    def at(t: int, g: np.ndarray) -> dict[str, float | None]:
        return {"threshold": float(grid[t])} | _rates(refuse[t, g], ok[t, g], answerable[g])

    corpora: list[dict[str, Any]] = []
    for i, (golden, _) in enumerate(runs):
        g = groups == i
        corpora.append(
            {
                "name": names[i],
                "golden": {"source": golden.source, "sha256": golden.sha256},
                "counts": {
                    "questions": int(g.sum()),
                    "answerable": int((g & answerable).sum()),
                    "unanswerable": int((g & ~answerable).sum()),
                },
                "run": _rates(ran_refused[g], ran_ok[g], answerable[g]),
                "alone": at(irmetrics.choose_threshold(refuse[:, g], answerable[g], budget), g),
                "chosen": at(best, g),
                "loco": at(held[i], g) if held else None,
                "curve": [at(t, g) for t in range(len(grid))],
            }
        )
    return {
        "schema": SWEEP_SCHEMA,
        "label": runs[0][1].get("label"),
        "rule": {
            "budget": budget,
            "step": step,
            "statement": (
                f"refused_when_answerable <= {budget} on every corpus; within that, the most unanswerable questions refused, "
                "then the fewest answerable; ties: the middle of the run of equivalent thresholds (the lower middle)"
            ),
        },
        "chosen": {"threshold": float(grid[best])} | _mean_rates([c["chosen"] for c in corpora]),
        "loco": _mean_rates([c["loco"] for c in corpora]) if held else None,
        "corpora": corpora,
        "curve": [{"threshold": float(t)} | _mean_rates([c["curve"][i] for c in corpora]) for i, t in enumerate(grid)],
    }


def _sweep_arrays(golden: Golden, result: dict[str, Any]) -> tuple[np.ndarray, ...]:
    """(answerable, confidence, ran_ok, ran_refused) of a result's questions, once it is known to be `golden`'s."""
    rows = result["questions"]
    if result.get("golden", {}).get("sha256") != golden.sha256:
        raise StageError(f"the result was scored against another golden file than {golden.source} (sha256 differs)", golden.source)
    by_id = golden.by_id()
    if sorted(r["id"] for r in rows) != sorted(by_id):
        raise StageError(f"the result's questions are not {golden.source}'s", golden.source)
    return (
        np.array([by_id[r["id"]].answerable for r in rows], dtype=bool),
        np.array([r["confidence"] for r in rows], dtype=np.float64),
        np.array([bool(r["answer_ok"]) for r in rows], dtype=bool),
        np.array([bool(r["refused"]) for r in rows], dtype=bool),
    )


def _rates(refused: np.ndarray, ok: np.ndarray, answerable: np.ndarray) -> dict[str, float | None]:
    """`irmetrics.refusal_rates`, rounded as the result files store numbers."""
    return {name: rounded(value) for name, value in irmetrics.refusal_rates(refused, ok, answerable).items()}


def _mean_rates(per_corpus: Sequence[dict[str, Any]]) -> dict[str, float | None]:
    """Each rate's mean over the corpora that have it (`irmetrics.mean_or_none`), rounded."""
    names = ("refused_when_unanswerable", "refused_when_answerable", "answer_ok")
    return {n: rounded(irmetrics.mean_or_none(r[n] for r in per_corpus if r[n] is not None)) for n in names}


def plot_sweep(result: dict[str, Any], out: Any) -> bool:
    """Draw the sweep's two refusal curves as a PNG into the binary stream `out`.
    False (and nothing written) when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(8.4, 4.0), dpi=120)
    for n, corpus in enumerate(result["corpora"]):
        t = [p["threshold"] for p in corpus["curve"]]
        for key, name, style in (("refused_when_unanswerable", "unanswerable", "-"), ("refused_when_answerable", "answerable", "--")):
            values = [p[key] if p[key] is not None else float("nan") for p in corpus["curve"]]
            ax.plot(t, values, style, color=f"C{n}", label=f"{corpus['name']}: {name} refused", drawstyle="steps-post")
    ax.axhline(result["rule"]["budget"], color="grey", linestyle=":", label=f"budget {result['rule']['budget']:g}")
    ax.axvline(result["chosen"]["threshold"], color="black", linestyle="--", label=f"chosen {result['chosen']['threshold']:.2f}")
    ax.set(xlabel="abstain threshold (refuse when confidence < t)", ylabel="share refused", xlim=(0, 1), ylim=(-0.02, 1.02))
    ax.set_title(f"abstain sweep: {result.get('label')}")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    fig.tight_layout()
    fig.savefig(out, format="png")
    plt.close(fig)
    return True
