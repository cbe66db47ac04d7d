"""The task cache (`--task-cache PATH`, seed 002's `cache: true`): a target's answers kept in
SQLite, so a second run of the same questions against the same target asks it nothing.

An answer is keyed by everything that can change it: the request as the target receives it
(question, history, conversation id, K, folder mode, scope, rerank weights, options with
every --param) and the target's identity (`describe()`: its kind, URL or python: spec,
params, the log a replay reads, the vault of the reference chatbot and, for it, the notes'
sizes and modification times), less the settings
that only say how it is asked (timeout, rps, retries, worker processes). A failed ask is
never cached. The store is the judge cache's (`JudgeCache`: WAL, locking, a damaged file
moved aside), holding answers unredacted, exactly as the target gave them, so a cached
answer makes the same record; only its latency is the stored one, marked `cached` in the
record's `latency`.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Any

import orjson

from evalkit.judges.cache import JudgeCache
from evalkit.schema import AskRequest, IndexingCoverage
from evalkit.store.runlog import Rec
from evalkit.targets.base import AskResult, parse_ask_response, request_body

__all__ = ["CachedTarget", "notes_fingerprint", "task_cache_key"]

# How a target is asked, not what: these change no answer.
_HOW_ASKED = frozenset({"timeout_s", "rps", "retries", "processes", "concurrency", "max_response_bytes"})
_KIND = "target_answer"
_FIX = "or run without --task-cache"


def task_cache_key(identity: dict[str, Any], request: AskRequest) -> str:
    """sha256 over the target's identity and the request body it is sent."""
    body = request_body(request)
    blob = orjson.dumps({"target": identity, "request": body}, option=orjson.OPT_SORT_KEYS, default=str)
    return hashlib.sha256(blob).hexdigest()


def notes_fingerprint(folder: Path) -> str:
    """sha256 over every file's path, size and modification time under `folder` (stat only,
    no reading): any note added, removed or edited changes it."""
    h = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        st = path.stat()
        h.update(f"{path.relative_to(folder).as_posix()}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


class CachedTarget:
    """A Target whose answers come from the task cache when it holds them.

    Attributes:
        hits, misses: asks answered from the cache, and asks passed to the target.
        stored: answers written to the cache.
    """

    def __init__(self, target: Any, path: str | Path):
        self.inner = target
        self.name = target.name
        self.cache = JudgeCache(Path(path), fix=_FIX, label="task cache", redact=False)
        desc = target.describe()
        self.identity = {k: v for k, v in desc.items() if k not in _HOW_ASKED}
        if desc.get("kind") == "reference" and desc.get("vault"):
            # The built-in chatbot answers from these notes: an edited note is another answer.
            self.identity["notes"] = notes_fingerprint(Path(desc["vault"]))
        self.hits = self.misses = self.stored = 0

    async def ask(self, request: AskRequest, *, case_id: str | None = None) -> AskResult:
        key = task_cache_key(self.identity, request)
        entry = self.cache.get(key)
        if entry is not None:
            result = parse_ask_response(entry["response"], request, source="task cache")
            result.missing_fields = list(entry.get(Rec.MISSING_FIELDS) or [])
            result.server_timings_ms = dict(entry.get("server_timings_ms") or {})
            result.attempts = entry.get("attempts") or 1
            result.elapsed_ms = entry.get("elapsed_ms")
            result.logged_total_ms = entry.get("total_ms")
            result.cached = True
            self.hits += 1
            return result
        self.misses += 1
        t0 = time.perf_counter()
        result = await self.inner.ask(request, case_id=case_id)  # a TargetError passes through: never cached
        total_ms = (time.perf_counter() - t0) * 1000.0
        logged = result.logged_total_ms  # a replayed answer's own latency
        entry = {
            "response": result.plain,
            Rec.MISSING_FIELDS: list(result.missing_fields),
            "server_timings_ms": dict(result.server_timings_ms),
            "attempts": result.attempts,
            "elapsed_ms": result.elapsed_ms,
            "total_ms": logged if logged is not None else (result.elapsed_ms if result.elapsed_ms is not None else total_ms),
        }
        if self.cache.put(key, entry, kind=_KIND, model=str(self.identity.get("kind") or ""), prompt_version=""):
            self.stored += 1
        return result

    async def index_stats(self) -> IndexingCoverage | None:
        return await self.inner.index_stats()

    def describe(self) -> dict:
        return self.inner.describe()

    def summary(self) -> dict[str, Any]:
        """What config.json records of the cache: used, where, hits and misses."""
        return {"used": True, "path": str(self.cache.path), "hits": self.hits, "misses": self.misses,
                "stored": self.stored}

    async def aclose(self) -> None:
        self.cache.close()
        await self.inner.aclose()

    def __getattr__(self, name: str) -> Any:
        # Anything else the runner reads of a target (its breaker, its workers) is the target's.
        return getattr(self.inner, name)
