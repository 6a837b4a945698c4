"""Measure the stages on large inputs and write results/reliability.json (run by hand, not a test).

    python tests/support/measure_large.py               # 50 MB of markdown, 200,000 records
    python tests/support/measure_large.py --markdown-mb 5 --records 20000 --out /tmp/r.json

Peak RSS is the kernel's count for the one child process (os.wait4's ru_maxrss), with
stdout sent to /dev/null. The markdown is generated (headed sections of prose, code
fences and lists); the record stream is short `{"id", "text"}` records embedded with the
`hash` model, so no model files are needed.
"""

from __future__ import annotations

import argparse
import platform
import random
import sys
import tempfile
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))

from stagecli import ROOT, command, measure

WORDS = "the nightly sweep closes settlement batch payout refund webhook retry idempotency key charge capture ledger".split()


def markdown(path: Path, megabytes: float, seed: int = 1) -> int:
    """About `megabytes` MB of markdown; returns its size in bytes."""
    rng = random.Random(seed)
    target = int(megabytes * 1_000_000)
    size, n = 0, 0
    with open(path, "w", encoding="utf-8") as out:
        out.write("# Handbook\n\n")
        while size < target:
            n += 1
            part = f"## Section {n}\n\n" + " ".join(rng.choice(WORDS) for _ in range(120)) + ".\n\n"
            if n % 7 == 0:
                part += "```bash\nmarlctl lock release\n```\n\n"
            if n % 5 == 0:
                part += "- first step\n- second step\n\n"
            size += out.write(part)
    return path.stat().st_size


def stream(path: Path, records: int) -> int:
    with open(path, "wb") as out:
        for i in range(records):
            out.write(orjson.dumps({"id": f"r{i}", "text": f"record {i}: the nightly settlement sweep closes batch {i % 97}"}) + b"\n")
    return path.stat().st_size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown-mb", type=float, default=50)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "reliability.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ragline-large-") as tmp:
        md = Path(tmp) / "large.md"
        md_bytes = markdown(md, args.markdown_mb)
        chunk = measure([*command("rag-chunk"), str(md)])
        records = Path(tmp) / "records.jsonl"
        stream_bytes = stream(records, args.records)
        embed = measure([*command("rag-embed"), "--model", "hash"], records)
    for name, result in (("rag-chunk", chunk), ("rag-embed", embed)):
        if result["exit"] != 0:
            sys.exit(f"{name} failed: {result['stderr']}")
    report = {
        "schema": "reliability/1",
        "chunk": {"input_bytes": md_bytes} | {k: v for k, v in chunk.items() if k != "stderr"},
        "embed": {"records": args.records, "input_bytes": stream_bytes, "model": "hash"}
        | {k: v for k, v in embed.items() if k != "stderr"},
        "machine": {"python": platform.python_version(), "system": platform.system(), "processor": platform.machine()},
    }
    report["markdown"] = (
        "Large inputs, measured by `python3 tests/support/measure_large.py` (peak resident memory of the one process):\n\n"
        "| stage | input | peak RSS | time |\n| --- | --- | ---: | ---: |\n"
        f"| `rag-chunk` | {md_bytes / 1e6:.0f} MB of markdown in one file | {chunk['peak_rss_mib']} MiB | {chunk['seconds']} s |\n"
        f"| `rag-embed --model hash` | {args.records:,} records ({stream_bytes / 1e6:.0f} MB) | {embed['peak_rss_mib']} MiB | {embed['seconds']} s |\n\n"
        "rag-embed streams (a window of 2,048 records at a time), so its memory does not grow with the stream; "
        "rag-chunk streams a document section by section through a window of its lines and spools its chunks to a "
        "file (all output is written only when every input has chunked, so a bad file leaves stdout empty), so its "
        "memory grows with the longest section, not the document."
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2) + b"\n")
    print(
        f"rag-chunk {md_bytes / 1e6:.0f} MB: peak RSS {chunk['peak_rss_mib']} MiB in {chunk['seconds']} s; "
        f"rag-embed {args.records:,} records: peak RSS {embed['peak_rss_mib']} MiB in {embed['seconds']} s -> {args.out}"
    )


if __name__ == "__main__":
    main()
