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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache, partial
from itertools import compress, repeat
from operator import itemgetter
from typing import Any, NamedTuple

__all__ = [
    "HEADING_DELIMITER",
    "SUPPORT_FORMS",
    "GoldIndex",
    "MatchTable",
    "SupportForm",
    "form_matches",
    "heading_components",
    "match_ranking",
    "match_support",
    "normalize_heading_path",
    "normalize_phrase",
    "normalize_rel_path",
    "order_chunks",
    "paths_of",
    "phrase_in",
    "support_form",
    "support_forms",
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
        graded_only: indices of the `graded_only` supports: they count for nDCG only and
            are outside the recall set of every other metric (empty for most cases).
    """

    matches: list[frozenset[int]]
    relevance: list[float]
    n_supports: int
    duplicates: frozenset[int] = field(default_factory=frozenset)
    graded_only: frozenset[int] = field(default_factory=frozenset)


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
    return _normalize_rel_path(p if type(p) is str else str(p), case_sensitive)


# Re-scoring a run normalizes the same few thousand paths and heading chains over and over
# (every chunk of every case); the functions are pure, so a bounded cache keeps them once.
@lru_cache(maxsize=1 << 16)
def _normalize_rel_path(p: str, case_sensitive: bool) -> str:
    s = unicodedata.normalize("NFC", p).strip().replace("\\", "/")
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
    return _heading_components(h if type(h) is str else str(h))


@lru_cache(maxsize=1 << 16)
def _heading_components(h: str) -> tuple[str, ...]:
    simple = _canonical_components(h)
    return simple if simple is not None else _normalized_components(h)


def _normalized_components(h: str) -> tuple[str, ...]:
    s = unicodedata.normalize("NFC", h)
    # Padding lets a leading or trailing " > " split off an empty component too.
    comps = (_normalize_component(c) for c in _DELIM.split(f" {s} "))
    return tuple(c for c in comps if c)


def _canonical_components(h: str) -> tuple[str, ...] | None:
    """The components of a heading path already in normal form (`# A > ## B`, what
    chunkers write), without the regex passes; None when `h` is not plainly so (the full
    normalization then decides). Accepting implies the full steps change nothing: ASCII
    (NFC is the identity), single spaces only, every `>` a ` > ` delimiter, no empty or
    padded component, and `#...` runs followed by one space and a text that has no closing
    hash run."""
    if not h.isascii() or not h.isprintable() or "  " in h:
        return None
    parts = h.split(HEADING_DELIMITER)
    if h.count(">") != len(parts) - 1:
        return None
    for c in parts:
        if not c or c[0] == " " or c[-1] == " ":
            return None
        if c[0] == "#":
            rest = c.lstrip("#")
            if rest and (rest[0] != " " or _CLOSING_TAIL.search(rest)):
                return None
    return tuple(parts)


_CLOSING_TAIL = re.compile(r"\s#+$")


@lru_cache(maxsize=1 << 16)
def _folded_components(h: str) -> tuple[str, ...]:
    return tuple(c.casefold() for c in _heading_components(h))


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


def normalize_phrase(s: str | None) -> str:
    """The phrase rule's comparison form: Unicode NFKC, case-folded, every whitespace removed.

    The one rule for "a phrase occurs in a text" (EVAL.md, "Phrases"): gold snippets, the
    `expected` lists (`must_include`, `must_exclude`, `ordered_hints`) and the Hindsight
    importer's facts all compare in this form, so a phrase found as a snippet is found as
    an expectation too. NFKC folds compatibility forms ("ﬁ" -> "fi", "Ｒ" -> "R", a
    non-breaking space -> a space); case-folding goes beyond lower case ("ß" -> "ss").

    Returns:
        The comparison form; "" for None or "".
    """
    if not s:
        return ""
    return _SPACES.sub("", unicodedata.normalize("NFKC", str(s)).casefold())


def phrase_in(phrase: str | None, text: str | None) -> bool:
    """Whether `phrase` occurs in `text` under the phrase rule (`normalize_phrase` of both;
    "RAG  systems" occurs in "rag\nSYSTEMS"). A blank phrase occurs in every text: callers
    drop blank phrases first."""
    return normalize_phrase(phrase) in normalize_phrase(text)


def _get(obj: Mapping[str, Any] | Any, key: str) -> Any:
    if type(obj) is dict or isinstance(obj, Mapping):
        return obj.get(key)
    return getattr(obj, key, None)


def int_or_none(v: Any) -> int | None:
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
       text under the phrase rule (`normalize_phrase`: NFKC, case-folded, no whitespace).

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
    gold_path = path_of(_get(support, "rel_path"), case_sensitive)
    if not gold_path or path_of(_get(chunk, "rel_path"), case_sensitive) != gold_path:
        return False
    view = chunk if type(chunk) is dict else {k: _get(chunk, k) for k in _CHUNK_KEYS}
    return form_matches(support_form(support, case_sensitive), view, require_snippets, case_sensitive)


class SupportForm(NamedTuple):
    """A gold support's span and anchor forms, normalized once (`support_form`).

    Attributes:
        span: (start_line, end_line) when the support has both, else None.
        heading_given: the support has a `heading_path` (even an empty one).
        heading: its heading components as `form_matches` compares them (case-folded when
            not case-sensitive); () is the whole file.
        snippets: its non-blank snippets in comparison form (`normalize_phrase`).
    """

    span: tuple[int, int] | None
    heading_given: bool
    heading: tuple[str, ...]
    snippets: tuple[str, ...]


def support_form(support: Mapping | Any, case_sensitive: bool) -> SupportForm:
    """The support's SupportForm (see `form_matches`)."""
    start, end = int_or_none(_get(support, "start_line")), int_or_none(_get(support, "end_line"))
    heading = _get(support, "heading_path")
    snippets = _get(support, "snippets") or []
    return SupportForm(
        (start, end) if start is not None and end is not None else None,
        heading is not None,
        path_components(heading, case_sensitive),
        tuple(normalize_phrase(x) for x in snippets if x and str(x).strip()) if snippets else (),
    )


SUPPORT_FORMS = ("anchor", "chunk_id", "snippets", "span")


def support_forms(support: Mapping | Any) -> set[str]:
    """The forms (SUPPORT_FORMS) by which `match_support` can match this gold support: which
    fields of a retrieved chunk or reference its match reads.

    - "chunk_id": it has a chunk id (the chunk's `chunk_id` is read);
    - "span": a file and both line numbers (the chunk's `rel_path`, `start_line`, `end_line`);
    - "anchor": a file, and a heading path or no span (`rel_path`, `heading_path`);
    - "snippets": non-blank snippets on a span or anchor form (the chunk's `text`, when
      snippets are required).
    """
    out: set[str] = set()
    chunk_id = _get(support, "chunk_id")
    if chunk_id is not None and str(chunk_id) != "":
        out.add("chunk_id")
    if not path_of(_get(support, "rel_path"), True):
        return out
    span = int_or_none(_get(support, "start_line")) is not None and int_or_none(_get(support, "end_line")) is not None
    if span:
        out.add("span")
    if _get(support, "heading_path") is not None or not span:
        out.add("anchor")
    if any(x and str(x).strip() for x in _get(support, "snippets") or []):
        out.add("snippets")
    return out


def form_matches(form: SupportForm, chunk: Mapping, require_snippets: bool, case_sensitive: bool) -> bool:
    """The anchor rule's span and anchor forms, for a chunk already known to be on the
    support's (non-empty, normalized) file. This is the rule, written once: `match_support`,
    `GoldIndex` (per chunk) and `evalkit.metrics.batch` (per block) reach it after the two
    equality tests that come before it (same chunk id: a match; another file: none), which
    they do by lookups or array compares instead of per pair.

    `chunk` is a plain dict (a retrieved chunk or a reference; references carry no text, so
    pass `require_snippets=False` for them).
    """
    span, heading_given, gold, snippets = form
    if span is not None:
        c_start, c_end = int_or_none(chunk.get("start_line")), int_or_none(chunk.get("end_line"))
        if c_start is not None and c_end is not None:
            # Inclusive ranges; touching at one line overlaps.
            if not (c_start <= span[1] and span[0] <= c_end):
                return False
            return not (require_snippets and snippets) or _snippets_in(snippets, chunk)
        if not heading_given:
            return False  # no line numbers to decide by, and no anchor form to fall back on
    # Component-wise: the heading-boundary rule ("# A" never prefixes "# AB").
    if gold and path_components(chunk.get("heading_path"), case_sensitive)[: len(gold)] != gold:
        return False
    return not (require_snippets and snippets) or _snippets_in(snippets, chunk)


def order_chunks(chunks: Sequence[Mapping]) -> list[Mapping]:
    """Chunks in rank order: by `rank` when present (stable), chunks without one last.

    Metrics use the position in this order (1, 2, 3...), never the `rank` value itself,
    so 0-based ranks or gaps do not shift MRR.
    """
    if _in_rank_order(chunks):
        return list(chunks)
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


def _in_rank_order(chunks: Sequence[Mapping]) -> bool:
    """True when every chunk has a numeric rank and the ranks never decrease (stored runs
    are written so): the stable sort of `order_chunks` would then keep the list as it is."""
    prev = float("-inf")
    for c in chunks:
        rank = _get(c, "rank")
        if type(rank) is not int and type(rank) is not float:
            return False
        r = float(rank)
        if not prev <= r:  # also False for NaN, which the sort places its own way
            return False
        prev = r
    return True


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
    return GoldIndex(supports, case_sensitive=case_sensitive).ranking(chunks, require_snippets=require_snippets)


_NO_MATCH: frozenset[int] = frozenset()
_DICT_ONLY = {dict}
_STR_ONLY = {str}
_INTS = {int}
_RANK, _CHUNK_ID = itemgetter("rank"), itemgetter("chunk_id")
_CHUNK_KEYS = ("chunk_id", "rel_path", "heading_path", "start_line", "end_line", "text", "text_truncated", "rank")
# Normalized paths by raw string, one table per case sensitivity: a dict lookup per chunk
# instead of a call. Cleared when full, so memory stays bounded on any corpus.
_PATHS: tuple[dict[str, str], dict[str, str]] = ({}, {})
_PATHS_MAX = 1 << 17


def path_of(raw: Any, case_sensitive: bool) -> str:
    table = _PATHS[case_sensitive]
    if type(raw) is str:
        path = table.get(raw)
        if path is None:
            if len(table) >= _PATHS_MAX:
                table.clear()
            path = table[raw] = normalize_rel_path(raw, case_sensitive=case_sensitive)
        return path
    return normalize_rel_path(raw, case_sensitive=case_sensitive)


def paths_of(raws: Sequence[Any], case_sensitive: bool) -> list[str]:
    """`normalize_rel_path` of each raw path, through the bounded cache: for a column of
    strings already seen, one C-level pass of dict lookups."""
    table = _PATHS[case_sensitive]
    if set(map(type, raws)) <= _STR_ONLY:
        paths = list(map(table.get, raws))
        if None not in paths:
            return paths
    else:
        paths = [None] * len(raws)
    return [p if p is not None else path_of(r, case_sensitive) for p, r in zip(paths, raws)]


class GoldIndex:
    """A case's gold supports, normalized once and indexed by chunk id and by path.

    `match(chunk)` is exactly {i : match_support(supports[i], chunk)}: the id form through
    the id index, the span and anchor forms through the path index (both need an equal,
    non-empty normalized path), with `match_support`'s rules in its order. So a chunk costs
    two dictionary lookups unless it shares an id or a file with a support, and a case
    costs O(K + G) instead of O(K x G) pairs, each normalizing both sides.

    Args:
        supports: the case's gold supports (dicts or models).
        case_sensitive: compare paths and headings case-sensitively (default).
    """

    __slots__ = ("by_id", "by_path", "cs", "graded_only", "n", "relevance")

    def __init__(self, supports: Sequence[Mapping], *, case_sensitive: bool = True) -> None:
        self.cs = case_sensitive
        self.n = len(supports)
        self.relevance: list[float] = []
        self.by_id: dict[str, list[int]] = {}
        # Per normalized path, its supports' span and anchor forms, in index order.
        self.by_path: dict[str, list[tuple[int, SupportForm]]] = {}
        graded: list[int] = []
        for i, s in enumerate(supports):
            get = s.get if type(s) is dict else partial(_get, s)
            rel = get("relevance")
            self.relevance.append(1.0 if rel is None or isinstance(rel, bool) else float(rel))
            if get("graded_only") is True:
                graded.append(i)
            gid = get("chunk_id")
            if gid is not None and str(gid) != "":
                self.by_id.setdefault(str(gid), []).append(i)
            path = path_of(get("rel_path"), case_sensitive)
            if not path:
                continue  # the span and anchor forms need a path: this support matches by id only
            self.by_path.setdefault(path, []).append((i, support_form(s, case_sensitive)))
        self.graded_only: frozenset[int] = frozenset(graded) if graded else _NO_MATCH

    def match(self, chunk: Mapping, *, require_snippets: bool = False) -> frozenset[int]:
        """Indices of the supports `chunk` (a retrieved chunk or a reference) matches."""
        if type(chunk) is not dict:
            chunk = {k: _get(chunk, k) for k in _CHUNK_KEYS}
        cid = chunk.get("chunk_id")
        cid = None if cid is None else str(cid)
        return self._match(chunk, cid, path_of(chunk.get("rel_path"), self.cs), require_snippets)

    def ranking(self, chunks: Sequence[Mapping], *, require_snippets: bool = False) -> MatchTable:
        """The MatchTable of `chunks` (see `match_ranking`)."""
        table = self._bulk(chunks, require_snippets)
        if table is None:
            table = self._ranking(chunks, require_snippets, check_order=True)
        if table is None:
            # Not plain dicts already in rank order (stored runs are): order, then the same loop.
            ordered = [c if type(c) is dict else {k: _get(c, k) for k in _CHUNK_KEYS} for c in order_chunks(chunks)]
            table = self._ranking(ordered, require_snippets, check_order=False)
        return table  # type: ignore[return-value]

    def _bulk(self, chunks: Sequence[Mapping], require_snippets: bool) -> MatchTable | None:
        """The common case of a stored run, column-wise in C loops (map, set operations):
        plain dicts in rank order with distinct, non-empty string ids. None otherwise (the
        caller takes the general loop, which gives the same table)."""
        n = len(chunks)
        if not n or set(map(type, chunks)) != _DICT_ONLY:
            return None
        try:
            ranks = list(map(_RANK, chunks))
            ids = list(map(_CHUNK_ID, chunks))
        except KeyError:
            return None
        if set(map(type, ranks)) != _INTS or ranks != sorted(ranks):
            return None
        if set(map(type, ids)) != _STR_ONLY or "" in ids:
            return None
        distinct = set(ids)
        if len(distinct) != n:
            return None  # duplicates: the general loop records them
        matches = [_NO_MATCH] * n
        by_id, by_path = self.by_id, self.by_path
        # The positions sharing an id or a file with a support; every other one matches nothing.
        todo: Iterable[int] = ()
        if by_id and not distinct.isdisjoint(by_id):
            todo = list(compress(range(n), map(by_id.__contains__, ids)))
        paths: list[str] | None = None
        if by_path:
            paths = paths_of(list(map(dict.get, chunks, repeat("rel_path", n))), self.cs)
            if not by_path.keys().isdisjoint(paths):
                on_path = compress(range(n), map(by_path.__contains__, paths))
                todo = set(todo).union(on_path) if todo else on_path
        for pos in todo:
            path = paths[pos] if paths is not None else ""
            matches[pos] = self._match(chunks[pos], ids[pos], path, require_snippets)  # type: ignore[arg-type]
        return MatchTable(
            matches=matches, relevance=self.relevance, n_supports=self.n, duplicates=_NO_MATCH, graded_only=self.graded_only
        )

    def _ranking(self, chunks: Sequence[Mapping], require_snippets: bool, *, check_order: bool) -> MatchTable | None:
        by_id, by_path, cs = self.by_id, self.by_path, self.cs
        paths = _PATHS[cs]
        matches: list[frozenset[int]] = []
        duplicates: list[int] = []
        seen_ids: set[str] = set()
        seen_locs: set[tuple] = set()
        prev: float = float("-inf")
        for pos, c in enumerate(chunks):
            if check_order:
                # order_chunks keeps the list as it is iff every rank is a number and none
                # decreases; else give up here and let the caller sort.
                if type(c) is not dict:
                    return None
                rank = c.get("rank")
                if (type(rank) is not int and type(rank) is not float) or not prev <= rank:
                    return None
                prev = rank
            raw = c.get("rel_path")
            path = paths.get(raw) if type(raw) is str else None
            if path is None:
                path = path_of(raw, cs)
            cid = c.get("chunk_id")
            if cid is not None and type(cid) is not str:
                cid = str(cid)
            if cid:
                # Ids and locations are separate namespaces, as ("id", ..) / ("loc", ..) keys.
                if cid in seen_ids:
                    duplicates.append(pos)
                    matches.append(_NO_MATCH)
                    continue
                seen_ids.add(cid)
            else:
                loc = (
                    path,
                    normalize_heading_path(c.get("heading_path")),
                    int_or_none(c.get("start_line")),
                    int_or_none(c.get("end_line")),
                    c.get("text") or "",
                )
                if loc in seen_locs:
                    duplicates.append(pos)
                    matches.append(_NO_MATCH)
                    continue
                seen_locs.add(loc)
            if (cid is not None and cid in by_id) or (path and path in by_path):
                matches.append(self._match(c, cid, path, require_snippets))
            else:
                matches.append(_NO_MATCH)
        return MatchTable(
            matches=matches, relevance=self.relevance, n_supports=self.n, duplicates=frozenset(duplicates),
            graded_only=self.graded_only,
        )

    def _match(self, chunk: dict, cid: str | None, path: str, require_snippets: bool) -> frozenset[int]:
        # match_support's clauses in its order: an equal id matches (the id index); a support
        # on another file does not (the path index); the rest is `form_matches`.
        ids = self.by_id.get(cid) if cid is not None else None
        hit: set[int] = set(ids) if ids else set()
        for i, form in (self.by_path.get(path) or ()) if path else ():
            if i not in hit and form_matches(form, chunk, require_snippets, self.cs):
                hit.add(i)
        return frozenset(hit) if hit else _NO_MATCH


def path_components(h: Any, case_sensitive: bool) -> tuple[str, ...]:
    """Heading components as `form_matches` compares them (case-folded when not case-sensitive)."""
    if type(h) is str:
        table = _COMPONENTS[case_sensitive]
        got = table.get(h)
        if got is None:
            if len(table) >= _PATHS_MAX:
                table.clear()
            got = table[h] = (_heading_components(h) if case_sensitive else _folded_components(h)) if h else ()
        return got
    if not h:
        return ()
    h = str(h)
    return _heading_components(h) if case_sensitive else _folded_components(h)


# Heading components by raw string, one table per case sensitivity (as _PATHS): the rule
# compares a chunk's heading once per gold support on its file, so this is a dict lookup.
_COMPONENTS: tuple[dict[str, tuple[str, ...]], dict[str, tuple[str, ...]]] = ({}, {})


def _snippets_in(snippets: Sequence[str], chunk: Mapping) -> bool:
    """Every snippet occurs in the chunk's text (both in comparison form). A truncated
    stored prefix cannot prove a snippet absent: see EVAL.md "Anchors"."""
    text = normalize_phrase(chunk.get("text"))
    if all(s in text for s in snippets):
        return True
    return bool(chunk.get("text_truncated"))
