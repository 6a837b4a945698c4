"""Records as the stages read and write them: JSON Lines bytes in, dicts out."""

from __future__ import annotations

import orjson


def jsonl(*records: dict) -> bytes:
    return b"".join(orjson.dumps(r) + b"\n" for r in records)


def parse(output: bytes | str) -> list[dict]:
    data = output.encode() if isinstance(output, str) else output
    return [orjson.loads(line) for line in data.splitlines() if line.strip()]
