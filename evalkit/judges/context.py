"""Full chunk text for re-judging a stored run.

results.jsonl keeps chunk text cut to 200 characters unless the run used --store-full-text
(DESIGN.md §6), and a judge reading the cut text scores claims from the rest of the chunk
as unsupported. `context_source` finds where the full text can be re-read:

- an in-process reference run (config.json `target.kind == "reference"`) rebuilds its
  chunks from the vault with the reference chunker and looks each one up by chunk id; the
  id hashes the chunk's text, so a found id is exactly the text the run retrieved, and a
  chunk whose id is gone (the vault changed since the run) stays cut;
- any other run re-reads `start_line..end_line` of `rel_path` from `--vault`, and keeps a
  re-read text only if it contains the stored 200-character prefix.

Without `--vault`, a reference run uses the vault config.json recorded; other runs have
no source. judge_answers refuses cut context unless `--allow-truncated-context`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from evalkit.errors import InputError, Problem, did_you_mean
from evalkit.evalset.turns import record_turn
from evalkit.judges.runner import context_from_record


class ChunkReader(Protocol):
    """Re-reads one stored chunk's full text; None when it cannot be recovered."""

    def chunk_text(self, chunk: Mapping[str, Any]) -> str | None: ...


def _squash(text: str) -> str:
    return " ".join(text.split())


class VaultReader:
    """Full chunk text from the vault by rel_path and start_line..end_line (1-based, inclusive).

    A re-read text that does not contain the stored (cut) text is rejected: the note
    changed since the run, or the target's lines are not the vault's.
    """

    def __init__(self, vault: Path):
        self.vault = Path(vault).resolve()
        self._files: dict[str, list[str] | None] = {}

    def _lines(self, rel_path: str) -> list[str] | None:
        if rel_path not in self._files:
            path = (self.vault / rel_path).resolve()
            lines = None
            # Never read outside the vault, whatever a record claims.
            if path.is_relative_to(self.vault) and path.is_file():
                lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
            self._files[rel_path] = lines
        return self._files[rel_path]

    def chunk_text(self, chunk: Mapping[str, Any]) -> str | None:
        rel, start, end = chunk.get("rel_path"), chunk.get("start_line"), chunk.get("end_line")
        if not rel or not isinstance(start, int) or not isinstance(end, int):
            return None
        lines = self._lines(rel)
        if lines is None or start < 1 or end < start or start > len(lines):
            return None
        text = "\n".join(lines[start - 1 : end])
        if _squash(chunk.get("text") or "") not in _squash(text):
            return None
        return text


class ReferenceChunkReader:
    """Chunk text of an in-process reference run, looked up by chunk id.

    Each note a record names is chunked once with the reference chatbot's chunker (default
    ChunkerConfig, as `ReferenceChatbot` builds it) and the run's `vault_id`.
    """

    def __init__(self, vault: Path, vault_id: str = "default"):
        self.vault = Path(vault).resolve()
        self.vault_id = vault_id
        self._by_file: dict[str, dict[str, str]] = {}

    def _chunks(self, rel_path: str) -> dict[str, str]:
        if rel_path not in self._by_file:
            from evalkit.reference.chunker import chunk_markdown

            path = (self.vault / rel_path).resolve()
            found: dict[str, str] = {}
            if path.is_relative_to(self.vault) and path.is_file():
                doc = chunk_markdown(path.read_bytes(), rel_path, vault_id=self.vault_id)
                found = {c.chunk_id: c.text for c in doc.chunks}
            self._by_file[rel_path] = found
        return self._by_file[rel_path]

    def chunk_text(self, chunk: Mapping[str, Any]) -> str | None:
        rel, cid = chunk.get("rel_path"), chunk.get("chunk_id")
        if not rel or not cid:
            return None
        return self._chunks(str(rel)).get(str(cid))


@dataclass
class ContextSource:
    """Where full chunk text comes from. `reader` is None when there is no source; `why`
    then says so in words fit for an error message."""

    reader: ChunkReader | None
    vault: Path | None = None
    origin: str | None = None  # "--vault" | "config.json"
    why: str = ""

    def describe(self) -> dict[str, Any]:
        kind = {VaultReader: "vault_lines", ReferenceChunkReader: "reference_chunk_ids"}.get(type(self.reader))
        return {"source": kind, "vault": str(self.vault) if self.vault else None, "origin": self.origin}


def _is_reference_run(cfg: Mapping[str, Any]) -> bool:
    target = cfg.get("target")
    if isinstance(target, Mapping) and target.get("kind"):
        return target.get("kind") == "reference"
    settings = cfg.get("settings")
    return isinstance(settings, Mapping) and "vault" in settings and not settings.get("api_url") and not settings.get("target")


def _recorded_vault(cfg: Mapping[str, Any]) -> tuple[str | None, str]:
    target = cfg.get("target") if isinstance(cfg.get("target"), Mapping) else {}
    settings = cfg.get("settings") if isinstance(cfg.get("settings"), Mapping) else {}
    vault = target.get("vault") or settings.get("vault")
    return (str(vault) if vault else None), str(target.get("vault_id") or "default")


def context_source(cfg: Mapping[str, Any], vault: Path | None) -> ContextSource:
    """The source of full chunk text for a run with config.json `cfg` (module docstring).

    Args:
        cfg: the run's config.json.
        vault: the `--vault` the user gave, or None.

    Raises:
        InputError: `vault` is given but is not a folder.
    """
    reference = _is_reference_run(cfg)
    recorded, vault_id = _recorded_vault(cfg)
    if vault is not None:
        if not Path(vault).is_dir():
            raise InputError(Problem("vault folder not found" + did_you_mean(vault, folders=True), path=str(vault), field="--vault"))
        reader: ChunkReader = ReferenceChunkReader(vault, vault_id) if reference else VaultReader(vault)
        return ContextSource(reader, Path(vault), "--vault", f"they are not in --vault {vault}")
    if not reference:
        return ContextSource(None, why="config.json records no vault to re-read it from: the run's target was not the in-process reference chatbot")
    if recorded is None:
        return ContextSource(None, why="config.json records no vault")
    if not Path(recorded).is_dir():
        return ContextSource(None, Path(recorded), "config.json", f"the run's vault {recorded} (config.json) is not there")
    return ContextSource(
        ReferenceChunkReader(Path(recorded), vault_id),
        Path(recorded),
        "config.json",
        f"their chunk ids are no longer in the run's vault {recorded}, which changed since the run",
    )


def full_context(record: Mapping[str, Any], reader: ChunkReader | None) -> tuple[list[dict[str, Any]] | None, int]:
    """The record's chunks with cut texts re-read, and how many stay cut.

    Returns:
        (None, 0) when no chunk was cut (the record's own chunks are whole); otherwise the
        chunks in rank order with every recoverable text replaced, and the number of
        chunks still cut (`text_truncated` stays true on those).
    """
    chunks = context_from_record(dict(record))
    if not any(c.get("text_truncated") for c in chunks):
        return None, 0
    out, missing = [], 0
    for c in chunks:
        if c.get("text_truncated"):
            text = reader.chunk_text(c) if reader is not None else None
            if text is None:
                missing += 1
            else:
                c = {**c, "text": text, "text_truncated": False}
        out.append(c)
    return out, missing


# --------------------------------------------------------------------------- conversations


def _chunk_key(chunk: Mapping[str, Any]) -> Any:
    return chunk.get("chunk_id") or (chunk.get("rel_path"), chunk.get("heading_path"), chunk.get("start_line"),
                                     (chunk.get("text") or "")[:200])


# At most this many chunks of earlier turns join a turn's judge context, the latest turns'
# first: a long conversation would otherwise send every chunk it ever retrieved (8 turns at
# K = 20: 140 more chunks) with each late turn, for facts that are nearly always in the last
# turn or two.
EARLIER_TURN_CHUNKS = 20


def with_earlier_turns(own: Sequence[Mapping[str, Any]],
                       earlier: Sequence[tuple[int, Sequence[Mapping[str, Any]]]],
                       limit: int = EARLIER_TURN_CHUNKS) -> list[dict[str, Any]]:
    """A conversation turn's judge context (DESIGN.md §10): its own chunks in rank order, then
    what the turns before it retrieved, the latest turn first, each chunk once and marked
    `earlier_turn: n`, at most `limit` of them. An answer that reuses a fact an earlier turn
    retrieved is grounded by it; the turn's own retrieval metrics read only its own chunks.

    Args:
        own: the turn's chunks (full text where the caller has it).
        earlier: (turn, its chunks) of the turns before it.
        limit: the most earlier-turn chunks added.
    """
    out = [dict(c) for c in own]
    seen = {_chunk_key(c) for c in out}
    added = 0
    for turn, chunks in sorted(earlier, key=lambda t: -t[0]):
        for c in chunks:
            if added >= limit:
                return out
            key = _chunk_key(c)
            if key not in seen:
                seen.add(key)
                out.append({**c, "earlier_turn": turn})
                added += 1
    return out


def conversation_contexts(
    records: Sequence[Mapping[str, Any]], selected: Sequence[int], contexts: dict[int, list[dict[str, Any]] | None],
    reader: ChunkReader | None,
) -> dict[int, list[dict[str, Any]] | None]:
    """`contexts` (judge_answers' recovered full texts, None: the record's own) with each
    selected turn's earlier turns added (`with_earlier_turns`), their texts recovered the
    same way; a single question's context is left as it is."""
    turns: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for i, r in enumerate(records):
        key = record_turn(r)
        if key is not None:
            turns.setdefault(key[0], []).append((key[1], i))

    def own(j: int) -> list[dict[str, Any]]:
        got = contexts.get(j) if j in contexts else full_context(records[j], reader)[0]
        return got if got is not None else context_from_record(dict(records[j]))

    out = dict(contexts)
    for i in selected:
        key = record_turn(records[i])
        if key is None or key[1] == 1:
            continue
        earlier = [(t, own(j)) for t, j in turns.get(key[0], []) if t < key[1]]
        out[i] = with_earlier_turns(own(i), earlier)
    return out
