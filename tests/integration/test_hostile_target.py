"""A chatbot on loopback that trickles its answer, streams without end or sends a gzip bomb:
each case ends at --timeout's whole-answer deadline, in bounded memory, recorded with its error kind."""

from __future__ import annotations

import json
import resource
import time
import zlib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from tests.support import (
    loopback_server,
    make_case,
    read_records,
    run_eval_api,
    write_eval_set,
)

pytestmark = pytest.mark.integration

GOLD = [{"rel_path": "notes/a.md", "heading_path": "# A"}]
ANSWER = json.dumps(
    {"answer": "A [1].", "references": [], "abstained": False,
     "debug": {"retrieved_chunks": [{"rel_path": "notes/a.md", "heading_path": "# A", "text": "A."}]}}
).encode()
LIMIT = 1 << 20  # --max-response-bytes in these tests


def _gzip_bomb(inflated_mb: int) -> bytes:
    # Compressed a megabyte at a time: making the bomb must not cost its inflated size.
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    out = [z.compress(b"{")] + [z.compress(b" " * (1 << 20)) for _ in range(inflated_mb)]
    return b"".join([*out, z.flush()])


_BOMB = _gzip_bomb(300)


class _Hostile(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        question = json.loads(body)["question"]
        try:
            if question == "ok":
                self._send(ANSWER)
            elif question == "trickle":  # one byte every 0.3 s: every read is quick, the whole is not
                self._head(len(ANSWER))
                for b in ANSWER:
                    self.wfile.write(bytes([b]))
                    self.wfile.flush()
                    time.sleep(0.3)
            elif question == "endless":  # chunked, 640 MB if nobody stops reading
                self.send_response(200)
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                chunk = b" " * 65536
                for _ in range(10_000):
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            elif question == "bomb":  # 300 KB on the wire, 300 MB inflated
                self.send_response(200)
                self.send_header("Content-Encoding", "gzip")
                self.send_header("Content-Length", str(len(_BOMB)))
                self.end_headers()
                self.wfile.write(_BOMB)
            elif question == "gzipped":  # an honest compressed answer is still read
                packed = zlib.compress(ANSWER, wbits=31)
                self.send_response(200)
                self.send_header("Content-Encoding", "gzip")
                self.send_header("Content-Length", str(len(packed)))
                self.end_headers()
                self.wfile.write(packed)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _head(self, n: int) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(n))
        self.end_headers()

    def _send(self, data: bytes) -> None:
        self._head(len(data))
        self.wfile.write(data)


@pytest.fixture
def hostile() -> Iterator[str]:
    with loopback_server(_Hostile) as srv:
        yield f"http://127.0.0.1:{srv.server_address[1]}"


def _ask(url: str, tmp_path: Path, question: str, **kw):
    """The record of a one-case run asking the hostile server `question`."""
    es = write_eval_set(tmp_path / "es.jsonl", [make_case("c1", question=question, gold_supports=GOLD)])
    result = run_eval_api(eval_set=es, api_url=url, retrieval_only=True, results_dir=tmp_path / "r",
                          no_probe=True, retries=0, max_error_rate=1.0, **kw)
    (rec,) = read_records(result.run_dir)
    return rec


def test_a_trickling_answer_ends_within_the_timeout(hostile, tmp_path):
    # regression: --timeout was per read; one byte a second kept a case running 181 s. Every
    # read here comes within 0.3 s, so only the whole-answer deadline can end it as a timeout
    # (the whole answer takes ~45 s to trickle: a per-read timeout would read it all).
    rec = _ask(hostile, tmp_path, "trickle", timeout=2.0)
    assert rec["error"]["kind"] == "timeout", rec["error"]


@pytest.mark.parametrize("question", ["endless", "bomb"])
def test_an_oversized_answer_is_cut_off_in_bounded_memory(hostile, tmp_path, question):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    rec = _ask(hostile, tmp_path, question, timeout=20.0, max_response_bytes=LIMIT)
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert rec["error"]["kind"] == "response_too_large", rec["error"]
    assert grown_mb < 100, grown_mb  # the server offered 300-640 MB
    assert sum(f.stat().st_size for f in (tmp_path / "r").rglob("results.jsonl")) < 1 << 20


@pytest.mark.parametrize("question", ["endless", "bomb"])
def test_the_httpx_path_is_capped_the_same_way(hostile, question):
    # https targets (and the judges' SDKs) go through httpx with BoundedTransport.
    import asyncio

    import httpx

    from evalkit.net.limits import BoundedTransport, ResponseTooLarge

    async def ask() -> None:
        async with httpx.AsyncClient(transport=BoundedTransport(max_bytes=LIMIT), timeout=20) as client:
            await client.post(f"{hostile}/api/v1/ask", json={"question": question})

    with pytest.raises(ResponseTooLarge):
        asyncio.run(ask())


def test_a_compressed_answer_within_the_limit_is_read(hostile, tmp_path):
    rec = _ask(hostile, tmp_path, "gzipped", max_response_bytes=LIMIT)
    assert rec["error"] is None and rec["answer"] == "A [1]."
