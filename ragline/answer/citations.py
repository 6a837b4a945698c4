"""citations: the answer's citation contract: `[n]` markers, sentences, and the check every answer passes.

A library, not a stage (rag_answer uses it, and any generator's text goes through
`check_citations`): every sentence must cite a block that was sent; quoted handbook text
has its `[n]` made inert (`escape_markers`) so it can never read as a citation.
"""

from __future__ import annotations

import re

import ragline.text

CITATION = re.compile(r"(?<!\\)\[(\d{1,3})\]")


def escape_markers(text: str) -> str:
    """Make `[7]` in quoted handbook text inert (`\\[7]`), so it can never read as a citation."""
    return CITATION.sub(lambda m: "\\[" + m.group(1) + "]", text)


def sentences(text: str) -> list[str]:
    """Sentences of one line of prose. A list ordinal (`1.`) or a bare run of markers
    (`[1]`) is not a sentence: it joins its neighbour; so does a piece ending in an
    abbreviation (`vs.`, `e.g.`, an initial)."""
    out: list[str] = []
    text = text.strip()
    for a, b in ragline.text.sentence_spans(text):
        piece = text[a:b]
        lead = re.match(r"^((?:\[\d{1,3}\]\s*)+)(.*)$", piece)
        if out and lead:  # markers opening a piece close the sentence before it
            out[-1] = out[-1] + " " + lead.group(1).strip()
            piece = lead.group(2).strip()
            if not piece:
                continue
        if out and re.fullmatch(r"\d{1,3}[.)]", out[-1]):
            out[-1] = out[-1] + " " + piece
        else:
            out.append(piece)
    return out


def split_sentences(text: str) -> list[str]:
    """An answer's sentences: per line, then at sentence ends. A fenced code block is
    one unit together with the marker line after it; a line holding " | " (a table row)
    is one unit; a run of bare markers (`[1][2]`) joins the sentence before it."""
    out: list[str] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        fence = re.match(r"^\s*(`{3,}|~{3,})", line)
        if fence:
            j = i + 1
            while j < len(lines) and not lines[j].strip().startswith(fence.group(1)):
                j += 1
            out.append("\n".join(lines[i : j + 1]))
            i = j + 1
            continue
        i += 1
        if out and re.fullmatch(r"\s*(?:\[\d{1,3}\]\s*)+[.!?]?\s*", line):
            out[-1] = out[-1] + ("\n" if out[-1].rstrip().endswith(("```", "~~~")) else " ") + line.strip()
        elif " | " in line:  # a table row, quoted whole (`cite`): one unit, whatever full stops its cells hold
            out.append(line.strip())
        elif line.strip():
            out.extend(sentences(line))
    return out


def check_citations(answer: str, n_blocks: int) -> tuple[list[str], list[int], int]:
    """(kept sentences, cited block numbers in order of first use, number dropped).

    Every sentence must cite at least one block that was really sent (1..n_blocks).
    A sentence citing nothing, or only blocks that were not sent, is dropped; in a
    sentence citing both, the markers of blocks that were not sent are removed.
    Escaped markers (`\\[7]`, quoted handbook text) are not citations.
    """
    kept: list[str] = []
    cited: list[int] = []
    dropped = 0
    for sentence in split_sentences(answer):
        if not CITATION.sub("", sentence).strip(" .!?"):
            continue  # a bare marker with nothing to cite for
        numbers = [int(m) for m in CITATION.findall(sentence)]
        valid = [n for n in numbers if 1 <= n <= n_blocks]
        if not valid:
            dropped += 1
            continue
        if len(valid) != len(numbers):
            sentence = CITATION.sub(lambda m: m.group(0) if 1 <= int(m.group(1)) <= n_blocks else "", sentence)
            sentence = re.sub(r"\s{2,}", " ", sentence).strip()
        kept.append(sentence)
        cited.extend(n for n in valid if n not in cited)
    return kept, cited, dropped
