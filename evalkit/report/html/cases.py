"""The run report's case table as data: compact columns for the table, per-case details in
compressed blocks read only when a row is expanded (static/cases.js draws both).

    with read_case_table(run) as table:      # streams results.jsonl once
        table.rows        # the packed columns (a str for the page)
        table.first       # the first rows as CaseRow, drawn by the template before any script runs
        table.detail_pieces()                # the packed blocks, streamed from temp files

A page cannot load files beside it under the report's CSP (`default-src 'none'`), so both
live in the page, each packed once (`pack`): JSON, raw deflate (the browser's
DecompressionStream "deflate-raw" unpacks it), base 85 over an alphabet without `<` or `&`,
so run text cannot end the element holding it; the script puts text on the page with
textContent only.

Rows are in eval-set order (case index, then file order). Details are in file order, in
blocks of `BLOCK` records; a row finds its record through the `detail` column (absent when
it is the row's own position). A retrieved chunk's text and an anchor's text are stored once
per page, in blocks of their own (`_Details`): a run retrieves the same chunks over and over,
and real text compresses about 3 to 1 where a number per mention costs a few bytes. Memory
stays near the size of the columns: blocks go to temp files as soon as they are full.
"""

from __future__ import annotations

import heapq
import math
import operator
import re
import tempfile
import unicodedata
import zlib
from array import array
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from itertools import compress
from typing import IO, Any, NoReturn

import orjson

from evalkit.evalset.turns import turn_place
from evalkit.store.runlog import Rec
from evalkit.store.runs import RunDir

__all__ = ["ALPHABET", "ANCHOR_BLOCK", "BATCH", "BLOCK", "CHUNK_BLOCK", "CASE_FIELDS", "FIRST_ROWS", "PARALLEL_MIN_BYTES", "RANKED", "CaseRow", "CaseTable", "case_detail", "case_row", "pack", "read_case_table", "text_ranks", "unpack"]

# Records per detail block: one expand unpacks one block (about 0.2 MB of JSON at 20 chunks
# a case: numbers, the answer and the judges' words; chunk text is in chunk blocks).
BLOCK = 256
# Distinct chunks per chunk block: an expand unpacks the blocks of its chunks (up to K of
# them, about 120 kB of JSON each at 200 characters a chunk).
CHUNK_BLOCK = 512
# Distinct anchors per anchor block.
ANCHOR_BLOCK = 2048
# Distinct chunks (and anchors) remembered for reuse: 65,536 keys of ~500 bytes (~33 MB) at
# most, so a run whose chunks never repeat stays within the report's memory target. SciFact's
# whole index is 32,804 chunks; a run that retrieves more distinct chunks than this stores a
# later repeat again (a bigger page, the same rows).
KEPT = 1 << 16
# Records a forked reader hands over at a time (`_Collector`): 1-4 MB pickled, as many again
# unpickled in the parent while it merges them.
BATCH = 512
# Rows drawn by the template: the page shows them before (or without) its script.
FIRST_ROWS = 50
OUTCOMES = ("hit", "miss", "unanswerable", "unlabeled", "error")
# Measured on the 5,000-case SciFact run's blocks (8.4 MB of JSON): level 5 deflates them to
# 3.16 MB in 0.23 s, level 6 to 3.12 MB in 0.38 s, level 7 3.12 MB in 0.48 s, level 4 3.25 MB
# in 0.14 s; the 100,000-case page's 52 MB: level 4 19.3 MB in 0.81 s, level 5 18.9 MB in 1.41 s.
# Level 4: on a busy machine a session's processes share one session's CPU (the kernel's
# autogroups), so the time to write tracks CPU, and 3% more page costs none of it.
# Blocks are deflated in threads beside the reading (zlib lets go of the GIL).
_DEFLATE_LEVEL = 4
# The detail blocks are numbers (chunk numbers, scores, ranks) more than text: 46 MB of JSON at
# 100,000 SciFact cases, the most of any kind. Level 1 deflates them in 0.58 of level 4's CPU
# (5,000 and 20,000 cases of SciFact) for 7-9% more bytes: 0.3 s of CPU at 100,000 cases for
# 1.9 MB more page; the 5,000-case page grows 0.09 MB. Chunk and anchor blocks are text, where
# level 4 saves more: they keep it.
_DETAIL_LEVEL = 1
# The table's columns (19 MB of JSON at 100,000 cases) are deflated in pieces of this size in
# the pool's threads, each primed with the 32 kB before it (as pigz does), so the stream is the
# one raw deflate stream the page expects, within a few bytes of deflating it whole.
_PIECE = 1 << 20


# Base 85 over printable ASCII without " & ' ( ) < > @ \ : nothing that could end an element
# or an attribute, start a character reference, or spell "url(" or "@import" in the page.
# 5 characters per 4 bytes, where base64 takes 5.33.
ALPHABET = bytes(c for c in range(33, 127) if chr(c) not in "\"&'()<>@\\")  # 85 of them


def pack(value: Any, pool: Any = None) -> str:
    """`value` as the page stores data: JSON, raw deflate, base 85 (`ALPHABET`). The first
    character says how many zero bytes were added to fill the last group of 4 (0-3). With a
    thread pool, a long JSON text is deflated in pieces side by side."""
    return _pack_json(orjson.dumps(value), pool)


def _deflate_piece(raw: bytes, start: int, level: int = _DEFLATE_LEVEL) -> bytes:
    end = start + _PIECE
    z = zlib.compressobj(level, zlib.DEFLATED, -15, **({"zdict": raw[max(0, start - 32768):start]} if start else {}))
    # a sync flush ends a piece on a byte boundary without ending the stream; the last one ends it
    return z.compress(raw[start:end]) + z.flush(zlib.Z_FINISH if end >= len(raw) else zlib.Z_SYNC_FLUSH)


def _pack_json(raw: bytes, pool: Any = None, level: int = _DEFLATE_LEVEL) -> str:
    import numpy as np

    if pool is None or len(raw) <= _PIECE:
        data = _deflate_piece(raw, 0, level) if len(raw) <= _PIECE else zlib.compress(raw, level, -15)
    else:
        pieces = -(-len(raw) // _PIECE)
        data = b"".join(pool.map(_deflate_piece, [raw] * pieces, range(0, len(raw), _PIECE), [level] * pieces))
    fill = -len(data) % 4
    words = np.frombuffer(data + bytes(fill), dtype=">u4").astype(np.uint64)
    digits = np.empty((len(words), 5), dtype=np.uint8)
    for i in range(4, -1, -1):
        words, digits[:, i] = np.divmod(words, 85)
    return str(fill) + np.frombuffer(ALPHABET, dtype=np.uint8)[digits].tobytes().decode("ascii")


def unpack(text: str) -> Any:
    """The value `pack` packed (what the page's script does, for tests and tools)."""
    import numpy as np

    lookup = np.zeros(128, dtype=np.uint64)
    lookup[np.frombuffer(ALPHABET, dtype=np.uint8)] = np.arange(85, dtype=np.uint64)
    fill, body = int(text[0]), np.frombuffer(text[1:].encode("ascii"), dtype=np.uint8).reshape(-1, 5)
    words = np.zeros(len(body), dtype=np.uint64)
    for i in range(5):
        words = words * 85 + lookup[body[:, i]]
    data = words.astype(">u4").tobytes()
    return orjson.loads(zlib.decompress(data[: len(data) - fill], -15))


def _num(v: Any, digits: int = 6) -> float | None:
    if v is None or isinstance(v, bool):
        return None
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(x) or math.isinf(x) else round(x, digits)


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _text(v: Any) -> str:
    return "" if v is None else str(v)


@dataclass(slots=True)
class CaseRow:
    """One row of the case table: what its cells show and sort by."""

    index: int
    id: str
    question: str
    category: str
    outcome: str
    first_rank: int | None
    recall: float | None
    mrr: float | None
    ndcg: float | None
    groundedness: float | None
    correctness: float | None
    abstained: bool | None
    answerable: bool | None
    latency_ms: float | None
    error: str | None


# The CaseRow field holding each case-table metric's per-case value (the registry's
# `case_columns` view; the template, cases.js and report.css draw the columns by these names).
CASE_FIELDS = {
    "recall_at_k_avg": "recall", "mrr_avg": "mrr", "ndcg_at_k_avg": "ndcg", "groundedness_avg": Rec.GROUNDEDNESS,
    "correctness_avg": Rec.CORRECTNESS,
}


def case_row(record: Mapping[str, Any], seq: int = 0) -> CaseRow:
    """The table row of one results.jsonl record (`seq`: its line, when it has no case_index)."""
    case = record.get("case") or {}
    rm = record.get(Rec.RETRIEVAL_METRICS) or {}
    error = record.get("error")
    status = rm.get("status")
    recall = _num(rm.get("recall_at_k"))
    if error:
        outcome = "error"
    elif status in ("unanswerable", "unlabeled"):
        outcome = status
    elif recall is None:
        outcome = "unlabeled"
    else:
        outcome = "hit" if recall > 0 else "miss"
    err_text = None
    if error:
        err_text = _text(error.get("kind")) if isinstance(error, Mapping) else _text(error)
        detail = error.get("detail") if isinstance(error, Mapping) else None
        if detail:
            err_text = f"{err_text}: {detail}"
    g, c = record.get(Rec.GROUNDEDNESS), record.get(Rec.CORRECTNESS)
    abstained = (record.get("abstention") or {}).get("abstained")
    index = _int(record.get(Rec.CASE_INDEX))
    return CaseRow(
        index=seq if index is None else index,
        # A --trials run has one row per answer: the trial tells them apart.
        id=_text(record.get(Rec.CASE_ID) or case.get("id"))
        + (f" (trial {record['trial']})" if type(record.get("trial")) is int else ""),
        question=_text(record.get("question") or case.get("question")),
        category=_text(case.get("category")),
        outcome=outcome,
        first_rank=_int(rm.get("first_match_rank")),
        recall=recall,
        mrr=_num(rm.get("mrr")),
        ndcg=_num(rm.get("ndcg_at_k")),
        groundedness=_num(g.get("score")) if isinstance(g, Mapping) else None,
        correctness=_num(c.get("score")) if isinstance(c, Mapping) else None,
        abstained=abstained if isinstance(abstained, bool) else None,
        answerable=case.get("answerable") if isinstance(case.get("answerable"), bool) else None,
        latency_ms=_num((record.get("latency") or {}).get("total_ms"), 2),
        error=err_text,
    )


def _anchor(item: Mapping[str, Any]) -> str:
    path, heading = _text(item.get("rel_path")), _text(item.get("heading_path"))
    return f"{path} › {heading}" if heading else path or _text(item.get("chunk_id"))


def _judge_lines(record: Mapping[str, Any]) -> list[str]:
    """The judges' own words: each verdict's score and reasoning, what it found missing, and
    judge failures (excluded from the means)."""
    lines = []
    for name, missing_key in ((Rec.GROUNDEDNESS, "unsupported_claims"), (Rec.CORRECTNESS, "key_facts_missing")):
        verdict = record.get(name)
        if not isinstance(verdict, Mapping):
            continue
        score = _num(verdict.get("score"))
        reason = _text(verdict.get("reasoning")).strip()
        lines.append(f"{name} {'—' if score is None else f'{score:g}'}: {reason}".rstrip(": "))
        missing = [str(m) for m in verdict.get(missing_key) or []]
        if missing:
            lines.append(f"{missing_key.replace('_', ' ')}: " + "; ".join(missing))
    for j in record.get(Rec.JUDGE_ERRORS) or []:
        if isinstance(j, Mapping):
            kind = j.get("judge") or j.get("kind") or "judge"
            lines.append(f"judge error: {kind}: {j.get('reason') or j.get('detail') or ''}".rstrip(": "))
    return lines


def _score(v: Any) -> float | None:
    return round(v, 4) if type(v) is float and v - v == 0.0 else _num(v, 4)  # v - v: 0 unless inf or nan


def _round_scores(values: list[Any]) -> list[float | None]:
    """`_score` of each value of a block's score column, which holds floats as they came and
    what `_score` made of anything else: numpy's rint(v * 1e4) / 1e4 where that is Python's
    round(v, 4) to the bit (|v| < 1e4 and v * 1e4 at least 1e-6 from a tie: the product is
    then within 1e-8 of the exact one, so both pick the same integer k, and k / 1e4 is
    rounded once either way), Python's own round elsewhere; None for none, inf and nan."""
    import numpy as np

    a = np.asarray(values, dtype=np.float64)  # None -> nan
    with np.errstate(invalid="ignore", over="ignore"):  # inf and nan go Python's way below
        y = a * 1e4
        out: list[float | None] = (np.rint(y) / 1e4).tolist()
        safe = (np.abs(a) < 1e4) & (np.abs(y - np.floor(y) - 0.5) > 1e-6)  # nan compares False: not safe
    for i in np.flatnonzero(~safe).tolist():
        out[i] = _score(values[i])
    return out


def _rank(v: Any) -> int | None:
    return v if type(v) is int else None


def _chunk(c: Mapping[str, Any]) -> tuple[str, str, str, bool, float | None, int | None]:
    # (path, heading, text, text cut, score, rank)
    path, heading, text = c.get("rel_path"), c.get("heading_path"), c.get("text")
    return (
        path if type(path) is str else _text(path), heading if type(heading) is str else _text(heading),
        text if type(text) is str else _text(text), bool(c.get("text_truncated")), _score(c.get("score_final")),
        _rank(c.get("rank")),
    )


def _is_mapping(v: Any) -> bool:
    return type(v) is dict or isinstance(v, Mapping)  # records come from orjson: dicts, the short way


def _chunks_of(record: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [c for c in record.get("retrieved_chunks") or [] if _is_mapping(c)]


# A conversation's earlier turns as a row shows them: each message cut like chunk text.
_MESSAGE_CHARS = 200


def _turn(record: Mapping[str, Any]) -> tuple[str, list[list[str]]]:
    """A conversation turn's place ("sv-conv-01 · turn 2 of 3") and what it was sent (the
    record's `history`: [role, text] each); ("", []) for a single question."""
    place = turn_place(record.get("case"))
    if place is None:
        return "", []
    sent = [[_text(m.get("role")), _text(m.get("content"))[:_MESSAGE_CHARS]] for m in record.get(Rec.HISTORY) or []
            if _is_mapping(m)]
    return place, sent


def _words(record: Mapping[str, Any]) -> dict[str, Any]:
    """Everything an expanded row shows but the retrieved chunks."""
    case = record.get("case") or {}
    place, sent = _turn(record)
    return {
        "turn": place,
        "history": sent,
        "answer": _text(record.get("answer")),
        "answer_cut": bool(record.get(Rec.ANSWER_TRUNCATED)),
        "refs": [_anchor(r) for r in record.get("references") or [] if _is_mapping(r)],
        "gold": [_anchor(s) for s in case.get("gold_supports") or [] if _is_mapping(s)],
        "judge": _judge_lines(record),
        "traces": _trace_lines(record),
    }


def _trace_lines(record: Mapping[str, Any]) -> list[list[str]]:
    """The target's trace steps as stored (already cut and redacted): [name, input, output],
    a value that is not text shown as its JSON."""
    def shown(v: Any) -> str:
        return v if isinstance(v, str) else "" if v is None else orjson.dumps(v, default=str).decode()

    return [[_text(t.get("name")), shown(t.get("input")), shown(t.get("output"))]
            for t in record.get(Rec.TRACES) or () if _is_mapping(t)]


def case_detail(record: Mapping[str, Any]) -> dict[str, Any]:
    """What an expanded row shows: the answer, cited and gold anchors, the retrieved chunks
    (path, heading, text as stored, text cut, score, rank) and the judges' words."""
    return {**_words(record), "chunks": [_chunk(c) for c in _chunks_of(record)]}


# The fields that say which chunk a retrieved chunk is, fetched in one call: as they come from
# results.jsonl (str, str, str, bool) they are the stored key itself (`_chunk`'s first four).
_CHUNK_KEY = operator.itemgetter("rel_path", "heading_path", "text", "text_truncated")


class _Blocks:
    """Packed blocks of one kind, in page order: packed in the pool's threads (deflate lets go
    of the GIL), written to their own temp file. The reading thread writes a few MB at a time:
    each write lets go of the GIL, and getting it back from busy packers costs milliseconds."""

    def __init__(self, pool: Any, ahead: int, level: int = _DEFLATE_LEVEL) -> None:
        self.pool, self.ahead, self.level = pool, ahead, level
        self.spool: IO[bytes] = tempfile.TemporaryFile(prefix="evalkit-report-")  # noqa: SIM115 - closed by CaseTable
        self.pending: deque[Any] = deque()  # futures of packed blocks, in page order
        self.ready: list[bytes] = []
        self.ready_size = 0
        self.count = 0

    def submit(self, value: Any) -> None:
        self.pending.append(self.pool.submit(_pack_json, orjson.dumps(value), None, self.level))
        self.count += 1
        self.spill(self.ahead)

    def spill(self, limit: int = 0) -> None:
        """Take the packed blocks in order while more than `limit` are pending or the first is done."""
        pending = self.pending
        while pending and (len(pending) > limit or pending[0].done()):
            piece = b"<p>" + pending.popleft().result().encode("ascii") + b"</p>"
            self.ready.append(piece)
            self.ready_size += len(piece)
        if self.ready_size > (4 << 20) or (limit == 0 and self.ready):
            self.spool.write(b"".join(self.ready))
            self.ready, self.ready_size = [], 0


class _Details:
    """Every record's details, in three kinds of blocks:

    - chunk blocks: each distinct retrieved chunk once (a run retrieves the same chunks over
      and over), numbered in order of first appearance, CHUNK_BLOCK a block, as columns
      `anchor` (its anchor's number), `text`, `cut`;
    - anchor blocks: each distinct anchor text once ("path › heading" of a chunk, a cited
      reference or a gold support), ANCHOR_BLOCK a block, as a list;
    - detail blocks: BLOCK records a block, as columns: `answer`, `answer_cut`, `n_chunks`,
      then per retrieved chunk `chunk` (0: the next new chunk, numbered from the block's
      `base`; else 1 + the number of a chunk stored before), `score` and `rank` (minus its
      position, 1-based: 0 for the usual 1, 2, 3, ...; null when none), and per record
      `refs` and `gold` (anchor numbers) and `judge` (lines).

    Mostly zeros compress to nothing. Only the first KEPT distinct chunks and anchors are
    remembered (memory stays bounded when a run's chunks never repeat); a chunk seen again
    after that is stored again, which costs size, never correctness.
    """

    block_size = BLOCK  # records a detail block holds

    def __init__(self, pool: Any, ahead: int) -> None:
        self.details, self.chunks, self.anchors = _Blocks(pool, ahead, _DETAIL_LEVEL), _Blocks(pool, ahead), _Blocks(pool, ahead)
        self.chunk_ids: dict[tuple[str, str, str, bool], int] = {}
        self.anchor_ids: dict[str, int] = {}
        self.n_chunks = self.n_anchors = 0
        self.chunk_block: dict[str, list[Any]] = {"anchor": [], "text": [], "cut": []}
        self.anchor_block: list[str] = []
        self.n = 0
        self.block = self._new_block()
        self.rounded = False  # True once records come merged (`merge`): their scores are rounded already

    def _new_block(self) -> dict[str, Any]:
        cols: dict[str, Any] = {k: [] for k in ("turn", "history", "answer", "answer_cut", "n_chunks", "chunk", "score", "rank",
                                                "refs", "gold", "judge", "traces")}
        cols["base"] = self.n_chunks
        return cols

    def anchor(self, text: str) -> int:
        number = self.anchor_ids.get(text)
        if number is None:
            number = self.n_anchors
            self.n_anchors += 1
            if number < KEPT:
                self.anchor_ids[text] = number
            self._store_anchor(text)
        return number

    def _store_anchor(self, text: str) -> None:
        self.anchor_block.append(text)
        if len(self.anchor_block) == ANCHOR_BLOCK:
            self.anchors.submit(self.anchor_block)
            self.anchor_block = []

    def add(self, record: Mapping[str, Any]) -> None:
        """One results.jsonl record: what `case_detail` says of it. 2 million chunks make a
        100,000-case page, so a chunk seen before is found by its fields as they come (one
        itemgetter call, one dict lookup); only a new chunk or unusual types take `_chunk`."""
        cols = self.block
        words = _words(record)
        cols["turn"].append(words["turn"])
        cols["history"].append(words["history"])
        cols["answer"].append(words["answer"])
        cols["answer_cut"].append(1 if words["answer_cut"] else 0)
        # bound once: these run 20 times a record
        find, key_of = self.chunk_ids.get, _CHUNK_KEY
        chunk, score, rank = cols["chunk"].append, cols["score"].append, cols["rank"].append
        position = 0
        for c in record.get("retrieved_chunks") or ():
            if type(c) is not dict and not isinstance(c, Mapping):
                continue
            position += 1
            try:
                number = find(key_of(c))
            except (KeyError, TypeError):  # a field missing, or a value no key can hold
                number = None
            if number is None:
                key = _chunk(c)[:4]  # path, heading, text, cut
                number = find(key)
                if number is None:
                    self._new_chunk(key)
                    chunk(0)
                else:
                    chunk(number + 1)
            else:
                chunk(number + 1)
            # a float is rounded with the block's others (_round_scores); _rank inline
            v = c.get("score_final")
            score(v if type(v) is float else _score(v))
            v = c.get("rank")
            rank(v - position if type(v) is int else None)
        cols["n_chunks"].append(position)
        cols["refs"].append([self.anchor(a) for a in words["refs"]])
        cols["gold"].append([self.anchor(a) for a in words["gold"]])
        cols["judge"].append(words["judge"])
        cols["traces"].append(words["traces"])
        self.n += 1
        if self.n == self.block_size:
            self._submit()

    def _submit(self) -> None:
        if not self.rounded:
            self.block["score"] = _round_scores(self.block["score"])
        self.details.submit(self.block)
        self.block, self.n = self._new_block(), 0

    def _new_chunk(self, key: tuple[str, str, str, bool]) -> int:
        number = self._number_chunk(key)
        path, heading = key[0], key[1]
        self._store_chunk(key, self.anchor(f"{path} › {heading}" if heading else path))
        return number

    def _number_chunk(self, key: tuple[str, str, str, bool]) -> int:
        number = self.n_chunks
        self.n_chunks += 1
        if number < KEPT:
            self.chunk_ids[key] = number
        return number

    def _store_chunk(self, key: tuple[str, str, str, bool], anchor: int) -> None:
        store = self.chunk_block
        store["anchor"].append(anchor)
        store["text"].append(key[2])
        store["cut"].append(1 if key[3] else 0)
        if len(store["text"]) == CHUNK_BLOCK:
            self.chunks.submit(store)
            self.chunk_block = {"anchor": [], "text": [], "cut": []}

    def _store_chunks(self, anchors: list[int], texts: list[str], cuts: list[int]) -> None:
        """`_store_chunk` of many, a block's worth at a time."""
        i = 0
        while i < len(texts):
            store = self.chunk_block
            j = min(len(texts), i + CHUNK_BLOCK - len(store["text"]))
            store["anchor"] += anchors[i:j]
            store["text"] += texts[i:j]
            store["cut"] += cuts[i:j]
            i = j
            if len(store["text"]) == CHUNK_BLOCK:
                self.chunks.submit(store)
                self.chunk_block = {"anchor": [], "text": [], "cut": []}

    def merge(self, batch: dict[str, Any], part: _PartNumbers) -> None:
        """The records of a forked reader's batch (`_Collector`), as if `add` had read them
        here after every record before: its chunks and anchors, numbered by that reader in
        order of first appearance in its range, become the page's own (one lookup per
        distinct one, not per mention), its chunk column is renumbered with numpy, and its
        records fill the detail blocks from where they stand. `part` holds the reader's
        numbering across its batches."""
        import numpy as np

        if not self.rounded:  # the open block's scores as they came, before the rounded ones join them
            self.block["score"] = _round_scores(self.block["score"])
            self.rounded = True
        anchors = part.anchors
        for text in batch["anchors"]:
            anchors.append(self.anchor(text))
        before = self.n_chunks
        keys = list(zip(batch["paths"], batch["headings"], batch["texts"], batch["cuts"]))
        numbers = list(map(self.chunk_ids.get, keys))  # None: new to the page
        if None in numbers:  # the new ones numbered in the range's order, as `add` would have
            fresh = [n is None for n in numbers]
            new_keys = list(compress(keys, fresh))
            room = max(0, min(KEPT - before, len(new_keys)))
            self.chunk_ids.update(zip(new_keys[:room], range(before, before + room)))
            self.n_chunks += len(new_keys)
            count = iter(range(before, self.n_chunks))
            numbers = [next(count) if n is None else n for n in numbers]
            self._store_chunks([anchors[a] for a in compress(batch["chunk_anchors"], fresh)],
                               list(compress(batch["texts"], fresh)), [1 if c else 0 for c in compress(batch["cuts"], fresh)])
            part.fresh += bytes(fresh)
        else:
            part.fresh += bytes(len(numbers))
        part.chunks.extend(numbers)
        cols = batch["cols"]
        local = cols["chunk"]  # 0: the range's next new chunk; else 1 + its number in the range
        first = local == 0
        ids = np.where(first, part.seen + np.cumsum(first) - 1, local - 1)
        part.seen = len(part.chunks)
        fresh = np.frombuffer(part.fresh, np.bool_)[ids]
        number = np.frombuffer(part.chunks, np.int64)[ids]
        refs = np.where(first & fresh, 0, number + 1)  # new to the page: 0 where it is first seen
        new_before = np.zeros(len(refs) + 1, np.int64)
        np.cumsum(refs == 0, out=new_before[1:])
        n = len(cols["answer"])
        starts = np.zeros(n + 1, np.int64)
        np.cumsum(cols["n_chunks"], out=starts[1:])
        starts_l, new_before_l, refs_l = starts.tolist(), new_before.tolist(), refs.tolist()
        cited = [[anchors[a] for a in r] for r in cols["refs"]]
        gold = [[anchors[a] for a in g] for g in cols["gold"]]
        i = 0
        while i < n:
            block = self.block
            if self.n == 0:  # a block opened here: its first new chunk's number
                block["base"] = before + new_before_l[starts_l[i]]
            j = min(i + self.block_size - self.n, n)
            a, b = starts_l[i], starts_l[j]
            for name in ("turn", "history", "answer", "answer_cut", "n_chunks"):
                block[name] += cols[name][i:j]
            block["chunk"] += refs_l[a:b]
            block["score"] += cols["score"][a:b]
            block["rank"] += cols["rank"][a:b]
            block["refs"] += cited[i:j]
            block["gold"] += gold[i:j]
            block["judge"] += cols["judge"][i:j]
            block["traces"] += cols["traces"][i:j]
            self.n += j - i
            i = j
            if self.n == self.block_size:
                self._submit()

    def finish(self) -> None:
        """Pack the last, partly filled blocks and wait for every block."""
        if self.n:
            self._submit()
        if self.chunk_block["text"]:
            self.chunks.submit(self.chunk_block)
        if self.anchor_block:
            self.anchors.submit(self.anchor_block)
        for kind in (self.details, self.chunks, self.anchors):
            kind.spill()

    def spools(self) -> list[IO[bytes]]:
        return [self.details.spool, self.chunks.spool, self.anchors.spool]

    def counts(self) -> dict[str, int]:
        return {"details": self.details.count, "chunks": self.chunks.count, "anchors": self.anchors.count}


@dataclass
class _PartNumbers:
    """A forked reader's numbering as the page's: chunk i of its range is the page's chunk
    `chunks[i]`, first stored by that range when `fresh[i]`; its anchor i is `anchors[i]`."""

    chunks: array = field(default_factory=lambda: array("q"))
    fresh: bytearray = field(default_factory=bytearray)
    anchors: array = field(default_factory=lambda: array("q"))
    seen: int = 0  # chunks numbered in the batches merged so far


class _Collector(_Details):
    """`_Details` in a forked reader: the same reading of each record, numbered within its
    byte range, but nothing packed: every `BATCH` records (and at the end) `emit` gets a
    batch for `_Details.merge` in the parent: the detail columns of those records (scores
    rounded; the chunk column an array), the chunks and anchors they saw first (as columns:
    path, heading, text, cut and anchor number; anchor texts)."""

    block_size = BATCH

    def __init__(self, emit: Callable[[dict[str, Any]], None]) -> None:
        self.emit = emit
        self.chunk_ids, self.anchor_ids = {}, {}
        self.n_chunks = self.n_anchors = 0
        self.new_chunks: dict[str, list[Any]] = {"paths": [], "headings": [], "texts": [], "cuts": [], "chunk_anchors": []}
        self.anchor_block = []
        self.n = 0
        self.block = self._new_block()

    def _store_anchor(self, text: str) -> None:
        self.anchor_block.append(text)

    def _store_chunk(self, key: tuple[str, str, str, bool], anchor: int) -> None:
        new = self.new_chunks  # as columns: they pickle faster than tuples
        new["paths"].append(key[0])
        new["headings"].append(key[1])
        new["texts"].append(key[2])
        new["cuts"].append(key[3])
        new["chunk_anchors"].append(anchor)

    def _submit(self) -> None:
        import numpy as np

        cols = self.block
        del cols["base"]
        cols["score"] = _round_scores(cols["score"])
        cols["chunk"] = np.array(cols["chunk"], np.int64)
        self.emit({"cols": cols, **self.new_chunks, "anchors": self.anchor_block})
        self.block, self.n = self._new_block(), 0
        self.new_chunks = {k: [] for k in self.new_chunks}
        self.anchor_block = []


@dataclass
class CaseTable:
    """The case table of one run, read by `read_case_table`; close it (or use `with`) to
    drop its temp files."""

    rows: str  # the packed columns (see `_columns`)
    first: list[CaseRow]
    total: int  # records in results.jsonl
    shown: int  # rows in the table (total, unless capped)
    categories: list[str]
    outcomes: list[str]
    blocks: dict[str, int]  # how many detail, chunk and anchor blocks the page holds, in that order
    _spools: list[IO[bytes]] = field(default_factory=list, repr=False)

    @property
    def capped(self) -> bool:
        return self.shown < self.total

    def detail_pieces(self, size: int = 1 << 20) -> Iterator[bytes]:
        """The page's blocks as page text, one `<p>` each (base 85 inside), in pieces of
        `size`: the detail blocks, then the chunk blocks, then the anchor blocks."""
        for spool in self._spools:
            spool.seek(0)
            while piece := spool.read(size):
                yield piece

    def close(self) -> None:
        for spool in self._spools:
            spool.close()
        self._spools = []

    def __enter__(self) -> CaseTable:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _kept_lines(run: RunDir, max_cases: int) -> set[int]:
    """The lines (file order) of the `max_cases` records of lowest (case index, line)."""
    heap: list[tuple[int, int]] = []  # (-index, -seq): the root is the last one kept
    for seq, record in enumerate(run.iter_results()):
        index = _int(record.get(Rec.CASE_INDEX))
        key = (-(seq if index is None else index), -seq)
        if len(heap) < max_cases:
            heapq.heappush(heap, key)
        elif key > heap[0]:
            heapq.heapreplace(heap, key)
    return {-s for _, s in heap}


def read_case_table(
    run: RunDir, *, max_cases: int | None = None, first_rows: int = FIRST_ROWS, processes: int | None = None
) -> CaseTable:
    """Stream results.jsonl once into the case table: columns in memory, detail, chunk and
    anchor blocks packed into temp files as they fill.

    A large results.jsonl is read side by side: this process reads the first part while
    forked readers each read a later byte range (`_fork_readers`), then merges what they
    read in file order; the page is the one this process alone would write, byte for byte
    (a run that retrieves more than KEPT distinct chunks may store a repeat fewer times).

    Args:
        run: the run folder.
        max_cases: keep only this many records, the lowest case indexes (None: all). Costs a
            second pass over results.jsonl, and is read by this process alone.
        first_rows: how many rows (in eval-set order) to return as CaseRow for the template.
        processes: how many processes read results.jsonl (1: this one alone). Default: one
            per core (at most 4) from `PARALLEL_MIN_BYTES` on, else 1.

    Returns:
        The CaseTable; close it when its blocks have been written out.
    """
    keep = _kept_lines(run, max_cases) if max_cases is not None else None
    spans = _spans(run, processes) if keep is None else None
    if spans is None:
        return _read(run, keep, first_rows, None)
    try:
        return _read(run, None, first_rows, spans)
    except _ReaderFailed:  # this process alone reads it again, and says what was wrong where
        return _read(run, None, first_rows, None)


def _read(run: RunDir, keep: set[int] | None, first_rows: int, spans: list[tuple[int, int | None]] | None) -> CaseTable:
    """`read_case_table`: this process reads `spans[0]` (all of results.jsonl when None), a
    forked reader each later span."""
    import os
    from concurrent.futures import ThreadPoolExecutor

    from evalkit.collector import fewer_collections

    rows: list[CaseRow] = []
    sort_keys: list[tuple[int, int]] = []
    total = 0
    readers = _fork_readers(run, spans[1:]) if spans else []  # before the threads start
    try:
        # deflate runs in a thread per core beside the reading; at most 2 blocks ahead per worker
        workers = max(1, min(4, os.cpu_count() or 1))
        with ThreadPoolExecutor(workers, thread_name_prefix="evalkit-report") as pool:
            details = _Details(pool, 2 * workers)
            try:
                with fewer_collections():  # rows and blocks pile up: young collections would rescan them
                    for seq, record in enumerate(run.iter_results(*spans[0]) if spans else run.iter_results()):
                        total += 1
                        if keep is not None and seq not in keep:
                            continue
                        row = case_row(record, seq)
                        sort_keys.append((row.index, seq))
                        rows.append(row)
                        details.add(record)
                    for reader in readers:
                        numbers = _PartNumbers()
                        for batch in reader.batches():
                            got = [CaseRow(*values) for values in batch["rows"]]
                            for k in batch["unindexed"]:  # a record without a case index sorts by its line
                                got[k].index = total + k
                            sort_keys += [(row.index, total + k) for k, row in enumerate(got)]
                            rows += got
                            total += len(got)
                            details.merge(batch, numbers)
                details.finish()
                order = sorted(range(len(rows)), key=sort_keys.__getitem__)
                del sort_keys
                rows = [rows[i] for i in order]
                packed = pack(_columns(rows, order, details.counts()), pool)
            except BaseException:
                for spool in details.spools():
                    spool.close()
                raise
    finally:
        for reader in readers:
            reader.close()
    categories = sorted({r.category for r in rows if r.category})
    outcomes = [o for o in OUTCOMES if any(r.outcome == o for r in rows)]
    return CaseTable(
        rows=packed, first=rows[:first_rows], total=total, shown=len(rows), categories=categories, outcomes=outcomes,
        blocks=details.counts(), _spools=details.spools(),
    )


# ---- reading side by side: forked readers, each a byte range of results.jsonl

# results.jsonl from this size on is read side by side (about 18,000 cases of SciFact text at
# K = 20). Below it the hand-over costs more than it saves: a reader's first sight of a chunk
# goes to the parent (pickled, looked up, numbered again), and a small run sees mostly first
# sights; 5,000 SciFact cases (70 MB, 29,179 distinct chunks in 99,941): 1.2 s of CPU read
# side by side against 1.0 s alone, no faster at load 8.
PARALLEL_MIN_BYTES = 256 << 20
_MAX_PROCESSES = 4
# This process also merges the readers' batches and deflates every block in its threads, so
# it reads a smaller share of the file than each reader (a fraction of an equal share).
_OWN_SHARE = 0.75
_ROW_VALUES = operator.attrgetter(*CaseRow.__slots__)  # type: ignore[attr-defined]


class _ReaderFailed(Exception):
    """A forked reader ended without handing over all of its range."""


def other_threads() -> bool:
    """Whether this process runs a thread besides the calling one: forking then can deadlock
    (a lock another thread held stays held in the child), so the page is read here alone."""
    import threading

    return threading.active_count() > 1


def _spans(run: RunDir, processes: int | None) -> list[tuple[int, int | None]] | None:
    """The byte ranges of results.jsonl each process reads (this one the first), or None when
    this process reads it alone: one process asked for or one core, a small file, no fork
    (not Linux), or another thread running (forking it can deadlock)."""
    import bisect
    import os
    import sys

    if processes is None:
        processes = min(os.cpu_count() or 1, _MAX_PROCESSES)
        try:
            if run.results_path.stat().st_size < PARALLEL_MIN_BYTES:
                return None
        except OSError:
            return None
    if processes <= 1 or sys.platform != "linux" or other_threads():
        return None
    slices = run.split_results(20 * processes)
    starts = [a for a, _ in slices]
    size = run.results_path.stat().st_size
    own = _OWN_SHARE / processes
    cuts = sorted({bisect.bisect_left(starts, size * (own + (1 - own) * k / (processes - 1))) for k in range(processes - 1)})
    cuts = [c for c in cuts if 0 < c < len(starts)]
    if not cuts:
        return None
    bounds = [0, *(starts[c] for c in cuts)]
    return [(a, b) for a, b in zip(bounds, [*bounds[1:], None])]


class _Reader:
    """A forked process reading one byte range (`_read_range`): each batch is appended to
    an anonymous temp file (its length, then its pickle), and one byte on a pipe says so."""

    def __init__(self, pid: int, spool: IO[bytes], ready: int) -> None:
        self.pid: int | None = pid
        self.spool, self.ready = spool, ready

    def batches(self) -> Iterator[dict[str, Any]]:
        """The batches in order, each as soon as it is written; _ReaderFailed if the reader
        ended otherwise than done."""
        import os
        import pickle

        fd, at = self.spool.fileno(), 0
        while os.read(self.ready, 1):  # the end of the pipe: the reader has exited
            size = int.from_bytes(_pread(fd, 8, at), "little")
            yield pickle.loads(_pread(fd, size, at + 8))
            at += 8 + size
        assert self.pid is not None
        _, status = os.waitpid(self.pid, 0)
        self.pid = None
        if os.waitstatus_to_exitcode(status) != 0:
            raise _ReaderFailed(f"a forked reader of the case table ended with status {status}")

    def close(self) -> None:
        """End the reader if it still runs (an error or Ctrl-C here), and drop its file."""
        import os
        import signal

        if self.pid is not None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.waitpid(self.pid, 0)
            self.pid = None
        if self.ready >= 0:
            os.close(self.ready)
            self.ready = -1
        self.spool.close()


def _pread(fd: int, size: int, at: int) -> bytes:
    import os

    got = []
    while size:
        piece = os.pread(fd, size, at)
        if not piece:
            raise _ReaderFailed("a forked reader's batch is cut short")
        got.append(piece)
        size -= len(piece)
        at += len(piece)
    return b"".join(got)


def _fork_readers(run: RunDir, spans: list[tuple[int, int | None]]) -> list[_Reader]:
    """A forked reader for each span. Their files are anonymous (nothing is left on disk,
    however a process ends); a reader ignores Ctrl-C (this process ends it), and stops
    when this one is gone (its pipe breaks)."""
    import os

    readers: list[_Reader] = []
    try:
        for start, end in spans:
            spool = tempfile.TemporaryFile(prefix="evalkit-report-")  # noqa: SIM115 - closed by _Reader.close
            try:
                ready, done = os.pipe()
            except BaseException:
                spool.close()
                raise
            try:
                pid = os.fork()
            except BaseException:
                spool.close()
                os.close(ready)
                os.close(done)
                raise
            if pid == 0:  # the reader
                _reader_main(run, start, end, spool, done, [r.ready for r in readers] + [ready])
            os.close(done)
            readers.append(_Reader(pid, spool, ready))
    except BaseException:
        for reader in readers:
            reader.close()
        raise
    return readers


def _reader_main(run: RunDir, start: int, end: int | None, spool: IO[bytes], done: int, others: list[int]) -> NoReturn:
    """A forked reader's whole life: it never returns into the caller's code, and says how
    it ended only by its exit status (this process reads the range again after a failure,
    and reports what was wrong there)."""
    import os
    import signal

    status = 1
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        for fd in others:
            os.close(fd)
        _read_range(run, start, end, spool, done)
        status = 0
    finally:
        os._exit(status)


def _read_range(run: RunDir, start: int, end: int | None, spool: IO[bytes], done: int) -> None:
    """Read results.jsonl[start:end] as `read_case_table` reads records, a batch at a time
    into `spool` (`_Collector`), with the row of each record (a record without a case
    index listed in `unindexed`: the parent knows its line)."""
    import os
    import pickle

    from evalkit.collector import fewer_collections

    rows: list[tuple[Any, ...]] = []
    unindexed: list[int] = []

    def emit(batch: dict[str, Any]) -> None:
        batch["rows"], batch["unindexed"] = rows, unindexed
        data = pickle.dumps(batch, pickle.HIGHEST_PROTOCOL)
        spool.write(len(data).to_bytes(8, "little"))
        spool.write(data)
        spool.flush()
        os.write(done, b"\x01")
        rows.clear()
        unindexed.clear()

    details = _Collector(emit)
    with fewer_collections():
        for seq, record in enumerate(run.iter_results(start, end)):
            if _int(record.get(Rec.CASE_INDEX)) is None:
                unindexed.append(len(rows))
            rows.append(_ROW_VALUES(case_row(record, seq)))
            details.add(record)
        if details.n:
            details._submit()


# The page sorts text case-insensitively with digit runs as numbers (cases.js `textKey`: the
# value lower-cased, each run of ASCII digits padded with zeros to 20), comparing the keys as
# JavaScript compares strings (UTF-16 code units). `text_ranks` makes the same order here.
_DIGITS = re.compile(r"[0-9]+")
_NOT_ASCII = re.compile(r"[^\x00-\x7f]")
# Text columns whose order is shipped with the page: the sortable ones with a value per row
# (the question column does not sort; category and outcome are few names, ranked in the page;
# errors are few).
RANKED = ("id",)


def _pad(m: re.Match[str]) -> str:
    return m[0].zfill(20)  # digits only: zfill pads in front, and leaves 20 or more alone


def text_ranks(values: list[str]) -> list[int | None] | None:
    """Each value's place in the page's text sort (cases.js `textRanks`): 0 for the first key,
    one more for each next distinct key, equal keys equal ranks, None for an empty value.
    Shipped with the page, a text sort of 100,000 rows is a sort of numbers (the browser
    would make 100,000 keys and compare them as strings first).

    None (the page then ranks the column itself) when a character is not assigned in this
    Python's Unicode database: its lower case may differ from the browser's."""
    joined = "".join(values)
    if not joined.isascii() and any(unicodedata.category(c) == "Cn" for c in set(_NOT_ASCII.findall(joined))):
        return None
    keys = [_DIGITS.sub(_pad, v.lower()) if v else None for v in values]
    distinct = set(keys)
    distinct.discard(None)
    if joined.isascii() or all(k.isascii() or max(k) <= "\uffff" for k in distinct):  # type: ignore[union-attr]
        ordered = sorted(distinct)  # type: ignore[type-var]
    else:  # past U+FFFF code points and UTF-16 code units order differently
        ordered = sorted(distinct, key=lambda k: k.encode("utf-16-be", "surrogatepass"))  # type: ignore[union-attr]
    rank = {k: r for r, k in enumerate(ordered)}
    return list(map(rank.get, keys))  # type: ignore[arg-type]


def _codes(values: list[str]) -> tuple[list[str], list[int]]:
    names = sorted(set(values))
    code = {name: i for i, name in enumerate(names)}
    return names, [code[v] for v in values]


def _bool(v: bool | None) -> int | None:
    return None if v is None else int(v)


def _columns(rows: list[CaseRow], detail: list[int], blocks: dict[str, int]) -> dict[str, Any]:
    """The table's columns, one list per field (null = no value); categories and outcomes as
    codes into their name lists; errors as {row: text}, since most rows have none; and where
    the details are (`blocks`: how many of each kind, in page order; their sizes); `ranks`:
    the sort order of the RANKED text columns (`text_ranks`), where it could be made here."""
    categories, category = _codes([r.category for r in rows])
    outcomes, outcome = _codes([r.outcome for r in rows])
    cols: dict[str, Any] = {
        "n": len(rows),
        "block": BLOCK,
        "chunk_block": CHUNK_BLOCK,
        "anchor_block": ANCHOR_BLOCK,
        "blocks": blocks,
        "index": [r.index for r in rows],
        "id": [r.id for r in rows],
        "question": [r.question for r in rows],
        "categories": categories,
        "category": category,
        "outcomes": outcomes,
        "outcome": outcome,
        "first_rank": [r.first_rank for r in rows],
        "recall": [r.recall for r in rows],
        "mrr": [r.mrr for r in rows],
        "ndcg": [r.ndcg for r in rows],
        Rec.GROUNDEDNESS: [r.groundedness for r in rows],
        Rec.CORRECTNESS: [r.correctness for r in rows],
        "abstained": [_bool(r.abstained) for r in rows],
        "answerable": [_bool(r.answerable) for r in rows],
        "latency": [r.latency_ms for r in rows],
        "error": {str(i): r.error for i, r in enumerate(rows) if r.error},
    }
    ranks = {col: text_ranks(cols[col]) for col in RANKED}
    cols["ranks"] = {col: r for col, r in ranks.items() if r is not None}
    if any(d != i for i, d in enumerate(detail)):
        cols["detail"] = detail
    return cols
