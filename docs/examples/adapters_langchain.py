"""A LangChain bot over the Obsidian Tasks guide, as an evalkit target (docs/adapters.md).

One Document per heading section (MarkdownHeaderTextSplitter), BM25 over them, no LLM
and no API key. From the repository root:

    pip install -e '.[langchain]'
    export NOTES_DIR=../shared/corpora/obsidian-tasks/vault
    python scripts/run_eval.py --eval-set tests/data/adapters/obsidian_tasks.jsonl \
        --target python:docs/examples/adapters_langchain.py:ask --retrieval-only

NOTES_DIR names the notes folder; it has no default.
"""

import os
from pathlib import Path

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_text_splitters import MarkdownHeaderTextSplitter
from rank_bm25 import BM25Okapi

from evalkit.adapters import langchain

# The notes folder, always given: NOTES_DIR=path/to/notes.
NOTES = Path(os.environ.get("NOTES_DIR") or "(NOTES_DIR is not set)")
NOTE_FILES = sorted(NOTES.rglob("*.md"))
if not NOTE_FILES:
    raise FileNotFoundError(f"no .md notes under {NOTES}: set NOTES_DIR to your notes folder")
HEADERS = [("#", "Header 1"), ("##", "Header 2"), ("###", "Header 3")]


class BM25Retriever(BaseRetriever):
    """BM25 over Documents (what langchain-community's BM25Retriever does; that package is
    being retired, so the example keeps its own dozen lines)."""

    documents: list[Document]
    k: int = 10

    def model_post_init(self, context: object) -> None:
        self._bm25 = BM25Okapi([d.page_content.lower().split() for d in self.documents])

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        scores = self._bm25.get_scores(query.lower().split())
        best = sorted(range(len(scores)), key=lambda i: -scores[i])[: self.k]
        return [self.documents[i] for i in best]


splitter = MarkdownHeaderTextSplitter(headers_to_split_on=HEADERS)
sections = []
for path in NOTE_FILES:
    for doc in splitter.split_text(path.read_text(encoding="utf-8")):
        doc.metadata["source"] = str(path)  # the splitter keeps only the headers
        sections.append(doc)
retriever = BM25Retriever(documents=sections, k=10)

# evalkit calls `ask(request)`; the adapter turns the retrieved Documents into contract chunks.
ask = langchain.target(retriever, notes_dir=NOTES, headers_to_split_on=HEADERS)
