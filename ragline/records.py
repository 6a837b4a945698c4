"""records: JSON Lines in and out, the one-line error contract, atomic writes, the stage entry.

Records are read as bytes and parsed with orjson; a fault in them is a `StageError`
with its file and line; files and directories are built beside their target and
renamed into place. `stage_main` and `launch` are the plumbing every stage's `main`
runs under.

Nothing here imports a stage, and nothing runs at import time.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import math
import os
import signal
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import orjson

STDIN = "<stdin>"


# --------------------------------------------------------------------------- errors


class StageError(Exception):
    """Bad data: the stage stops with exit 1 and this one line on stderr.

    `where` is `file:line` (or just `file`) when the fault has a place.
    """

    def __init__(self, message: str, where: str | None = None):
        super().__init__(message)
        self.message = message
        self.where = where

    def __str__(self) -> str:
        return f"{self.where}: {self.message}" if self.where else self.message


def place(source: str, line: int | None = None) -> str:
    """`file:line`, or `file` when there is no line."""
    return f"{source}:{line}" if line else source


def one_line(text: str, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


_CONTROL = None  # compiled on first use: no work at import time


def printable(text: str, keep: str = "") -> str:
    """`text` with nothing a terminal or a log reader takes as structure: every control
    character (C0, DEL, C1: newline, ESC, BEL, ...), the Unicode line and paragraph
    separators, the bidirectional embeddings, overrides and isolates (U+202A-202E,
    U+2066-2069: they reorder what follows on screen, "Trojan Source") and the backslash
    itself written as Python escapes (`\\n`, `\\x1b`, `\\u2028`, `\\u202e`, `\\\\`), so
    one line stays one line and reads in the order it was written, a forged log line reads
    as what it is, and no escape sequence reaches the terminal. Other text is unchanged, and so are the
    characters in `keep` (`keep="\n"` for text shown on a terminal a line at a time)."""
    global _CONTROL
    if _CONTROL is None:
        import re

        _CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\\]")
    names = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
    return _CONTROL.sub(lambda m: m.group() if m.group() in keep else names.get(m.group(), repr(m.group())[1:-1]), text)


@contextlib.contextmanager
def stage(name: str) -> Iterator[None]:
    """Run a stage's body under the error contract.

    StageError and OSError: one line `name: ...` on stderr, exit 1.
    Ctrl-C: one line, exit 130, also when a cleanup it ran raised an OSError (`during_interrupt`). A closed stdout (`| head -1`): quiet exit 141,
    as any Unix filter killed by SIGPIPE. Anything else is a bug and keeps its
    traceback.
    """
    try:
        yield
        sys.stdout.flush()
    except StageError as err:
        _die(name, str(err), 1)
    except BrokenPipeError:
        _quiet_stdout()
        raise SystemExit(141) from None
    except KeyboardInterrupt:
        _die(name, "interrupted", 130)
    except OSError as err:
        if during_interrupt(err):  # a cleanup that failed as Ctrl-C unwound: the interrupt is what happened
            _die(name, "interrupted", 130)
        if err.errno == errno.EPIPE:  # raised as plain OSError by some writers
            _quiet_stdout()
            raise SystemExit(141) from None
        target = f"{err.filename}: " if err.filename else ""
        _die(name, f"{target}{err.strerror or err}", 1)


def during_interrupt(err: BaseException) -> bool:
    """Whether `err` was raised while a Ctrl-C (KeyboardInterrupt) was being handled: one in its
    chain of exceptions it was raised during (`__context__`) or from (`__cause__`)."""
    seen: set[int] = set()
    at: BaseException | None = err
    while at is not None and id(at) not in seen:
        if isinstance(at, KeyboardInterrupt):
            return True
        seen.add(id(at))
        at = at.__cause__ or at.__context__
    return False


def _die(name: str, message: str, code: int) -> None:
    with contextlib.suppress(Exception):
        sys.stdout.flush()
    sys.stderr.write(f"{name}: {one_line(message, 2000)}\n")
    sys.stderr.flush()
    raise SystemExit(code)


def _quiet_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush cannot fail."""
    with contextlib.suppress(Exception):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


def stage_main(name: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Decorate a stage's click callback: SIGTERM becomes Ctrl-C, the body runs under `stage(name)`.

    The one place the stages' shared plumbing lives (as csvkit's one `run`), `--version`
    included:

        @click.command()
        @ragline.records.stage_main("rag-chunk")
        def main(...): ...
    """

    def decorate(body: Callable[..., None]) -> Callable[..., None]:
        @functools.wraps(body)
        def run(*args: Any, **kwargs: Any) -> None:
            die_on_sigterm()
            with stage(name):
                body(*args, **kwargs)

        return version_option(name)(run)

    return decorate


def version_option(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """`--version`: the command's name and the installed ragline's version."""
    import click

    return click.version_option(package_name="ragline", prog_name=name, message="%(prog)s (ragline) %(version)s")


def launch(module: str, name: str) -> None:
    """A console script's entry: import the stage's module, then run its `main`.

    Ctrl-C while the stage is still importing its libraries (numpy, onnxruntime: the
    slow part of a start) is an interrupt like any other, exit 130 and one line,
    never a traceback.

    Once the stage's module is imported, what the imports made (numpy's, click's, the
    stages' own objects: most of a process's) is moved out of the collector's reach
    (`gc.freeze`): it lives as long as the process, and the collections during the run
    and the last one of the interpreter's shutdown would otherwise walk all of it, the
    largest part of the time between a command's last output and its exit. What `main`
    makes is collected as ever: a vector cache's sqlite connection, held in a cycle, is
    closed at exit and its WAL checkpointed into the file.
    """
    import gc
    import importlib

    try:
        main = importlib.import_module(module).main
    except KeyboardInterrupt:
        _die(name, "interrupted", 130)
    gc.freeze()
    try:
        main()
    finally:
        _default_sigint()


def _default_sigint() -> None:
    """Once the stage is done (its output flushed, its files in place, or its interrupt reported), Ctrl-C
    gets the default handler back: one landing while the interpreter shuts down (joining threads,
    checkpointing a cache) ends the process silently, as a killed filter does, instead of Python
    printing a KeyboardInterrupt it can only ignore. Set again if an interrupt lands while setting it."""
    for _ in range(3):
        try:
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            return
        except KeyboardInterrupt:
            continue


def die_on_sigterm() -> None:
    """Turn SIGTERM into KeyboardInterrupt so cleanup handlers run."""

    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    with contextlib.suppress(ValueError):  # not in the main thread (tests)
        signal.signal(signal.SIGTERM, handler)


# --------------------------------------------------------------------------- records in


@dataclass(frozen=True)
class Line:
    """Where a record came from."""

    source: str
    number: int

    def __str__(self) -> str:
        return f"{self.source}:{self.number}"


def open_inputs(paths: Iterable[str], usage: str | None = None) -> Iterator[tuple[str, IO[bytes]]]:
    """Yield (name, binary stream) for each path; `-` or no paths means stdin.

    stdin on a terminal with nothing piped is a usage error, not a hang.
    """
    paths = list(paths) or ["-"]
    for path in paths:
        if path == "-":
            stream = sys.stdin.buffer
            if stream.isatty():
                import click

                raise click.UsageError(usage or "no input: pipe JSON Lines into me or name a file")
            yield STDIN, stream
        else:
            try:
                handle = open(path, "rb")  # noqa: SIM115 - closed below
            except OSError as err:
                raise StageError(err.strerror or str(err), path) from None
            with handle:
                yield path, handle


MAX_RECORD = 16 << 20  # bytes of one JSON line: a longer one is refused before it is read whole


def bounded_lines(name: str, stream: Iterable[bytes], limit: int = MAX_RECORD) -> Iterator[bytes]:
    """The stream's lines, each read `limit` bytes at most: a longer line is a StageError naming it,
    so one line with no newline (a 200 MB file) costs `limit` bytes of memory, not its size."""
    readline = getattr(stream, "readline", None)
    lines = iter(lambda: readline(limit + 1), b"") if readline is not None else iter(stream)
    for number, raw in enumerate(lines, 1):
        if len(raw) > limit and not (len(raw) == limit + 1 and raw.endswith(b"\n")):
            raise StageError(f"a line of over {limit >> 20} MiB: not a record ragline writes", place(name, number))
        yield raw


def parse_lines(name: str, stream: Iterable[bytes]) -> Iterator[tuple[Line, dict[str, Any]]]:
    """Parse one JSON object per line; blank lines are skipped.

    A UTF-8 byte-order mark on the first line is tolerated (editors write it).
    Anything that is not a JSON object is a StageError naming the line, and so is a line
    over MAX_RECORD bytes (`bounded_lines`).
    """
    for number, raw in enumerate(bounded_lines(name, stream), 1):
        if number == 1 and raw.startswith(b"\xef\xbb\xbf"):
            raw = raw[3:]
        if not raw.strip():
            continue
        where = place(name, number)
        try:
            record = orjson.loads(raw)
        except orjson.JSONDecodeError as err:
            raise StageError(_json_error(raw, err), where) from None
        if not isinstance(record, dict):
            raise StageError(f"expected a JSON object, got {_json_kind(record)}", where)
        yield Line(name, number), record


def _json_error(raw: bytes, err: orjson.JSONDecodeError) -> str:
    """orjson's complaint about one line, with the column counted on that line.

    Bytes that are not UTF-8 are named as such (orjson calls them surrogates, at column 1).
    """
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as bad:
        return f"not valid JSON: not UTF-8 (byte 0x{raw[bad.start]:02x} at column {bad.start + 1})"
    column = min(err.pos, len(raw.rstrip(b"\r\n"))) + 1  # orjson counts a trailing newline as a new line
    return f"not valid JSON: {one_line(err.msg)} (column {column})"


def read_records(paths: Iterable[str], usage: str | None = None) -> Iterator[tuple[Line, dict[str, Any]]]:
    """Records from files or stdin, each with its Line."""
    for name, stream in open_inputs(paths, usage):
        yield from parse_lines(name, stream)


def _json_kind(value: Any) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if value is None:
        return "null"
    return "an object"


_KIND_NAMES = {str: "a string", list: "an array", dict: "an object", int: "an integer", float: "a number", bool: "a boolean"}


def require_field(record: dict[str, Any], name: str, kind: type | tuple[type, ...], where: Line | str) -> Any:
    """record[name], checked to be of `kind`; otherwise a StageError naming the field.

    Also turns "KeyError: 'hits'" into "expected a hits record, got a chunk record"
    when the record carries a `schema` tag.
    """
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if name not in record:
        schema = record.get("schema")
        got = f" (got a {schema} record)" if isinstance(schema, str) else ""
        raise StageError(f"missing field '{name}'{got}", str(where))
    value = record[name]
    ok = isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds)
    if float in kinds and isinstance(value, int) and not isinstance(value, bool):
        ok = True
    if not ok:
        want = " or ".join(_KIND_NAMES.get(k, k.__name__) for k in kinds)
        raise StageError(f"field '{name}' must be {want}, got {_json_kind(value)}", str(where))
    return value


def check_strings(record: dict[str, Any], name: str, where: Line | str, whose: str = "") -> None:
    """A StageError unless record[name], where present (not null), is an array of strings
    (`whose`, e.g. " (rag-expand's)", ends the message)."""
    value = record.get(name)
    if value is not None and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
        raise StageError(f"field '{name}' must be an array of strings{whose}", str(where))


def check_hits(record: dict[str, Any], where: Line | str, scored: bool = False) -> list[Any]:
    """record["hits"], each hit checked: an object with `chunk_id` and `text` strings, `headings`
    strings where present, and (`scored`) a number `score`. A StageError names the hit."""
    hits = require_field(record, "hits", list, where)
    for i, hit in enumerate(hits):
        if not isinstance(hit, dict) or not isinstance(hit.get("chunk_id"), str) or not isinstance(hit.get("text"), str):
            raise StageError(f"hit {i + 1} must be an object with 'chunk_id' and 'text' strings", str(where))
        headings = hit.get("headings", [])
        if not isinstance(headings, list) or not all(isinstance(h, str) for h in headings):
            raise StageError(f"hit {i + 1}: 'headings' must be a list of strings", str(where))
        score = hit.get("score")
        if scored and (isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score)):
            raise StageError(f"hit {i + 1}: 'score' must be a number (rag-search's hits carry one)", str(where))
    return hits


# --------------------------------------------------------------------------- records out


_DUMP_OPTS = orjson.OPT_APPEND_NEWLINE | orjson.OPT_SERIALIZE_NUMPY


def dumps(record: dict[str, Any]) -> bytes:
    """One compact JSON line (numpy arrays serialised as lists)."""
    return orjson.dumps(record, option=_DUMP_OPTS)


def write_records(records: Iterable[dict[str, Any]], out: IO[bytes] | None = None, flush_every: int = 64) -> int:
    """Write records as JSON Lines; flush every `flush_every` records. Returns the count."""
    out = out if out is not None else sys.stdout.buffer
    count = 0
    for count, record in enumerate(records, 1):
        out.write(dumps(record))
        if count % flush_every == 0:
            out.flush()
    out.flush()
    return count


# --------------------------------------------------------------------------- atomic files


DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


class DiskFull(StageError):
    """The file system ran out of space (or quota) while writing `where`; `kept` says what is left as it was.

    One line, `where: no space left on the device; the previous file is untouched`.
    """

    def __init__(self, where: str, kept: str):
        super().__init__(f"no space left on the device; {kept}", where)


def disk_full(err: BaseException) -> bool:
    """Is this the file system running out of space (ENOSPC) or quota (EDQUOT)?"""
    return isinstance(err, DiskFull) or (isinstance(err, OSError) and err.errno in DISK_FULL)


def _temporary(directory: Path, prefix: str, made: list[Path], *, folder: bool = False, suffix: str = ".tmp") -> Path:
    """Create an empty temporary file (or directory) in `directory` and return its path.

    The name is chosen and put in `made` before the file exists, so that a caller's
    cleanup finds it whatever moment an interrupt lands at. tempfile.mkstemp creates
    first and names after: a Ctrl-C between its open and the caller's assignment left a
    file nobody knew of (a `.CURRENT.*.tmp` beside an index, seen in CI).
    """
    import secrets

    while True:
        path = directory / f"{prefix}{secrets.token_hex(6)}{suffix}"
        made.append(path)
        try:
            if folder:
                os.mkdir(path, 0o777)  # less the umask, as any directory
            else:
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
            return path
        except FileExistsError:
            made.pop()  # someone else's: not ours to remove


def _remove(paths: list[Path]) -> None:
    """Remove what `_temporary` made, quietly: the error that brought us here is the one to tell (a path
    named but never created, on a read-only file system, is EROFS rather than ENOENT to unlink)."""
    import shutil

    for path in paths:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                os.unlink(path)


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike[str], mode: str = "wb") -> Iterator[IO[Any]]:
    """Write `path` atomically: a temporary file beside it, fsync, os.replace on success.

    On any failure (including KeyboardInterrupt, at any moment) the temporary file is
    removed and `path` is left as it was. A full disk is a DiskFull naming `path`.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    made: list[Path] = []
    try:
        tmp = _temporary(target.parent, f".{target.name}.", made)
        with open(tmp, mode) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException as err:
        _remove(made)
        if disk_full(err):
            kept = "the previous file is untouched" if target.exists() else "nothing was written"
            raise DiskFull(str(target), kept) from None
        raise


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Build a directory beside `path`, then swap it into place on success.

    Yields the temporary directory to fill. A reader never sees a half-built
    directory at `path`. The swap of an existing directory is two renames; a
    kill between them leaves the old one at `.NAME.old-*` beside it (see
    rag_index for the generation scheme that closes that window for indexes).
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    made: list[Path] = []
    old: list[Path] = []
    try:
        tmp = _temporary(target.parent, f".{target.name}.", made, folder=True)
        yield tmp
        if target.exists():
            aside = _temporary(target.parent, f".{target.name}.old-", old, folder=True, suffix="")
            os.replace(target, aside / "x")
            os.replace(tmp, target)
            _remove(old)
        else:
            os.replace(tmp, target)
    except BaseException:
        if old and (old[0] / "x").exists() and not target.exists():
            os.replace(old[0] / "x", target)  # Ctrl-C between the two renames: put the old one back
        _remove(made)
        _remove(old)
        raise


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """fsync a directory so a rename inside it is durable."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


# --------------------------------------------------------------------------- progress


def note(message: str, quiet: bool = False) -> None:
    """A notice on stderr (counts, truncations): shown unless --quiet."""
    if not quiet:
        sys.stderr.write(message + "\n")


def env_default(name: str, default: Any, convert: Callable[[str], Any] = str) -> Any:
    """An option's default read from the environment (RAG_*)."""
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return convert(value)
    except ValueError:
        import click

        raise click.UsageError(f"{name}={value!r} is not valid") from None


# --------------------------------------------------------------------------- shared names

# The extractive answer generator's switches (rag_answer), each one ablation in rag_eval.
ANSWER_FEATURES = ("unwrap", "idf", "headings", "cue", "dense", "names")


def lazy_import(name: str) -> Any:
    """A module that is imported on first attribute access (importlib.util.LazyLoader).

    Keeps `--help` fast in stages whose heavy imports (numpy, yaml) only the work needs.
    """
    import importlib.util

    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        raise ImportError(name)
    loader = importlib.util.LazyLoader(spec.loader)
    spec.loader = loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    return module
