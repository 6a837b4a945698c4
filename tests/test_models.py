"""models: the float32 file derived from the shipped int8 one, pinned, reproducible, same vectors; the
int8-arithmetic file derived from it, pinned, reproducible, within its pinned cosine."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import orjson
import pytest
from corpora import load_minilm

import rag_embed
import ragline.text
from ragline import models
from ragline.records import StageError

FIXTURE = Path(__file__).parent / "fixtures" / "minilm_reference.json"
TOLERANCE = 0.9999  # cosine of the derived file's vectors with the source file's, every text


@pytest.mark.model
def test_fp32_file_gives_the_int8_files_vectors():
    """The derived float32 file computes what onnxruntime computes from the int8 file (its dequantisation,
    folded once): cosine >= TOLERANCE on every reference text, short, long and truncated."""
    fp32, int8 = load_minilm("fp32"), load_minilm("int8")
    assert fp32.model_file.name == models.FP32_FILE and int8.model_file.name == models.SOURCE_FILE
    assert fp32.sha256 != int8.sha256
    ref = json.loads(FIXTURE.read_text())
    texts = ref["sentences"] + ref["long_sentences"] + ["ok", "NW-4021", "when does the settlement sweep run"]
    for query in (False, True):
        a, b = fp32.embed(texts, query=query), int8.embed(texts, query=query)
        cosines = np.sum(a * b, axis=1)
        assert cosines.min() >= TOLERANCE, (texts[int(cosines.argmin())][:40], float(cosines.min()))


@pytest.mark.model
def test_derivation_is_reproducible_and_pinned(tmp_path):
    """Deriving again from the fetched int8 file gives the very bytes whose sha256 the folder's
    ragline-model.json pins (with the onnxruntime that derived it), and a folder that loses the
    derived file, or holds another one, is refused with the way to fetch it again."""
    import onnxruntime

    folder = load_minilm("fp32").folder
    description = orjson.loads((folder / models.DESCRIPTION).read_bytes())
    assert description["fp32_derivation"]["from_sha256"] == description["sha256"] == models.KNOWN["all-MiniLM-L6-v2"].onnx_sha256
    got = models.derive_fp32(folder / models.SOURCE_FILE, tmp_path / models.FP32_FILE)
    assert got["fp32_sha256"] == models.sha256_file(tmp_path / models.FP32_FILE)
    if description["fp32_derivation"]["onnxruntime"] != onnxruntime.__version__:
        pytest.skip("the folder was derived by another onnxruntime: the bytes may differ")
    assert got["fp32_sha256"] == description["fp32_sha256"]


@pytest.mark.model
def test_qint8_file_computes_in_int8_within_its_pinned_cosine():
    """The int8-arithmetic file runs its MatMuls in onnxruntime's integer kernels (MatMulInteger, fed by
    DynamicQuantizeLinear), leaves the attention and the MatMuls after GELU in float32 as its description
    says, and gives every chunk of the Northwind handbook (and its passages) a vector within
    models.QINT8_COSINE of the float32 file's."""
    import onnx

    from rag_chunk import chunk_paths

    fp32, qint8 = load_minilm("fp32"), load_minilm("qint8")
    assert qint8.model_file.name == models.QINT8_FILE and qint8.weights == "qint8" and qint8.sha256 not in (fp32.sha256, None)
    ops = [n.op_type for n in onnx.load(str(qint8.model_file)).graph.node]
    assert ops.count("MatMulInteger") == 12 and ops.count("DynamicQuantizeLinear") >= 6
    assert ops.count("MatMul") == 6 and ops.count("Attention") == 6
    description = orjson.loads((qint8.folder / models.DESCRIPTION).read_bytes())
    assert description["qint8_derivation"]["from_sha256"] == description["fp32_sha256"]
    assert description["qint8_derivation"]["quantised"].startswith("12 of 18 MatMuls")
    chunks = list(chunk_paths([str(Path(__file__).resolve().parent.parent / "corpus")]))
    texts = [ragline.text.retrieval_text(c, True, "text") for c in chunks]
    texts += [p for c in chunks for p in rag_embed.passage_texts(c)]
    cosines = np.sum(fp32.embed(texts) * qint8.embed(texts), axis=1)
    assert cosines.min() >= models.QINT8_COSINE, (texts[int(cosines.argmin())][:60], float(cosines.min()))


@pytest.mark.model
def test_qint8_derivation_is_reproducible_and_pinned(tmp_path):
    """Deriving the int8-arithmetic file again from the folder's float32 file gives the bytes its
    description pins (with the onnxruntime that derived it); a wrong or missing file is refused."""
    import onnxruntime

    folder = load_minilm("qint8").folder
    description = orjson.loads((folder / models.DESCRIPTION).read_bytes())
    got = models.derive_qint8(folder / models.FP32_FILE, tmp_path / models.QINT8_FILE)
    assert got["qint8_sha256"] == models.sha256_file(tmp_path / models.QINT8_FILE)
    assert got["qint8_derivation"]["version"] == models.QINT8_DERIVATION
    if description["qint8_derivation"]["onnxruntime"] != onnxruntime.__version__:
        pytest.skip("the folder was derived by another onnxruntime: the bytes may differ")
    assert got["qint8_sha256"] == description["qint8_sha256"]


def fake_folder(folder: Path) -> tuple[Path, dict]:
    """A MiniLM model folder of stand-in files (no model in them) and the description that pins them."""
    folder.mkdir()
    (folder / "model.onnx").write_bytes(b"source")
    (folder / "model.fp32.onnx").write_bytes(b"derived")
    (folder / "model.qint8.onnx").write_bytes(b"int8 arithmetic")
    (folder / "tokenizer.json").write_text("{}")
    description = models.KNOWN["all-MiniLM-L6-v2"].description(models.sha256_file(folder / "model.onnx"))
    description["fp32_sha256"] = models.sha256_file(folder / "model.fp32.onnx")
    description["qint8_sha256"] = models.sha256_file(folder / "model.qint8.onnx")
    return folder, description


def test_fp32_file_is_checked_against_its_pin(tmp_path):
    """The derived file is loaded by default and checked against fp32_sha256; weights="int8" loads the
    source file; a wrong or missing derived file is an error naming the file and how to fetch again."""
    folder, description = fake_folder(tmp_path / "mine")
    (folder / models.DESCRIPTION).write_bytes(orjson.dumps(description))
    derived = rag_embed.load_embedder(str(folder))
    source = rag_embed.load_embedder(str(folder), weights="int8")
    assert derived.model_file == folder / "model.fp32.onnx" and derived.sha256 == description["fp32_sha256"]
    assert source.model_file == folder / "model.onnx" and source.sha256 == description["sha256"]
    # the vector cache keys on the file that runs: int8 vectors are never served for the fp32 file
    a, b = rag_embed.cache_for(derived, str(tmp_path / "c.sqlite")), rag_embed.cache_for(source, str(tmp_path / "c.sqlite"))
    assert a.key("x", False) != b.key("x", False)
    (folder / "model.fp32.onnx").write_bytes(b"another")
    with pytest.raises(StageError, match=r"model.fp32.onnx sha256 is .*, expected "):
        rag_embed.load_embedder(str(folder))
    (folder / "model.fp32.onnx").unlink()
    with pytest.raises(StageError, match="model folder is missing model.fp32.onnx"):
        rag_embed.load_embedder(str(folder))
    with pytest.raises(StageError, match="weights must be one of fp32, int8, qint8"):
        rag_embed.load_embedder(str(folder), weights="int4")


def test_qint8_file_is_checked_against_its_pin(tmp_path, monkeypatch):
    """weights="qint8" (or RAG_MODEL_WEIGHTS=qint8) loads model.qint8.onnx, checked against qint8_sha256; the
    vector cache keys it apart from the other files; a wrong file, or a folder without one, is refused."""
    folder, description = fake_folder(tmp_path / "mine")
    (folder / models.DESCRIPTION).write_bytes(orjson.dumps(description))
    monkeypatch.setenv("RAG_MODEL_WEIGHTS", "qint8")
    qint8 = rag_embed.load_embedder(str(folder))
    assert qint8.model_file == folder / "model.qint8.onnx" and qint8.sha256 == description["qint8_sha256"] and qint8.weights == "qint8"
    fp32 = rag_embed.load_embedder(str(folder), weights="fp32")
    keys = {rag_embed.cache_for(e, str(tmp_path / "c.sqlite")).key("x", False) for e in (qint8, fp32)}
    assert len(keys) == 2
    (folder / "model.qint8.onnx").write_bytes(b"another")
    with pytest.raises(StageError, match=r"model.qint8.onnx sha256 is .*, expected "):
        rag_embed.load_embedder(str(folder))
    del description["qint8_sha256"]
    (folder / models.DESCRIPTION).write_bytes(orjson.dumps(description))
    with pytest.raises(StageError, match=r"the model folder has no int8-arithmetic file \(model.qint8.onnx\)"):
        rag_embed.load_embedder(str(folder))


def test_a_folder_without_a_derived_file_loads_its_source():
    """A description without fp32_sha256 (a model of the user's own, or one fetched before) loads model.onnx."""
    spec = models.KNOWN["all-MiniLM-L6-v2"]
    file, pinned = models.weights_file(Path("/x"), spec.description(spec.onnx_sha256), "fp32")
    assert file == Path("/x/model.onnx") and pinned == spec.onnx_sha256


def test_tokenizer_and_session_open_only_when_a_text_misses_the_cache(tmp_path):
    """Loading an embedder opens neither its tokenizer nor its onnxruntime session; a batch whose texts all
    hit the vector cache never opens them either; the first miss does (here: a file that is no model)."""
    folder = tmp_path / "lazy"
    folder.mkdir()
    (folder / "model.onnx").write_bytes(b"not a model")
    (folder / "tokenizer.json").write_text("{}")
    spec = models.KNOWN["all-MiniLM-L6-v2"]
    (folder / models.DESCRIPTION).write_bytes(orjson.dumps(spec.description(models.sha256_file(folder / "model.onnx"))))
    embedder = rag_embed.load_embedder(str(folder))
    cache = rag_embed.cache_for(embedder, str(tmp_path / "c.sqlite"))
    want = np.eye(384, dtype=np.float32)[:2]
    cache.put([(cache.key("a", True), want[0]), (cache.key("b", True), want[1])])
    got = rag_embed.embed_texts(embedder, ["a", "b", "a"], query=True, cache=cache)
    assert np.array_equal(got, want[[0, 1, 0]])
    assert "session" not in vars(embedder) and "tokenizer" not in vars(embedder)
    with pytest.raises(StageError, match="cannot load"):
        rag_embed.embed_texts(embedder, ["a", "c"], query=True, cache=cache)


@pytest.mark.model
def test_an_index_built_on_the_int8_file_is_queried_with_it(tmp_path, monkeypatch):
    """rag-search embeds the question with the file the index was built with: an index from before the
    derived file (int8 vectors) keeps working, with int8 query vectors, one built with the int8-arithmetic
    file is queried with it, and the default builds fp32 ones."""
    from corpora import build_index

    import rag_index
    import rag_search

    load_minilm("fp32")
    (tmp_path / "old").mkdir()
    (tmp_path / "new").mkdir()
    monkeypatch.setenv("RAG_MODEL_WEIGHTS", "int8")
    old = rag_index.load(build_index(tmp_path / "old", model="all-MiniLM-L6-v2"))
    (tmp_path / "q").mkdir()
    monkeypatch.setenv("RAG_MODEL_WEIGHTS", "qint8")
    q = rag_index.load(build_index(tmp_path / "q", model="all-MiniLM-L6-v2"))
    monkeypatch.delenv("RAG_MODEL_WEIGHTS")
    new = rag_index.load(build_index(tmp_path / "new", model="all-MiniLM-L6-v2"))
    assert old.manifest["model_sha256"] == load_minilm("int8").sha256 != new.manifest["model_sha256"] == load_minilm("fp32").sha256
    assert q.manifest["model_sha256"] == load_minilm("qint8").sha256
    for index in (old, q, new):
        searcher = rag_search.Searcher(index, rag_search.Config())
        assert searcher.embedder.sha256 == index.manifest["model_sha256"]
        assert searcher.search(["when does the settlement sweep run"])[0]["hits"][0]["doc"] == "settlement"


def test_a_stamped_file_is_not_hashed_and_a_changed_one_is(tmp_path, monkeypatch):
    """A file whose size and mtime match the stamp fetch_model wrote is taken as the pinned one without
    hashing it; rewritten with the same size (another mtime), or with another size, it is hashed and refused."""
    folder, description = fake_folder(tmp_path / "stamped")
    description["stamps"] = {f: models.stamp(folder / f) for f in ("model.onnx", "model.fp32.onnx")}
    (folder / models.DESCRIPTION).write_bytes(orjson.dumps(description))
    hashed = []
    real = rag_embed.sha256_file
    monkeypatch.setattr(rag_embed, "sha256_file", lambda p: hashed.append(Path(p).name) or real(p))
    assert rag_embed.load_embedder(str(folder)).sha256 == description["fp32_sha256"]
    assert rag_embed.load_embedder(str(folder), weights="int8").sha256 == description["sha256"]
    assert hashed == []
    (folder / "model.fp32.onnx").write_bytes(b"DERIVED")  # same size, other bytes
    st = (folder / "model.fp32.onnx").stat()
    os.utime(folder / "model.fp32.onnx", ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    with pytest.raises(StageError, match=r"model.fp32.onnx sha256 is .*, expected "):
        rag_embed.load_embedder(str(folder))
    (folder / "model.onnx").write_bytes(b"source, longer")
    with pytest.raises(StageError, match=r"model.onnx sha256 is .*, expected "):
        rag_embed.load_embedder(str(folder), weights="int8")
    assert hashed == ["model.fp32.onnx", "model.onnx"]


@pytest.mark.model
def test_a_description_of_other_dimensions_is_refused_at_the_first_miss(tmp_path):
    """The session's output width (from the graph, no probe run) is checked against the description when it opens."""
    real = load_minilm("fp32").folder
    folder = tmp_path / "wrong-dim"
    folder.mkdir()
    for name in ("model.onnx", "model.fp32.onnx", "tokenizer.json"):
        (folder / name).symlink_to(real / name)
    description = orjson.loads((real / models.DESCRIPTION).read_bytes()) | {"dim": 383}
    description.pop("stamps", None)
    (folder / models.DESCRIPTION).write_bytes(orjson.dumps(description))
    for weights in ("fp32", "int8"):
        embedder = rag_embed.load_embedder(str(folder), weights=weights)
        with pytest.raises(StageError, match="model gives 384 dimensions, its description says 383"):
            embedder.embed(["x"])


@pytest.mark.model
def test_the_derived_file_runs_attention_fused(tmp_path):
    """The derived file holds one fused Attention operator per layer (no softmax left), and the description
    says so; derived with a wrong head count the fused graph computes something else, which the derivation
    notices and answers with the unfused graph."""
    import onnx

    folder = load_minilm("fp32").folder
    description = orjson.loads((folder / models.DESCRIPTION).read_bytes())
    assert description["fp32_derivation"]["attention"] == "fused (6 layers, 12 heads)"
    ops = [n.op_type for n in onnx.load(str(folder / models.FP32_FILE)).graph.node]
    assert ops.count("Attention") == 6 and "Softmax" not in ops
    got = models.derive_fp32(folder / models.SOURCE_FILE, tmp_path / "wrong.onnx", heads=6)
    assert got["fp32_derivation"]["attention"] == "unfused: the fused graph's outputs differ from the unfused graph's"
    ops = [n.op_type for n in onnx.load(str(tmp_path / "wrong.onnx")).graph.node]
    assert "Attention" not in ops and ops.count("Softmax") == 6


def test_fuse_attention_leaves_a_graph_without_bert_layers_alone(tmp_path):
    """A graph with no `...attention.self.query.bias` initializers is not rewritten, and says why."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    onnx.save(helper.make_model(graph), str(tmp_path / "tiny.onnx"))
    assert models.fuse_attention(tmp_path / "tiny.onnx", tmp_path / "out.onnx", 12) == (0, "no BERT-style attention layers found")
    assert not (tmp_path / "out.onnx").exists()
