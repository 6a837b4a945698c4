"""scripts/spark_pipeline.py: `rag-chunk | rag-embed` under Spark (RDD.pipe, local mode) gives one process's output.

Marked `spark`; skipped where PySpark (`pip install -e '.[scale]'`) or a Java runtime is missing.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

pytestmark = [
    pytest.mark.spark,
    pytest.mark.skipif(importlib.util.find_spec("pyspark") is None, reason="PySpark is not installed (pip install -e '.[scale]')"),
    pytest.mark.skipif(shutil.which("java") is None and not os.environ.get("JAVA_HOME"), reason="no Java runtime for Spark"),
]


@pytest.fixture(scope="module")
def spark():
    from pyspark import SparkConf, SparkContext

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    sc = SparkContext(conf=SparkConf().setMaster("local[2]").setAppName("ragline-test").set("spark.ui.enabled", "false"))
    sc.setLogLevel("ERROR")
    yield sc
    sc.stop()


def one_process(files: list[str], model: str, env: dict[str, str]) -> bytes:
    chunks = subprocess.run(["rag-chunk", *files], capture_output=True, env=env, check=True).stdout
    return subprocess.run(
        ["rag-embed", "--quiet", "--no-cache", "--model", model], input=chunks, capture_output=True, env=env, check=True
    ).stdout


@pytest.mark.parametrize("partitions", [1, 3, 7])
def test_spark_output_is_one_processs_output(spark, partitions, tmp_path):
    """The handbook through Spark tasks (each piping its files into rag-chunk, then rag-embed): the part
    files, in order, are byte for byte what `rag-chunk FILES | rag-embed` writes in one process."""
    import spark_pipeline

    files = spark_pipeline.check_files([str(p) for p in sorted((ROOT / "corpus").glob("*.md"))][::-1])
    env = spark_pipeline.task_env()
    want = one_process(files, "hash", env)
    out = tmp_path / "out"
    spark_pipeline.pipeline(spark, files, partitions, "hash").saveAsTextFile(str(out))
    parts = sorted(out.glob("part-*"))
    assert len(parts) == min(partitions, len(files))
    got = b"".join(p.read_bytes() for p in parts)
    assert got.count(b"\n") == want.count(b"\n") > 50
    assert got == want


@pytest.mark.model
def test_spark_with_the_real_model(spark, tmp_path):
    import spark_pipeline

    files = spark_pipeline.check_files([str(p) for p in sorted((ROOT / "corpus").glob("*.md"))[:4]])
    want = one_process(files, "all-MiniLM-L6-v2", spark_pipeline.task_env())
    lines = spark_pipeline.pipeline(spark, files, 2, "all-MiniLM-L6-v2").collect()
    got = "".join(line + "\n" for line in lines).encode()
    assert got == want


def test_two_documents_of_one_id_are_refused(tmp_path):
    import spark_pipeline

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    for d in ("a", "b"):
        (tmp_path / d / "x.md").write_text("# X\n\ntext\n")
    with pytest.raises(ValueError, match="document id 'x' is also the id of"):
        spark_pipeline.check_files([str(tmp_path / "a" / "x.md"), str(tmp_path / "b" / "x.md")])
