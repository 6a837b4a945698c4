"""Embed texts with sentence-transformers (fp32 torch, CPU): the reference side of bench/run.py.

    RAG_BENCH_ST_PYTHON=/tmp/stvenv/bin/python bench/run.py --only embed

Run by bench/run.py under an interpreter that has torch and sentence-transformers
(they are not ragline dependencies). Reads a JSON list of texts, encodes them
`--runs` times with batch size `--batch-size` and `--threads` torch threads, and
writes the last run's L2-normalised vectors to OUT.npy and the timings to
OUT.json: {"seconds": [...], "cpu_seconds": [...], "tokens": n, "versions": {...}}. Tokens are counted
with the model's own tokenizer, truncated at its max_seq_length (256), [CLS] and
[SEP] included, the same count bench/run.py takes from ragline's tokenizer.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir", help="a sentence-transformers model folder (fp32)")
    parser.add_argument("texts", help="a JSON file holding a list of strings")
    parser.add_argument("out", help="output prefix: OUT.npy (vectors) and OUT.json (timings)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args(argv[1:])

    import numpy as np
    import sentence_transformers
    import torch
    import transformers
    from sentence_transformers import SentenceTransformer

    transformers.logging.set_verbosity_error()
    torch.set_num_threads(args.threads)
    with open(args.texts, encoding="utf-8") as handle:
        texts = json.load(handle)
    model = SentenceTransformer(args.model_dir, device="cpu")
    model.eval()
    max_len = int(model.max_seq_length)
    tokens = sum(len(ids) for ids in model.tokenizer(texts, truncation=True, max_length=max_len)["input_ids"])
    with torch.inference_mode():
        model.encode(texts[:8], batch_size=args.batch_size, show_progress_bar=False)  # warm-up
        seconds = []
        cpu_seconds = []
        vectors = None
        for _ in range(args.runs):
            start, cpu = time.perf_counter(), time.process_time()
            vectors = model.encode(
                texts, batch_size=args.batch_size, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
            )
            seconds.append(time.perf_counter() - start)
            cpu_seconds.append(time.process_time() - cpu)
    np.save(args.out + ".npy", np.asarray(vectors, dtype=np.float32), allow_pickle=False)
    info = {
        "seconds": seconds,
        "cpu_seconds": cpu_seconds,
        "tokens": tokens,
        "max_seq_length": max_len,
        "threads": torch.get_num_threads(),
        "batch_size": args.batch_size,
        "versions": {
            "python": sys.version.split()[0],
            "torch": torch.__version__,
            "sentence_transformers": sentence_transformers.__version__,
            "transformers": transformers.__version__,
            "numpy": np.__version__,
        },
    }
    with open(args.out + ".json", "w", encoding="utf-8") as handle:
        json.dump(info, handle)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
