"""Anchor matching: which retrieved chunk matches which gold support.

This is evalkit's qrels x run step. `match_ranking` turns retrieved chunks and gold
supports into a `MatchTable` (per rank, the set of gold indices matched), and every
retrieval metric in `evalkit.metrics.retrieval` is a small function over that table.
The rules below are the ones EVAL.md states under "Anchors"; change both together.

A gold support carries one or more of three forms; it matches a chunk when any form
it carries matches:

- `chunk_id`: the chunk has the same id (exact string compare).
- line span `{rel_path, start_line, end_line}`: same normalized file and the inclusive
  line ranges overlap. When the chunk has no line numbers, the span form cannot decide
  and the anchor form (if the support also has a `heading_path`) decides instead.
- anchor `{rel_path, heading_path, snippets?}`: same normalized file, and the chunk's
  heading path starts with the gold heading path at a heading boundary. With
  `require_snippets`, every snippet must also occur in the chunk text.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "HEADING_DELIMITER",
    "MatchTable",
    "heading_components",
    "match_ranking",
    "match_support",
    "normalize_heading_path",
    "normalize_rel_path",
    "normalize_snippet_text",
    "order_chunks",
]

HEADING_DELIMITER = " > "

_SLASHES = re.compile(r"/{2,}")
_SPACES = re.compile(r"\s+")
# A `>` separates components when spaces surround it or a `#` component follows it,
# so headings such as "x -> y" or "a>b" stay one component.
_DELIM = re.compile(r"\s+>\s+|\s*>\s*(?=#)")
_HASHES = re.compile(r"^(#+)\s*(.*)$")
# CommonMark: an optional closing run of `#` preceded by a space ends an ATX heading.
_CLOSING_HASHES = re.compile(r"\s+#+$")


@dataclass(frozen=True)
class MatchTable:
    """Retrieved chunks x gold supports, in rank order.

    Attributes:
        matches: per retrieved chunk (position 1 first), the indices of the gold supports
            it matches. A repeated chunk keeps only its first position's matches; later
            copies have an empty set (they occupy a slot and earn nothing).
        relevance: per gold support, its graded relevance (default 1.0), for nDCG.
        n_supports: number of gold supports.
        duplicates: positions (0-based) holding a repeat of an earlier chunk.
    """

    matches: list[frozenset[int]]
    relevance: list[float]
    n_supports: int
    duplicates: frozenset[int] = field(default_factory=frozenset)


def normalize_rel_path(p: str | None, *, case_sensitive: bool = True) -> str:
    """Normalize a vault-relative note path for comparison.

    Steps: Unicode NFC; trim; backslashes become `/`; runs of `/` collapse to one;
    `.` segments (including a leading `./`) are dropped; leading and trailing `/` are
    dropped. `..` is kept as written (never resolved). Case is kept unless
    `case_sensitive=False`, in which case the path is case-folded: vault file systems
    differ (Linux is case-sensitive, macOS/Windows usually not), so the default is the
    strict one and the looser one is an explicit choice.

    Args:
        p: the path as written in the eval set, a chunk or a reference. None -> "".
        case_sensitive: False to compare paths case-insensitively.

    Returns:
        The normalized path, e.g. ".\\\\notes//a.md " -> "notes/a.md".
    """
    if not p:
        return ""
    s = unicodedata.normalize("NFC", str(p)).strip().replace("\\", "/")
    s = _SLASHES.sub("/", s)
    parts = [seg for seg in s.split("/") if seg not in ("", ".")]
    out = "/".join(parts)
    return out if case_sensitive else out.casefold()


def _normalize_component(c: str) -> str:
    c = _SPACES.sub(" ", c).strip()
    m = _HASHES.match(c)
    if not m:
        return c
    hashes, text = m.groups()
    text = _CLOSING_HASHES.sub("", text).strip() if text else text
    return f"{hashes} {text}" if text else hashes


def heading_components(h: str | None) -> tuple[str, ...]:
    """Split a heading path into normalized components (see `normalize_heading_path`)."""
    if not h:
        return ()
    s = unicodedata.normalize("NFC", str(h))
    # Padding lets a leading or trailing " > " split off an empty component too.
    comps = (_normalize_component(c) for c in _DELIM.split(f" {s} "))
    return tuple(c for c in comps if c)


def normalize_heading_path(h: str | None) -> str:
    """Normalize a heading path: "#A  >##  B " -> "# A > ## B".

    Steps: Unicode NFC; split into components at `>` delimiters (a `>` with whitespace
    on both sides, or one followed by a `#` component); in each component collapse
    whitespace runs to one space and trim; write the leading hash run as `#... text`
    with exactly one space (`#Heading` -> `# Heading`), keeping the number of hashes
    so depth stays meaningful (`# A` and `## A` differ); drop a CommonMark closing
    hash run (`## A ##` -> `## A`); drop empty components; join with " > ".
    Case is kept.

    Args:
        h: the heading path; None or "" means the whole file.

    Returns:
        The normalized path, "" for the whole file.
    """
    return HEADING_DELIMITER.join(heading_components(h))


def normalize_snippet_text(s: str | None) -> str:
    """Snippet comparison form: Unicode NFKC, case-folded, every whitespace removed."""
    if not s:
        return ""
    return _SPACES.sub("", unicodedata.normalize("NFKC", str(s)).casefold())


def _heading_prefix(gold: tuple[str, ...], got: tuple[str, ...], case_sensitive: bool) -> bool:
    if len(got) < len(gold):
        return False
    if not case_sensitive:
        gold = tuple(c.casefold() for c in gold)
        got = tuple(c.casefold() for c in got)
    # Component-wise compare is the heading-boundary rule: "# A" never prefixes "# AB".
    return got[: len(gold)] == gold


def _get(obj: Mapping[str, Any] | Any, key: str) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(key)
    return getattr(obj, key, None)


def _snippets_ok(support: Mapping, chunk: Mapping) -> bool:
    snippets = [s for s in (_get(support, "snippets") or []) if s and str(s).strip()]
    if not snippets:
        return True
    text = normalize_snippet_text(_get(chunk, "text"))
    truncated = bool(_get(chunk, "text_truncated"))
    for snip in snippets:
        if normalize_snippet_text(snip) not in text and not truncated:
            return False
    # A truncated stored prefix cannot prove a snippet absent; see EVAL.md "Anchors".
    return True


def _int_or_none(v: Any) -> int | None:
    if v is None or isinstance(v, bool):
        return None
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def match_support(
    support: Mapping,
    chunk: Mapping,
    *,
    require_snippets: bool = False,
    case_sensitive: bool = True,
) -> bool:
    """Whether one retrieved chunk (or reference) matches one gold support.

    Rules, in order (a support matches when any form it carries matches):
    1. `chunk_id`: equal ids match. A support with only a `chunk_id` matches nothing else.
    2. Line span (support has `start_line`/`end_line`): the normalized `rel_path` must be
       equal; when the chunk has both line numbers, the result is whether
       `chunk.start_line <= support.end_line and support.start_line <= chunk.end_line`
       (inclusive ranges; touching at one line overlaps). When the chunk lacks line
       numbers, the anchor rule decides if the support has a `heading_path`.
    3. Anchor: equal normalized `rel_path`, and the chunk's heading components start
       with the support's heading components (an empty gold heading path = the whole
       file). With `require_snippets`, every non-blank snippet must occur in the chunk
       text (NFKC, case-folded, all whitespace removed on both sides).

    Args:
        support: a gold support dict (or model) from the eval set.
        chunk: a retrieved chunk or a reference (references carry no text: pass
            `require_snippets=False`).
        require_snippets: enforce the support's snippets (anchor and span forms).
        case_sensitive: compare paths and headings case-sensitively (default).

    Returns:
        True when the chunk matches the support.
    """
    gold_id = _get(support, "chunk_id")
    if gold_id is not None and str(gold_id) != "":
        chunk_id = _get(chunk, "chunk_id")
        if chunk_id is not None and str(chunk_id) == str(gold_id):
            return True
    gold_path = normalize_rel_path(_get(support, "rel_path"), case_sensitive=case_sensitive)
    if not gold_path:
        return False
    if normalize_rel_path(_get(chunk, "rel_path"), case_sensitive=case_sensitive) != gold_path:
        return False

    g_start, g_end = _int_or_none(_get(support, "start_line")), _int_or_none(_get(support, "end_line"))
    if g_start is not None and g_end is not None:
        c_start, c_end = _int_or_none(_get(chunk, "start_line")), _int_or_none(_get(chunk, "end_line"))
        if c_start is not None and c_end is not None:
            if not (c_start <= g_end and g_start <= c_end):
                return False
            return not require_snippets or _snippets_ok(support, chunk)
        if _get(support, "heading_path") is None:
            return False

    gold_heading = heading_components(_get(support, "heading_path"))
    got_heading = heading_components(_get(chunk, "heading_path"))
    if not _heading_prefix(gold_heading, got_heading, case_sensitive):
        return False
    return not require_snippets or _snippets_ok(support, chunk)


def order_chunks(chunks: Sequence[Mapping]) -> list[Mapping]:
    """Chunks in rank order: by `rank` when present (stable), chunks without one last.

    Metrics use the position in this order (1, 2, 3...), never the `rank` value itself,
    so 0-based ranks or gaps do not shift MRR.
    """
    indexed = list(enumerate(chunks))

    def key(item: tuple[int, Mapping]) -> tuple[int, float, int]:
        rank = _get(item[1], "rank")
        if rank is None or isinstance(rank, bool):
            return (1, 0.0, item[0])
        try:
            return (0, float(rank), item[0])
        except (TypeError, ValueError):
            return (1, 0.0, item[0])

    return [c for _, c in sorted(indexed, key=key)]


def _identity(chunk: Mapping, case_sensitive: bool) -> tuple:
    cid = _get(chunk, "chunk_id")
    if cid is not None and str(cid) != "":
        return ("id", str(cid))
    return (
        "loc",
        normalize_rel_path(_get(chunk, "rel_path"), case_sensitive=case_sensitive),
        normalize_heading_path(_get(chunk, "heading_path")),
        _int_or_none(_get(chunk, "start_line")),
        _int_or_none(_get(chunk, "end_line")),
        _get(chunk, "text") or "",
    )


def match_ranking(
    chunks: Sequence[Mapping],
    supports: Sequence[Mapping],
    *,
    require_snippets: bool = False,
    case_sensitive: bool = True,
) -> MatchTable:
    """Match every retrieved chunk against every gold support.

    Chunks are put in rank order first (`order_chunks`). A chunk that repeats an earlier
    one (same `chunk_id`; without ids, same path, heading, lines and text) is recorded
    in `duplicates` and matches nothing: it occupies its slot (precision@K counts it in
    the denominator) and earns nothing, so duplicates never raise a metric.

    Args:
        chunks: retrieved chunks (dicts with rel_path, heading_path, chunk_id, lines, text, rank).
        supports: the case's gold supports.
        require_snippets: enforce snippets (see `match_support`).
        case_sensitive: compare paths and headings case-sensitively (default).

    Returns:
        A MatchTable with one entry per chunk, in rank order.
    """
    relevance = [_relevance(s) for s in supports]
    matches: list[frozenset[int]] = []
    duplicates: set[int] = set()
    seen: set[tuple] = set()
    for pos, chunk in enumerate(order_chunks(chunks)):
        ident = _identity(chunk, case_sensitive)
        if ident in seen:
            duplicates.add(pos)
            matches.append(frozenset())
            continue
        seen.add(ident)
        matches.append(
            frozenset(
                i
                for i, s in enumerate(supports)
                if match_support(s, chunk, require_snippets=require_snippets, case_sensitive=case_sensitive)
            )
        )
    return MatchTable(matches=matches, relevance=relevance, n_supports=len(supports), duplicates=frozenset(duplicates))


def _relevance(support: Mapping) -> float:
    rel = _get(support, "relevance")
    if rel is None or isinstance(rel, bool):
        return 1.0
    return float(rel)
