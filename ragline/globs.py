"""globs: gitignore-style patterns over the paths of a walked folder (rag-chunk's --include and --exclude).

A pattern matches a path relative to the folder walked, `/`-separated, as a .gitignore line
(and a ripgrep `--glob`) does:

- `*` matches any run of characters but `/`, `?` one of them, `[abc]` / `[!abc]` / `[a-z]` a class;
  `{draft,wip}` either word (ripgrep's alternation); `\\*` a literal `*`.
- `**` as a whole segment matches any number of folders: `**/notes.md` at any depth, `drafts/**`
  everything inside drafts, `a/**/b` zero or more folders between.
- A pattern without a `/` (but a trailing one) matches a name at any depth: `*.tmp`, `drafts`.
  One with a `/` at its start or in its middle is anchored to the folder walked: `/README.md`,
  `docs/archive`.
- A trailing `/` matches folders only: `drafts/` leaves out the folder, not a file named drafts.
- A pattern that matches a folder matches everything inside it: `drafts` leaves out
  `drafts/2024/plan.md`.

    >>> Glob("drafts/**").matches("drafts/2024/plan.md"), Glob("drafts/**").matches("docs/drafts.md")
    (True, False)
    >>> Glob("*.md").matches("docs/a/b.md"), Glob("/README.md").matches("docs/README.md")
    (True, False)
    >>> Glob("archive/").covers("docs/archive"), Glob("archive/").matches("archive", folder=False)
    (True, False)
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field


def _translate(pattern: str) -> str:
    """The regular expression of a pattern's body (no leading or trailing `/`)."""
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        ch = pattern[i]
        if pattern.startswith("**", i) and (i == 0 or pattern[i - 1] == "/") and (i + 2 == n or pattern[i + 2] == "/"):
            if i + 2 == n:
                out.append(".*")  # `x/**`: everything inside x
                i += 2
            else:
                out.append("(?:[^/]+/)*")  # `**/`: zero or more folders
                i += 3
            continue
        if ch == "*":
            while i < n and pattern[i] == "*":  # `a**b` is `a*b`, as git reads it
                i += 1
            out.append("[^/]*")
            continue
        if ch == "?":
            out.append("[^/]")
        elif ch == "[" and (end := _class_end(pattern, i)) > 0:
            body = pattern[i + 1 : end]
            negate = body[:1] in ("!", "^")
            body = body[1:] if negate else body
            out.append("[" + ("^/" if negate else "") + body.replace("\\", "\\\\").replace("[", "\\[") + "]")
            i = end
        elif ch == "{" and (end := pattern.find("}", i)) > 0 and "," in pattern[i:end]:
            out.append("(?:" + "|".join(_translate(alt) for alt in pattern[i + 1 : end].split(",")) + ")")
            i = end
        elif ch == "\\" and i + 1 < n:
            out.append(re.escape(pattern[i + 1]))
            i += 1
        else:
            out.append(re.escape(ch))
        i += 1
    return "".join(out)


def _class_end(pattern: str, start: int) -> int:
    """The index of the `]` closing the class opened at `start`, or -1 (then `[` is itself)."""
    i = start + 1
    if i < len(pattern) and pattern[i] in "!^":
        i += 1
    if i < len(pattern) and pattern[i] == "]":  # `[]a]`: a leading `]` is a member
        i += 1
    end = pattern.find("]", i)
    return end


@dataclass(frozen=True)
class Glob:
    """One pattern, compiled (see the module's docstring for what it matches)."""

    pattern: str
    folders_only: bool = field(init=False)
    _regex: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        body = self.pattern
        folders_only = body.endswith("/") and body.strip("/") != ""
        body = body.rstrip("/") if folders_only else body
        anchored = "/" in body
        body = body.lstrip("/")
        regex = _translate(body)
        object.__setattr__(self, "folders_only", folders_only)
        object.__setattr__(self, "_regex", re.compile(("" if anchored else "(?:[^/]+/)*") + regex))

    def _fits(self, path: str, folder: bool) -> bool:
        return (folder or not self.folders_only) and self._regex.fullmatch(path) is not None

    def matches(self, path: str, folder: bool = False) -> bool:
        """Does the pattern match `path` (a file, or with `folder` a folder), or a folder it is in?"""
        parts = path.split("/")
        if any(self._fits("/".join(parts[:k]), True) for k in range(1, len(parts))):
            return True
        return self._fits(path, folder)

    def covers(self, folder: str) -> bool:
        """Does the pattern match everything inside `folder`: the folder itself, or all it holds (`drafts/**`)?"""
        return self.matches(folder, folder=True) or (self.pattern.endswith("/**") and self._fits(folder + "/-", False))


def compile_all(patterns: tuple[str, ...] | list[str]) -> tuple[Glob, ...]:
    """The patterns compiled, blank ones left out."""
    return tuple(Glob(p) for p in patterns if p.strip())


def first_match(globs: tuple[Glob, ...], path: str, folder: bool = False) -> Glob | None:
    """The first of `globs` that matches `path`, or None."""
    return next((g for g in globs if g.matches(path, folder)), None)
