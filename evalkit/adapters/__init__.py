"""Adapters: a retriever, query engine or chain built with a framework, as an evalkit target.

- `evalkit.adapters.llamaindex`: a LlamaIndex retriever or query engine (`evalkit[llamaindex]`).
- `evalkit.adapters.langchain`: a LangChain retriever or chain (`evalkit[langchain]`).

Each module's `target(obj, notes_dir=...)` returns a callable for `--target python:...`;
its `to_chunks(...)` gives contract chunks to a chatbot that serves /api/v1/ask itself.
The frameworks are imported only when an adapter is used (docs/adapters.md).
"""
