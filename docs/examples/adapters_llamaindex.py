"""A LlamaIndex bot over the Obsidian Tasks guide, as an evalkit target (docs/adapters.md).

One node per heading section (MarkdownNodeParser), BM25 over them, no LLM and no API key.
From the repository root:

    pip install -e '.[llamaindex]'
    export NOTES_DIR=../shared/corpora/obsidian-tasks/vault
    python scripts/run_eval.py --eval-set tests/data/adapters/obsidian_tasks.jsonl \
        --target python:docs/examples/adapters_llamaindex.py:ask --retrieval-only

NOTES_DIR names the notes folder; it has no default.
"""

import os
from pathlib import Path

from llama_index.core import Document
from llama_index.core.node_parser import MarkdownNodeParser
from llama_index.retrievers.bm25 import BM25Retriever

from evalkit.adapters import llamaindex

# The notes folder, always given: NOTES_DIR=path/to/notes.
NOTES = Path(os.environ.get("NOTES_DIR") or "(NOTES_DIR is not set)")
NOTE_FILES = sorted(NOTES.rglob("*.md"))
if not NOTE_FILES:
    raise FileNotFoundError(f"no .md notes under {NOTES}: set NOTES_DIR to your notes folder")

# Each note as it is on disk, with its path (SimpleDirectoryReader sets `file_path` too).
documents = [
    Document(text=path.read_text(encoding="utf-8"), metadata={"file_path": str(path)})
    for path in NOTE_FILES
]
nodes = MarkdownNodeParser().get_nodes_from_documents(documents)
retriever = BM25Retriever.from_defaults(nodes=nodes, similarity_top_k=10)

# evalkit calls `ask(request)`; the adapter turns the retrieved nodes into contract chunks.
ask = llamaindex.target(retriever, notes_dir=NOTES)
