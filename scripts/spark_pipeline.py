"""Run `rag-chunk | rag-embed` under Apache Spark: the stage commands themselves, through RDD.pipe.

    pip install -e '.[scale]'            # PySpark; Spark needs a Java runtime (17 or later)
    python3 scripts/spark_pipeline.py corpus/*.md --out build/spark-chunks        # local mode, every core
    python3 scripts/spark_pipeline.py docs/*.md --master spark://head:7077 --partitions 64 --out hdfs:///rag/chunks

The markdown files (named on the command line, documents of one flat folder) are
split over `--partitions` Spark tasks in sorted order. Each task pipes its file
names into `xargs rag-chunk` and the chunk records it gets into `rag-embed --threads
1`; nothing is re-implemented, each task runs the very commands a single machine
runs. Partitions keep their order and a task's output keeps its input's, so the
part files under --out (part-00000, part-00001, ...), read in order, are the
stream `rag-chunk FILES | rag-embed` writes in one process; they go on into
`rag-index --out IDX` on one machine (`cat OUT/part-* | rag-index --out IDX`).

The tasks run the stage commands of this interpreter's environment (its bin/ is
put first on their PATH) with its model cache ($RAG_MODEL_HOME): on a cluster,
every worker needs ragline installed at the same path, and the model fetched
(`just model`), or a shared RAG_MODEL_HOME. A document id is the file's name
without .md (as `rag-chunk FILE` gives it), so two files of one name are refused.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path


def task_env(model_home: str | None = None) -> dict[str, str]:
    """The environment of each piped command: this interpreter's bin/ first on PATH, its model cache."""
    env = {"PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")}  # and no RAG_EMBED_CACHE
    home = model_home or os.environ.get("RAG_MODEL_HOME")
    if home:
        env["RAG_MODEL_HOME"] = home
    for name in ("HOME", "XDG_CACHE_HOME", "LANG", "RAG_MODEL_WEIGHTS"):
        if os.environ.get(name):
            env[name] = os.environ[name]
    return env


def check_files(files: list[str]) -> list[str]:
    """The files in sorted order; a missing file or two documents of one id is a ValueError."""
    seen: dict[str, str] = {}
    for f in files:
        if not Path(f).is_file():
            raise ValueError(f"{f}: no such file")
        name = Path(f).stem if f.endswith(".md") else Path(f).name
        if name in seen:
            raise ValueError(f"{f}: document id '{name}' is also the id of {seen[name]}")
        seen[name] = f
    return sorted(files)


def pipeline(sc, files: list[str], partitions: int, model: str, words: int | None = None, env: dict[str, str] | None = None):
    """The RDD of embedded chunk records (JSON lines), in the order of a single `rag-chunk FILES | rag-embed`."""
    env = env or task_env()
    chunk = "xargs -r -d '\\n' rag-chunk --quiet" + (f" --words {int(words)}" if words else "")
    embed = f"rag-embed --quiet --no-cache --threads 1 --model {shlex.quote(model)}"  # every task embeds: no shared cache file
    docs = sc.parallelize(files, max(1, min(partitions, len(files))))
    return docs.pipe(chunk, env=env, checkCode=True).pipe(embed, env=env, checkCode=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", help="markdown files (one flat folder's documents)")
    parser.add_argument("--out", required=True, help="output directory of part files (must not exist)")
    parser.add_argument("--master", default=None, help="Spark master URL [default: local[N], N = this machine's cores]")
    parser.add_argument("--partitions", type=int, default=None, help="Spark tasks [default: the master's default parallelism]")
    parser.add_argument("--model", default="all-MiniLM-L6-v2", help="rag-embed --model")
    parser.add_argument("--words", type=int, default=None, help="rag-chunk --words")
    args = parser.parse_args(argv)
    try:
        files = check_files(args.files)
    except ValueError as err:
        print(f"spark_pipeline: {err}", file=sys.stderr)
        return 1
    try:
        from pyspark import SparkConf, SparkContext
    except ImportError:
        print("spark_pipeline: PySpark is not installed: pip install -e '.[scale]'", file=sys.stderr)
        return 1
    conf = SparkConf().setAppName("ragline chunk | embed").setMaster(args.master or f"local[{os.cpu_count() or 1}]")
    sc = SparkContext(conf=conf)
    sc.setLogLevel("ERROR")
    try:
        records = pipeline(sc, files, args.partitions or sc.defaultParallelism, args.model, args.words)
        records.saveAsTextFile(args.out)
    finally:
        sc.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
