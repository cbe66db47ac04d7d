"""A LlamaIndex retriever or query engine as an evalkit target (extra: `evalkit[llamaindex]`).

    from evalkit.adapters import llamaindex

    ask = llamaindex.target(retriever, notes_dir="notes")    # or a query engine
    # python scripts/run_eval.py --target python:mybot.py:ask --retrieval-only

What it maps (docs/adapters.md):

- `rel_path`: the node's `file_path` metadata (SimpleDirectoryReader sets it), relative
  to `notes_dir`, with `/`.
- `start_line`/`end_line` and `heading_path`: the node is found in its note, at its
  `start_char_idx` when the note holds its text there, else by its text
  (evalkit.adapters.notes); the heading path is the chain of the section it starts in, with
  every level and the section's own heading. MarkdownNodeParser's `header_path` metadata
  (`/A/B/`: the parents only, without levels) is used only when the node is not in its
  note (`heading_path_from_metadata`).
- `chunk_id`: a hash of path, heading path, lines and text (node ids are random UUIDs by
  default, and an `id_func` is handed index 0 for every node of a note).
- `rank`: 1..n in the order retrieved; `score_final`: the node's score.

Only `llama_index.core` is needed, imported when `target` or `hits_of` is called.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from evalkit.adapters.base import AdapterTarget, Hit, contract_chunks, missing_extra
from evalkit.adapters.notes import Notes

__all__ = ["LlamaIndexTarget", "heading_path_from_metadata", "hits_of", "target", "to_chunks"]

_ATX = re.compile(r"^(#+)\s+(.*?)\s*$")


def _require() -> Any:
    try:
        import llama_index.core as core
    except ImportError:
        raise missing_extra("llamaindex", "llamaindex", "llama-index-core") from None
    return core


def heading_path_from_metadata(header_path: str | None, text: str, *, separator: str = "/") -> str:
    """MarkdownNodeParser's metadata in the contract's form, for a node not found in its note.

    `header_path` (`/A/B/`) names the section's parents without their levels, and without
    the section itself; the section's own heading is the node text's first line when that
    is a heading (`### C`). Parents get levels 1, 2, ... (right for a note that skips no
    level), and are cut to those below the own heading's level.

    Example: `heading_path_from_metadata("/A/B/", "### C\\n\\ntext")` -> `"# A > ## B > ### C"`.

    Args:
        header_path: the node's `header_path` metadata ("/" or "" at the top of a note).
        text: the node's text.
        separator: MarkdownNodeParser's `header_path_separator`.

    Returns:
        The heading path, "" when neither gives a heading.
    """
    parents = [p.strip() for p in (header_path or "").split(separator) if p.strip()]
    first = next((line for line in text.splitlines() if line.strip()), "")
    own = _ATX.match(first)
    comps = [f"{'#' * level} {title}" for level, title in enumerate(parents, start=1)]
    if own is not None:
        level = len(own.group(1))
        comps = comps[: level - 1] + [f"{'#' * level} {own.group(2)}".rstrip()]
    return " > ".join(comps)


def hits_of(
    nodes: Iterable[Any], *, path_key: str = "file_path", header_path_separator: str = "/"
) -> list[Hit]:
    """Read LlamaIndex nodes (NodeWithScore, or bare nodes) into `Hit`s, in their order.

    Raises:
        ValueError: a node without `path_key` metadata (it cannot be placed in a note).
    """
    _require()
    from llama_index.core.schema import MetadataMode

    hits: list[Hit] = []
    for item in nodes:
        node = getattr(item, "node", item)
        score = getattr(item, "score", None)
        metadata = getattr(node, "metadata", None) or {}
        path = metadata.get(path_key)
        if not path:
            raise ValueError(
                f"a retrieved node has no {path_key!r} metadata, so its note is unknown "
                f"(metadata keys: {sorted(metadata)}); load notes with SimpleDirectoryReader "
                f"or set it on each Document, or pass path_key="
            )
        text = node.get_content(metadata_mode=MetadataMode.NONE)
        hits.append(
            Hit(
                path=str(path),
                text=text,
                score=score,
                char_start=getattr(node, "start_char_idx", None),
                heading_path=heading_path_from_metadata(
                    metadata.get("header_path"), text, separator=header_path_separator
                ),
            )
        )
    return hits


def to_chunks(
    nodes: Iterable[Any], notes_dir: str | Path | Notes, *, path_key: str = "file_path"
) -> list[dict[str, Any]]:
    """Contract chunks for retrieved nodes: for a chatbot that serves /api/v1/ask itself.

    Args:
        nodes: NodeWithScore (or nodes) in rank order, e.g. `retriever.retrieve(q)` or a
            response's `source_nodes`.
        notes_dir: the notes folder (or a `Notes` to reuse its cache across calls).
        path_key: the metadata key holding the note's file path.

    Returns:
        The `debug.retrieved_chunks` list.
    """
    notes = notes_dir if isinstance(notes_dir, Notes) else Notes(notes_dir)
    return contract_chunks(hits_of(nodes, path_key=path_key), notes)


class LlamaIndexTarget(AdapterTarget):
    """A LlamaIndex retriever or query engine as a Python target (see `target`)."""

    framework = "llamaindex"

    def __init__(self, obj: Any, *, notes_dir: str | Path, path_key: str = "file_path", versions: Any = None):
        core = _require()
        from llama_index.core.base.base_query_engine import BaseQueryEngine
        from llama_index.core.base.base_retriever import BaseRetriever
        from llama_index.core.chat_engine.types import BaseChatEngine

        if isinstance(obj, BaseQueryEngine):
            self.kind = "query_engine"
        elif isinstance(obj, BaseRetriever):
            self.kind = "retriever"
        elif isinstance(obj, BaseChatEngine):
            self.kind = "chat_engine"
        else:
            raise TypeError(
                f"expected a LlamaIndex retriever, query engine or chat engine, got {type(obj).__module__}.{type(obj).__name__}"
            )
        self.path_key = path_key
        self._core_version = getattr(core, "__version__", "?")
        super().__init__(obj, notes_dir=notes_dir, versions=versions)

    def describe_object(self) -> str:
        return f"llama-index-core {self._core_version}: {type(self.obj).__name__}"

    def _ask(self, question: str, history: list[dict[str, str]] | None = None) -> tuple[str | None, list[Hit]]:
        if self.kind == "retriever":
            return None, hits_of(self.obj.retrieve(question), path_key=self.path_key)
        if self.kind == "chat_engine":
            return self._read(self.obj.chat(question, chat_history=chat_messages(history)))
        return self._read(self.obj.query(question))

    async def _aask(self, question: str, history: list[dict[str, str]] | None = None) -> tuple[str | None, list[Hit]]:
        if self.kind == "retriever":
            return None, hits_of(await self.obj.aretrieve(question), path_key=self.path_key)
        if self.kind == "chat_engine":
            return self._read(await self.obj.achat(question, chat_history=chat_messages(history)))
        return self._read(await self.obj.aquery(question))

    def _read(self, response: Any) -> tuple[str, list[Hit]]:
        text = getattr(response, "response", None)
        answer = str(text) if text is not None else str(response)
        return answer, hits_of(getattr(response, "source_nodes", None) or [], path_key=self.path_key)


def chat_messages(history: list[dict[str, str]] | None) -> list[Any]:
    """A conversation's earlier turns as LlamaIndex ChatMessages (a chat engine's chat_history).
    An empty list, not None, for a first turn: a chat engine given None would use the
    history it kept from the conversation before, which belongs to another case."""
    from llama_index.core.llms import ChatMessage, MessageRole

    roles = {"user": MessageRole.USER, "assistant": MessageRole.ASSISTANT}
    return [ChatMessage(role=roles.get(m["role"], MessageRole.USER), content=m["content"]) for m in history or []]


def target(
    obj: Any, *, notes_dir: str | Path, path_key: str = "file_path", versions: dict[str, Any] | None = None
) -> LlamaIndexTarget:
    """A LlamaIndex retriever or query engine as an evalkit Python target.

    Put the result at module level (`ask = target(...)`) and run
    `--target python:mybot.py:ask`. The retriever's own `similarity_top_k` caps what comes
    back: build it with at least the largest `--k`; the target keeps the first `k`.

    Args:
        obj: a `BaseRetriever` (the answer is then the top chunk's text), a
            `BaseQueryEngine` (its response and `source_nodes`), or a `BaseChatEngine` (e.g.
            `index.as_chat_engine(chat_mode="condense_plus_context")`: a conversation's turn
            is asked with the turns before it as `chat_history`; the others are asked the
            turn's question alone).
        notes_dir: the notes folder the eval set's `rel_path`s are relative to.
        path_key: the node metadata key holding the note's file path.
        versions: extra `debug.versions` fields (e.g. `{"llm_model": "..."}`).

    Raises:
        ImportError: llama-index-core is not installed (`pip install 'evalkit[llamaindex]'`).
        TypeError: `obj` is neither a retriever nor a query engine.
        NotADirectoryError: `notes_dir` is not a folder.
    """
    return LlamaIndexTarget(obj, notes_dir=notes_dir, path_key=path_key, versions=versions)
