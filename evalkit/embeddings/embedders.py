"""Embedders: one small Protocol, two implementations, and the cache kept outside them.

- `LexicalEmbedder`, the offline default: hashed character n-gram TF-IDF (lower-cased words,
  each padded with a space, n-grams of 3 to 5 characters, hashed by CRC-32 into
  `LEXICAL_DIMS` buckets; sublinear term frequency 1 + ln(tf), smooth IDF
  ln((1 + N) / (1 + df)) + 1 over the N texts embedded together; rows L2-normalised).
  It needs no download and no network, and it is *lexical, not neural*: it sees shared
  spellings (and word stems, through the n-grams), not meaning; "car" and "automobile" are
  far apart. Its IDF is fitted on the texts of one call, so a text's vector depends on the
  other texts of that call, and it is not cached; `fit(texts)` fixes the IDF on a set of texts
  first (an analysis fits it on all its texts, then embeds them a block at a time, each vector
  the one a single call over all of them would give).
- `OpenAICompatibleEmbedder`: POST `{base_url}/embeddings` (`{"model", "input": [...]}`) on
  the project's HTTP stack (httpx over `evalkit.net`), in batches, with the one retry policy
  (`evalkit.net.retry`). Any server that speaks OpenAI's embeddings API: OpenAI, Ollama,
  llama.cpp, vLLM, LM Studio, LiteLLM.
- `CachedEmbedder` wraps a stateless embedder with the judge cache (`JudgeCache`, kind
  `embedding`, values kept unredacted: a vector holds no secret), keyed by the embedder's
  identity and the text, so a second analysis of the same texts asks the endpoint nothing.
"""

from __future__ import annotations

import hashlib
import os
import re
import unicodedata
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import orjson

from evalkit.errors import InputError, Problem, redact

__all__ = [
    "CACHE_KIND", "DEFAULT_BATCH_SIZE", "KEY_ENV", "LEXICAL_DIMS", "LEXICAL_VERSION", "CachedEmbedder", "Embedder",
    "EmbeddingError", "LexicalEmbedder", "lexical_counts", "OpenAICompatibleEmbedder", "embedding_cache_key", "lexical_features",
]

LEXICAL_DIMS = 1 << 12
LEXICAL_NGRAMS = (3, 4, 5)
LEXICAL_VERSION = f"lexical-charwb{LEXICAL_NGRAMS[0]}-{LEXICAL_NGRAMS[-1]}-crc32x{LEXICAL_DIMS}-tfidf-v1"
DEFAULT_BATCH_SIZE = 64
FITTED_ROWS = 1024  # rows a fitted LexicalEmbedder builds together
CACHE_KIND = "embedding"
# The key is read from here, never from a flag (a flag lands in shell history and process
# lists); OPENAI_API_KEY is sent only to OpenAI's own host, never to another server.
KEY_ENV = "EVALKIT_EMBED_API_KEY"
_OPENAI_HOST = "api.openai.com"
_WORD = re.compile(r"\w+")


class EmbeddingError(InputError):
    """The embeddings endpoint could not be used (unreachable, refused, a reply of the wrong
    shape): the analysis stops, its file records why, the run's other files are untouched."""


class Embedder(Protocol):
    """Texts -> one vector per text, rows in the texts' order."""

    name: str
    # A text's vector depends on the text alone (not on the other texts of the call). An
    # embedder that is not cacheable may offer `fit(texts) -> Embedder`, a copy whose vectors
    # depend on `texts` and the text alone; an analysis then embeds a block at a time.
    cacheable: bool

    def identity(self) -> dict[str, Any]:
        """What the vectors depend on (kind, model, version, server): recorded and cache-keyed."""
        ...

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        """A (len(texts), dims) float array."""
        ...


# --------------------------------------------------------------------------- offline default


def lexical_features(text: str) -> list[int]:
    """The bucket of every character n-gram of `text` (with repeats): NFKC, lower-cased,
    words (`\\w+`) padded with one space each side, n in LEXICAL_NGRAMS (a word shorter than
    n gives no n-gram of that size), each n-gram hashed by CRC-32 of its UTF-8 modulo LEXICAL_DIMS."""
    out: list[int] = []
    for word in _WORD.findall(unicodedata.normalize("NFKC", text).lower()):
        padded = f" {word} "
        for n in LEXICAL_NGRAMS:
            if len(padded) < n:
                break
            out.extend(zlib.crc32(padded[i:i + n].encode("utf-8")) % LEXICAL_DIMS for i in range(len(padded) - n + 1))
    return out


def lexical_counts(text: str) -> tuple[np.ndarray, np.ndarray]:
    """The distinct buckets of `text`'s n-grams (`lexical_features`), ascending, and how many
    n-grams fell in each (int64 both)."""
    return np.unique(np.asarray(lexical_features(text), dtype=np.int64), return_counts=True)


@dataclass
class LexicalEmbedder:
    """The offline default (module docstring): hashed character n-gram TF-IDF, fitted on the
    texts of each call. Deterministic across processes and machines (CRC-32, no seed)."""

    name: str = "lexical"
    cacheable: bool = False
    # The IDF per bucket `fit` fixed (None: fitted on the texts of each call), and the texts
    # it saw, as their buckets and counts (`lexical_counts`), so they are not hashed again.
    idf: np.ndarray | None = field(default=None, repr=False, compare=False)
    seen: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict, repr=False, compare=False)

    def identity(self) -> dict[str, Any]:
        return {"kind": "lexical", "version": LEXICAL_VERSION}

    def fit(self, texts: Iterable[str]) -> LexicalEmbedder:
        """A copy whose IDF is fitted on `texts` (N = how many, df per bucket) and kept for
        every later call: a text's vector is then the one a single call over all of `texts`
        gives, whatever the texts embedded beside it (embed them in blocks of any size).
        It keeps each text's non-zero buckets (uint16) and counts (uint32), about 6 bytes a
        bucket where the text's dense vector takes 16 KB."""
        df = np.zeros(LEXICAL_DIMS, dtype=np.int64)
        seen: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for text in texts:
            cols, counts = lexical_counts(text)
            df[cols] += 1
            seen[text] = (cols.astype(np.uint16), counts.astype(np.uint32))
        return LexicalEmbedder(name=self.name, idf=np.log((1.0 + len(seen)) / (1.0 + df)) + 1.0, seen=seen)

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self.embed_now(texts)

    def embed_now(self, texts: Sequence[str]) -> np.ndarray:
        n, dims = len(texts), LEXICAL_DIMS
        if self.idf is not None and n > FITTED_ROWS:
            # Fitted: each row depends on its text alone, so the sparse temporaries (several
            # times the non-zero cells, in int64 and float64) are made FITTED_ROWS rows at a time.
            out = np.zeros((n, dims), dtype=np.float32)
            for at in range(0, n, FITTED_ROWS):
                out[at:at + FITTED_ROWS] = self.embed_now(texts[at:at + FITTED_ROWS])
            return out
        rows, cols, tfs = [], [], []
        for i, text in enumerate(texts):
            got = self.seen.get(text)
            c, tf = lexical_counts(text) if got is None else got
            rows.append(np.full(len(c), i, dtype=np.int64))
            cols.append(c.astype(np.int64))
            tfs.append(tf.astype(np.int64))
        out = np.zeros((n, dims), dtype=np.float32)
        if not n:
            return out
        # The non-zero cells row by row, each row's buckets ascending.
        r, c, counts = np.concatenate(rows), np.concatenate(cols), np.concatenate(tfs)
        if self.idf is None:
            df = np.bincount(c, minlength=dims)
            idf = np.log((1.0 + n) / (1.0 + df)) + 1.0
        else:
            idf = self.idf
        # Weighted and normalised over the non-zero cells in float64, then stored as float32:
        # a run's distinct texts can be tens of thousands, at LEXICAL_DIMS each.
        values = (1.0 + np.log(counts)) * idf[c]
        norms = np.sqrt(np.bincount(r, weights=values * values, minlength=n))
        out[r, c] = values / norms[r]
        return out


# --------------------------------------------------------------------------- any OpenAI-compatible server


def _server(base_url: str) -> str:
    """The base URL as recorded: scheme, host, port and path, no user info or query."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(base_url)
    netloc = parts.hostname or ""
    if parts.port:
        netloc += f":{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))


def api_key_for(base_url: str, environ: Mapping[str, str] | None = None) -> str | None:
    """EVALKIT_EMBED_API_KEY, else OPENAI_API_KEY when the server is OpenAI's own, else None
    (local servers take none)."""
    from urllib.parse import urlsplit

    env = os.environ if environ is None else environ
    key = env.get(KEY_ENV) or None
    if key is None and (urlsplit(base_url).hostname or "") == _OPENAI_HOST:
        key = env.get("OPENAI_API_KEY") or None
    return key


@dataclass
class OpenAICompatibleEmbedder:
    """`POST {base_url}/embeddings` in batches of `batch_size`, each retried by `retry_policy`
    (connection errors, timeouts, 408, 429, 5xx; Retry-After honoured).

    Args:
        model: the model name the server knows.
        base_url: e.g. https://api.openai.com/v1 or http://127.0.0.1:11434/v1.
        api_key: sent as a Bearer token when given (module docstring: where it comes from).
        http_client: an httpx.AsyncClient (tests inject one); default the bounded client
            every LLM call uses (`evalkit.net.limits.bounded_client`).
    """

    model: str
    base_url: str
    api_key: str | None = None
    timeout: float = 60.0
    batch_size: int = DEFAULT_BATCH_SIZE
    retry_policy: Any = None  # evalkit.net.retry.RetryPolicy; default RetryPolicy()
    http_client: Any = None
    name: str = "openai-compatible"
    cacheable: bool = True
    requests: int = field(default=0, init=False)  # HTTP requests made (retries included)

    def identity(self) -> dict[str, Any]:
        return {"kind": self.name, "model": self.model, "base_url": _server(self.base_url)}

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        from evalkit.net.limits import bounded_client

        if not texts:
            return np.zeros((0, 0))
        client = self.http_client or bounded_client(timeout=self.timeout)
        try:
            parts = [await self._batch(client, list(texts[i:i + self.batch_size]))
                     for i in range(0, len(texts), max(1, self.batch_size))]
        finally:
            if self.http_client is None:
                await client.aclose()
        dims = {p.shape[1] for p in parts}
        if len(dims) != 1:
            raise self._error(f"answered vectors of different lengths ({', '.join(map(str, sorted(dims)))})")
        return np.vstack(parts)

    def _url(self) -> str:
        return self.base_url.rstrip("/") + "/embeddings"

    def _error(self, what: str) -> EmbeddingError:
        return EmbeddingError(Problem(f"the embeddings endpoint {_server(self._url())} {what}", field="--embed-base-url"))

    async def _batch(self, client: Any, batch: list[str]) -> np.ndarray:
        import httpx

        from evalkit.net.retry import RetryPolicy

        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        body = orjson.dumps({"model": self.model, "input": batch})
        policy = self.retry_policy or RetryPolicy()
        try:
            async for attempt in policy.retrying():
                with attempt:
                    self.requests += 1
                    response = await client.post(self._url(), content=body, headers=headers, timeout=self.timeout)
                    await response.aread()
                    response.raise_for_status()
        except httpx.HTTPStatusError as e:
            detail = redact(e.response.text.strip().replace("\n", " "))[:300]
            raise self._error(f"answered HTTP {e.response.status_code}{f': {detail}' if detail else ''}") from None
        except httpx.HTTPError as e:
            raise self._error(f"could not be reached ({type(e).__name__}: {redact(str(e)) or 'no detail'})") from None
        return self._vectors(response.content, len(batch))

    def _vectors(self, raw: bytes, n: int) -> np.ndarray:
        try:
            reply = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise self._error("answered with something that is not JSON") from None
        data = reply.get("data") if isinstance(reply, dict) else None
        if not isinstance(data, list) or len(data) != n:
            got = f"{len(data)} vectors" if isinstance(data, list) else "no `data` list"
            raise self._error(f"answered {got} for {n} texts (expected OpenAI's {{'data': [{{'embedding': [...]}}]}})")
        # `index` says which input a vector is for; servers that omit it answer in order.
        order = [item.get("index", i) if isinstance(item, dict) else i for i, item in enumerate(data)]
        if sorted(order) != list(range(n)):
            raise self._error("answered `index` values that are not 0..n-1, one each")
        rows: list[Any] = [None] * n
        for at, item in zip(order, data):
            vec = item.get("embedding") if isinstance(item, dict) else None
            if not isinstance(vec, list) or not vec or not all(isinstance(x, int | float) and not isinstance(x, bool) for x in vec):
                raise self._error("answered an `embedding` that is not a list of numbers (send encoding_format float)")
            rows[at] = vec
        if len({len(r) for r in rows}) != 1:
            raise self._error("answered vectors of different lengths")
        out = np.asarray(rows, dtype=np.float64)
        if not np.isfinite(out).all():
            raise self._error("answered a vector holding NaN or infinity")
        return out


# --------------------------------------------------------------------------- the cache, outside the providers


def embedding_cache_key(identity: Mapping[str, Any], text: str) -> str:
    """sha256 of the canonical JSON of the embedder's identity and the text."""
    blob = orjson.dumps({"kind": CACHE_KIND, "embedder": dict(identity), "text": text}, option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(blob).hexdigest()


@dataclass
class CachedEmbedder:
    """`inner` (a cacheable embedder) behind the judge cache: each text's vector is looked up
    by `embedding_cache_key`; the misses are embedded in one call and stored.

    Attributes:
        hits, misses: texts answered from the cache, and texts sent to `inner`.
    """

    inner: Any
    cache: Any  # evalkit.judges.cache.JudgeCache
    refresh: bool = False
    hits: int = 0
    misses: int = 0

    def __post_init__(self) -> None:
        if not self.inner.cacheable:
            raise ValueError(f"{self.inner.name} vectors depend on the other texts of a call; they cannot be cached")
        self.name = self.inner.name
        self.cacheable = True

    def identity(self) -> dict[str, Any]:
        return self.inner.identity()

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        ident = self.identity()
        keys = [embedding_cache_key(ident, t) for t in texts]
        found: list[list[float] | None] = [None] * len(texts)
        if not self.refresh:
            for i, key in enumerate(keys):
                value = self.cache.get(key)
                vec = value.get("vector") if value else None
                if isinstance(vec, list) and vec:
                    found[i] = vec
        todo = [i for i, v in enumerate(found) if v is None]
        self.hits += len(texts) - len(todo)
        self.misses += len(todo)
        if todo:
            fresh = await self.inner.embed([texts[i] for i in todo])
            model = str(ident.get("model") or ident.get("kind"))
            for i, vec in zip(todo, fresh):
                found[i] = vec.tolist()
                self.cache.put(keys[i], {"vector": found[i]}, kind=CACHE_KIND, model=model, prompt_version=str(ident.get("base_url") or ""))
        if not texts:
            return np.zeros((0, 0))
        if len({len(v) for v in found if v is not None}) != 1:
            raise EmbeddingError(Problem("the embedding cache holds vectors of different lengths for this embedder; "
                                         "run again with --refresh-cache", field="--cache-path"))
        return np.asarray(found, dtype=np.float64)


def build_embedder(
    *,
    base_url: str | None,
    model: str | None,
    timeout: float = 60.0,
    retries: int = 3,
    batch_size: int = DEFAULT_BATCH_SIZE,
    cache_path: Path | None = None,
    refresh_cache: bool = False,
    http_client: Any = None,
    retry_policy: Any = None,
) -> Embedder:
    """The embedder the settings name: the lexical default without a base URL, else the
    OpenAI-compatible client (cached in `cache_path` unless it is None).

    Raises:
        EmbeddingError: a base URL without a model, or a model without a base URL.
    """
    if not base_url:
        if model:
            raise EmbeddingError(Problem("--embed-model needs --embed-base-url (or EVALKIT_EMBED_BASE_URL): the "
                                         "offline default has no models", field="--embed-model"))
        return LexicalEmbedder()
    if not model:
        raise EmbeddingError(Problem("--embed-base-url needs --embed-model (or EVALKIT_EMBED_MODEL), e.g. "
                                     "text-embedding-3-small or nomic-embed-text", field="--embed-model"))
    if not re.match(r"(?i)^https?://", base_url):
        raise EmbeddingError(Problem(f"{base_url!r} is not an http(s) URL", field="--embed-base-url"))
    from evalkit.net.retry import RetryPolicy

    inner = OpenAICompatibleEmbedder(
        model=model, base_url=base_url, api_key=api_key_for(base_url), timeout=timeout,
        batch_size=max(1, int(batch_size)), http_client=http_client,
        retry_policy=retry_policy or RetryPolicy.from_retries(retries),
    )
    if cache_path is None:
        return inner
    from evalkit.judges.cache import JudgeCache

    cache = JudgeCache(Path(cache_path), label="judge cache (embeddings)", redact=False,
                       fix="or use --no-cache")
    return CachedEmbedder(inner, cache, refresh=refresh_cache)

