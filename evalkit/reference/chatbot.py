"""ReferenceChatbot: the /api/v1/ask contract (DESIGN.md §5) over a folder of markdown notes.

Index built once at construction and never mutated, so `ask` is safe from many threads; a
request scoped by `folders` searches an index of its scope alone (built on first use, kept
per distinct scope under a lock), so notes outside the scope never change its scores.
Lexical BM25 always; vectors when EMBEDDINGS_BASE_URL is set; extractive answers unless
ANSWER_BASE_URL and ANSWER_MODEL are set. See EVAL.md "reference-chatbot".
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import numpy as np
from pydantic import Field, StringConstraints, ValidationError

from evalkit.errors import InputError, Problem
from evalkit.reference.answer import (
    ABSTAIN_TEXT,
    CHAT_PROMPT_VERSION,
    EXTRACTIVE_VERSION,
    UNSEEN_SHARE,
    chat_messages,
    evidence,
    extractive_answer,
    is_decline,
    renumber_citations,
    unseen_share,
)
from evalkit.reference.chunker import CHUNKER_VERSION, ChunkerConfig
from evalkit.reference.corpus import build_corpus, content_hash
from evalkit.reference.folders import in_folders, note_folder, select_folders
from evalkit.reference.index import LexicalIndex, fuse, indexed_text, normalize_rows
from evalkit.reference.tokens import terms
from evalkit.schema import AskRequest

if TYPE_CHECKING:
    from evalkit.net.retry import RetryPolicy

REFERENCE_VERSION = "reference-v1"


@dataclass(frozen=True)
class ReferenceConfig:
    """Every knob of the reference chatbot (EVAL.md "reference-chatbot" lists them).

    Attributes:
        chunker: chunk budget and limits.
        bm25_k1, bm25_b: BM25 parameters.
        abstain_threshold: abstain when the evidence share is below this (answer.py).
        evidence_chunks: how many top chunks count as evidence.
        folder_confidence_threshold: on_with_fallback falls back below this share.
        answer_sentences: sentences in an extractive answer.
        answer_context_chunks: chunks read by either answerer.
        embeddings_base_url/model/api_key: OpenAI-compatible embeddings (optional).
        answer_base_url/model/api_key: OpenAI-compatible chat for generative answers (optional).
        timeout: seconds per try of a call to either endpoint (the whole answer: connect,
            send, every byte).
        history_questions: a conversation's turn (a request with `history`) is searched with
            the last this-many earlier user questions added to its own: "and if I complete
            it early?" finds the note "How do I recur a task?" named. 0 ignores the history.
            The request option `history_questions` sets it per request.
    """

    chunker: ChunkerConfig = field(default_factory=ChunkerConfig)
    bm25_k1: float = 1.2
    bm25_b: float = 0.75
    abstain_threshold: float = 0.4
    evidence_chunks: int = 3
    folder_confidence_threshold: float = 0.35
    answer_sentences: int = 3
    answer_context_chunks: int = 3
    embeddings_base_url: str | None = None
    embeddings_model: str | None = None
    embeddings_api_key: str | None = field(default=None, repr=False)
    answer_base_url: str | None = None
    answer_model: str | None = None
    answer_api_key: str | None = field(default=None, repr=False)
    timeout: float = 60.0
    history_questions: int = 3

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> ReferenceConfig:
        """Endpoints from EMBEDDINGS_BASE_URL / EMBEDDINGS_MODEL / EMBEDDINGS_API_KEY and
        ANSWER_BASE_URL / ANSWER_MODEL / ANSWER_API_KEY; `overrides` win."""
        env = os.environ if env is None else env
        emb_url = env.get("EMBEDDINGS_BASE_URL") or None
        values: dict[str, Any] = {
            "embeddings_base_url": emb_url,
            "embeddings_model": (env.get("EMBEDDINGS_MODEL") or "default") if emb_url else None,
            "embeddings_api_key": env.get("EMBEDDINGS_API_KEY") or None,
            "answer_base_url": env.get("ANSWER_BASE_URL") or None,
            "answer_model": env.get("ANSWER_MODEL") or None,
            "answer_api_key": env.get("ANSWER_API_KEY") or None,
        }
        values.update(overrides)
        return cls(**values)

    @property
    def generative(self) -> bool:
        return bool(self.answer_base_url and self.answer_model)

    def public(self) -> dict:
        """The config without secrets (for logs and config.json)."""
        d = asdict(self)
        d.pop("embeddings_api_key")
        d.pop("answer_api_key")
        return d


# What one request may carry. The runner's own requests are far below these; a request
# past them is a client error (400), not minutes of CPU (a 1 MB `folders` list once was).
MAX_QUESTION_CHARS = 20_000
MAX_K = 1000
MAX_SCOPE_ITEMS = 1000
MAX_SCOPE_CHARS = 1024
MAX_OPTIONS = 100

_ScopeItem = Annotated[str, StringConstraints(max_length=MAX_SCOPE_CHARS)]


class ServedRequest(AskRequest):
    """AskRequest as the reference server accepts it: strict types (`k: "5"` and `k: true`
    are refused, not coerced) and bounded sizes."""

    question: str = Field(min_length=1, max_length=MAX_QUESTION_CHARS, strict=True)
    k: int = Field(5, ge=1, le=MAX_K, strict=True)
    vaults: list[_ScopeItem] = Field(default_factory=list, max_length=MAX_SCOPE_ITEMS)
    folders: list[_ScopeItem] = Field(default_factory=list, max_length=MAX_SCOPE_ITEMS)
    options: dict[str, Any] = Field(default_factory=dict, max_length=MAX_OPTIONS)
    debug: bool = Field(True, strict=True)


def default_vault_id(vault: Path) -> str:
    """A vault's id when none is given: its folder's name (`sample_vault`), so an eval set
    can name the vault it is about and a server for another vault can say so."""
    return vault.resolve().name or "default"


def _problems(e: ValidationError) -> list[Problem]:
    return [
        Problem(err["msg"], field=".".join(str(p) for p in err["loc"]) or None)
        for err in e.errors(include_url=False)
    ]


class ReferenceChatbot:
    """A small, real retrieval chatbot over a markdown vault.

    Args:
        vault: the vault folder.
        vault_id: goes into chunk ids and answers the request's `vaults` filter;
            default: the vault folder's name. A request naming only other vaults is
            refused (InputError, the server's 400), never answered from nothing.
        config: knobs; default ReferenceConfig.from_env().
        retry_policy: the endpoints' `evalkit.net.retry.RetryPolicy`; default two retries
            after the first try (`openai_compat.DEFAULT_RETRIES`). Tests pass
            `RetryPolicy.no_wait()`.

    Raises:
        InputError: the vault folder does not exist.
        BackendError: embeddings were configured and the endpoint failed while indexing.
    """

    def __init__(
        self,
        vault: Path | str,
        *,
        vault_id: str | None = None,
        config: ReferenceConfig | None = None,
        retry_policy: RetryPolicy | None = None,
    ):
        self.vault = Path(vault)
        self.vault_id = vault_id or default_vault_id(self.vault)
        self.config = cfg = config if config is not None else ReferenceConfig.from_env()
        corpus = build_corpus(self.vault, vault_id=self.vault_id, config=cfg.chunker)
        self.chunks = corpus.chunks
        self.folders = corpus.folders
        self._chunk_ids = [c.chunk_id for c in self.chunks]
        self._chunk_folders = [note_folder(c.rel_path) for c in self.chunks]
        self._terms = [terms(indexed_text(c)) for c in self.chunks]
        self._lexical = LexicalIndex(self._terms, k1=cfg.bm25_k1, b=cfg.bm25_b)
        self._term_sets = self._lexical.term_sets
        self._indexes: dict[tuple[float, float], LexicalIndex] = {}  # per-request BM25 settings
        # A scoped request's own memory (fresh index over its scope), per distinct scope and
        # BM25 setting, least recently used dropped first; the lock keeps `ask` thread-safe.
        self._scoped: OrderedDict[tuple, _ScopedIndex] = OrderedDict()
        self._scoped_lock = threading.Lock()

        self._embedder = self._chat = None
        self._vectors: np.ndarray | None = None
        if cfg.embeddings_base_url:
            from evalkit.reference.openai_compat import EmbeddingsClient

            self._embedder = EmbeddingsClient(
                cfg.embeddings_base_url, cfg.embeddings_model or "default", cfg.embeddings_api_key, cfg.timeout,
                retry_policy=retry_policy,
            )
            vecs = self._embedder.embed([indexed_text(c) for c in self.chunks]) if self.chunks else []
            self._vectors = normalize_rows(vecs) if vecs else np.zeros((0, 1))
        if cfg.generative:
            from evalkit.reference.openai_compat import ChatClient

            self._chat = ChatClient(
                cfg.answer_base_url, cfg.answer_model, cfg.answer_api_key, cfg.timeout, retry_policy=retry_policy
            )

        emb = cfg.embeddings_model if self._embedder else None
        build = f"{cfg.chunker.describe()}+embedding_{emb or 'none'}"
        self._versions = {
            "index_build_version": build,
            "retriever_version": (
                f"bm25(k1={cfg.bm25_k1},b={cfg.bm25_b})"
                + ("+vector+minmax_fusion" if self._embedder else "+lexical_only")
            ),
            "answerer_version": (
                f"{CHAT_PROMPT_VERSION}+llm_{cfg.answer_model}" if self._chat else EXTRACTIVE_VERSION
            ) + f"+abstain_{cfg.abstain_threshold}+unseen_{UNSEEN_SHARE}",
            "llm_model": cfg.answer_model if self._chat else None,
            "embedding_model": emb,
            "chunker_version": CHUNKER_VERSION,
        }
        self._coverage = dict(corpus.coverage, index_version=f"{build}+{content_hash(self.chunks)}")

    # ------------------------------------------------------------------ public

    def versions(self) -> dict:
        """The `debug.versions` object every answer carries."""
        return dict(self._versions)

    def index_stats(self) -> dict:
        """The seed's indexing_coverage object (schema.IndexingCoverage shape), plus `files`:
        the rel_paths of every note with at least one indexed chunk, sorted, so that
        `evalkit validate --api-url` can check gold anchors' files against the index."""
        cov = dict(self._coverage)
        cov["files"] = sorted({c.rel_path for c in self.chunks})
        cov["chunks_skipped_reasons"] = dict(cov["chunks_skipped_reasons"])
        cov["chunk_token_stats"] = dict(cov["chunk_token_stats"])
        cov["coverage_by_doc_type"] = {k: dict(v) for k, v in cov["coverage_by_doc_type"].items()}
        return cov

    def close(self) -> None:
        """Close HTTP clients of configured endpoints (nothing to do otherwise)."""
        for client in (self._embedder, self._chat):
            if client is not None:
                client.close()

    def ask(self, request: Mapping[str, Any]) -> dict:
        """Answer one request of the /api/v1/ask contract.

        Args:
            request: the JSON body as a dict, plus optional "debug" (default True, as
                schema.AskRequest). `options.abstain_threshold` (0-1), `bm25_k1` (>= 0)
                and `bm25_b` (0-1) override the configured values for this request; any
                other option is ignored and named in `debug.ignored_options`.

        Returns:
            The response dict: answer, references, abstained, abstain_reason and, when
            debug, the debug object (retrieved chunks with full text).

        Raises:
            InputError: the request does not validate (one Problem per field).
            BackendError: a configured embeddings or chat endpoint failed.
        """
        try:
            req = ServedRequest.model_validate(dict(request))
        except ValidationError as e:
            raise InputError(_problems(e)) from None
        threshold = _number_option(req.options, "abstain_threshold", self.config.abstain_threshold, 0.0, 1.0)
        k1 = _number_option(req.options, "bm25_k1", self.config.bm25_k1, 0.0, None)
        b = _number_option(req.options, "bm25_b", self.config.bm25_b, 0.0, 1.0)
        n_earlier = int(_number_option(req.options, "history_questions", self.config.history_questions, 0.0, None))
        allowed = self._filter_mask(req.vaults, req.folders)
        index = self._scoped_index(req.folders, allowed, k1, b) if not allowed.all() else self._index(k1, b)
        # An option this chatbot does not know changes nothing: it says so, so a run made with
        # `--param top_k_rerank=3` is not mistaken for a run that measured that setting.
        ignored = sorted(k for k in req.options if k not in OPTIONS)

        t0 = time.perf_counter()
        query = search_query(req.question, req.history, n_earlier)
        qterms = terms(query)
        lexical = np.where(allowed, index.scores(qterms), 0.0)
        t1 = time.perf_counter()
        selection = select_folders(
            req.folder_mode, lexical, self._chunk_folders, self.folders, qterms,
            confidence_threshold=self.config.folder_confidence_threshold,
        )
        if req.folder_mode != "off":
            keep = set(selection["selected_folders"])
            allowed = allowed & np.array([in_folders(f, keep) for f in self._chunk_folders], dtype=bool)
        t2 = time.perf_counter()
        vector = None
        if self._embedder is not None and self._vectors is not None and self.chunks:
            qv = normalize_rows(self._embedder.embed([query]))[0]
            vector = self._vectors @ qv
        w = req.rerank_weights
        hits = fuse(lexical, vector, allowed, self._chunk_ids, req.k, w.vector, w.lexical)
        retrieved = [self._chunk_dict(h, rank) for rank, h in enumerate(hits, 1)]
        t3 = time.perf_counter()

        top_sets = [self._term_sets[h.index] for h in hits[: self.config.evidence_chunks]]
        share = evidence(qterms, top_sets, index.idf)
        # The notes lack most of what is asked about: no passage can answer it, whatever
        # the few shared words score (answer.py). A threshold of 0 turns the lexical rule off,
        # this part of it too.
        unseen = unseen_share(qterms, index.knows)
        lacking = threshold > 0 and unseen >= UNSEEN_SHARE
        abstained, reason = (not hits or share < threshold or lacking), "no_relevant_context"
        answer, cited = ABSTAIN_TEXT, []
        if not abstained:
            answer, cited, declined = self._answer(req.question, qterms, retrieved, index.idf)
            if declined:
                abstained, reason, cited = True, "model_declined", []
        t4 = time.perf_counter()

        response: dict[str, Any] = {
            "answer": answer,
            "references": [
                {k: retrieved[i][k] for k in ("chunk_id", "rel_path", "heading_path", "start_line", "end_line")}
                for i in cited
            ],
            "abstained": abstained,
            "abstain_reason": reason if abstained else None,
        }
        if req.debug:
            ms = lambda a, b: round((b - a) * 1000, 3)  # noqa: E731
            response["debug"] = {
                "retrieved_chunks": retrieved,
                "folder_selection": selection,
                "timings_ms": {
                    "folder_selection": ms(t1, t2),
                    "retrieval": ms(t0, t1) + ms(t2, t3),
                    "generation": ms(t3, t4),
                },
                "versions": self._versions_for(k1, b),
                "evidence": round(share, 6),
                "unseen_share": round(unseen, 6),
                "abstain_threshold": threshold,
                "ignored_options": ignored,
            }
        return response

    # ------------------------------------------------------------------ helpers

    def _index(self, k1: float, b: float) -> LexicalIndex:
        """The BM25 index for (k1, b): the configured one, or one built for a request's
        `options.bm25_k1` / `bm25_b` and kept (a few at most) for the next request."""
        if (k1, b) == (self._lexical.k1, self._lexical.b):
            return self._lexical
        found = self._indexes.get((k1, b))
        if found is None:
            if len(self._indexes) >= MAX_CACHED_INDEXES:
                self._indexes.pop(next(iter(self._indexes)))
            found = self._indexes[(k1, b)] = LexicalIndex(self._terms, k1=k1, b=b)
        return found

    def _scoped_index(self, folders: list[str], allowed: np.ndarray, k1: float, b: float) -> _ScopedIndex:
        """A request scoped to some notes searches a memory of only those notes (Hindsight's
        fresh memory per case): BM25's document frequencies and average length come from the
        scope, so a note outside it never changes the request's scores. Built once per
        distinct scope and (k1, b), kept for the next request with the same scope."""
        key = (tuple(sorted({f.strip().strip("/") for f in folders})), k1, b)
        with self._scoped_lock:
            found = self._scoped.get(key)
            if found is not None:
                self._scoped.move_to_end(key)
                return found
        positions = np.flatnonzero(allowed)
        found = _ScopedIndex(LexicalIndex([self._terms[i] for i in positions], k1=k1, b=b), positions, len(allowed))
        with self._scoped_lock:
            self._scoped[key] = found
            while len(self._scoped) > MAX_CACHED_SCOPES:
                self._scoped.popitem(last=False)
        return found

    def _versions_for(self, k1: float, b: float) -> dict:
        versions = self.versions()
        if (k1, b) != (self.config.bm25_k1, self.config.bm25_b):
            versions["retriever_version"] = versions["retriever_version"].replace(
                f"bm25(k1={self.config.bm25_k1},b={self.config.bm25_b})", f"bm25(k1={k1},b={b})", 1
            )
        return versions

    def _filter_mask(self, vaults: list[str], folders: list[str]) -> np.ndarray:
        n = len(self.chunks)
        if vaults and self.vault_id not in vaults:
            # An empty search would look like a chatbot that knows nothing: say what is wrong.
            names = ", ".join(repr(v) for v in vaults)
            raise InputError(
                Problem(f"unknown vault {names}; this server serves {self.vault_id!r}", field="vaults")
            )
        if not folders:
            return np.ones(n, dtype=bool)
        prefixes = {f.strip().strip("/") for f in folders}
        if prefixes & {"", "."}:
            return np.ones(n, dtype=bool)
        # A note is kept when it, or one of its folders, is named: a walk up its own path
        # (depth d) per distinct note, so the cost is O(notes × d), whatever len(folders).
        keep: dict[str, bool] = {}
        for c in self.chunks:
            if c.rel_path not in keep:
                keep[c.rel_path] = _under_any(c.rel_path, prefixes)
        return np.fromiter((keep[c.rel_path] for c in self.chunks), dtype=bool, count=n)

    def _chunk_dict(self, hit: Any, rank: int) -> dict:
        c = self.chunks[hit.index]
        return {
            "chunk_id": c.chunk_id,
            "rel_path": c.rel_path,
            "heading_path": c.heading_path,
            "start_line": c.start_line,
            "end_line": c.end_line,
            "score_vector": hit.score_vector,
            "score_lexical": hit.score_lexical,
            "score_final": hit.score_final,
            "text": c.text,
            "rank": rank,
            "token_count": c.token_count,
        }

    def _answer(
        self, question: str, qterms: list[str], retrieved: list[dict], idf: Any
    ) -> tuple[str, list[int], bool]:
        context = retrieved[: self.config.answer_context_chunks]
        if self._chat is None:
            text, cited = extractive_answer(
                qterms, context, idf, max_sentences=self.config.answer_sentences,
                context_chunks=len(context),
            )
            return text, cited, False
        reply = self._chat.complete(chat_messages(question, context)).strip()
        if is_decline(reply):
            return reply, [], True
        text, cited = renumber_citations(reply, len(context))
        return text, cited, False


class _ScopedIndex:
    """A LexicalIndex over some of the vault's chunks, answering `scores` and `idf` as the
    whole-vault index does: scores for every chunk (0 outside the scope), idf of the scope."""

    def __init__(self, index: LexicalIndex, positions: np.ndarray, n_chunks: int):
        self._index, self._positions, self._n = index, positions, n_chunks
        self.idf = index.idf
        self.knows = index.knows

    def scores(self, query_terms: list[str]) -> np.ndarray:
        out = np.zeros(self._n, dtype=np.float64)
        out[self._positions] = self._index.scores(query_terms)
        return out


def _under_any(rel_path: str, prefixes: set[str]) -> bool:
    """Whether `rel_path` is one of `prefixes` or lies below one, at a `/` boundary. Unlike
    folder selection, a filter the user gave does not include root notes."""
    folder = note_folder(rel_path)
    return rel_path in prefixes or (folder is not None and in_folders(folder, prefixes))


# The request options this chatbot honours (`--param key=value`); others are named back.
OPTIONS = frozenset({"abstain_threshold", "bm25_k1", "bm25_b", "history_questions"})


def search_query(question: str, history: Any, n_earlier: int) -> str:
    """What a turn is searched with: its question after the last `n_earlier` user questions
    of its history (the reference chatbot's whole query rewrite; a real one would ask an LLM
    to make the follow-up stand alone)."""
    if not history or n_earlier <= 0:
        return question
    earlier = [m.content for m in history if m.role == "user" and m.content]
    return " ".join([*earlier[-n_earlier:], question])
MAX_CACHED_INDEXES = 4
# Distinct request scopes kept indexed (an eval set of per-case folders asks for one each).
MAX_CACHED_SCOPES = 256


def _number_option(options: Mapping[str, Any], name: str, default: float, low: float, high: float | None) -> float:
    if name not in options:
        return default
    v = options[name]
    if isinstance(v, bool) or not isinstance(v, int | float) or not low <= v <= (high if high is not None else v):
        bounds = f"from {low:g} to {high:g}" if high is not None else f"of at least {low:g}"
        raise InputError(Problem(f"expected a number {bounds}, got {v!r}", field=f"options.{name}"))
    return float(v)
