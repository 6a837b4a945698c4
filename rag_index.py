"""rag-index: embedded chunk records -> an index directory (vectors, text, BM25).

    rag-chunk corpus/ | rag-embed | rag-index --out build/idx

Reads embedded chunk records (`id`, `text`, `vector`, `model`, and the chunk
fields) and writes an index directory. `rag_index` owns the format: `write` and
`load` live here and every reader goes through `load`.

On disk, an index is a directory of generations and a pointer to the live one:

    IDX/CURRENT                 the name of the live generation, replaced atomically
    IDX/gen-<stamp>/vectors.npy float32 (chunks x dim), rows L2-normalised
    IDX/gen-<stamp>/chunks.jsonl  the chunk records (no vectors), in row order
    IDX/gen-<stamp>/bm25/*.npy  vocabulary (the sorted terms' UTF-8 bytes end to end,
                                and V + 1 offsets into them), df, doc lengths, postings
                                (CSR: indptr, doc ids, tf, precomputed BM25 weights)
    IDX/gen-<stamp>/passages.npy, passage_rows.npy  passage vectors (rag-embed
                                --passages), rows L2-normalised, and each one's chunk row
    IDX/gen-<stamp>/manifest.json  written last: model, dim, ONNX hash, chunking,
                                counts, corpus digest, the source files' facts (`sources`:
                                size, mtime, sha256 as rag-chunk recorded them, the file and
                                its input relative to IDX), file sizes and sha256s, ragline version

Format 2 (`ragline-index/2`) stores the vocabulary unpadded: format 1's fixed-width
string array gave every term the width of the longest, so one 20,000-character token
made a 69 KB file a 382 MB index. Format 1 indexes are still read (their vocabulary is
converted when loaded). CURRENT holds one generation's name (`gen-` and letters, digits,
`-`, `T`); anything else there (bytes that are not such a name, a directory, a symbolic
link, a FIFO, a device) is a damaged pointer: `load` says so in one line (rebuild it), and
`write` replaces it with its own generation, keeping the generations it finds until its own
is live. CURRENT and the manifest are read without blocking and no further than a bound
(`read_small`), and a pointer's bytes are never repeated in a message.

A rebuild writes a new generation beside the live one, then replaces CURRENT
(os.replace) and removes the old generation. A kill at any moment leaves CURRENT
naming a complete generation; a generation without a manifest, or whose files
disagree with it (size or sha256; files over 64 MiB by a sampled sha256, see
`file_digest`), is never loaded. A kill may leave a dead generation or a
`.CURRENT.*.tmp` beside the live one: readers never look at them, and the next
build sweeps them away before it writes, so however many builds are killed there
is never more than one dead generation (DEAD_BOUND) and one temp file beside the
live one. A reader that read CURRENT just before a rebuild swept the generation it
named follows CURRENT again (`load`).

Writers take turns: `write` holds an exclusive lock (fcntl.flock) on IDX/.lock from
its first sweep to its last, and a second writer waits for it, saying once on
stderr which process holds it (`rag-index: IDX: another rag-index (pid N) is
writing this index; waiting for it to finish`). Waiting rather than refusing: two
builds of one index at once (`make -j`, two terminals) both succeed, one after the
other, and the last one's generation is live; neither deletes the other's
unfinished generation. The lock is the kernel's, so a killed writer releases it.
The lock file stays (removing it would race with the next writer); one that is not a
regular file of one link (a symlink to another file) is refused, never written through.

A full disk is one line, `rag-index: IDX: no space left on the device; the previous
index is untouched` (or `no index was written` on a first build): the unfinished
generation is removed and CURRENT still names the old one.

The BM25 statistics (`ragline.bm25`: Okapi BM25 with Lucene's idf, k1 = 1.2, b = 0.75) are
stored as the arrays above and loaded back into a `ragline.bm25.Bm25`.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import re
import shlex
import stat
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import click
import numpy as np
import orjson

import rag_embed
import ragline
import ragline.records
import ragline.text
from ragline import options, progress, sources, terminal
from ragline.bm25 import Bm25, Vocabulary, build_bm25
from ragline.index import Index
from ragline.records import StageError

STAGE = "rag-index"
FORMAT = "ragline-index/2"
READABLE = ("ragline-index/1", FORMAT)  # format 1: the vocabulary as a fixed-width string array (terms.npy)
BM25_ARRAYS = ("terms_utf8", "term_offsets", "df", "doc_len", "indptr", "docs", "tf", "weights")
CURRENT = "CURRENT"
LOCK = ".lock"  # writers take turns on an flock of this file
LOCK_MAX = 64  # bytes of a lock file, at most: more, and it is not rag-index's
PID_WIDTH = 10  # characters the holder's PID is written in, right-aligned (Linux PIDs have at most 7 digits)
LOAD_ATTEMPTS = 3  # a load follows CURRENT when a rebuild swapped it under the reader
POINTER_MAX = 256  # bytes of CURRENT read, at most (a generation's name is about 40)
MANIFEST_MAX = 16 << 20  # bytes of a manifest read, at most (one of 100,000 chunks is a few KB)
DEAD_BOUND = 1  # dead generations beside the live one, at most, after any number of killed builds
CHUNK_FIELDS = ("id", "doc", "path", "headings", "text", "start_line", "end_line", "words", "title", "questions")
CHUNK_TYPES = {"doc": str, "path": str, "title": str, "start_line": int, "end_line": int, "words": int}  # checked when present
MAX_ID = 1000  # characters of a chunk id


# --------------------------------------------------------------------------- building


def _numbers(value: Any, name: str, ndim: int, at: str) -> np.ndarray:
    """A vector (ndim 1) or a matrix of row vectors (ndim 2) of finite float32s, else a StageError."""
    shape = "a flat, non-empty list of numbers" if ndim == 1 else "a list of equally long lists of numbers"
    try:
        raw = np.asarray(value)
        if raw.dtype.kind not in "iufO":  # booleans and numeric strings are not numbers
            raise ValueError
        with np.errstate(over="ignore"):  # null (how orjson writes NaN) becomes NaN, refused below
            array = np.asarray(value, dtype=np.float32) if raw.dtype.kind == "O" else raw.astype(np.float32)
    except (TypeError, ValueError, OverflowError):
        kind = "a list of numbers" if ndim == 1 else "a list of equally long lists of numbers"
        raise StageError(f"field '{name}' must be {kind}", at) from None
    if array.ndim != ndim or (ndim == 1 and not len(array)):
        raise StageError(f"field '{name}' must be {shape}", at)
    if not np.isfinite(array).all():
        raise StageError(f"{'vector' if ndim == 1 else name} has a non-finite value (NaN or infinity)", at)
    return array


def check_chunk(record: dict[str, Any], at: str) -> str:
    """A chunk record's id (a string, not empty, at most MAX_ID characters, no control character),
    text, typed fields (CHUNK_TYPES) and headings (strings), else a StageError at `at`: what rag-index
    accepts into an index, and what `load` accepts back from one. Returns the id."""
    cid = ragline.records.require_field(record, "id", str, at)
    ragline.records.require_field(record, "text", str, at)
    if not cid or len(cid) > MAX_ID or re.search(r"[\x00-\x1f\x7f]", cid):
        what = "is empty" if not cid else f"is over {MAX_ID} characters" if len(cid) > MAX_ID else "holds a control character"
        raise StageError(f"chunk id '{ragline.records.printable(cid[:80])}' {what}", at)
    for name, kind in CHUNK_TYPES.items():
        if record.get(name) is not None:
            ragline.records.require_field(record, name, kind, at)
    ragline.records.check_strings(record, "headings", at)
    ragline.records.check_strings(record, "questions", at, " (rag-expand's)")
    return cid


def _unit_rows(matrix: np.ndarray) -> np.ndarray:
    """Rows scaled to length 1. A row whose float32 norm overflows (values near 1e20 and up) is scaled in
    float64 instead; the others in float32, bit for bit as before."""
    with np.errstate(over="ignore"):
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    unit = matrix / np.where(norms > 0, norms, 1.0)
    wide = ~np.isfinite(norms[:, 0])
    if wide.any():
        big = np.asarray(matrix[wide], dtype=np.float64)
        unit[wide] = (big / np.linalg.norm(big, axis=1, keepdims=True)).astype(np.float32)
    return unit


def collect(records: Iterable[tuple[ragline.records.Line, dict[str, Any]]]) -> tuple[list[dict[str, Any]], np.ndarray, dict[str, Any]]:
    """Check the stream and gather (chunk records, vectors, embedding facts).

    Refused, naming the line: a record without the chunk fields, a vector that is
    not a list of finite numbers, a second model or dimension, a duplicate id, passage
    vectors of another dimension, a `source` that is not a file's facts or not the facts
    of its file's other chunks. Passage vectors, where the records carry them, are
    gathered into facts["passages"] (a matrix) and facts["passage_rows"] (each one's chunk row);
    the source files' facts into facts["sources"] (`ragline.sources.gather`).
    """
    chunks: list[dict[str, Any]] = []
    rows: list[np.ndarray] = []
    passages: list[np.ndarray] = []
    owners: list[int] = []
    seen: dict[str, str] = {}
    facts: dict[str, Any] = {}
    files: dict[str, dict[str, Any]] = {}  # the source files' facts (`ragline.sources`), by the chunks' path
    for where, record in records:
        at = str(where)
        cid = ragline.records.require_field(record, "id", str, at)
        ragline.records.require_field(record, "text", str, at)
        vector = ragline.records.require_field(record, "vector", list, at)
        model = ragline.records.require_field(record, "model", str, at)
        check_chunk(record, at)
        if cid in seen:
            raise StageError(f"duplicate chunk id '{cid}' (first at {seen[cid]})", at)
        seen[cid] = at
        row = _numbers(vector, "vector", 1, at)
        headings = bool(record.get("embed_headings", True))
        sha = record.get("model_sha256")
        long_mode = record.get("embed_long", "truncate")
        if not facts:
            dim = rag_embed.KNOWN[model].dim if model in rag_embed.KNOWN else None  # `hash` has any dimension it is asked for
            if dim is not None and len(row) != dim:
                raise StageError(f"vector has {len(row)} values, model '{model}' gives {dim}", at)
            facts = {
                "model": model,
                "sha256": sha,
                "dim": len(row),
                "headings": headings,
                "long": long_mode,
                "embed_passages": bool(record.get("embed_passages", False)),
                "window": record.get("window"),
                "first": at,
            }
        elif long_mode != facts["long"]:
            raise StageError("embed_long differs from the first record's: re-embed the whole corpus one way", at)
        elif sha != facts["sha256"]:
            raise StageError(f"model_sha256 differs from the first record's at {facts['first']}: one index, one model file", at)
        elif model != facts["model"]:
            raise StageError(f"model '{model}' differs from '{facts['model']}' at {facts['first']}: one index, one model", at)
        elif len(row) != facts["dim"]:
            raise StageError(f"vector has {len(row)} values, the stream's first has {facts['dim']}", at)
        elif headings != facts["headings"]:
            raise StageError("embed_headings differs from the first record's: re-embed the whole corpus one way", at)
        if record.get("passage_vectors") is not None and len(record["passage_vectors"]):
            matrix = _numbers(record["passage_vectors"], "passage_vectors", 2, at)
            if matrix.shape[1] != facts["dim"]:
                raise StageError(f"passage vectors have {matrix.shape[1]} values, the stream's first vector has {facts['dim']}", at)
            passages.append(_unit_rows(matrix))
            owners.extend([len(chunks)] * len(matrix))
        if isinstance(record.get("expand"), dict) and record.get("embed_questions"):
            facts.setdefault("expand", record["expand"])
            facts["questions"] = facts.get("questions", 0) + int(record["embed_questions"])
        if record.get("source") is not None:
            sources.gather(files, str(record.get("path") or record.get("doc") or cid), record["source"], at)
        rows.append(row)
        chunks.append({k: record[k] for k in CHUNK_FIELDS if k in record} | {"text": record["text"]})
    if not chunks:
        raise StageError("no records: nothing to index")
    facts["sources"] = files
    facts["passages"] = np.vstack(passages).astype(np.float32) if passages else np.zeros((0, facts["dim"]), dtype=np.float32)
    facts["passage_rows"] = np.array(owners, dtype=np.int32)
    return chunks, _unit_rows(np.vstack(rows)).astype(np.float32), facts


def corpus_digest(chunks: list[dict[str, Any]]) -> str:
    """sha256 over ids and texts in row order: same corpus and chunking, same digest."""
    digest = hashlib.sha256()
    for chunk in chunks:
        digest.update(chunk["id"].encode() + b"\x00" + chunk["text"].encode() + b"\x00")
    return digest.hexdigest()


def write(
    out: Path, chunks: list[dict[str, Any]], vectors: np.ndarray, facts: dict[str, Any], notice: Callable[[str], None] | None = None
) -> Path:
    """Write a new generation of the index at `out` and make it live. Returns its folder.

    Waits for any other writer of `out` (`notice` hears once which process it is waiting
    for). A full disk is a ragline.records.DiskFull naming `out`, with the previous index untouched.
    """
    bm25 = build_bm25(
        [ragline.text.retrieval_text(c, facts.get("headings", True)) for c in chunks]
    )  # before the lock: writers overlap here
    try:
        out.mkdir(parents=True, exist_ok=True)
        _check_target(out)
        with _writer_lock(out, notice):
            return _write_generation(out, chunks, vectors, bm25, facts)
    except (OSError, ragline.records.DiskFull) as err:  # DiskFull: the manifest or CURRENT, by ragline.records.atomic_file
        if not ragline.records.disk_full(err):
            raise
        kept = "the previous index is untouched" if _live_or_damaged(out) else "no index was written"
        raise ragline.records.DiskFull(str(out), kept) from None


@contextlib.contextmanager
def _writer_lock(out: Path, notice: Callable[[str], None] | None) -> Iterator[None]:
    """Hold an exclusive flock on out/LOCK; if another writer holds it, say so once and wait.

    The lock is opened with O_NOFOLLOW and must be a regular file with one link and at most
    LOCK_MAX bytes, else a StageError: a `.lock` linked to another file (symbolic or hard) is
    not rag-index's to write into. It is never truncated: the holder's PID is written over
    its first line at a fixed width (PID_WIDTH), and only the first line is read back.
    """
    try:
        fd = os.open(out / LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o666)
    except OSError as err:
        if err.errno not in (errno.ELOOP, errno.EISDIR):
            raise
        what = "a symbolic link" if err.errno == errno.ELOOP else "a directory"
        raise StageError(f"{LOCK} is {what}, not rag-index's lock file: remove it", str(out)) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1 or info.st_size > LOCK_MAX:
            why = (
                "not a regular file"
                if not stat.S_ISREG(info.st_mode)
                else "a second name of another file"
                if info.st_nlink != 1
                else f"{info.st_size} bytes"
            )
            raise StageError(f"{LOCK} is {why}, not rag-index's lock file: remove it", str(out))
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, LOCK_MAX, 0).decode("ascii", "replace").partition("\n")[0].strip()  # the first line
            who = f"another rag-index (pid {holder})" if holder.isdigit() else "another rag-index"
            if notice is not None:
                notice(f"{out}: {who} is writing this index; waiting for it to finish")
            fcntl.flock(fd, fcntl.LOCK_EX)
        with contextlib.suppress(OSError):  # who holds it: for the notice of the next writer only
            os.pwrite(fd, f"{os.getpid():>{PID_WIDTH}}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock


def _write_generation(out: Path, chunks: list[dict[str, Any]], vectors: np.ndarray, bm25: Bm25, facts: dict[str, Any]) -> Path:
    """Sweep, write a generation beside the live one, swap CURRENT, sweep: under the writer lock."""
    import shutil  # the writers' (as in _sweep): `load` does not need it

    _sweep(out)
    gen = out / f"gen-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}-{time.monotonic_ns() % 1_000_000:06d}"
    headings = facts.get("headings", True)
    try:
        (gen / "bm25").mkdir(parents=True)
        _save(gen / "vectors.npy", vectors)
        passages = facts.get("passages")
        if passages is not None and len(passages):
            _save(gen / "passages.npy", passages)
            _save(gen / "passage_rows.npy", facts["passage_rows"])
        with open(gen / "chunks.jsonl", "wb") as handle:
            ragline.records.write_records(chunks, handle, flush_every=1 << 30)
        _save(gen / "bm25" / "terms_utf8.npy", bm25.terms.data)
        _save(gen / "bm25" / "term_offsets.npy", bm25.terms.offsets)
        for name in ("df", "doc_len", "indptr", "docs", "tf", "weights"):
            _save(gen / "bm25" / f"{name}.npy", getattr(bm25, name))
        files = sorted(p.relative_to(gen).as_posix() for p in gen.rglob("*") if p.is_file())
        manifest = {
            "format": FORMAT,
            "ragline": ragline.__version__,
            "model": facts["model"],
            "dim": int(vectors.shape[1]),
            "model_sha256": facts.get("sha256"),
            "embed_headings": headings,
            "embed_long": facts.get("long", "truncate"),
            "embed_passages": facts.get("embed_passages", False),
            "expand": facts.get("expand"),  # rag-expand's model and questions a chunk, where its questions were embedded
            "chunking": {"window": facts.get("window")},
            "bm25": {
                "k1": bm25.k1,
                "b": bm25.b,
                "idf": "lucene: ln(1 + (N - df + 0.5) / (df + 0.5))",
                "tokeniser": "ragline.text.tokenize",
            },
            "counts": {
                "chunks": len(chunks),
                "docs": len({c.get("doc") for c in chunks}),
                "terms": len(bm25.terms),
                "postings": len(bm25.docs),
                "passages": 0 if passages is None else len(passages),
                "questions": facts.get("questions", 0),  # of the passages, those that are rag-expand's questions
            },
            "corpus_digest": corpus_digest(chunks),
            "sources": sources.anchor(facts.get("sources") or {}, out),
            "files": {f: (gen / f).stat().st_size for f in files},
            "sha256": {f: file_digest(gen / f) for f in files},
        }
        for f in files:
            _fsync(gen / f)
        with ragline.records.atomic_file(gen / "manifest.json") as handle:
            handle.write(orjson.dumps(manifest, option=orjson.OPT_INDENT_2))
        ragline.records.fsync_dir(gen)
        if (out / CURRENT).is_dir() and not (out / CURRENT).is_symlink():  # a damaged pointer: ours replaces it
            shutil.rmtree(out / CURRENT)
        with ragline.records.atomic_file(out / CURRENT) as handle:
            handle.write(gen.name.encode() + b"\n")
        ragline.records.fsync_dir(out)
    except BaseException:
        if _live_or_damaged(out) != gen.name:  # Ctrl-C after CURRENT names it: it is the index now, keep it
            shutil.rmtree(gen, ignore_errors=True)
        raise
    _sweep(out)
    return gen


FULL_DIGEST_LIMIT = 64 << 20  # files up to this size are hashed whole at every load
SAMPLES = 16  # blocks of 1 MiB hashed from a larger file (first and last included)


def file_digest(path: Path) -> str:
    """sha256 of a file; above FULL_DIGEST_LIMIT, `sampled:` + the sha256 of its size and
    SAMPLES evenly spaced 1 MiB blocks, so that loading a 1.5 GB vector matrix costs
    milliseconds, not seconds (a flipped bit outside the samples is then caught only
    by the size check and the shape checks)."""
    size = path.stat().st_size
    if size <= FULL_DIGEST_LIMIT:
        return rag_embed.sha256_file(path)
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        digest.update(str(size).encode())
        for i in range(SAMPLES):
            handle.seek((size - (1 << 20)) * i // (SAMPLES - 1))
            digest.update(handle.read(1 << 20))
    return "sampled:" + digest.hexdigest()


def _save(path: Path, array: np.ndarray) -> None:
    """np.save(path, array, allow_pickle=False), byte for byte, through Python's file layer:
    a full disk is then an OSError with its errno (numpy's own writer says only
    `1523 requested and 403 written`)."""
    array = np.ascontiguousarray(array)
    with open(path, "wb") as handle:
        np.lib.format.write_array_header_1_0(handle, np.lib.format.header_data_from_array_1_0(array))
        handle.write(array.data)


def _fsync(path: Path) -> None:
    with open(path, "rb") as handle:
        os.fsync(handle.fileno())


def _check_target(out: Path) -> None:
    """Refuse to write into a directory that is neither empty nor a ragline index."""
    entries = [p.name for p in out.iterdir()]
    if entries and CURRENT not in entries and not all(e.startswith(("gen-", f".{CURRENT}")) or e == LOCK for e in entries):
        raise StageError("exists and is not a ragline index (refusing to write into it)", str(out))


def _sweep(out: Path) -> None:
    """Remove generations that are not live, and CURRENT temp files (left by an earlier kill or replaced).

    Only under the writer lock: no other writer is then writing a generation.
    """
    import shutil

    damaged = _pointer_damaged(out)  # then any generation may be the good one: keep them all until ours is live
    live = _live_or_damaged(out)
    for entry in out.iterdir():
        if not damaged and entry.is_dir() and entry.name.startswith("gen-") and entry.name != live:
            shutil.rmtree(entry, ignore_errors=True)
        elif entry.is_file() and entry.name.startswith(f".{CURRENT}.") and entry.name.endswith(".tmp"):
            entry.unlink(missing_ok=True)


def live_generation(out: Path) -> str | None:
    """The name of the index's live generation (its CURRENT pointer), None when there is none.

    A CURRENT that is not a generation's name (bytes that are not one, a directory, a
    symbolic link, a FIFO or a device, a file that cannot be read) is a StageError naming
    the index: a damaged pointer. The pointer is read by `read_small` (never blocking, at
    most POINTER_MAX bytes), and its bytes are never repeated in the message: a pointer
    linked to another file would show that file's first bytes in /health.
    """
    damaged = "the index pointer CURRENT is damaged ({}): rebuild the index (rag-index --out writes over it)"
    try:
        raw = read_small(out / CURRENT, POINTER_MAX).strip()
    except (FileNotFoundError, NotADirectoryError):
        return None
    except NotRegular as err:
        raise StageError(damaged.format(err.kind), str(out)) from None
    except OSError as err:
        if err.errno in (errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.EINTR):
            raise  # the process's trouble, not the pointer's
        raise StageError(damaged.format(f"cannot be read: {err.strerror}"), str(out)) from None
    if not raw:
        return None
    if len(raw) > POINTER_MAX or not re.fullmatch(rb"gen-[0-9A-Za-z-]+", raw):
        shown = f"over {POINTER_MAX} bytes" if len(raw) > POINTER_MAX else f"{len(raw)} bytes"
        raise StageError(damaged.format(f"{shown} that are not the name of a generation"), str(out))
    return raw.decode("ascii")


class NotRegular(OSError):
    """`read_small` found something that is not a regular file; `kind` says what, as a message's words."""

    def __init__(self, kind: str):
        super().__init__(kind)
        self.kind = kind


def read_small(path: Path, limit: int) -> bytes:
    """At most limit + 1 bytes of the regular file `path` (more than `limit`: the caller's to refuse).

    Opened with O_NONBLOCK and O_NOFOLLOW and checked with fstat before any read: a FIFO
    would block the reader in open() (the server's event loop, rag-search) until a writer
    came, a symbolic link may lead anywhere (/dev/zero: gigabytes before a length check),
    so a symlink, a directory, a FIFO, a socket or a device is a NotRegular saying which.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise NotRegular("a symbolic link, not a file") from None
        raise
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kinds = {stat.S_IFDIR: "a directory", stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket"}
            raise NotRegular(f"{kinds.get(stat.S_IFMT(mode), 'a device')}, not a file")
        return os.read(fd, limit + 1)
    finally:
        os.close(fd)


def _live_or_damaged(out: Path) -> str | None:
    """For writers: the live generation, or None when there is none or CURRENT is damaged (a build writes over it)."""
    try:
        return live_generation(out)
    except StageError:
        return None


def _pointer_damaged(out: Path) -> bool:
    try:
        live_generation(out)
    except StageError:
        return True
    return False


# --------------------------------------------------------------------------- loading


def load(path: str | os.PathLike[str], *, mmap: bool = True) -> Index:
    """Load the live generation of an index; anything incomplete is a StageError.

    Vectors are memory-mapped (`mmap_mode='r'`) and no file is read with pickle. A
    rebuild may replace CURRENT and sweep the generation it named while this reads it:
    when a load fails and CURRENT has moved meanwhile, it follows CURRENT (LOAD_ATTEMPTS
    in all). Once loaded, an index stays usable when a rebuild sweeps its files (chunks
    and BM25 are in memory, the vectors mapped from files that stay open).
    """
    root = Path(path)
    if not root.is_dir():
        raise StageError("no index here (run rag-index --out first)", str(root))
    attempt = 1
    while True:
        live = live_generation(root)
        if live is None:
            raise StageError("not a ragline index, or one whose first build never finished (no CURRENT)", str(root))
        try:
            return _load_generation(root, root / live, mmap)
        except (StageError, OSError):
            if attempt == LOAD_ATTEMPTS or live_generation(root) == live:
                raise  # CURRENT did not move: the generation itself is broken
        attempt += 1


def _load_generation(root: Path, gen: Path, mmap: bool) -> Index:
    """Load one generation, checking every file against its manifest."""
    manifest_file = gen / "manifest.json"
    try:
        raw = read_small(manifest_file, MANIFEST_MAX)
        if len(raw) > MANIFEST_MAX:
            raise StageError(f"index manifest is over {MANIFEST_MAX >> 20} MiB: rebuild it", str(manifest_file))
        manifest = orjson.loads(raw)
    except FileNotFoundError:
        raise StageError("index is half-written (no manifest): rebuild it", str(root)) from None
    except NotRegular as err:
        raise StageError(f"index manifest is {err.kind}: rebuild it", str(manifest_file)) from None
    except orjson.JSONDecodeError:
        raise StageError("index manifest is not valid JSON: rebuild it", str(manifest_file)) from None
    if not isinstance(manifest, dict) or manifest.get("format") not in READABLE:
        raise StageError(
            f"index format is {manifest.get('format') if isinstance(manifest, dict) else None!r}, expected {FORMAT!r}: rebuild it",
            str(root),
        )
    _check_manifest(manifest, str(manifest_file))
    hashes = manifest.get("sha256") or {}
    for name, size in manifest["files"].items():
        file = gen / name
        if not file.is_file():
            raise StageError(f"index file {name} is missing: rebuild it", str(root))
        if file.stat().st_size != size:
            raise StageError(f"index file {name} has {file.stat().st_size} bytes, the manifest says {size}: rebuild it", str(root))
    try:
        vectors = np.load(gen / "vectors.npy", mmap_mode="r" if mmap else None, allow_pickle=False)
        names = BM25_ARRAYS if manifest["format"] == FORMAT else ("terms", *BM25_ARRAYS[2:])
        arrays = {name: np.load(gen / "bm25" / f"{name}.npy", allow_pickle=False) for name in names}
        if "terms" in arrays:  # format 1: a sorted fixed-width string array
            if arrays["terms"].dtype.kind != "U":
                raise ValueError(f"terms.npy holds {arrays['terms'].dtype}, not strings")
            terms = arrays.pop("terms").tolist()
            arrays["terms_utf8"], arrays["term_offsets"] = (vocabulary := Vocabulary.of(terms)).data, vocabulary.offsets
    except (ValueError, OSError) as err:
        raise StageError(f"index arrays cannot be read ({ragline.records.one_line(str(err), 120)}): rebuild it", str(root)) from None
    for name in manifest["files"]:  # same sizes, other bytes: a flipped bit, or a file from another build
        if name in hashes and file_digest(gen / name) != hashes[name]:
            raise StageError(f"index file {name} does not match the manifest's sha256 (corrupted or replaced): rebuild it", str(root))
    chunks = _load_chunks(root, gen / "chunks.jsonl")
    counts = manifest["counts"]
    if (
        vectors.shape != (counts["chunks"], manifest["dim"])
        or len(chunks) != counts["chunks"]
        or arrays["doc_len"].shape[0] != counts["chunks"]
    ):
        raise StageError(f"index arrays disagree with the manifest (vectors {vectors.shape}, {len(chunks)} chunks): rebuild it", str(root))
    _check_arrays(root, vectors, arrays)
    vocabulary = Vocabulary(arrays.pop("terms_utf8"), arrays.pop("term_offsets"))
    params = manifest["bm25"]
    bm25 = Bm25(vocabulary, **arrays, k1=params["k1"], b=params["b"])
    index = Index(root, manifest, vectors, chunks, bm25)
    if "passages.npy" in manifest["files"]:
        index.passages, index.passage_rows = _load_passages(gen, manifest, mmap)
    return index


def _load_chunks(root: Path, path: Path) -> list[dict[str, Any]]:
    """The chunk records of a generation, each checked as rag-index checks the records it is given (`check_chunk`)."""
    chunks, seen = [], set()
    with open(path, "rb") as handle:
        for line, record in ragline.records.parse_lines(str(path), handle):
            try:
                cid = check_chunk(record, str(line))
            except StageError as err:
                raise StageError(f"index file chunks.jsonl is damaged (line {line.number}: {err.message}): rebuild it", str(root)) from None
            if cid in seen:
                raise StageError(f"index file chunks.jsonl is damaged (line {line.number}: a second chunk '{cid}'): rebuild it", str(root))
            seen.add(cid)
            chunks.append(record)
    return chunks


def _check_arrays(root: Path, vectors: np.ndarray, arrays: dict[str, np.ndarray]) -> None:
    """The dtypes, shapes and ranges the search relies on, beyond the manifest's sizes and digests (which
    whoever edits an array can put back): a StageError naming the file, not an IndexError at query time.
    Vectors must be finite (checked whole up to FULL_DIGEST_LIMIT bytes, over sampled rows beyond, as
    `file_digest` samples)."""
    n, data, offsets = vectors.shape[0], arrays["terms_utf8"], arrays["term_offsets"]
    df, indptr, docs = arrays["df"], arrays["indptr"], arrays["docs"]

    def need(ok: bool, name: str, why: str) -> None:
        if not ok:
            raise StageError(f"index file {name} is damaged ({why}): rebuild it", str(root))

    def ints(name: str, shape: tuple[int, ...], array: np.ndarray) -> None:
        need(array.dtype.kind in "iu", name, f"{array.dtype} values, not integers")
        need(array.shape == shape, name, f"shape {array.shape}, expected {shape}")

    need(vectors.dtype == np.float32, "vectors.npy", f"{vectors.dtype} values, not float32")
    need(_finite(vectors), "vectors.npy", "a value that is NaN or infinite")
    need(data.dtype == np.uint8 and data.ndim == 1, "bm25/terms_utf8.npy", f"{data.dtype} of shape {data.shape}, not bytes")
    need(offsets.ndim == 1 and len(offsets) >= 1, "bm25/term_offsets.npy", f"shape {offsets.shape}")
    terms = len(offsets) - 1
    ints("bm25/term_offsets.npy", (terms + 1,), offsets)
    spans = np.diff(offsets)
    need(offsets[0] == 0 and offsets[-1] == len(data) and bool((spans >= 0).all()), "bm25/term_offsets.npy", "not a span of the terms")
    try:
        data.tobytes().decode("utf-8")
    except UnicodeDecodeError:
        need(False, "bm25/terms_utf8.npy", "not UTF-8")
    need(not ((data[offsets[:-1][spans > 0]] & 0xC0) == 0x80).any(), "bm25/term_offsets.npy", "an offset inside a character")
    ints("bm25/df.npy", (terms,), df)
    ints("bm25/doc_len.npy", (n,), arrays["doc_len"])
    ints("bm25/indptr.npy", (terms + 1,), indptr)
    need(bool((arrays["doc_len"] >= 0).all()), "bm25/doc_len.npy", "a negative length")
    need(indptr[0] == 0 and bool((np.diff(indptr) == df).all()), "bm25/indptr.npy", "postings that disagree with df")
    nnz = int(indptr[-1])
    for name in ("docs", "tf"):
        ints(f"bm25/{name}.npy", (nnz,), arrays[name])
    need(not nnz or (int(docs.min()) >= 0 and int(docs.max()) < n), "bm25/docs.npy", f"a chunk row outside 0..{n - 1}")
    need(not nnz or int(arrays["tf"].min()) >= 1, "bm25/tf.npy", "a term frequency below 1")
    weights = arrays["weights"]
    need(weights.dtype.kind == "f" and weights.shape == (nnz,), "bm25/weights.npy", f"{weights.dtype} of shape {weights.shape}")
    need(bool(np.isfinite(weights).all()), "bm25/weights.npy", "a value that is NaN or infinite")


def _finite(matrix: np.ndarray) -> bool:
    """No NaN or infinity in `matrix` (2-D): every row up to FULL_DIGEST_LIMIT bytes, else SAMPLES blocks of about 1 MiB of rows."""
    if matrix.nbytes <= FULL_DIGEST_LIMIT:
        return bool(np.isfinite(matrix).all())
    step = max(1, (1 << 20) // max(1, matrix.shape[1] * matrix.itemsize))
    starts = {(len(matrix) - step) * i // (SAMPLES - 1) for i in range(SAMPLES)}
    return all(bool(np.isfinite(matrix[s : s + step]).all()) for s in starts)


def _load_passages(gen: Path, manifest: dict[str, Any], mmap: bool) -> tuple[np.ndarray, np.ndarray]:
    """The passage vectors and their chunk rows, checked against the manifest."""
    where = str(gen.parent)
    try:
        passages = np.load(gen / "passages.npy", mmap_mode="r" if mmap else None, allow_pickle=False)
        rows = np.load(gen / "passage_rows.npy", allow_pickle=False)
    except (ValueError, OSError) as err:
        raise StageError(f"index passage arrays cannot be read ({ragline.records.one_line(str(err), 120)}): rebuild it", where) from None
    n = manifest["counts"].get("passages")
    if (
        passages.shape != (n, manifest["dim"])
        or rows.shape != (n,)
        or rows.dtype.kind not in "iu"
        or (n and not 0 <= int(rows.min()) <= int(rows.max()) < manifest["counts"]["chunks"])
    ):
        raise StageError(
            f"index passage arrays disagree with the manifest (passages {passages.shape}, rows {rows.shape}): rebuild it", where
        )
    if passages.dtype != np.float32 or not _finite(passages):
        raise StageError("index file passages.npy is damaged (values that are not finite float32s): rebuild it", where)
    return passages, rows


def _check_manifest(manifest: dict[str, Any], where: str) -> None:
    """The manifest fields `load` relies on, with their types; otherwise a StageError naming the field."""
    for name, kind in (("model", str), ("dim", int), ("files", dict), ("counts", dict), ("bm25", dict)):
        ragline.records.require_field(manifest, name, kind, where)
    ragline.records.require_field(manifest["counts"], "chunks", int, f"{where} (counts)")
    for name in ("k1", "b"):
        ragline.records.require_field(manifest["bm25"], name, float, f"{where} (bm25)")
    if not all(isinstance(size, int) for size in manifest["files"].values()) or "vectors.npy" not in manifest["files"]:
        raise StageError("field 'files' must map each index file to its size in bytes: rebuild it", where)
    hashes = manifest.get("sha256")
    if hashes is not None and not (isinstance(hashes, dict) and all(isinstance(h, str) for h in hashes.values())):
        raise StageError("field 'sha256' must map index files to hex digests: rebuild it", where)


# --------------------------------------------------------------------------- staleness


def watch(index: Index) -> sources.Watch:
    """The index's source files (the manifest's `sources`), to check against the files as they are now."""
    return sources.Watch(index.manifest.get("sources"), index.path)


def rebuild_command(index: Index) -> str:
    """The pipeline that builds this index again: its inputs, and the options the manifest shows were not the defaults."""
    m = index.manifest
    window = (m.get("chunking") or {}).get("window")
    words = f" --words {window}" if isinstance(window, int) and window != options.default("window") else ""
    runs = [  # one rag-chunk a set of globs: the roots chosen with other globs are chunked apart, then joined
        f"rag-chunk{words}"
        + "".join(f" --{kind} {shlex.quote(glob)}" for kind, globs in chosen.items() for glob in globs)
        + " "
        + " ".join(shlex.quote(terminal.shown_path(r)) for r in roots)
        for chosen, roots in watch(index).selections()
    ] or [f"rag-chunk{words} HANDBOOK"]
    chunk = runs[0] if len(runs) == 1 else "{ " + "; ".join(runs) + "; }"
    embed = "rag-embed" + (f" --model {shlex.quote(m['model'])}" if m["model"] != options.default("model", "embed") else "")
    for key, name in (("embed_headings", "embed_headings"), ("embed_passages", "passages")):
        option = options.get(name, "embed")
        if bool(m.get(key, option.default)) != option.default:
            embed += " " + option.args(bool(m.get(key)))[0]
    return f"{chunk} | {embed} | rag-index --out {shlex.quote(terminal.shown_path(str(index.path)))}"


def source_report(index: Index, watched: sources.Watch | None = None) -> dict[str, Any]:
    """What rag-serve's /health says of the index's sources: how many, which changed or vanished
    since the build (a check of `watched`, or of a new `watch`), and the one line saying so (None when none did)."""
    watched = watched or watch(index)
    report = watched.check()
    return {
        "files": report.files,
        "changed": list(report.changed),
        "vanished": list(report.vanished),
        "notice": sources.notice(report, rebuild_command(index), watched.shown),
    }


def stale_notice(index: Index) -> str | None:
    """The one line saying the index's sources have moved since it was built, with the command that
    rebuilds it; None when none did. rag-search and rag-answer print it (`ragline.cli.note_stale`)."""
    notice: str | None = source_report(index)["notice"]
    return notice


# --------------------------------------------------------------------------- the command


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("inputs", nargs=-1, type=click.Path(dir_okay=False, allow_dash=True))
@options.get("out").click()
@click.option("--quiet", "-q", is_flag=True, help="No notices on stderr (not even that it waits for another writer).")
@ragline.records.stage_main(STAGE)
def main(inputs: tuple[str, ...], out: str, quiet: bool) -> None:
    """Build an index directory from embedded chunk records (files or stdin).

    Two builds of one index at once take turns: the second waits for the first to finish,
    and says so.
    """
    records = ragline.records.read_records(
        inputs, usage="no input: pipe embedded chunks into rag-index (rag-chunk DIR | rag-embed | rag-index --out IDX)"
    )
    chunks, vectors, facts = collect(progress.Progress(STAGE, "chunks", lambda: progress.count_lines(inputs), quiet).track(records))
    gen = write(Path(out), chunks, vectors, facts, notice=lambda message: ragline.records.note(f"{STAGE}: {message}", quiet))
    if not quiet and sys.stderr.isatty():
        ragline.records.note(f"{STAGE}: {len(chunks)} chunks, {vectors.shape[1]} dims, model {facts['model']} -> {gen}")


if __name__ == "__main__":
    main()
