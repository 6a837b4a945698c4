"""rag-rerank: hits -> the same hits reordered by the local model's query likelihood.

    rag-search --index idx --k 20 "our deploys keep breaking on Fridays" --json | rag-rerank | rag-answer --index idx
    rag-eval questions golden.yaml | rag-search --index idx --k 20 | rag-rerank | rag-answer --index idx

Reads hits records (rag-search's) and writes each back with its first --depth hits in
the order of the normalised retrieval score plus --weight (by default the weight fitted
for the model that runs: `ragline.rerank.FITTED_WEIGHTS`) times the normalised
likelihood the local model gives the question after each hit (`ragline.rerank` says
why: a question asked in other words than the page's). The hits past --depth are
dropped; every hit kept is renumbered, its `score` the combined one, and its `signals`
gain:

    local       {logp, pmi, rank}: the question's mean log-likelihood after the hit, its
                pointwise mutual information with it, and the model's own rank of it
    retrieved   {score, rank}: what rag-search gave it

and the record gains `relevance` (the best hit's PMI: how much the best passage explains
the question beyond its own words) and `rerank` {model, model_sha256, depth, weight,
words}; `retrieval.rerank_depth` records the depth, so rag-eval tells the run apart.

Seconds a question on two cores (the model reads --depth x --words words), so this is
a stage of its own, for a pipeline that can wait, not a default of rag-search. The local
model is `--local-model` (`just llm-model` fetches the default); llama.cpp runs in this
process (the `local` extra). The whole input is read and checked before the model loads,
and the output is written once every record is done: a bad record, a missing model or an
interrupt leaves stdout empty.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import click

import ragline
import ragline.records
from ragline import options, progress, rerank
from ragline.records import StageError

STAGE = "rag-rerank"


def checked(records: Any) -> list[tuple[Any, dict[str, Any]]]:
    """Every (place, record), each a hits record: a `question` string and `hits` whose each has a `score`."""
    out = []
    for where, record in records:
        question = ragline.records.require_field(record, "question", str, where)
        if not question.strip():
            raise StageError("field 'question' is empty", str(where))
        for i, hit in enumerate(ragline.records.check_hits(record, where, scored=True)):
            if not isinstance(hit.get("signals") or {}, dict):
                raise StageError(f"hit {i + 1}: 'signals' must be an object", str(where))
        out.append((where, record))
    return out


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("inputs", nargs=-1, type=click.Path(dir_okay=False, allow_dash=True))
@options.decorate(options.taken_by("rerank"))
@click.option("--quiet", "-q", is_flag=True, help="No notices on stderr.")
@ragline.records.stage_main(STAGE)
def main(
    inputs: tuple[str, ...],
    depth: int,
    rerank_weight: float | None,
    rerank_words: int,
    local_model: str,
    local_threads: int,
    local_context: int,
    quiet: bool,
) -> None:
    """Reorder each hits record's first DEPTH hits (files or stdin) by the local model's likelihood of the question."""
    records = checked(
        ragline.records.read_records(inputs, usage="no input: pipe rag-search's records into rag-rerank or name a file (see --help)")
    )
    if not records:
        return  # nothing to reorder: no model to load
    from ragline import local_models
    from ragline.answer.local import Judge, LocalModel, OverBudget

    path, sha256 = local_models.model_file(local_model)
    name = local_models.known_or_path(local_model)
    if rerank_weight is None:  # the weight fitted for this model (ragline.rerank.FITTED_WEIGHTS), named or given as its file
        rerank_weight = rerank.weight_for(name if name in local_models.KNOWN else local_models.known_as(path) or name)
    reranker = rerank.Reranker(Judge(LocalModel(path, local_threads, local_context, sha256, name)), depth, rerank_weight, rerank_words)
    shallow = sum(len(r["hits"]) < depth for _, r in records)
    if shallow:
        ragline.records.note(
            f"{STAGE}: {shallow} of {len(records)} records hold fewer than --depth {depth} hits: "
            f"rag-search --k {depth} gives the model more to choose from",
            quiet,
        )
    meta = {"model": name, "model_sha256": sha256, "depth": depth, "weight": rerank_weight, "words": rerank_words}
    meter = progress.Progress(STAGE, unit="questions", total=len(records), quiet=quiet, piped=False)
    start = time.monotonic()
    for where, record in meter.track(records):
        try:
            record["hits"], record["relevance"] = reranker.rerank(record["question"], record["hits"])
        except OverBudget as err:
            raise StageError(f"{err.why}: fewer --words or a larger --local-context", str(where)) from None
        record["rerank"] = meta
        if isinstance(record.get("retrieval"), dict):
            record["retrieval"]["rerank_depth"] = depth
    out = sys.stdout.buffer
    for _, record in records:
        out.write(ragline.records.dumps(record))
    seconds = time.monotonic() - start
    ragline.records.note(f"{STAGE}: reranked {len(records)} questions in {seconds:.0f} s ({seconds / len(records):.1f} s each)", quiet)


if __name__ == "__main__":
    main()
