"""A LangChain retriever or chain as an evalkit target (extra: `evalkit[langchain]`).

    from evalkit.adapters import langchain

    ask = langchain.target(retriever, notes_dir="notes")    # or a chain (a Runnable)
    # python scripts/run_eval.py --target python:mybot.py:ask --retrieval-only

What it maps (docs/adapters.md):

- `rel_path`: the Document's `source` metadata (what LangChain's loaders set; set it
  yourself after MarkdownHeaderTextSplitter, whose Documents carry only headers), relative
  to `notes_dir`, with `/`.
- `start_line`/`end_line` and `heading_path`: the Document is found in its note by its
  text, line by line and whitespace-blind (MarkdownHeaderTextSplitter strips lines,
  drops the headings with `strip_headers=True` and joins lines with "  \\n"); the heading
  path is the chain of the section it starts in, with every level, also levels the
  splitter did not split on. MarkdownHeaderTextSplitter's metadata (`{"Header 1": "A",
  "Header 2": "B"}`) breaks ties between two places holding the same text, and is the
  heading path when the text is not in the note (`heading_path_from_metadata`).
- `chunk_id`: a hash of path, heading path, lines and text (Documents have no stable id).
- `rank`: 1..n in the order retrieved.

Only `langchain_core` is needed, imported when `target` or `hits_of` is called.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from evalkit.adapters.base import AdapterTarget, Hit, contract_chunks, missing_extra
from evalkit.adapters.notes import Notes

__all__ = [
    "DEFAULT_HEADERS",
    "LangChainTarget",
    "heading_path_from_metadata",
    "hits_of",
    "target",
    "to_chunks",
]

# MarkdownHeaderTextSplitter's `headers_to_split_on` as its documentation writes it.
DEFAULT_HEADERS: tuple[tuple[str, str], ...] = tuple((f"{'#' * n}", f"Header {n}") for n in range(1, 7))


def _require() -> Any:
    try:
        import langchain_core
    except ImportError:
        raise missing_extra("langchain", "langchain", "langchain-core") from None
    return langchain_core


def heading_path_from_metadata(
    metadata: Mapping[str, Any], headers_to_split_on: Sequence[tuple[str, str]] = DEFAULT_HEADERS
) -> str:
    """MarkdownHeaderTextSplitter's header metadata in the contract's form.

    Each `(separator, name)` of `headers_to_split_on` whose name is in `metadata` gives one
    component, its level the number of `#` in the separator, shallowest first. It is the
    chain down to the deepest level the splitter split on: a section under a heading it
    did not split on gets its parent's path. Custom separators without `#` are left out.

    Example: `heading_path_from_metadata({"Header 1": "A", "Header 2": "B"})` -> `"# A > ## B"`.
    """
    comps: list[tuple[int, str]] = []
    for sep, name in headers_to_split_on:
        level = sep.count("#")
        value = metadata.get(name) if level else None
        if value is not None and str(value).strip():
            comps.append((level, f"{'#' * level} {' '.join(str(value).split())}"))
    return " > ".join(c for _, c in sorted(comps))


def hits_of(
    documents: Iterable[Any],
    *,
    path_key: str = "source",
    headers_to_split_on: Sequence[tuple[str, str]] = DEFAULT_HEADERS,
) -> list[Hit]:
    """Read LangChain Documents into `Hit`s, in their order.

    A Document's `start_index` metadata (a text splitter's `add_start_index=True`) is taken
    as its offset in the note when the note holds its text there.

    Raises:
        ValueError: a Document without `path_key` metadata (it cannot be placed in a note).
    """
    _require()
    hits: list[Hit] = []
    for doc in documents:
        metadata = getattr(doc, "metadata", None) or {}
        path = metadata.get(path_key)
        if not path:
            raise ValueError(
                f"a retrieved Document has no {path_key!r} metadata, so its note is unknown "
                f"(metadata keys: {sorted(metadata)}); set doc.metadata[{path_key!r}] to the note's "
                f"path when you split the notes, or pass path_key="
            )
        start = metadata.get("start_index")
        hits.append(
            Hit(
                path=str(path),
                text=str(getattr(doc, "page_content", "")),
                score=None,
                char_start=start if isinstance(start, int) and not isinstance(start, bool) else None,
                heading_path=heading_path_from_metadata(metadata, headers_to_split_on),
            )
        )
    return hits


def to_chunks(
    documents: Iterable[Any],
    notes_dir: str | Path | Notes,
    *,
    path_key: str = "source",
    headers_to_split_on: Sequence[tuple[str, str]] = DEFAULT_HEADERS,
) -> list[dict[str, Any]]:
    """Contract chunks for retrieved Documents: for a chatbot that serves /api/v1/ask itself.

    Args:
        documents: Documents in rank order, e.g. `retriever.invoke(q)`.
        notes_dir: the notes folder (or a `Notes` to reuse its cache across calls).
        path_key: the metadata key holding the note's file path.
        headers_to_split_on: what MarkdownHeaderTextSplitter was given.

    Returns:
        The `debug.retrieved_chunks` list.
    """
    notes = notes_dir if isinstance(notes_dir, Notes) else Notes(notes_dir)
    return contract_chunks(hits_of(documents, path_key=path_key, headers_to_split_on=headers_to_split_on), notes)


class LangChainTarget(AdapterTarget):
    """A LangChain retriever or chain as a Python target (see `target`)."""

    framework = "langchain"

    def __init__(
        self,
        obj: Any,
        *,
        notes_dir: str | Path,
        path_key: str = "source",
        headers_to_split_on: Sequence[tuple[str, str]] = DEFAULT_HEADERS,
        input_key: str | None = None,
        answer_key: str = "answer",
        context_key: str = "context",
        history_key: str | None = None,
        versions: Mapping[str, Any] | None = None,
    ):
        core = _require()
        from langchain_core.retrievers import BaseRetriever
        from langchain_core.runnables import Runnable

        if isinstance(obj, BaseRetriever):
            self.kind = "retriever"
        elif isinstance(obj, Runnable):
            self.kind = "chain"
        else:
            raise TypeError(
                f"expected a LangChain retriever or Runnable, got {type(obj).__module__}.{type(obj).__name__}"
            )
        self.path_key = path_key
        self.headers_to_split_on = tuple(headers_to_split_on)
        self.input_key = input_key
        self.answer_key = answer_key
        self.context_key = context_key
        self.history_key = history_key
        self._core_version = getattr(core, "__version__", "?")
        super().__init__(obj, notes_dir=notes_dir, versions=versions)

    def describe_object(self) -> str:
        return f"langchain-core {self._core_version}: {type(self.obj).__name__}"

    def _input(self, question: str, history: list[dict[str, str]] | None = None) -> Any:
        if self.kind != "chain" or not self.input_key:
            return question
        given: dict[str, Any] = {self.input_key: question}
        if self.history_key:
            # LangChain's message tuples, as a MessagesPlaceholder takes them; [] on a first turn.
            given[self.history_key] = [("human" if m["role"] == "user" else "ai", m["content"]) for m in history or []]
        return given

    def _ask(self, question: str, history: list[dict[str, str]] | None = None) -> tuple[str | None, list[Hit]]:
        return self._read(self.obj.invoke(self._input(question, history)))

    async def _aask(self, question: str, history: list[dict[str, str]] | None = None) -> tuple[str | None, list[Hit]]:
        return self._read(await self.obj.ainvoke(self._input(question, history)))

    def _hits(self, documents: Iterable[Any]) -> list[Hit]:
        return hits_of(documents, path_key=self.path_key, headers_to_split_on=self.headers_to_split_on)

    def _read(self, out: Any) -> tuple[str | None, list[Hit]]:
        """A retriever's Documents, or a chain's output: a dict with `answer_key` and
        `context_key` (create_retrieval_chain's shape), a list of Documents, a string or a
        message."""
        if isinstance(out, Mapping):
            answer = out.get(self.answer_key)
            return (None if answer is None else _text(answer)), self._hits(out.get(self.context_key) or [])
        if isinstance(out, list | tuple):
            return None, self._hits(out)
        if isinstance(out, str) or hasattr(out, "content"):
            return _text(out), []
        raise TypeError(
            f"cannot read the chain's output ({type(out).__name__}): expected Documents, a dict with "
            f"{self.answer_key!r} and {self.context_key!r}, a string or a message"
        )


def _text(answer: Any) -> str:
    content = getattr(answer, "content", answer)
    return content if isinstance(content, str) else str(content)


def target(
    obj: Any,
    *,
    notes_dir: str | Path,
    path_key: str = "source",
    headers_to_split_on: Sequence[tuple[str, str]] = DEFAULT_HEADERS,
    input_key: str | None = None,
    answer_key: str = "answer",
    context_key: str = "context",
    history_key: str | None = None,
    versions: Mapping[str, Any] | None = None,
) -> LangChainTarget:
    """A LangChain retriever or chain as an evalkit Python target.

    Put the result at module level (`ask = target(...)`) and run
    `--target python:mybot.py:ask`. The retriever's own `k` caps what comes back: build it
    with at least the largest `--k`; the target keeps the first `k`.

    Args:
        obj: a `BaseRetriever` (the answer is then the top chunk's text), or any Runnable
            (a chain) returning Documents or a dict with the answer and its context
            Documents, as `create_retrieval_chain` does.
        notes_dir: the notes folder the eval set's `rel_path`s are relative to.
        path_key: the Document metadata key holding the note's file path.
        headers_to_split_on: what MarkdownHeaderTextSplitter was given (to read its metadata).
        input_key: a chain is invoked with `{input_key: question}` (`"input"` for
            `create_retrieval_chain`); None = with the question string.
        answer_key: the answer's key in a chain's dict output.
        context_key: the retrieved Documents' key in a chain's dict output.
        history_key: a chain that takes a conversation's earlier turns under this key
            (`"chat_history"` for a `create_history_aware_retriever` chain) is given them as
            `("human" | "ai", text)` tuples, oldest first, `[]` on a first turn; None = the
            turn's question alone (needs `input_key`).
        versions: extra `debug.versions` fields (e.g. `{"llm_model": "..."}`).

    Raises:
        ImportError: langchain-core is not installed (`pip install 'evalkit[langchain]'`).
        TypeError: `obj` is not a LangChain retriever or Runnable.
        NotADirectoryError: `notes_dir` is not a folder.
    """
    return LangChainTarget(
        obj,
        notes_dir=notes_dir,
        path_key=path_key,
        headers_to_split_on=headers_to_split_on,
        input_key=input_key,
        answer_key=answer_key,
        context_key=context_key,
        history_key=history_key,
        versions=versions,
    )
