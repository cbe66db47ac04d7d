"""The judge cache: SQLite in WAL mode, one row per (judge kind, inputs, model, prompt, temperature).

Two processes may judge into the same file at once: WAL lets readers and one writer work
together, `busy_timeout` makes a second writer wait instead of failing, and every write
is one short `INSERT OR REPLACE` transaction, so no write can be lost or half-done.
"""

from __future__ import annotations

import hashlib
import sqlite3
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from evalkit.errors import BadConfig, Problem, redact_data

DEFAULT_CACHE_PATH = Path("cache/judge_cache.sqlite")
_BUSY_TIMEOUT_MS = 30_000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS judgments (
    key TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    model TEXT NOT NULL,
    prompt_version TEXT NOT NULL,
    created_at REAL NOT NULL,
    value BLOB NOT NULL
)
"""


def context_hash(context: Sequence[Mapping[str, Any]]) -> str:
    """sha256 over the context the judge saw: each chunk's id and text, in rank order."""
    h = hashlib.sha256()
    for chunk in context:
        h.update(orjson.dumps([chunk.get("chunk_id"), chunk.get("text") or ""]))
        h.update(b"\n")
    return h.hexdigest()


def cache_key(
    *,
    kind: str,
    question: str,
    answer: str,
    context_sha256: str,
    provider: str,
    model: str,
    prompt_version: str,
    temperature: float,
    trial: int = 0,
    extra: Mapping[str, Any] | None = None,
) -> str:
    """sha256 of the canonical JSON of everything that can change a judgment.

    `extra` carries inputs some prompts add (the correctness judge's expected key facts).
    Trial 0 has no trial field, so a single-trial run and trial 0 of `--judge-trials N`
    share entries.
    """
    parts: dict[str, Any] = {
        "kind": kind,
        "question": question,
        "answer": answer,
        "context": context_sha256,
        "provider": provider,
        "model": model,
        "prompt_version": prompt_version,
        "temperature": float(temperature),
    }
    if trial:
        parts["trial"] = int(trial)
    if extra:
        parts["extra"] = dict(extra)
    return hashlib.sha256(orjson.dumps(parts, option=orjson.OPT_SORT_KEYS)).hexdigest()


class JudgeCache:
    """Get/put judgments by key. Safe across processes; one connection per instance.

    Args:
        path: the SQLite file (its folder is created).
    """

    def __init__(self, path: Path = DEFAULT_CACHE_PATH):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        # Autocommit (isolation_level=None): each INSERT OR REPLACE is its own transaction.
        self._conn = sqlite3.connect(
            str(self.path), timeout=_BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False
        )
        self._conn.execute(f"PRAGMA busy_timeout={_BUSY_TIMEOUT_MS}")
        self._retry_locked(lambda: self._conn.execute("PRAGMA journal_mode=WAL"))
        self._conn.execute("PRAGMA synchronous=NORMAL")
        self._retry_locked(lambda: self._conn.execute(_SCHEMA))

    @staticmethod
    def _retry_locked(fn: Any, attempts: int = 50) -> Any:
        # Switching to WAL needs a moment of exclusive access; busy_timeout does not cover it.
        for i in range(attempts):
            try:
                return fn()
            except sqlite3.OperationalError as e:
                if "locked" not in str(e) or i == attempts - 1:
                    raise
                time.sleep(0.05)
        return None  # pragma: no cover

    def get(self, key: str) -> dict[str, Any] | None:
        """The stored judgment for `key` (secrets redacted, also in entries older than that rule), or None."""
        with self._lock:
            row = self._conn.execute("SELECT value FROM judgments WHERE key = ?", (key,)).fetchone()
        return redact_data(orjson.loads(row[0])) if row else None

    def put(self, key: str, value: Mapping[str, Any], *, kind: str, model: str, prompt_version: str) -> None:
        """Store (or replace) one judgment, every string in it redacted (errors.redact)."""
        blob = orjson.dumps(redact_data(dict(value)))
        with self._lock:
            self._retry_locked(
                lambda: self._conn.execute(
                    "INSERT OR REPLACE INTO judgments (key, kind, model, prompt_version, created_at, value)"
                    " VALUES (?, ?, ?, ?, ?, ?)",
                    (key, kind, model, prompt_version, time.time(), blob),
                )
            )

    def count(self) -> int:
        with self._lock:
            return int(self._conn.execute("SELECT COUNT(*) FROM judgments").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._conn.close()


@dataclass
class CacheMerge:
    """What `merge_caches` did: entries added to the target, entries it already had
    (identical), and keys both held with different judgments (the target's kept)."""

    target: Path
    added: int = 0
    same: int = 0
    conflicts: int = 0
    sources: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"target": str(self.target), "added": self.added, "same": self.same, "conflicts": self.conflicts,
                "sources": self.sources}


def source_problem(path: Path) -> str | None:
    if not path.is_file():
        return "no such file"
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
            cols = [r[1] for r in conn.execute("PRAGMA table_info(judgments)")]
    except sqlite3.DatabaseError as e:
        return f"not a judge cache ({e})"
    if not {"key", "kind", "model", "prompt_version", "created_at", "value"} <= set(cols):
        return "not a judge cache (no judgments table)"
    return None


def merge_caches(target: str | Path, sources: Sequence[str | Path]) -> CacheMerge:
    """Copy every judgment of the `sources` caches into `target` (created if missing).

    For shards judged on different hosts, each with its own cache: merged, the next run or
    re-judge finds every verdict any shard paid for. A key names everything that can change
    a judgment (kind, inputs, model, prompt, temperature, trial), so the same key in two
    caches is the same question asked twice; the target's judgment is kept (first wins,
    like a cache hit), and a key whose stored judgments differ (a judge sampled above
    temperature 0, or a provider that changed under a pinned name) is counted as a conflict.

    Raises:
        BadConfig: a source that is missing or not a judge cache (every one named, before
            anything is written), or the target among the sources.
    """
    target = Path(target)
    paths = [Path(s) for s in sources]
    problems = [Problem(msg, path=str(p)) for p in paths if (msg := source_problem(p)) is not None]
    if any(p.resolve() == target.resolve() for p in paths):
        problems.append(Problem("is the target itself", path=str(target), field="--into"))
    if not paths:
        problems.append(Problem("no cache to merge", field="CACHE"))
    if problems:
        raise BadConfig(problems)
    cache = JudgeCache(target)
    result = CacheMerge(target=target)
    try:
        conn = cache._conn
        with cache._lock:
            for path in paths:
                conn.execute("ATTACH DATABASE ? AS src", (str(path),))  # only read from
                try:
                    conn.execute("BEGIN IMMEDIATE")
                    same = conn.execute(
                        "SELECT COUNT(*) FROM src.judgments s JOIN main.judgments m ON m.key = s.key AND m.value = s.value"
                    ).fetchone()[0]
                    conflicts = conn.execute(
                        "SELECT COUNT(*) FROM src.judgments s JOIN main.judgments m ON m.key = s.key AND m.value != s.value"
                    ).fetchone()[0]
                    added = conn.execute(
                        "INSERT OR IGNORE INTO main.judgments (key, kind, model, prompt_version, created_at, value)"
                        " SELECT key, kind, model, prompt_version, created_at, value FROM src.judgments"
                    ).rowcount
                    conn.execute("COMMIT")
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
                finally:
                    conn.execute("DETACH DATABASE src")
                result.added += added
                result.same += same
                result.conflicts += conflicts
                result.sources.append({"path": str(path), "added": added, "same": same, "conflicts": conflicts})
    finally:
        cache.close()
    return result
