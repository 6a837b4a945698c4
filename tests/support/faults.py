"""The machine faults tests/test_faults.py injects, as a user meets each one: the stage, the exit
code, the stderr line (`…` stands for any text) and what is left on disk. tests/support/fault_table.py
renders them for the README."""

from __future__ import annotations

import re
from dataclasses import dataclass

WRITERS = 4  # rag-index processes started at once on one index


@dataclass(frozen=True)
class Fault:
    """One fault as a user meets it: what the stage says (`…`: any text) and what is left on disk."""

    name: str
    stage: str
    code: int
    expect: str  # the stderr line; "" for nothing
    after: str

    def regex(self) -> re.Pattern[str]:
        return re.compile(".*".join(re.escape(part) for part in self.expect.split("…")))


FAULTS = {
    "writers": Fault(
        f"{WRITERS} `rag-index --out idx` started at once",
        "rag-index",
        0,
        "rag-index: idx: another rag-index… is writing this index; waiting for it to finish",  # (pid N) once the holder has written it
        "every writer exits 0, one after another (a writer that waited says so, once); idx holds one complete "
        "generation, the last writer's, and nothing else but `CURRENT` and the lock file `.lock`",
    ),
    "disk-index": Fault(
        "`rag-index` on a full disk",
        "rag-index",
        1,
        "rag-index: idx: no space left on the device; the previous index is untouched",
        "the previous index loads and answers; the unfinished generation is removed "
        "(a first build says `no index was written` and leaves no CURRENT)",
    ),
    "disk-cache": Fault(
        "`rag-embed --cache` on a full disk",
        "rag-embed",
        1,
        "rag-embed: cache.sqlite: no space left on the device; the cache is untouched",
        "nothing on stdout; the cache holds every vector it held before and works once there is room",
    ),
    "disk-result": Fault(
        "`rag-eval score --out` on a full disk",
        "rag-eval",
        1,
        "rag-eval: result.json: no space left on the device; the previous file is untouched",
        "the previous result file, byte for byte; no temporary file left",
    ),
    "cache-not-sqlite": Fault(
        "`--cache` names a file that is not a database (`--cache chunks.jsonl`)",
        "rag-embed",
        1,
        "rag-embed: chunks.jsonl: not a vector cache (not an sqlite database): if it was one, delete it and run again; "
        "otherwise name another file with --cache or RAG_EMBED_CACHE",
        "the file is left exactly as it was, and nothing is created beside it",
    ),
    "cache-truncated": Fault(
        "the cache file truncated (a copy cut short, a full disk long ago)",
        "rag-embed",
        1,
        "rag-embed: cache.sqlite: the vector cache is damaged (database disk image is malformed): delete it and run again "
        "(it holds only vectors, which are computed again)",
        "the file is left as it was (ragline never deletes or renames a file it cannot read as its own)",
    ),
    "cache-damaged-page": Fault(
        "a cache page overwritten (found only when a query reads it)",
        "rag-embed",
        1,
        "rag-embed: cache.sqlite: the vector cache is damaged (database disk image is malformed): delete it and run again "
        "(it holds only vectors, which are computed again)",
        "as above, from the window of records that met it (those of earlier windows are on stdout already, as with any error mid-stream)",
    ),
    "model": Fault(
        "model.onnx in the model cache truncated",
        "rag-embed",
        1,
        "rag-embed: …/all-MiniLM-L6-v2: model.onnx sha256 is …, expected 8199be6f…: the file is damaged or replaced; "
        "fetch it again with 'just model' or 'rag-embed --fetch-model'",
        "the file is left as it is; `just model` fetches it again (its `--if-missing` check fails on the hash); "
        "rag-search and rag-answer load the model the same way and say the same",
    ),
}
