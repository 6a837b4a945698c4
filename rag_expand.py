"""rag-expand: the questions each chunk answers, written by the local model (doc2query).

    rag-chunk corpus/ | rag-expand | rag-embed | rag-index --out idx

Reads chunk records (rag-chunk's) and writes each back with the questions a colleague
would ask of it, in everyday words, that it answers:

    questions   up to --questions strings, each ending in "?" (none where the model wrote none)
    expand      {"model": NAME, "model_sha256": ..., "questions": N, "prompt": VERSION}

rag-embed embeds each question as one more passage vector of its chunk, so a question
asked in other words than the page's can still find it (`ragline.expand` says why). The
local model is `--local-model` (`just llm-model` fetches the default); llama.cpp runs in
this process (the `local` extra). Minutes for a handbook on two cores, so every chunk's
questions go into a cache (`--cache`, default `$XDG_CACHE_HOME/ragline/expand.sqlite`)
keyed by the model file, the prompt, --questions and the chunk's heading path and text:
a rerun after an edit writes only the changed chunks' questions, and a run stopped by
Ctrl-C keeps every chunk it finished. The whole input is read and checked before the
model loads, and the output is written once every chunk is done: a bad record or an
interrupt leaves stdout empty. `--questions 0` passes the records through unchanged.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import click

import ragline
import ragline.records
from ragline import expand, options, progress

STAGE = "rag-expand"


def checked(records: Any) -> list[dict[str, Any]]:
    """Every record, each a chunk: an `id` and a `text` (strings), `headings` strings where present."""
    out = []
    for where, record in records:
        ragline.records.require_field(record, "id", str, where)
        ragline.records.require_field(record, "text", str, where)
        ragline.records.check_strings(record, "headings", where)
        out.append(record)
    return out


def model_identity(name: str) -> tuple[Path, str, str]:
    """(the GGUF file, the name records show, the sha256 the cache keys on): a known model's pinned
    sha256, or a user's own file's, computed. A missing or damaged model is a StageError now, before
    any chunk is read from the cache: the same command fails the same way on a warm cache and a cold one."""
    from ragline import local_models

    path, sha256 = local_models.model_file(name)
    return path, local_models.known_or_path(name), sha256 or local_models.sha256_file(path)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("inputs", nargs=-1, type=click.Path(dir_okay=False, allow_dash=True))
@options.decorate(options.taken_by("expand"))
@click.option("--no-cache", is_flag=True, help="Write every chunk's questions afresh and keep none.")
@click.option("--quiet", "-q", is_flag=True, help="No notices on stderr.")
@ragline.records.stage_main(STAGE)
def main(
    inputs: tuple[str, ...],
    questions: int,
    local_model: str,
    local_threads: int,
    local_context: int,
    expand_cache: str | None,
    no_cache: bool,
    quiet: bool,
) -> None:
    """Add `questions` (what each chunk answers, in a reader's words) to each chunk record (files or stdin)."""
    records = checked(
        ragline.records.read_records(inputs, usage="no input: pipe rag-chunk's records into rag-expand or name a file (see --help)")
    )
    out = sys.stdout.buffer
    if questions == 0:
        for record in records:
            out.write(ragline.records.dumps(record))
        return
    path, name, sha256 = model_identity(local_model)
    cache = None if no_cache else expand.QuestionCache(Path(expand_cache) if expand_cache else expand.default_cache(), sha256)

    def load() -> Any:
        from ragline.answer.local import LocalModel

        return LocalModel(path, local_threads, local_context, sha256, name)

    expander = expand.Expander(load, questions, cache)
    meter = progress.Progress(STAGE, unit="chunks", total=len(records), quiet=quiet, piped=False)
    start, written, empty = time.monotonic(), 0, 0
    meta = {"model": name, "model_sha256": sha256, "questions": questions, "prompt": expand.PROMPT_VERSION}
    for record in meter.track(records):
        result = expander.questions(record)
        record["questions"] = result.questions
        record["expand"] = meta
        written += not result.cached
        empty += not result.questions
    for record in records:
        out.write(ragline.records.dumps(record))
    if written or empty:
        seconds = time.monotonic() - start
        ragline.records.note(
            f"{STAGE}: wrote the questions of {written} of {len(records)} chunks in {seconds:.0f} s"
            f" (the rest from the cache){f'; {empty} chunks got none' if empty else ''}",
            quiet,
        )


if __name__ == "__main__":
    main()
