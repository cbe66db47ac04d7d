"""A `--target python:` wrapper of the reference chatbot that honours BM25 options per request.

The reference chatbot reads only `options.abstain_threshold`; the matrix tests need real
retrieval settings that differ, so this wrapper builds (and caches) one ReferenceChatbot per
`options.bm25_k1` / `options.bm25_b` / `options.max_tokens` over sample_vault/.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from evalkit.reference.chatbot import ReferenceChatbot, ReferenceConfig
from evalkit.reference.chunker import ChunkerConfig

VAULT = Path(__file__).resolve().parents[2] / "sample_vault"
_BOTS: dict[tuple[float, float, int], ReferenceChatbot] = {}
_LOCK = threading.Lock()


def _bot(options: dict[str, Any]) -> ReferenceChatbot:
    key = (float(options.get("bm25_k1", 1.2)), float(options.get("bm25_b", 0.75)), int(options.get("max_tokens", 256)))
    with _LOCK:
        if key not in _BOTS:
            cfg = ReferenceConfig(chunker=ChunkerConfig(max_tokens=key[2]), bm25_k1=key[0], bm25_b=key[1])
            _BOTS[key] = ReferenceChatbot(VAULT, config=cfg)
        return _BOTS[key]


def ask(request: dict[str, Any]) -> dict[str, Any]:
    options = dict(request.get("options") or {})
    bot = _bot(options)
    for name in ("bm25_k1", "bm25_b", "max_tokens"):
        options.pop(name, None)
    return bot.ask({**request, "options": options})
