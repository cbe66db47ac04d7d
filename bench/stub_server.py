"""A loopback stub of /api/v1/ask that answers a valid contract response after a fixed delay.

For bench/runner_overhead.py: with the chatbot's own time fixed at L, whatever else the
wall clock shows is the harness. The response is built once; each request costs a body
read, a sleep of L and one socket write (HTTP/1.1 keep-alive, Nagle off).

In process (shares the GIL with the harness, which inflates its measured overhead):

    from stub_server import start_stub_server
    base_url, stop = start_stub_server(delay_ms=50)

In its own process (what the benchmark should use):

    from stub_server import start_stub_process
    base_url, stop = start_stub_process(delay_ms=50)

With `corpus="scifact"` (or "obsidian"; `--corpus` by hand) it answers with real text instead:
the answer a question names, K = 5 chunks of SciFact abstracts or obsidian-tasks sections
(real_answers.py; bench/ask_cpu.py).

Or by hand: `python bench/stub_server.py --delay-ms 50 [--port 8099]` prints the base URL.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_CHUNKS = [
    {
        "chunk_id": f"{i:032x}",
        "rel_path": f"notes/note-{i}.md",
        "heading_path": f"# Note {i}",
        "start_line": 1,
        "end_line": 10,
        "score_vector": round(0.9 - 0.1 * i, 3),
        "score_lexical": round(0.5 - 0.05 * i, 3),
        "score_final": round(0.78 - 0.085 * i, 3),
        "text": f"Stub chunk {i}: a fixed paragraph of text standing in for a retrieved note.",
        "rank": i + 1,
        "token_count": 14,
    }
    for i in range(5)
]
RESPONSE: dict[str, Any] = {
    "answer": "A stub answer citing the first note [1].",
    "references": [{k: _CHUNKS[0][k] for k in ("chunk_id", "rel_path", "heading_path", "start_line", "end_line")}],
    "abstained": False,
    "debug": {
        "retrieved_chunks": _CHUNKS,
        "folder_selection": {"mode": "off", "selected_folders": [], "reasoning": "stub", "fallback_used": False},
        "timings_ms": {"folder_selection": 0.0, "retrieval": 0.0, "generation": 0.0},
        "versions": {
            "index_build_version": "stub",
            "retriever_version": "stub",
            "answerer_version": "stub",
            "llm_model": "stub",
            "embedding_model": "stub",
            "chunker_version": "stub",
        },
    },
}


def _ok(body: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body


def _handler(delay_s: float, corpus: str | None = None) -> type[BaseHTTPRequestHandler]:
    ok = _ok(json.dumps(RESPONSE).encode())
    # With a corpus: answers of real text (real_answers.py), the one a question names.
    pool: list[bytes] = []
    if corpus:
        from real_answers import answers

        pool = [_ok(json.dumps(a).encode()) for a in answers(corpus)]
    stats = b'{"docs_processed": 5, "chunks_attempted": 5, "chunks_embedded": 5}'
    stats_ok = (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
        + str(len(stats)).encode()
        + b"\r\n\r\n"
        + stats
    )
    not_found = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            answer = ok
            if pool and body:
                from real_answers import answer_index

                answer = pool[answer_index(json.loads(body)["question"], len(pool))]
            if delay_s > 0:
                time.sleep(delay_s)
            self.wfile.write(answer if self.path.startswith("/api/v1/ask") else not_found)

        def do_GET(self) -> None:
            self.wfile.write(stats_ok if self.path.startswith("/api/v1/index/stats") else not_found)

    return Handler


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # C=64 clients connect at once

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass


def start_stub_server(delay_ms: float = 50.0, port: int = 0, corpus: str | None = None) -> tuple[str, Callable[[], None]]:
    """Serve the stub on 127.0.0.1 in a background thread of this process (with `corpus`,
    scifact or obsidian: answers of real text, real_answers.py).

    Returns:
        (base_url, stop); stop() shuts the server down and closes the socket.
    """
    httpd = _Server(("127.0.0.1", port), _handler(delay_ms / 1000, corpus))
    thread = threading.Thread(
        target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="stub-server", daemon=True
    )
    thread.start()
    host, bound = httpd.server_address[:2]

    def stop() -> None:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)

    return f"http://{host}:{bound}", stop


def start_stub_process(delay_ms: float = 50.0, corpus: str | None = None) -> tuple[str, Callable[[], None]]:
    """Run the stub in a child Python process (no GIL shared with the caller).

    Returns:
        (base_url, stop); stop() terminates the child and waits for it.
    """
    proc = subprocess.Popen(
        [sys.executable, __file__, "--delay-ms", str(delay_ms), *(["--corpus", corpus] if corpus else [])],
        stdout=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline().strip() if proc.stdout is not None else ""
    if not line.startswith("http://"):
        proc.kill()
        proc.wait()
        raise RuntimeError(f"stub server did not start (printed {line!r})")

    def stop() -> None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    return line, stop


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--delay-ms", type=float, default=50.0, help="fixed answer delay L in ms")
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0 = any free port)")
    parser.add_argument("--corpus", choices=["scifact", "obsidian"], help="answers of real text (real_answers.py)")
    args = parser.parse_args()
    base_url, stop = start_stub_server(args.delay_ms, args.port, args.corpus)
    print(base_url, flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        stop()


if __name__ == "__main__":
    main()
