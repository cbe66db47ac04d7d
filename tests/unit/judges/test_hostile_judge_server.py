"""A judge server on loopback that trickles, streams without end or sends a gzip bomb:
each judge call ends within its deadline, in bounded memory, as a recorded judge failure."""

from __future__ import annotations

import asyncio
import json
import time
import zlib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler

import pytest

from evalkit.judges import JudgeItem
from evalkit.judges.base import JudgeFailure
from evalkit.judges.settings import JudgeSettings, build_judge
from evalkit.net.retry import RetryPolicy
from tests.support import loopback_server
from tests.unit.judges.judge_helpers import CORRECT, openai_reply

ITEM = JudgeItem(
    question="Which port does the server listen on?",
    answer="The port is 8080 [1].",
    context=({"chunk_id": "c1", "rel_path": "ops/server.md", "text": "The server listens on port 8080."},),
    expected_key_facts=("port 8080",),
)
LIMIT = 1 << 20  # 1 MiB cap in these tests


class _Hostile(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    mode = "ok"
    seen_encoding: list[str] = []

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        type(self).seen_encoding.append(self.headers.get("Accept-Encoding", ""))
        body = json.dumps(openai_reply(json.dumps(CORRECT))).encode()
        try:
            if self.mode == "ok":
                self._head(len(body))
                self.wfile.write(body)
            elif self.mode == "trickle":
                self._head(len(body))
                for b in body:  # one byte every 0.2 s: each read is quick, the whole is not
                    self.wfile.write(bytes([b]))
                    self.wfile.flush()
                    time.sleep(0.2)
            elif self.mode == "endless":
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                chunk = b" " * 65536
                for _ in range(10_000):  # 640 MB if nobody stops reading
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            elif self.mode == "bomb":
                # 300 KB on the wire, 300 MB once inflated
                bomb = _BOMB
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Encoding", "gzip")
                self.send_header("Content-Length", str(len(bomb)))
                self.end_headers()
                self.wfile.write(bomb)
            elif self.mode == "announced":
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(600 * 1024 * 1024))
                self.end_headers()
                self.wfile.write(b"{")
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _head(self, n: int) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(n))
        self.end_headers()


def _gzip_bomb(inflated_mb: int) -> bytes:
    # Compressed a megabyte at a time, so making the bomb does not cost its inflated size.
    z = zlib.compressobj(9, zlib.DEFLATED, 31)  # wbits 31: a gzip stream
    block = b" " * (1 << 20)
    out = [z.compress(b"{")]
    out += [z.compress(block) for _ in range(inflated_mb)]
    out.append(z.flush())
    return b"".join(out)


_BOMB = _gzip_bomb(300)


@pytest.fixture
def server() -> Iterator[tuple[str, type]]:
    handler = type("H", (_Hostile,), {"mode": "ok", "seen_encoding": []})
    with loopback_server(handler) as srv:
        yield f"http://127.0.0.1:{srv.server_address[1]}/v1", handler


def _judge(tmp_path, base_url: str, timeout: float):
    return build_judge(
        JudgeSettings(
            provider="openai-compatible",
            model="local-judge@0123456789abcdef",
            base_url=base_url,
            timeout=timeout,
            cache_path=tmp_path / "cache.sqlite",
            use_cache=False,
            retry_policy=RetryPolicy.no_wait(attempts=2),
            max_response_bytes=LIMIT,
        )
    )


def _run(judge):
    async def go():
        try:
            return await judge.judge("correctness", ITEM)
        finally:
            await judge.aclose()

    return asyncio.run(go())


def test_a_normal_reply_asks_for_an_unencoded_body(tmp_path, server):
    url, handler = server
    outcome = _run(_judge(tmp_path, url, timeout=5))
    assert not isinstance(outcome, JudgeFailure) and outcome.verdict["score"] == 4
    assert handler.seen_encoding == ["identity"]


def test_a_trickling_judge_ends_within_the_deadline(tmp_path, server):
    url, handler = server
    handler.mode = "trickle"
    outcome = _run(_judge(tmp_path, url, timeout=1.0))
    # each attempt ends at its 1 s deadline (a per-read timeout would go on for minutes, past
    # pytest's own timeout): the two attempts end as a timeout, and nothing more was asked
    assert isinstance(outcome, JudgeFailure) and outcome.reason == "timeout"
    assert len(handler.seen_encoding) == 2


@pytest.mark.parametrize("mode", ["endless", "bomb", "announced"])
def test_an_oversized_reply_is_cut_off_and_recorded(tmp_path, server, mode):
    import resource

    url, handler = server
    handler.mode = mode
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    outcome = _run(_judge(tmp_path, url, timeout=20))
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert isinstance(outcome, JudgeFailure) and outcome.reason == "response_too_large", outcome
    assert grown_mb < 100, grown_mb  # never the 300-640 MB the server offered
