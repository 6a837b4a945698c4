"""sources: the files an index was built from, and which of them changed or vanished since.

rag-chunk writes, on each chunk of a file, that file's facts (`facts`): the input it was read
from (`root`: the folder walked, or the file, as given), its size, its modification time in
nanoseconds and the sha256 of the bytes it chunked; the file itself is the chunk's `path`.
rag-index gathers one entry per file (`gather`) and keeps them in the manifest as `sources`,
their paths relative to the index directory (`anchor`: rag-index runs where rag-chunk ran,
in one pipeline), so an index and its handbook moved together, or built twice in two
copies, stay alike. rag-search, rag-answer and rag-serve's /health ask a `Watch` which of
them changed since (`Watch.check`) and say so in one line, with the command that rebuilds
the index (`notice`).

Cheap, as make and git are: a check stats every source and hashes only a file whose size is
its own but whose mtime moved (another size: changed). A file touched but holding the same
bytes (a checkout, `touch`) is then known by its new mtime, so each move costs one hash per
Watch. bench/stale.py times a check of a 1,000-file handbook on a warm cache against its 5 ms
target, beside hashing every file.

    >>> Report(3, ("a.md",), ()).stale, Report(3, (), ()).stale
    (True, False)
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ragline.models import sha256_file
from ragline.records import StageError
from ragline.terminal import shown_path

FACTS = {"root": str, "size": int, "mtime_ns": int, "sha256": str}  # what a chunk's `source` holds, and the types
ANCHORED = {"file": str, **FACTS}  # a manifest's entry: the file and root relative to the index directory
NAMED = 3  # sources a notice names before it counts the rest


SELECTION = ("include", "exclude")  # rag-chunk's globs that chose the page, where given: the rebuild command repeats them


def facts(root: str, digest: str, stat: os.stat_result, selection: dict[str, list[str]] | None = None) -> dict[str, Any]:
    """The facts of a source file read from the input `root`: `stat` taken before it was read,
    `digest` the sha256 of what was read, and the --include / --exclude globs given (`selection`,
    each list only when not empty)."""
    out = {"root": root, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": digest}
    return out | {k: list(v) for k, v in (selection or {}).items() if k in SELECTION and v}


def _glob_list(value: dict[str, Any], kind: str) -> list[str] | None:
    """A source's `include` or `exclude` (`kind`): its globs ([] where absent), None when not a list of strings."""
    globs = value.get(kind, [])
    return list(globs) if isinstance(globs, list) and all(isinstance(g, str) for g in globs) else None


def _globs(value: Any) -> bool:
    """Whether a source's `include` and `exclude`, where present, are lists of strings."""
    return all(_glob_list(value, k) is not None for k in SELECTION)


def _valid(value: Any, fields: dict[str, type]) -> bool:
    return isinstance(value, dict) and all(type(value.get(k)) is kind for k, kind in fields.items())


def gather(sources: dict[str, dict[str, Any]], path: str, value: Any, where: str) -> None:
    """Add a chunk's `source` (the facts of its file `path`) to `sources`: a StageError naming
    `where` when they are not facts, or not the facts the file's other chunks carry."""
    if not _valid(value, FACTS) or not _globs(value):
        raise StageError("field 'source' must be {root, size, mtime_ns, sha256} (and lists of globs), as rag-chunk writes it", where)
    known = sources.setdefault(path, value)
    if known != value:
        raise StageError(f"the chunks of {path} come from two versions of it (chunked at two times): chunk it once", where)


def anchor(sources: dict[str, dict[str, Any]], index: Path) -> dict[str, dict[str, Any]]:
    """The gathered sources as the manifest keeps them: each file (its `path`) and root, as seen
    from this process's working directory, made relative to the index directory."""
    base = os.path.abspath(index)

    def rel(path: str) -> str:
        return os.path.relpath(os.path.abspath(path), base)

    return {path: {"file": rel(path), **fact, "root": rel(fact["root"])} for path, fact in sources.items()}


@dataclass(frozen=True)
class Report:
    """What a check found: how many sources, and the `path` of each that changed or vanished."""

    files: int
    changed: tuple[str, ...]
    vanished: tuple[str, ...]

    @property
    def stale(self) -> bool:
        return bool(self.changed or self.vanished)


class Watch:
    """The sources of one index (its manifest's `sources`, relative to `index`), checked against the files as they are now."""

    def __init__(self, sources: Any, index: Path | str):
        entries = sources.items() if isinstance(sources, dict) else ()
        self.sources = {p: f for p, f in entries if _valid(f, ANCHORED)}  # globs not lists of strings: watched, globs unread
        self.base = os.path.abspath(index)
        self._files = {p: self.where(f["file"]) for p, f in self.sources.items()}  # resolved once: a check only stats
        self._seen: dict[str, tuple[int, int, bool]] = {}  # path -> (size, mtime_ns) hashed since, and whether it held the same bytes

    def where(self, relative: str) -> str:
        """The absolute path of a file or root the manifest names."""
        return os.path.normpath(os.path.join(self.base, relative))

    def shown(self, path: str) -> str:
        """A source as a notice names it: where it is, relative to the working directory when under it."""
        return shown_path(self._files[path]) if path in self._files else path

    def selections(self) -> list[tuple[dict[str, list[str]], list[str]]]:
        """The --include and --exclude globs the sources were chosen with, and the roots (absolute, sorted)
        chosen with each: one rag-chunk run gives every root the same globs; chunk streams of runs with
        other globs, joined, give one entry each."""
        by: dict[str, dict[str, list[str]]] = {}
        for fact in self.sources.values():
            chosen = {k: g for k in SELECTION if (g := _glob_list(fact, k))}
            by.setdefault(self.where(fact["root"]), chosen)
        groups: dict[str, tuple[dict[str, list[str]], list[str]]] = {}
        for root in sorted(by):
            key = repr(sorted(by[root].items()))
            groups.setdefault(key, (by[root], []))[1].append(root)
        return list(groups.values())

    def check(self) -> Report:
        """Stat every source; hash one whose size is its own but whose mtime moved (once per move)."""
        changed: list[str] = []
        vanished: list[str] = []
        for path, fact in self.sources.items():
            file = self._files[path]
            try:
                st = os.stat(file)
            except OSError:
                vanished.append(path)
                continue
            size, mtime = st.st_size, st.st_mtime_ns
            if mtime == fact["mtime_ns"] and size == fact["size"]:
                continue
            if size != fact["size"]:
                changed.append(path)
                continue
            seen = self._seen.get(path)
            if seen is None or seen[:2] != (size, mtime):
                try:
                    same = sha256_file(file) == fact["sha256"]
                except OSError:
                    vanished.append(path)
                    continue
                seen = self._seen[path] = (size, mtime, same)
            if not seen[2]:
                changed.append(path)
        return Report(len(self.sources), tuple(changed), tuple(vanished))


def _named(paths: tuple[str, ...], show: Callable[[str], str]) -> str:
    paths = tuple(show(p) for p in paths)
    if len(paths) <= NAMED:
        return ", ".join(paths[:-1]) + (" and " if len(paths) > 1 else "") + paths[-1]
    return f"{', '.join(paths[:NAMED])} and {len(paths) - NAMED} more"


def notice(report: Report, rebuild: str, show: Callable[[str], str] = shown_path) -> str | None:
    """One line saying which sources changed or vanished since the build (each as `show` gives
    it: `Watch.shown`), and how to rebuild; None when none did."""
    if not report.stale:
        return None
    parts = [f"{_named(report.changed, show)} changed"] if report.changed else []
    parts += [f"{_named(report.vanished, show)} vanished"] if report.vanished else []
    moved = len(report.changed) + len(report.vanished)
    return f"{'; '.join(parts)} since the index was built ({moved} of {report.files} sources); rebuild it: {rebuild}"
