"""vectorcache: the vector cache that rag-embed, rag-search and rag-answer share, and the store under it.

A library, not a stage (rag_embed owns it and re-exports `Cache`; `rag_embed.cache_for`
names the cache of an embedder): an sqlite file of vectors keyed by the sha256 of the
model's id, the kind of text (document or query) and the text. `Store`, the sqlite table
of blobs under it, also holds rag-expand's questions (`ragline.expand.QuestionCache`).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from pathlib import Path

import numpy as np

import ragline
import ragline.records
from ragline.records import StageError

MOST_MB = 2048  # the default bound of a vector cache file (RAG_EMBED_CACHE_MB): over a million MiniLM vectors
DROP_SHARE = 0.25  # past the bound, this share of the rows, the first stored, is dropped


def most_bytes() -> int:
    """The bound of a vector cache file in bytes: $RAG_EMBED_CACHE_MB megabytes, else MOST_MB (a value that
    is not a positive number is an error naming the variable)."""
    raw = os.environ.get("RAG_EMBED_CACHE_MB", "").strip()
    try:
        mb = float(raw) if raw else float(MOST_MB)
    except ValueError:
        mb = -1.0
    if not mb > 0:
        raise StageError(f"RAG_EMBED_CACHE_MB must be a positive number of megabytes, got {raw!r}")
    return int(mb * 1024 * 1024)


class Store:
    """A content-addressed sqlite store of blobs, keyed by sha256: the vector cache (`Cache`)
    and rag-expand's question cache (`ragline.expand.QuestionCache`) are each one table of it.

    sqlite in WAL mode, one file, shared by the processes that use it (each waits for
    another's write). A file that is not an sqlite database, or a damaged one, is a
    StageError naming it and saying what to do; the file is never deleted or moved aside
    (`--cache` may name a file that is not a cache at all). A full disk is a
    ragline.records.DiskFull: the failed write is rolled back and the store keeps what it held.
    """

    TABLE = "vectors"
    COLUMN = "vec"
    WHAT = "vector cache"  # its name in messages
    HOLDS = "vectors"  # what it holds, which are computed again when it is deleted
    OPTION = "--cache or RAG_EMBED_CACHE"

    def __init__(self, path: Path, model_id: str):
        import sqlite3  # here, not at the top: a run without a cache (rag-search QUESTION) does not load it

        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        try:
            self.db = sqlite3.connect(str(path), timeout=120)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute(f"CREATE TABLE IF NOT EXISTS {self.TABLE} (key BLOB PRIMARY KEY, {self.COLUMN} BLOB NOT NULL)")
        except sqlite3.Error as err:
            raise self.error(err) from None
        self.model_id = model_id.encode()
        self.hits = 0

    def error(self, err: Exception) -> StageError:
        """sqlite's error as one line naming the file and what to do."""
        name, where = getattr(err, "sqlite_errorname", ""), str(self.path)
        if name == "SQLITE_NOTADB":
            return StageError(
                f"not a {self.WHAT} (not an sqlite database): if it was one, delete it and run again; otherwise name another file with {self.OPTION}",
                where,
            )
        if name == "SQLITE_CORRUPT":
            return StageError(
                f"the {self.WHAT} is damaged ({err}): delete it and run again (it holds only {self.HOLDS}, which are computed again)", where
            )
        if name == "SQLITE_FULL":
            return ragline.records.DiskFull(where, "the cache is untouched")
        return StageError(f"cannot use the {self.WHAT}: {ragline.records.one_line(str(err))}", where)

    def blobs(self, keys: list[bytes]) -> dict[bytes, bytes]:
        """The blobs stored under those keys (a key not stored is left out); counted in `hits`."""
        import sqlite3

        found: dict[bytes, bytes] = {}
        try:
            for start in range(0, len(keys), 500):
                part = keys[start : start + 500]
                marks = ",".join("?" * len(part))
                for key, blob in self.db.execute(f"SELECT key, {self.COLUMN} FROM {self.TABLE} WHERE key IN ({marks})", part):
                    found[key] = blob
        except sqlite3.Error as err:
            raise self.error(err) from None
        self.hits += len(found)
        return found

    def put_blobs(self, items: Iterable[tuple[bytes, bytes]]) -> None:
        """Store blobs in one transaction: all of them, or (on any error) none."""
        import sqlite3

        try:
            with self.db:  # commits, or rolls back on an error
                self.db.executemany(f"INSERT OR REPLACE INTO {self.TABLE} VALUES (?, ?)", items)
        except sqlite3.Error as err:
            raise self.error(err) from None


class Cache(Store):
    """The vector cache: key = sha256(model id, kind, text).

    Re-embedding unchanged text is wasted work; with a cache, a second run over
    the same corpus embeds only what changed. Shared by rag-embed, rag-search and
    rag-answer (`Store` says how a damaged file or a full disk is met). Bounded: when
    a write leaves the file's used pages over `most` bytes (`most_bytes`), the first
    stored DROP_SHARE of its rows are dropped in the same transaction, and their
    pages are reused by later writes, so the file stays near the bound.
    """

    def __init__(self, path: Path, model_id: str, most: int | None = None):
        super().__init__(path, model_id)
        self.most = most_bytes() if most is None else most
        self.dropped = 0

    def used_bytes(self) -> int:
        """The bytes of the file's pages in use (its size less the free pages a drop left)."""
        pages, free, size = (self.db.execute(f"PRAGMA {p}").fetchone()[0] for p in ("page_count", "freelist_count", "page_size"))
        return int((pages - free) * size)

    def put_blobs(self, items: Iterable[tuple[bytes, bytes]]) -> None:
        """Store blobs in one transaction, all or none; then, past the bound, drop the first stored."""
        import sqlite3

        super().put_blobs(items)
        try:
            if self.used_bytes() > self.most:
                with self.db:
                    (rows,) = self.db.execute(f"SELECT count(*) FROM {self.TABLE}").fetchone()
                    drop = max(1, int(rows * DROP_SHARE))
                    self.db.execute(
                        f"DELETE FROM {self.TABLE} WHERE rowid IN (SELECT rowid FROM {self.TABLE} ORDER BY rowid LIMIT ?)", (drop,)
                    )
                    self.dropped += drop
        except sqlite3.Error as err:
            raise self.error(err) from None

    def key(self, text: str, query: bool) -> bytes:
        return hashlib.sha256(self.model_id + (b"\x00q\x00" if query else b"\x00d\x00") + text.encode("utf-8")).digest()

    def get(self, keys: list[bytes]) -> dict[bytes, np.ndarray]:
        return {key: np.frombuffer(blob, dtype=np.float32) for key, blob in self.blobs(keys).items()}

    def put(self, items: Iterable[tuple[bytes, np.ndarray]]) -> None:
        """Store vectors in one transaction: all of them, or (on any error) none."""
        self.put_blobs((k, v.astype(np.float32).tobytes()) for k, v in items)
