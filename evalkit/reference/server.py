"""The reference chatbot over HTTP, on the standard library (no new dependency).

Routes (DESIGN.md §5):
    POST /api/v1/ask[?debug=true]   body: schema.AskRequest without `debug`
    GET  /api/v1/index/stats        the indexing_coverage object
    GET  /healthz                   {"status": "ok", ...}

Errors are JSON `{"error": str, "problems": [str]?}`: 400 bad JSON or body (also a body
shorter than its Content-Length, an unknown vault, a field of the wrong type or size),
404 unknown path, 405 wrong method, 411 no Content-Length, 413 body over 1 MiB, 503 every
worker busy (at most 256 connections are served at once; a request's line, headers and body
must arrive within 10 s, so slow clients are cut off), 502 a configured embeddings/chat
endpoint failed, 500 a bug (logged; the server keeps serving).
"""

from __future__ import annotations

import socket
import sys
import threading
import traceback
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import orjson

from evalkit.errors import InputError, Problem
from evalkit.reference.openai_compat import BackendError

MAX_BODY_BYTES = 1 << 20
_ROUTES = {"/api/v1/ask": "POST", "/api/v1/index/stats": "GET", "/healthz": "GET"}
_TRUE = ("1", "true", "yes", "on")


class _Handler(BaseHTTPRequestHandler):
    # HTTP/1.1 keep-alive so a client pool reuses connections; every reply sets Content-Length
    protocol_version = "HTTP/1.1"
    # Headers and body go out in two writes; without TCP_NODELAY the second waits ~40 ms for an ACK.
    disable_nagle_algorithm = True
    # A client that promises more body than it sends (or idles on keep-alive) must not hold
    # a handler thread forever.
    timeout = 30
    # A request's line, headers and body must all arrive within this many seconds of the
    # server starting to wait for it: a client that trickles a byte every few seconds passes
    # every per-read timeout, and 70 of them held every worker (issue 29 item 5).
    request_deadline = 10.0
    server_version = "evalkit-reference/1"
    chatbot: Any = None
    quiet = True
    _timer: threading.Timer | None = None

    def handle_one_request(self) -> None:
        self._timer = threading.Timer(self.request_deadline, self._cut_off)
        self._timer.daemon = True
        self._timer.start()
        try:
            super().handle_one_request()
        finally:
            self._received()

    def _received(self) -> None:
        """The request is in: the deadline no longer applies (answering may take longer)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _cut_off(self) -> None:
        # The blocked read returns empty, and the handler closes the connection.
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        if not self.quiet:
            super().log_message(format, *args)

    def _send(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        data = orjson.dumps(body)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, message: str, problems: list[str] | None = None, **headers: str) -> None:
        body: dict[str, Any] = {"error": message}
        if problems:
            body["problems"] = problems
        self._send(status, body, headers)

    def _route(self, method: str) -> str | None:
        path = urlsplit(self.path).path.rstrip("/") or "/"
        allowed = _ROUTES.get(path)
        if allowed is None:
            self._discard_body()
            self._error(404, f"no route {path}")
            return None
        if method != allowed:
            self._discard_body()
            self._error(405, f"{method} not allowed on {path}; use {allowed}", Allow=allowed)
            return None
        return path

    def _discard_body(self) -> None:
        # an unread body would be parsed as the next request on this connection
        length = self.headers.get("Content-Length")
        if length and length.isdigit() and int(length) <= MAX_BODY_BYTES:
            self.rfile.read(int(length))
        elif length or self.headers.get("Transfer-Encoding"):
            self.close_connection = True

    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        self._guard(self._get)

    def do_POST(self) -> None:  # noqa: N802
        self._guard(self._post)

    def do_PUT(self) -> None:  # noqa: N802
        self._guard(lambda: self._route("PUT"))

    def do_DELETE(self) -> None:  # noqa: N802
        self._guard(lambda: self._route("DELETE"))

    def do_PATCH(self) -> None:  # noqa: N802
        self._guard(lambda: self._route("PATCH"))

    def _guard(self, fn: Callable[[], Any]) -> None:
        try:
            fn()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception:  # a bug in the chatbot must not take the server down
            traceback.print_exc(file=sys.stderr)
            self.close_connection = True
            try:
                self._error(500, "internal error (see server log)")
            except OSError:
                pass

    def _get(self) -> None:
        path = self._route("GET")
        if path is not None:
            self._discard_body()
        if path == "/healthz":
            bot = self.chatbot
            self._send(200, {"status": "ok", "docs": bot.index_stats()["docs_processed"], "chunks": len(bot.chunks)})
        elif path == "/api/v1/index/stats":
            self._send(200, self.chatbot.index_stats())

    def _post(self) -> None:
        if self._route("POST") is None:
            return
        length = self.headers.get("Content-Length")
        if length is None or not length.strip().isdigit():
            self.close_connection = True
            self._error(411, "Content-Length required (chunked bodies are not supported)")
            return
        n = int(length)
        if n > MAX_BODY_BYTES:
            self.close_connection = True
            self._error(413, f"body of {n} bytes is over the {MAX_BODY_BYTES}-byte limit")
            return
        try:
            raw = self.rfile.read(n)
        except (TimeoutError, OSError):
            raw = None
        self._received()
        if raw is None or len(raw) < n:
            # A client error, not ours: say so, without a traceback, and drop the connection
            # (what it sends next cannot be told apart from the missing body).
            self.close_connection = True
            got = "nothing more" if raw is None else f"{len(raw)} bytes"
            self._error(400, f"body shorter than its Content-Length: {n} bytes promised, {got} received")
            return
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError as e:
            self._error(400, f"body is not valid JSON: {e}")
            return
        if not isinstance(body, dict):
            self._error(400, f"body must be a JSON object, got {type(body).__name__}")
            return
        query = parse_qs(urlsplit(self.path).query)
        if "debug" in query:
            body["debug"] = query["debug"][-1].strip().lower() in _TRUE
        else:
            body.setdefault("debug", False)
        try:
            response = self.chatbot.ask(body)
        except InputError as e:
            problems = [str(p) for p in e.problems]
            self._error(400, problems[0] if len(problems) == 1 else "invalid request", problems)
            return
        except BackendError as e:
            self._error(e.status, f"upstream endpoint failed: {e}")
            return
        self._send(200, response)


# Threads start only for connections that come; a high cap leaves room for normal clients while
# slow ones wait out their request deadline.
MAX_WORKERS = 256
_BUSY_BODY = orjson.dumps({"error": "server busy: every worker is taken; retry shortly"})
_BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
    b"Connection: close\r\nContent-Length: " + str(len(_BUSY_BODY)).encode() + b"\r\n\r\n" + _BUSY_BODY
)


class _Server(ThreadingHTTPServer):
    """One thread per connection, at most `max_workers` at once; past that a connection
    gets a 503 with Retry-After and is closed, so 500 slow clients cannot make 500 threads."""

    # the stdlib default backlog of 5 resets connections when a client opens 50 at once
    request_queue_size = 128
    daemon_threads = True
    max_workers = MAX_WORKERS

    def server_activate(self) -> None:
        super().server_activate()
        self._slots = threading.BoundedSemaphore(self.max_workers)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            try:
                request.sendall(_BUSY)
            except OSError:
                pass
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()  # the thread never started
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


def make_server(
    chatbot: Any,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    quiet: bool = True,
    max_workers: int = MAX_WORKERS,
    read_timeout: float = 30.0,
    request_deadline: float = 10.0,
) -> ThreadingHTTPServer:
    """A threading HTTP server for `chatbot` (bound, not yet serving; call serve_forever).

    Args:
        chatbot: a ReferenceChatbot (anything with ask(dict), index_stats() and chunks).
        host: bind address; loopback by default.
        port: 0 picks a free port (read it from server.server_address).
        quiet: no per-request access log on stderr.
    """
    handler = type("ReferenceHandler", (_Handler,), {"chatbot": chatbot, "quiet": quiet, "timeout": read_timeout,
                                                      "request_deadline": request_deadline})
    server_cls = type("ReferenceServer", (_Server,), {"max_workers": max_workers})
    return server_cls((host, port), handler)


def build_reference_server(
    vault: Path,
    *,
    host: str = "127.0.0.1",
    port: int = 8080,
    vault_id: str | None = None,
    max_tokens: int | None = None,
    abstain_threshold: float | None = None,
    quiet: bool = True,
) -> tuple[ThreadingHTTPServer, Any]:
    """Index `vault` (endpoints from the environment) and bind a server for it.

    Returns:
        (server, chatbot); the caller runs server.serve_forever() and closes both.

    Raises:
        InputError: the vault does not exist, or the port cannot be bound.
    """
    from dataclasses import replace

    from evalkit.reference.chatbot import ReferenceChatbot, ReferenceConfig

    overrides: dict[str, Any] = {}
    if abstain_threshold is not None:
        overrides["abstain_threshold"] = abstain_threshold
    cfg = ReferenceConfig.from_env(**overrides)
    if max_tokens is not None:
        cfg = replace(cfg, chunker=replace(cfg.chunker, max_tokens=max_tokens))
    bot = ReferenceChatbot(vault, vault_id=vault_id, config=cfg)
    try:
        server = make_server(bot, host, port, quiet=quiet)
    except OSError as e:
        bot.close()
        raise InputError(Problem(f"cannot listen on {host}:{port}: {e.strerror or e}", field="--port")) from None
    return server, bot


def start_reference_server(vault: Path, *, vault_id: str | None = None, config: Any = None) -> tuple[str, Callable[[], None]]:
    """Build a ReferenceChatbot over `vault` and serve it on 127.0.0.1 (free port) in a thread.

    Returns:
        (base_url like "http://127.0.0.1:54321", stop) — call stop() to shut down and join.
    """
    from evalkit.reference.chatbot import ReferenceChatbot

    bot = ReferenceChatbot(vault, vault_id=vault_id, config=config)
    server = make_server(bot)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    host, port = server.server_address[:2]

    def stop() -> None:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
        bot.close()

    return f"http://{host}:{port}", stop
