"""Issue 43 item 2: `evalkit embed` against a fake OpenAI-compatible embeddings
server on 127.0.0.1 (a real socket, through evalkit's own HTTP stack), and offline.

The fake server gives each text a fixed vector made from its sha256, so the test computes
every expected similarity itself (scikit-learn's cosine, numpy's percentile) from the same
texts, independently of the analysis code."""

from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from evalkit.cli.main import app
from evalkit.evalset.anchors import match_support, normalize_rel_path, order_chunks
from tests.support import ROOT, loopback_server, read_records, run_eval_api

sklearn = pytest.importorskip("sklearn")
from sklearn.metrics.pairwise import cosine_similarity  # noqa: E402

KEY = "sk-embed-test-0123456789abcdef"
DIMS = 16


def fake_vector(text: str) -> list[float]:
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return [(b - 127.5) / 127.5 for b in digest[:DIMS]]


class FakeEmbeddings(BaseHTTPRequestHandler):
    """POST /v1/embeddings as OpenAI answers it (indexes given, in reverse order to prove
    the client sorts by index); `mode` on the server: "ok" or "fail" (500 every time)."""

    def log_message(self, *args: object) -> None:  # quiet
        pass

    def do_POST(self) -> None:  # noqa: N802
        server = self.server
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with server.lock:  # type: ignore[attr-defined]
            server.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})  # type: ignore[attr-defined]
        mode = server.mode  # type: ignore[attr-defined]
        extra: dict[str, str] = {}
        if mode == "fail" or self.path != "/v1/embeddings":
            payload, status = b'{"error": {"message": "model not loaded"}}', 500
        elif mode == "busy-once":  # 429 with Retry-After on the first request only
            server.mode = "ok"  # type: ignore[attr-defined]
            payload, status, extra = b'{"error": {"message": "slow down"}}', 429, {"Retry-After": "0"}
        elif mode == "short":  # one vector fewer than the texts sent
            data = [{"index": i, "embedding": fake_vector(t)} for i, t in enumerate(body["input"][1:])]
            payload, status = json.dumps({"data": data}).encode(), 200
        else:
            data = [{"object": "embedding", "index": i, "embedding": fake_vector(t)} for i, t in enumerate(body["input"])]
            payload, status = json.dumps({"object": "list", "data": data[::-1], "model": body["model"]}).encode(), 200
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        for name, value in extra.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


@pytest.fixture
def server():
    with loopback_server(FakeEmbeddings) as srv:
        srv.lock = threading.Lock()  # type: ignore[attr-defined]
        srv.requests = []  # type: ignore[attr-defined]
        srv.mode = "ok"  # type: ignore[attr-defined]
        yield srv


@pytest.fixture(scope="module")
def stored_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    results = tmp_path_factory.mktemp("runs")
    run_eval_api(eval_set=ROOT / "eval_set.jsonl", vault=ROOT / "sample_vault", retrieval_only=True,
                 results_dir=results, run_id="r")
    return results


def _invoke(*args: object, env: dict[str, str] | None = None):
    return CliRunner().invoke(app, [str(a) for a in args], env=env, catch_exceptions=False)


def _copy(results: Path, to: Path) -> Path:
    import shutil

    shutil.copytree(results, to)
    return to


def _expected(results: Path, k: int = 5) -> dict[str, dict]:
    """Per case, from the records and the notes, computed here: the gold texts by the anchor
    rule over the reference chunker's chunks, cosine by scikit-learn over fake_vector."""
    from evalkit.reference.corpus import build_corpus

    chunks = [{"chunk_id": c.chunk_id, "rel_path": c.rel_path, "heading_path": c.heading_path,
               "start_line": c.start_line, "end_line": c.end_line, "text": c.text}
              for c in build_corpus(ROOT / "sample_vault", vault_id="sample_vault").chunks]

    def cos(a: str, b: str) -> float:
        return float(cosine_similarity([fake_vector(a)], [fake_vector(b)])[0, 0])

    out: dict[str, dict] = {}
    for rec in read_records(results / "r"):
        q = rec["question"]
        golds = []
        for s in rec["case"]["gold_supports"]:
            text = "\n\n".join(c["text"] for c in chunks
                               if normalize_rel_path(c["rel_path"]) == normalize_rel_path(s["rel_path"]) and match_support(s, c))
            golds.append(cos(q, text[:4000]) if text else None)
        # a chunk stored cut is compared whole: its text by chunk id from the notes
        whole = {c["chunk_id"]: c["text"] for c in chunks}
        retrieved = [cos(q, whole[c["chunk_id"]] if c.get("text_truncated") else c["text"])
                     for c in order_chunks(rec["retrieved_chunks"])[:k]]
        out[rec["test_case_id"]] = {"q_gold": golds, "q_retrieved": retrieved}
    return out


def test_numbers_match_an_independent_computation_and_the_cache_saves_the_second_run(
        stored_run: Path, server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    results = _copy(stored_run, tmp_path / "results")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("EVALKIT_EMBED_API_KEY", KEY)
    base = f"http://127.0.0.1:{server.server_address[1]}/v1"
    args = ("embed", "--run-id", "r", "--results-dir", results, "--embed-base-url", base,
            "--embed-model", "fake-embed-1", "--batch-size", 50, "--cache-path", tmp_path / "cache.sqlite")
    first = _invoke(*args)
    assert first.exit_code == 0, first.output
    body = json.loads((results / "r" / "embeddings.json").read_text())
    assert body["embedder"] == {"kind": "openai-compatible", "model": "fake-embed-1", "base_url": base}
    assert body["retrieved_text_restored"] > 0 and body["retrieved_text_cut"] == 0  # the run stored 200 characters
    sent = [t for r in server.requests for t in r["body"]["input"]]
    assert len(sent) == len(set(sent))  # each text once
    assert all(len(r["body"]["input"]) <= 50 for r in server.requests) and len(server.requests) > 1  # batched
    assert {r["auth"] for r in server.requests} == {f"Bearer {KEY}"}

    want = _expected(results)
    assert {r["id"] for r in body["cases"]} == set(want)
    for row in body["cases"]:
        w = want[row["id"]]
        assert row["q_gold"] == pytest.approx(w["q_gold"], abs=1e-12)
        assert row["q_retrieved"] == pytest.approx(w["q_retrieved"], abs=1e-12)
        golds = [x for x in w["q_gold"] if x is not None]
        if golds and w["q_retrieved"]:
            assert row["gap"] == pytest.approx(max(golds) - max(w["q_retrieved"]), abs=1e-12)
    best = [max(x for x in w["q_gold"] if x is not None) for w in want.values() if any(x is not None for x in w["q_gold"])]
    threshold = float(np.percentile(best, 10))
    assert body["far_gold"]["threshold"] == pytest.approx(threshold, abs=1e-12)
    assert body["far_gold"]["n"] == sum(b <= threshold for b in best)
    assert body["distribution"]["q_gold_best"]["median"] == pytest.approx(float(np.median(best)), abs=1e-12)
    assert body["clusters"]["k"] in range(2, 9)
    assert sum(c["n"] for c in body["clusters"]["clusters"]) == body["clusters"]["n_questions"]

    # Second run: every vector from the judge cache, no request to the endpoint, same numbers.
    server.requests.clear()
    second = _invoke(*args)
    assert second.exit_code == 0, second.output
    assert server.requests == []
    assert f"cache {len(sent)} hits, 0 misses" in second.output
    again = json.loads((results / "r" / "embeddings.json").read_text())
    assert again["cases"] == body["cases"] and again["clusters"] == body["clusters"]

    # The key is never written anywhere.
    for path in [*(results / "r").iterdir(), *tmp_path.glob("cache.sqlite*")]:
        assert KEY.encode() not in path.read_bytes(), path
    assert KEY not in first.output + second.output


def test_a_failing_endpoint_is_a_clear_error_and_the_run_is_untouched(
        stored_run: Path, server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    results = _copy(stored_run, tmp_path / "results")
    monkeypatch.chdir(tmp_path)
    server.mode = "fail"
    before = {p.name: p.read_bytes() for p in (results / "r").iterdir() if p.is_file()}
    base = f"http://127.0.0.1:{server.server_address[1]}/v1"
    got = _invoke("embed", "--run-id", "r", "--results-dir", results, "--embed-base-url", base,
                  "--embed-model", "fake-embed-1", "--retries", 1, "--no-cache")
    assert got.exit_code == 2
    assert f"the embeddings endpoint {base}/embeddings answered HTTP 500" in got.stderr
    assert "model not loaded" in got.stderr and "Traceback" not in got.output
    assert len(server.requests) == 2  # the first try and one retry
    after = {p.name: p.read_bytes() for p in (results / "r").iterdir() if p.is_file()}
    error = json.loads(after.pop("embeddings.json"))
    assert "answered HTTP 500" in error["error"]["message"] and "cases" not in error
    assert after == before  # results.jsonl, metrics.json, config.json ... byte for byte

    # A closed port: the same, said as unreachable; the report shows the error.
    with loopback_server(FakeEmbeddings) as gone:
        port = gone.server_address[1]
    got = _invoke("embed", "--run-id", "r", "--results-dir", results, "--embed-base-url",
                  f"http://127.0.0.1:{port}/v1", "--embed-model", "m", "--retries", 0, "--no-cache")
    assert got.exit_code == 2 and "could not be reached" in got.stderr
    assert _invoke("report", "--run-id", "r", "--results-dir", results).exit_code == 0
    page = (results / "r" / "report.html").read_text()
    assert "The last embedding analysis failed: --embed-base-url: the embeddings endpoint" in page
    assert "could not be reached" in page


def test_offline_default_and_the_report_section_escapes_what_it_shows(stored_run: Path, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    results = _copy(stored_run, tmp_path / "results")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("EVALKIT_EMBED_BASE_URL", raising=False)
    monkeypatch.delenv("EVALKIT_EMBED_MODEL", raising=False)
    # A question with markup: the page must show it as text.
    records = read_records(results / "r")
    far_id = records[0]["test_case_id"]
    records[0]["question"] = "<script>alert(1)</script> reset?"
    (results / "r" / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert _invoke("report", "--run-id", "r", "--results-dir", results).exit_code == 0  # report.html exists first
    got = _invoke("embed", "--run-id", "r", "--results-dir", results, "--far-percentile", 100)
    assert got.exit_code == 0, got.output
    body = json.loads((results / "r" / "embeddings.json").read_text())
    assert body["embedder"]["kind"] == "lexical" and body["gold_unresolved"] == 0
    assert far_id in {c["id"] for c in body["far_gold"]["cases"]}  # percentile 100: every case with gold
    n_far = body["far_gold"]["n"]
    assert f"; {n_far} case{'' if n_far == 1 else 's'} with far gold; " in got.output and f"{body['n_cases']} cases," in got.output
    page = (results / "r" / "report.html").read_text()  # re-rendered by the analysis
    assert 'id="embeddings"' in page and 'href="#embeddings"' in page and "silhouette" in page
    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    # A shareable copy leaves the analysis out: it quotes questions and note text.
    assert _invoke("redact", "--run-id", "r", "--results-dir", results).exit_code == 0
    assert not (results / "r-redacted" / "embeddings.json").exists() and (results / "r-redacted" / "metrics.json").exists()
    # the same analysis again: the same numbers (no randomness outside the seeded k-means)
    assert _invoke("embed", "--run-id", "r", "--results-dir", results, "--far-percentile", 100).exit_code == 0
    again = json.loads((results / "r" / "embeddings.json").read_text())
    assert again["cases"] == body["cases"] and again["clusters"] == body["clusters"]


def test_a_model_without_an_endpoint_is_a_usage_error(stored_run: Path, tmp_path: Path) -> None:
    got = _invoke("embed", "--run-id", "r", "--results-dir", stored_run, "--embed-model", "m")
    assert got.exit_code == 2 and "--embed-model needs --embed-base-url" in got.stderr
    assert not (stored_run / "r" / "embeddings.json").exists()


def test_a_429_is_retried_and_a_reply_of_the_wrong_shape_is_refused(
        stored_run: Path, server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    results = _copy(stored_run, tmp_path / "results")
    monkeypatch.chdir(tmp_path)
    base = f"http://127.0.0.1:{server.server_address[1]}/v1"
    args = ("embed", "--run-id", "r", "--results-dir", results, "--embed-base-url", base, "--embed-model", "m",
            "--batch-size", 500, "--no-cache")
    server.mode = "busy-once"
    got = _invoke(*args)
    assert got.exit_code == 0, got.output
    batches = [r for r in server.requests if r["body"]["input"]]
    assert len(batches) == 1 + -(-len({t for r in batches for t in r["body"]["input"]}) // 500)  # one retried

    server.requests.clear()
    server.mode = "short"
    got = _invoke(*args)
    assert got.exit_code == 2 and "vectors for" in got.stderr and "texts" in got.stderr
    assert json.loads((results / "r" / "embeddings.json").read_text())["error"]["message"].endswith(
        "(expected OpenAI's {'data': [{'embedding': [...]}]})")


def test_openais_key_goes_to_openai_only() -> None:
    from evalkit.embeddings.embedders import api_key_for

    env = {"OPENAI_API_KEY": "sk-openai"}
    assert api_key_for("https://api.openai.com/v1", env) == "sk-openai"
    assert api_key_for("http://127.0.0.1:11434/v1", env) is None  # a local server never gets OpenAI's key
    assert api_key_for("http://127.0.0.1:11434/v1", {**env, "EVALKIT_EMBED_API_KEY": "k2"}) == "k2"


class _Counting:
    """A stateless embedder (fake_vector) that records how many texts each call sends."""

    name = "counting"
    cacheable = True

    def __init__(self) -> None:
        self.calls: list[int] = []

    def identity(self) -> dict:
        return {"kind": "counting"}

    async def embed(self, texts):
        self.calls.append(len(texts))
        return np.asarray([fake_vector(t) for t in texts])


def _body(results: Path, embedder, notes: Path | None = None) -> dict:
    from evalkit.embeddings.analysis import analyze_run
    from evalkit.store.runs import RunDir

    body = analyze_run(RunDir(results / "r"), embedder, notes=notes)
    body.pop("computed_at")
    return body


def test_texts_are_embedded_a_block_of_cases_at_a_time_with_the_same_numbers(
        stored_run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Memory stays bounded: no call holds every distinct text of the run (the vectors of one
    # block live at a time), and the numbers are those of one call over everything.
    from evalkit.embeddings import analysis
    from evalkit.embeddings.embedders import LexicalEmbedder

    k, block = 5, 8
    monkeypatch.setattr(analysis, "BLOCK_CASES", 10**9)
    one, one_body = _Counting(), None
    one_body = _body(stored_run, one)
    n_cases = one_body["n_cases"]
    assert one.calls and len(one.calls) == 1 and n_cases > 3 * block
    lexical_calls: list[int] = []
    real = LexicalEmbedder.embed_now

    def spy(self, texts):
        lexical_calls.append(len(texts))
        return real(self, texts)

    monkeypatch.setattr(LexicalEmbedder, "embed_now", spy)
    lexical_one = _body(stored_run, LexicalEmbedder())
    assert lexical_calls == [one.calls[0]]

    monkeypatch.setattr(analysis, "BLOCK_CASES", block)
    blocks = _Counting()
    assert _body(stored_run, blocks) == one_body
    max_gold = max(c["n_gold"] for c in one_body["cases"])
    assert len(blocks.calls) == -(-n_cases // block)
    assert max(blocks.calls) <= block * (1 + max_gold + k) and max(blocks.calls) < one.calls[0] / 2
    lexical_calls.clear()
    assert _body(stored_run, LexicalEmbedder()) == lexical_one  # the IDF is fitted on every text first
    assert len(lexical_calls) == len(blocks.calls) and max(lexical_calls) == max(blocks.calls)
