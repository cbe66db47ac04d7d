"""A loopback server for the /api/v1/ask contract that fails on purpose, per question.

Used by integration tests (never respx there) to drive the real HTTP client into every
error class. Behaviours are keyed by the question text (whitespace-normalised, exact);
a question with no entry gets the `"*"` entry, else "ok".

Behaviours (a name, or a dict `{"behaviour": name, **options}`):

    ok              200, a full debug response (chunks, references, folder selection,
                    timings, versions). Options: chunks, answer, abstained, abstain_reason.
    empty_answer    like ok with `"answer": ""` (the runner classifies it).
    partial         200, `{"answer": ...}` only (tests missing_fields).
    invalid_schema  200, JSON without `answer`.
    bad_json        200, a truncated JSON body.
    500             always HTTP 500.
    status          always HTTP `status` (option, default 404).
    503-then-ok     HTTP 503 for the first `times` requests (default 2), then ok.
    429             always HTTP 429 with `Retry-After: retry_after` (default "0").
    429-then-ok     429 + Retry-After for the first `times` requests, then ok.
    hang            waits `hang_s` (default 10) before answering ok: set the client
                    timeout well below it. Released at once when the server stops.
    disconnect      closes the connection without a response.

    Every behaviour also takes `delay_ms` (sleep before answering, default 0).

Chunks: dicts with at least `rel_path`; missing fields are filled in (chunk_id as the
DESIGN §5 hash, heading_path "", lines, three scores, rank, token_count, text). The
server returns the first `k` of them. `default_chunks` sets them for every "ok".

`GET /api/v1/index/stats` answers `index_stats` (default: a small valid coverage object;
None -> 404).

Example (in a test module under tests/integration/):

    from fault_server import fault_server  # noqa: F401  (the fixture)

    def test_errors(fault_server):
        srv = fault_server({"q-500": "500", "q-flaky": {"behaviour": "503-then-ok", "times": 1},
                            "q-hang": {"behaviour": "hang", "hang_s": 5}})
        ... HttpTarget(srv.base_url, timeout=0.5, retries=1) ...
        assert srv.hits["q-flaky"] == 2           # requests seen per question

Or without pytest: `base_url, stop = start_fault_server({...}); ...; stop()`.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

import pytest

DEFAULT_CHUNKS: list[dict[str, Any]] = [
    {"rel_path": "notes/alpha.md", "heading_path": "# Alpha", "text": "Alpha is the first Greek letter."},
    {"rel_path": "notes/beta.md", "heading_path": "# Beta > ## Details", "text": "Beta comes after alpha."},
    {"rel_path": "notes/gamma.md", "heading_path": "# Gamma", "text": "Gamma is the third letter."},
]

DEFAULT_INDEX_STATS: dict[str, Any] = {
    "docs_processed": 3,
    "docs_with_0_chunks": 0,
    "chunks_attempted": 3,
    "chunks_embedded": 3,
    "chunks_skipped": 0,
    "chunks_skipped_reasons": {},
    "chunk_token_stats": {"min": 5, "max": 9, "mean": 7, "p95": 9},
    "chunker_version": "fault-1",
    "index_version": "fault-1",
    "coverage_by_doc_type": {"md": {"processed": 3, "with_0_chunks": 0, "chunks_skipped": 0}},
}

VERSIONS = {
    "index_build_version": "fault-1",
    "retriever_version": "fault-1",
    "answerer_version": "fault-1",
    "llm_model": "none",
    "embedding_model": "none",
    "chunker_version": "fault-1",
}

_UNSET: Any = object()


def _norm(question: str) -> str:
    return " ".join(question.split())


def full_chunk(spec: Mapping[str, Any], i: int, vault_id: str = "default") -> dict[str, Any]:
    """Fill a partial chunk spec into a full contract chunk at 0-based position i."""
    text = spec.get("text", f"Text of {spec['rel_path']}.")
    heading = spec.get("heading_path", "")
    start = spec.get("start_line", 1 + 10 * i)
    end = spec.get("end_line", start + 9)
    vec = spec.get("score_vector", round(0.9 - 0.1 * i, 4))
    lex = spec.get("score_lexical", round(0.5 - 0.05 * i, 4))
    chunk_id = spec.get("chunk_id") or hashlib.sha256(
        f"{vault_id}|{spec['rel_path']}|{heading}|{start}|{end}|{text}".encode()
    ).hexdigest()[:32]
    return {
        "chunk_id": chunk_id,
        "rel_path": spec["rel_path"],
        "heading_path": heading,
        "start_line": start,
        "end_line": end,
        "score_vector": vec,
        "score_lexical": lex,
        "score_final": spec.get("score_final", round(0.7 * vec + 0.3 * lex, 4)),
        "text": text,
        "rank": i + 1,
        "token_count": spec.get("token_count", len(text.split())),
    }


class FaultServer:
    """The server object: `.base_url`, `.hits` (Counter of normalised questions),
    `.requests` (list of {"method", "path", "query", "body", "authorization"}), `.stop()`."""

    def __init__(
        self,
        behaviours: Mapping[str, str | Mapping[str, Any]] | None = None,
        *,
        default_chunks: list[dict[str, Any]] | None = None,
        index_stats: dict[str, Any] | None = _UNSET,
    ):
        self.behaviours = {("*" if q == "*" else _norm(q)): b for q, b in (behaviours or {}).items()}
        self.default_chunks = list(default_chunks if default_chunks is not None else DEFAULT_CHUNKS)
        self.index_stats = DEFAULT_INDEX_STATS if index_stats is _UNSET else index_stats
        self.hits: Counter[str] = Counter()
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.base_url = ""

    def behaviour_for(self, question: str) -> dict[str, Any]:
        b = self.behaviours.get(_norm(question), self.behaviours.get("*", "ok"))
        return {"behaviour": b} if isinstance(b, str) else dict(b)

    def start(self) -> FaultServer:
        server = self

        class Handler(_Handler):
            fault = server

        self._httpd = _Server(("127.0.0.1", 0), Handler)
        host, port = self._httpd.server_address[:2]
        self.base_url = f"http://{host}:{port}"
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="fault-server", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Release hanging handlers, stop serving, close the socket. Idempotent."""
        self._stopping.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> FaultServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # a burst of concurrent clients must not overflow the backlog

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that timed out and hung up is expected here; keep test output clean.
        pass


class _Handler(BaseHTTPRequestHandler):
    fault: FaultServer
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, status: int, body: bytes, headers: Mapping[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def _send_json(self, status: int, obj: Any, headers: Mapping[str, str] | None = None) -> None:
        self._send(status, json.dumps(obj).encode(), headers)

    def _record(self, body: Any) -> None:
        parts = urlsplit(self.path)
        with self.fault._lock:
            self.fault.requests.append(
                {
                    "method": self.command,
                    "path": parts.path,
                    "query": parts.query,
                    "body": body,
                    "authorization": self.headers.get("Authorization"),
                }
            )

    def do_GET(self) -> None:
        self._record(None)
        if urlsplit(self.path).path.rstrip("/") == "/api/v1/index/stats" and self.fault.index_stats is not None:
            self._send_json(200, self.fault.index_stats)
        else:
            self._send_json(404, {"error": "not found"})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        self._record(body)
        if urlsplit(self.path).path.rstrip("/") != "/api/v1/ask":
            self._send_json(404, {"error": "not found"})
            return
        if not isinstance(body, dict) or not isinstance(body.get("question"), str):
            self._send_json(400, {"error": "body must be a JSON object with a question"})
            return
        question = body["question"]
        with self.fault._lock:
            self.fault.hits[_norm(question)] += 1
            n = self.fault.hits[_norm(question)]
        b = self.fault.behaviour_for(question)
        name = b.get("behaviour", "ok")
        if b.get("delay_ms"):
            self.fault._stopping.wait(float(b["delay_ms"]) / 1000)
        times = int(b.get("times", 2))
        retry_after = {"Retry-After": str(b.get("retry_after", "0"))}

        if name == "hang":
            self.fault._stopping.wait(float(b.get("hang_s", 10)))
            name = "ok"
        if name == "503-then-ok":
            if n <= times:
                self._send_json(503, {"error": "unavailable"})
                return
            name = "ok"
        if name == "429-then-ok":
            if n <= times:
                self._send_json(429, {"error": "slow down"}, retry_after)
                return
            name = "ok"

        if name == "ok":
            self._send_json(200, self._ok_body(body, b))
        elif name == "empty_answer":
            self._send_json(200, {**self._ok_body(body, b), "answer": ""})
        elif name == "partial":
            self._send_json(200, {"answer": b.get("answer", f"Partial answer to: {question}")})
        elif name == "invalid_schema":
            self._send_json(200, {"reply": "no answer field here", "debug": {}})
        elif name == "bad_json":
            self._send(200, b'{"answer": "truncated')
        elif name == "500":
            self._send_json(500, {"error": "internal error"})
        elif name == "status":
            self._send_json(int(b.get("status", 404)), {"error": "injected status"})
        elif name == "429":
            self._send_json(429, {"error": "slow down"}, retry_after)
        elif name == "disconnect":
            self.close_connection = True
        else:
            self._send_json(500, {"error": f"fault server: unknown behaviour {name!r}"})

    def _ok_body(self, body: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
        k = int(body.get("k") or 5)
        specs = b.get("chunks", self.fault.default_chunks)
        chunks = [full_chunk(c, i) for i, c in enumerate(specs[:k])]
        abstained = bool(b.get("abstained", False))
        refs = [] if abstained else [
            {key: c[key] for key in ("chunk_id", "rel_path", "heading_path", "start_line", "end_line")}
            for c in chunks[:1]
        ]
        out: dict[str, Any] = {
            "answer": b.get("answer", f"Answer to: {body['question']} [1]"),
            "references": refs,
            "abstained": abstained,
            "debug": {
                "retrieved_chunks": chunks,
                "folder_selection": {
                    "mode": body.get("folder_mode", "off"),
                    "selected_folders": list(body.get("folders") or []),
                    "reasoning": "fault server selects nothing",
                    "fallback_used": False,
                },
                "timings_ms": {"folder_selection": 1.0, "retrieval": 2.0, "generation": 3.0},
                "versions": dict(VERSIONS),
            },
        }
        if abstained:
            out["abstain_reason"] = b.get("abstain_reason", "no_relevant_context")
        return out


def start_fault_server(
    behaviours: Mapping[str, str | Mapping[str, Any]] | None = None,
    default_chunks: list[dict[str, Any]] | None = None,
    *,
    index_stats: dict[str, Any] | None = _UNSET,
) -> tuple[str, Callable[[], None]]:
    """Start a FaultServer on 127.0.0.1:<free port> in a thread; return (base_url, stop)."""
    srv = FaultServer(behaviours, default_chunks=default_chunks, index_stats=index_stats).start()
    return srv.base_url, srv.stop


@pytest.fixture
def fault_server() -> Iterator[Callable[..., FaultServer]]:
    """Factory fixture: `fault_server(behaviours, **kw) -> FaultServer` (started); all are
    stopped at teardown."""
    servers: list[FaultServer] = []

    def start(
        behaviours: Mapping[str, str | Mapping[str, Any]] | None = None, **kwargs: Any
    ) -> FaultServer:
        srv = FaultServer(behaviours, **kwargs).start()
        servers.append(srv)
        return srv

    yield start
    for srv in servers:
        srv.stop()
