"""What every adapter shares: a framework hit -> a contract chunk, and the target callable.

An adapter turns one framework object (a retriever, a query engine, a chain) into an
`AdapterTarget`: a callable that takes evalkit's request dict and returns the contract's
response dict (docs/api-contract.md), so it works as a Python target
(`--target python:mybot.py:ask`, with `ask = adapter.target(...)` at module level).
Each adapter module only says how to ask its framework and how to read its hits.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalkit.adapters.notes import Notes, chunk_id
from evalkit.evalset.anchors import normalize_heading_path

__all__ = ["AdapterTarget", "Hit", "contract_chunks", "missing_extra"]


def missing_extra(module: str, extra: str, package: str) -> ImportError:
    """The error an adapter raises when its framework is not installed."""
    return ImportError(
        f"evalkit.adapters.{module} needs {package}, which is not installed: pip install 'evalkit[{extra}]'"
    )


@dataclass(frozen=True)
class Hit:
    """One retrieved chunk as a framework gave it, read into plain values by its adapter.

    Attributes:
        path: the note's file path from the chunk's metadata (absolute, or relative to the
            notes folder or the current directory).
        text: the chunk's text.
        score: the framework's score, if any.
        char_start: the chunk's character offset in the note, if the framework knows it.
        heading_path: the heading path the framework's metadata gives, already converted to
            the `# A > ## B` form as far as the metadata allows; used when the chunk cannot
            be found in its note, and to tell apart two places that hold the same text.
    """

    path: str
    text: str
    score: float | None = None
    char_start: int | None = None
    heading_path: str = ""


def contract_chunks(hits: Iterable[Hit], notes: Notes) -> list[dict[str, Any]]:
    """Contract chunks (`debug.retrieved_chunks`) for hits in rank order.

    Each has `chunk_id`, `rel_path`, `heading_path`, `start_line`, `end_line`, `text` and
    `rank` (1..n), and `score_final` when the hit has a score. `start_line`/`end_line` are
    None when the text is not in the note (then the heading path is the hit's own, from
    its metadata) or only its first line is (then the heading path is still the note's).

    Raises:
        ValueError: a hit's file is outside the notes folder.
    """
    out: list[dict[str, Any]] = []
    for rank, hit in enumerate(hits, start=1):
        rel = notes.rel_path(hit.path)
        note = notes.note(rel)
        span = note.locate(hit.text, char_start=hit.char_start, heading_path=hit.heading_path) if note else None
        if note is not None and span is not None:
            heading = note.heading_path(*span)
        else:
            heading = normalize_heading_path(hit.heading_path)
        # Both lines or neither: half a span matches no line-span gold support anyway.
        start, end = span if span is not None and span[1] is not None else (None, None)
        chunk: dict[str, Any] = {
            "chunk_id": chunk_id(rel, heading, start, end, hit.text),
            "rel_path": rel,
            "heading_path": heading,
            "start_line": start,
            "end_line": end,
            "text": hit.text,
            "rank": rank,
        }
        if hit.score is not None:
            chunk["score_final"] = float(hit.score)
        out.append(chunk)
    return out


class AdapterTarget:
    """A framework object as a Python target: call it with the request dict.

    Calling it (`await target(request)`) asks the framework through its async API, which
    is what evalkit does; `target.ask(request)` is the same through the sync API, for
    scripts and notebooks. Both return the contract's response dict:

    - `debug.retrieved_chunks`: the first `request["k"]` hits as contract chunks.
    - `answer`: the generated answer when the object generates one (a query engine, a
      chain that returns an answer). A bare retriever has none, so the answer is the top
      chunk's text (extractive) with that chunk as its one reference, and `abstained` is
      true exactly when nothing was retrieved.
    - `debug.versions`: `retriever_version` describing the object, plus `versions`.
    - `debug.timings_ms.retrieval` for a bare retriever (for a generating object the
      harness's own total time is the measure).

    A conversation's turn (DESIGN.md §10) comes with `history`, the turns before it as
    `[{"role": "user" | "assistant", "content": str}]`; `_ask`/`_aask` receive it (None for a
    single question) and pass it to a framework object that takes one (a chat engine, a chain
    with a history key); others are asked the turn's question alone.

    Subclasses set `framework` and implement `_ask`/`_aask` (question, history -> answer or
    None, hits) and `describe_object`.
    """

    framework = ""

    def __init__(self, obj: Any, *, notes_dir: str | Path, versions: Mapping[str, Any] | None = None):
        self.obj = obj
        self.notes = Notes(notes_dir)
        self.versions = {"retriever_version": self.describe_object(), **dict(versions or {})}

    def describe_object(self) -> str:
        """What the object is, for `debug.versions.retriever_version`."""
        return f"{self.framework}:{type(self.obj).__name__}"

    def _ask(self, question: str, history: list[dict[str, str]] | None = None) -> tuple[str | None, list[Hit]]:
        raise NotImplementedError

    async def _aask(self, question: str, history: list[dict[str, str]] | None = None) -> tuple[str | None, list[Hit]]:
        raise NotImplementedError

    async def __call__(self, request: Mapping[str, Any]) -> dict[str, Any]:
        t0 = time.perf_counter()
        answer, hits = await self._aask(_question(request), _history(request))
        return self._response(request, answer, hits, (time.perf_counter() - t0) * 1000)

    def ask(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """The sync form of `await target(request)`."""
        t0 = time.perf_counter()
        answer, hits = self._ask(_question(request), _history(request))
        return self._response(request, answer, hits, (time.perf_counter() - t0) * 1000)

    def _response(
        self, request: Mapping[str, Any], answer: str | None, hits: list[Hit], elapsed_ms: float
    ) -> dict[str, Any]:
        k = request.get("k")
        chunks = contract_chunks(hits[:k] if isinstance(k, int) and k > 0 else hits, self.notes)
        debug: dict[str, Any] = {"retrieved_chunks": chunks, "versions": dict(self.versions)}
        if answer is not None:
            return {"answer": answer, "debug": debug}
        debug["timings_ms"] = {"retrieval": round(elapsed_ms, 3)}
        top = chunks[0] if chunks else None
        return {
            "answer": top["text"] if top else "",
            "references": [{f: top[f] for f in ("chunk_id", "rel_path", "heading_path", "start_line", "end_line")}]
            if top
            else [],
            "abstained": top is None,
            "abstain_reason": None if top else "the retriever returned no chunks",
            "debug": debug,
        }


def _history(request: Mapping[str, Any]) -> list[dict[str, str]] | None:
    """The request's `history` (a conversation's earlier turns), messages without text left
    out; None when it has none."""
    history = request.get("history") if isinstance(request, Mapping) else None
    if not isinstance(history, list):
        return None
    return [{"role": str(m.get("role")), "content": m["content"]} for m in history
            if isinstance(m, Mapping) and isinstance(m.get("content"), str)]


def _question(request: Mapping[str, Any]) -> str:
    question = request.get("question") if isinstance(request, Mapping) else None
    if not isinstance(question, str):
        raise TypeError(f"expected evalkit's request dict with a 'question' string, got {type(request).__name__}")
    return question
