"""judge_answers --batch with OpenAI: the real SDK client against respx-mocked Batch API
endpoints (files, batches, file content). Submit -> poll -> results -> cache -> records;
a kill after (or during) the submission resumes the same batch (issue 27 item 4)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx
from typer.testing import CliRunner

from evalkit.cli.judge_answers import app
from evalkit.judges.batch import STATE_FILE
from tests.support import write_run
from tests.unit.judges.judge_helpers import CORRECT, GROUNDED, OPENAI_MODEL, make_record, openai_reply

RUN_ID = "20250101T000000Z-batch1"
API = "https://api.openai.com/v1"
VERDICTS = {"groundedness_verdict": GROUNDED, "correctness_verdict": CORRECT}


class FakeBatchAPI:
    """The OpenAI Batch API, as far as judge_answers uses it, on respx routes.

    Each batch answers "in_progress" to its first `polls_before_done` looks, then its
    `final` status. `junk` / `errored` hold indexes (in upload order) of requests whose
    reply is junk / a per-request error; `unrun` those an expired batch never ran; `bad`
    maps an index to the line sent instead of its reply (`{cid}` is its custom_id);
    `copies` maps an index to "same" (its line twice) or "different" (a wrong verdict
    under its custom_id first, then its own line).
    """

    def __init__(self, router: respx.Router):
        self.uploads: list[list[dict[str, Any]]] = []
        self.batches: dict[str, dict[str, Any]] = {}
        self.creates = 0
        self.polls_before_done = 1
        self.final = "completed"
        self.junk: set[int] = set()
        self.errored: set[int] = set()
        self.unrun: set[int] = set()
        self.bad: dict[int, str] = {}
        self.copies: dict[int, str] = {}
        self.polls: dict[str, int] = {}
        router.post(f"{API}/files", name="upload").mock(side_effect=self._upload)
        router.post(f"{API}/batches", name="create").mock(side_effect=self._create)
        router.get(f"{API}/batches", name="list").mock(side_effect=self._list)
        router.get(url__regex=rf"{API}/batches/(?P<bid>[^/]+)$", name="retrieve").mock(side_effect=self._retrieve)
        router.get(url__regex=rf"{API}/files/(?P<fid>[^/]+)/content$", name="content").mock(side_effect=self._content)

    def _upload(self, request: httpx.Request) -> httpx.Response:
        # The JSONL file travels in a multipart body; its lines are the JSON objects in it.
        lines = [json.loads(x.strip()) for x in request.content.split(b"\n") if x.startswith(b'{"custom_id"')]
        self.uploads.append(lines)
        return httpx.Response(200, json={"id": f"file-in-{len(self.uploads)}", "object": "file", "bytes": len(request.content),
                                         "created_at": 1700000000, "filename": "evalkit-judge-batch.jsonl", "purpose": "batch",
                                         "status": "processed"})

    def make_batch(self, body: dict[str, Any]) -> dict[str, Any]:
        self.creates += 1
        bid = f"batch_{self.creates}"
        n = int(body["input_file_id"].rsplit("-", 1)[1]) - 1
        self.batches[bid] = {
            "id": bid, "object": "batch", "endpoint": body["endpoint"], "errors": None,
            "input_file_id": body["input_file_id"], "completion_window": body["completion_window"],
            "status": "validating", "output_file_id": None, "error_file_id": None, "created_at": 1700000000 + self.creates,
            "request_counts": {"total": len(self.uploads[n]), "completed": 0, "failed": 0},
            "metadata": body.get("metadata"), "_lines": self.uploads[n],
        }
        return self.batches[bid]

    def _public(self, batch: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in batch.items() if not k.startswith("_")}

    def _create(self, request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=self._public(self.make_batch(json.loads(request.content))))

    def _list(self, request: httpx.Request) -> httpx.Response:
        data = [self._public(b) for b in sorted(self.batches.values(), key=lambda b: -b["created_at"])]
        return httpx.Response(200, json={"object": "list", "data": data, "has_more": False,
                                         "first_id": data[0]["id"] if data else None, "last_id": data[-1]["id"] if data else None})

    def _retrieve(self, request: httpx.Request, bid: str) -> httpx.Response:
        batch = self.batches[bid]
        seen = self.polls[bid] = self.polls.get(bid, 0) + 1
        lines = batch["_lines"]
        if seen <= self.polls_before_done:
            batch.update(status="in_progress", request_counts={"total": len(lines), "completed": seen - 1, "failed": 0})
        elif self.final == "failed":
            batch.update(status="failed", errors={"object": "list", "data": [
                {"code": "invalid_request", "message": "model not available for batch", "line": 1, "param": "body.model"}]})
        else:
            bad = len(self.errored | self.unrun)
            batch.update(status=self.final, output_file_id=f"file-out-{bid}", error_file_id=f"file-err-{bid}" if bad else None,
                         request_counts={"total": len(lines), "completed": len(lines) - bad, "failed": bad})
        return httpx.Response(200, json=self._public(batch))

    def _content(self, request: httpx.Request, fid: str) -> httpx.Response:
        kind, bid = fid.split("-", 2)[1:]
        out = []
        for i, line in enumerate(self.batches[bid]["_lines"]):
            cid = line["custom_id"]
            is_error = i in self.errored or i in self.unrun
            if (kind == "err") != is_error:
                continue
            if i in self.unrun:
                out.append(json.dumps({"id": f"r{i}", "custom_id": cid, "response": None,
                            "error": {"code": "batch_expired", "message": "This request could not be executed before the completion window expired."}}))
            elif i in self.errored:
                out.append(json.dumps({"id": f"r{i}", "custom_id": cid, "response": {"status_code": 500, "request_id": "x", "body": {
                    "error": {"message": "server had an error", "type": "server_error"}}}, "error": None}))
            else:
                name = line["body"]["response_format"]["json_schema"]["name"]
                content = "this is not json" if i in self.junk else json.dumps(VERDICTS[name])
                if self.copies.get(i) == "different":  # a wrong verdict first: first-wins would keep it
                    out.append(_output_line(i, cid, json.dumps({**VERDICTS[name], "score": 1})))
                out.append(_output_line(i, cid, content))
                if self.copies.get(i) == "same":
                    out.append(out[-1])
            if i in self.bad:
                out[-1] = self.bad[i].replace("{cid}", cid)
        return httpx.Response(200, content="".join(x + "\n" for x in out).encode())


def _output_line(i: int, cid: str, content: str) -> str:
    return json.dumps({"id": f"r{i}", "custom_id": cid, "error": None, "response": {
        "status_code": 200, "request_id": f"req{i}", "body": openai_reply(content, prompt_tokens=1000, completion_tokens=100)}})


def _chat(request: httpx.Request) -> httpx.Response:
    """The normal path's Chat Completions endpoint: a valid verdict for the schema asked."""
    name = json.loads(request.content)["response_format"]["json_schema"]["name"]
    return httpx.Response(200, json=openai_reply(json.dumps(VERDICTS[name]), prompt_tokens=1000, completion_tokens=100))


@pytest.fixture
def api() -> Any:
    with respx.mock(assert_all_called=False, assert_all_mocked=True) as router:
        fake = FakeBatchAPI(router)
        router.post(f"{API}/chat/completions", name="chat").mock(side_effect=_chat)
        fake.router = router  # type: ignore[attr-defined]
        yield fake


@pytest.fixture
def results(tmp_path: Path) -> Path:
    # Four different answers: four different prompts of each kind (equal ones share a key).
    records = [make_record(f"q{i}", case_index=i, answer=f"The port is 8080 [1] (case {i}).") for i in range(4)]
    return write_run(tmp_path / "results", RUN_ID, records)


def _invoke(results: Path, tmp_path: Path, *args: str):
    return CliRunner().invoke(app, ["--run-id", RUN_ID, "--results-dir", str(results), "--judge-model", OPENAI_MODEL,
                                    "--cache-path", str(tmp_path / "cache.sqlite"), "--json", *args])


def _ok(res: Any) -> dict[str, Any]:
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout.strip().splitlines()[-1])


def _scores(results: Path) -> list[tuple[Any, Any]]:
    records = [json.loads(x) for x in (results / RUN_ID / "results.jsonl").read_text().splitlines()]
    return [(r["groundedness"]["score"], r["correctness"]["score"]) for r in records]


def test_batch_submits_polls_fills_the_cache_and_writes_the_run(api, openai_key, results, tmp_path):
    res = _invoke(results, tmp_path, "--batch", "--batch-poll-interval", "0")
    out = _ok(res)
    assert api.creates == 1 and len(api.uploads) == 1
    lines = api.uploads[0]
    assert len(lines) == 4 * 2  # groundedness + correctness per case
    assert {x["url"] for x in lines} == {"/v1/chat/completions"} and {x["method"] for x in lines} == {"POST"}
    assert lines[0]["body"]["response_format"]["type"] == "json_schema" and lines[0]["body"]["model"] == OPENAI_MODEL
    create = json.loads(api.router["create"].calls[0].request.content)
    assert create["endpoint"] == "/v1/chat/completions" and create["completion_window"] == "24h"
    assert "evalkit_submission" in create["metadata"]
    assert api.polls["batch_1"] == 2  # in_progress, then completed
    assert api.router["chat"].call_count == 0
    assert _scores(results) == [(GROUNDED["score"], CORRECT["score"])] * 4
    batch = out["judge_stats"]["batch"]
    assert batch["cached"] == 8 and batch["left_to_normal_pass"] == 0 and batch["batches"][0]["batch_id"] == "batch_1"
    # by hand: 8 requests × (1000 × $2.50 + 100 × $10.00) per 1M tokens, at half price
    assert batch["cost_usd"] == pytest.approx(0.5 * 8 * (1000 * 2.50 + 100 * 10.00) / 1_000_000)
    metrics = json.loads((results / RUN_ID / "metrics.json").read_text())
    assert metrics["aggregate_metrics"]["judge"]["batch"]["cached"] == 8
    assert "evalkit: batch batch_1 (openai, 8 requests): submitted" in res.stderr
    assert "in_progress, 0/8 done" in res.stderr
    assert not (results / RUN_ID / STATE_FILE).exists()
    assert sorted(p.name for p in (results / RUN_ID).iterdir() if "batch" in p.name) == []
    rec = json.loads((results / RUN_ID / "results.jsonl").read_text().splitlines()[0])
    assert rec["groundedness"]["cached"] is True

    # The same cache serves a later normal judging: zero calls.
    again = _ok(_invoke(results, tmp_path))
    assert api.router["chat"].call_count == 0 and again["judge_stats"]["cache_hits"] == 8


def test_a_killed_batch_resumes_the_same_batch_without_submitting_it_twice(api, openai_key, results, tmp_path):
    before = (results / RUN_ID / "results.jsonl").read_text()
    def killed(request: httpx.Request, bid: str) -> httpx.Response:
        raise KeyboardInterrupt  # Ctrl-C while polling, after the submission

    api.router["retrieve"].side_effect = killed
    res = _invoke(results, tmp_path, "--batch", "--batch-poll-interval", "0")
    assert res.exit_code == 130, res.output
    assert "interrupted" in res.stderr and "--batch" in res.stderr
    state = json.loads((results / RUN_ID / STATE_FILE).read_text())
    (entry,) = state["batches"]
    assert entry["batch_id"] == "batch_1" and entry["phase"] == "submitted" and len(entry["requests"]) == 8
    assert (results / RUN_ID / "results.jsonl").read_text() == before  # nothing judged yet

    api.router["retrieve"].side_effect = api._retrieve
    out = _ok(_invoke(results, tmp_path, "--batch", "--batch-poll-interval", "0"))
    assert api.router["create"].call_count == 1 and api.router["upload"].call_count == 1
    assert api.router["chat"].call_count == 0
    assert out["judge_stats"]["batch"]["batches"][0]["batch_id"] == "batch_1"
    assert _scores(results) == [(GROUNDED["score"], CORRECT["score"])] * 4
    assert not (results / RUN_ID / STATE_FILE).exists()


def test_killed_between_creating_the_batch_and_recording_its_id_finds_it_by_its_tag(api, openai_key, results, tmp_path):
    def made_then_killed(request: httpx.Request) -> httpx.Response:
        api.make_batch(json.loads(request.content))  # OpenAI made it; the answer never arrived
        raise KeyboardInterrupt

    api.router["create"].side_effect = made_then_killed
    res = _invoke(results, tmp_path, "--batch", "--batch-poll-interval", "0")
    assert res.exit_code == 130, res.output
    (entry,) = json.loads((results / RUN_ID / STATE_FILE).read_text())["batches"]
    assert entry["phase"] == "submitting" and "batch_id" not in entry and entry["prepared"]["input_file_id"] == "file-in-1"

    api.router["create"].side_effect = api._create
    _ok(_invoke(results, tmp_path, "--batch", "--batch-poll-interval", "0"))
    # One batch made, in the first invocation; the rerun looked it up and never created one.
    assert api.creates == 1 and api.router["create"].call_count == 0 and api.router["list"].call_count == 1
    assert api.router["upload"].call_count == 1
    assert _scores(results) == [(GROUNDED["score"], CORRECT["score"])] * 4


def test_killed_before_openai_made_the_batch_creates_it_from_the_uploaded_file(api, openai_key, results, tmp_path):
    def killed(request: httpx.Request) -> httpx.Response:
        raise KeyboardInterrupt  # the create call never reached OpenAI

    api.router["create"].side_effect = killed
    assert _invoke(results, tmp_path, "--batch", "--batch-poll-interval", "0").exit_code == 130
    api.router["create"].side_effect = api._create
    _ok(_invoke(results, tmp_path, "--batch", "--batch-poll-interval", "0"))
    # Looked for by its tag, not found, so created once, from the file uploaded before the kill.
    assert api.router["list"].call_count == 1 and api.creates == 1 and api.router["upload"].call_count == 1
    assert _scores(results) == [(GROUNDED["score"], CORRECT["score"])] * 4


def test_a_big_batch_goes_in_rounds_of_max_requests(api, openai_key, results, tmp_path):
    from evalkit.judges import JudgeSettings
    from evalkit.judges.batch import BatchOptions
    from evalkit.net.retry import RetryPolicy
    from evalkit.rescore.answers import judge_run
    from evalkit.store.runs import RunDir

    settings = JudgeSettings(model=OPENAI_MODEL, cache_path=tmp_path / "cache.sqlite", retry_policy=RetryPolicy.no_wait())
    seen = []
    result = judge_run(RunDir.open(results, RUN_ID), settings,
                       batch=BatchOptions(poll_interval=0, max_requests=3, on_progress=lambda p: seen.append(p.event)))
    assert [len(u) for u in api.uploads] == [3, 3, 2] and api.creates == 3
    assert seen.count("submitted") == 3 and seen.count("collected") == 3
    assert result.stats["batch"]["cached"] == 8 and api.router["chat"].call_count == 0
    assert _scores(results) == [(GROUNDED["score"], CORRECT["score"])] * 4


def test_junk_and_errored_replies_are_judged_the_normal_way(api, openai_key, results, tmp_path):
    api.junk, api.errored = {0}, {3}
    out = _ok(_invoke(results, tmp_path, "--batch", "--batch-poll-interval", "0"))
    batch = out["judge_stats"]["batch"]["batches"][0]
    assert (batch["succeeded"], batch["unusable"], batch["errored"], batch["unrun"]) == (6, 1, 1, 0)
    # The two left out of the cache are asked once each through Chat Completions.
    assert api.router["chat"].call_count == 2
    assert _scores(results) == [(GROUNDED["score"], CORRECT["score"])] * 4
    assert out["judge_stats"]["batch"]["left_to_normal_pass"] == 2


def test_a_failed_batch_stops_with_its_error_and_judges_nothing(api, openai_key, results, tmp_path):
    api.final = "failed"
    before = (results / RUN_ID / "results.jsonl").read_text()
    res = _invoke(results, tmp_path, "--batch", "--batch-poll-interval", "0")
    assert res.exit_code == 2, res.output
    assert "openai batch batch_1 failed: invalid_request: model not available for batch" in res.stderr
    assert api.router["chat"].call_count == 0
    assert (results / RUN_ID / "results.jsonl").read_text() == before
    assert not (results / RUN_ID / STATE_FILE).exists()  # a rerun submits a new batch


def test_an_expired_batch_keeps_what_it_answered_and_a_rerun_asks_the_rest(api, openai_key, results, tmp_path):
    api.final, api.unrun = "expired", {5, 6, 7}
    res = _invoke(results, tmp_path, "--batch", "--batch-poll-interval", "0")
    assert res.exit_code == 2, res.output
    assert "ended expired with 3 of 8 requests not run (5 verdicts are cached)" in res.stderr
    assert api.router["chat"].call_count == 0

    api.final, api.unrun = "completed", set()
    _ok(_invoke(results, tmp_path, "--batch", "--batch-poll-interval", "0"))
    assert api.creates == 2 and len(api.uploads[1]) == 3  # only the three never run
    assert api.router["chat"].call_count == 0
    assert _scores(results) == [(GROUNDED["score"], CORRECT["score"])] * 4


def test_refresh_cache_asks_everything_again_in_the_batch(api, openai_key, results, tmp_path):
    _ok(_invoke(results, tmp_path, "--batch", "--batch-poll-interval", "0"))
    _ok(_invoke(results, tmp_path, "--batch", "--batch-poll-interval", "0"))
    assert api.creates == 1  # a warm cache: nothing to submit
    _ok(_invoke(results, tmp_path, "--batch", "--batch-poll-interval", "0", "--refresh-cache"))
    assert api.creates == 2 and len(api.uploads[1]) == 8 and api.router["chat"].call_count == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--judge-provider", "heuristic"], "--batch needs --judge-provider openai or anthropic"),
        (["--no-cache"], "--batch puts the batch's verdicts into the judge cache"),
        (["--judge-base-url", "http://127.0.0.1:9/v1", "--judge-model", "local@0123456789abcdef"],
         "the judge here is openai-compatible"),
    ],
)
def test_batch_refuses_a_judge_it_cannot_serve(api, openai_key, results, tmp_path, args, message):
    res = _invoke(results, tmp_path, "--batch", *args)
    assert res.exit_code == 2, res.output
    assert message in res.stderr
    assert api.creates == 0


# --------------------------------------------------------------------------- never pay twice (issue 38 item 5)


def _disk_full(monkeypatch: pytest.MonkeyPatch) -> dict[str, bool]:
    """The judge cache's store fails with ENOSPC while `full["on"]` is true."""
    import errno

    from evalkit.judges.cache import JudgeCache

    full = {"on": True}
    put = JudgeCache.put

    def store(self: JudgeCache, *args: Any, **kwargs: Any) -> bool:
        if full["on"]:
            raise OSError(errno.ENOSPC, "No space left on device")
        return put(self, *args, **kwargs)

    monkeypatch.setattr(JudgeCache, "put", store)
    return full


def test_a_cache_that_cannot_store_refuses_to_start_a_batch(api, openai_key, results, tmp_path, monkeypatch):
    _disk_full(monkeypatch)
    before = (results / RUN_ID / "results.jsonl").read_text()
    for _ in range(2):  # and the rerun, the disk still full
        res = _invoke(results, tmp_path, "--batch", "--batch-poll-interval", "0")
        assert res.exit_code == 2, res.output
        assert "cannot store a judgment now (No space left on device)" in res.stderr and "no batch was started" in res.stderr
    assert api.router["upload"].call_count == 0 and api.creates == 0 and api.router["chat"].call_count == 0
    assert (results / RUN_ID / "results.jsonl").read_text() == before


def test_the_disk_filling_during_the_batch_keeps_its_replies_and_the_rerun_stores_them(api, openai_key, results, tmp_path, monkeypatch):
    from evalkit.judges.batch import KEPT_FILE

    full = _disk_full(monkeypatch)
    full["on"] = False

    def fills_up(request: httpx.Request, bid: str) -> httpx.Response:
        full["on"] = True  # the disk fills while the batch runs
        return api._retrieve(request, bid)

    api.router["retrieve"].side_effect = fills_up
    before = (results / RUN_ID / "results.jsonl").read_text()
    res = _invoke(results, tmp_path, "--batch", "--batch-poll-interval", "0")
    assert res.exit_code == 2, res.output
    assert "8 of 8 verdicts of openai batch batch_1 could not be stored" in res.stderr
    assert "kept in" in res.stderr and "asks none of them again" in res.stderr
    # Nothing bought a second time: the normal pass did not run.
    assert api.router["chat"].call_count == 0 and (results / RUN_ID / "results.jsonl").read_text() == before
    assert len((results / RUN_ID / KEPT_FILE).read_text().splitlines()) == 8

    res = _invoke(results, tmp_path, "--batch", "--batch-poll-interval", "0")  # the disk still full
    assert res.exit_code == 2 and "are stored then" in res.stderr, res.output

    full["on"] = False
    res = _invoke(results, tmp_path)  # without --batch: refused, nothing bought at full price
    assert res.exit_code == 2 and "rerun with --batch to store them" in res.stderr, res.output
    assert api.router["chat"].call_count == 0 and (results / RUN_ID / KEPT_FILE).exists()
    full["on"] = True

    full["on"] = False
    api.router["retrieve"].side_effect = api._retrieve
    res = _invoke(results, tmp_path, "--batch", "--batch-poll-interval", "0")
    out = _ok(res)
    assert api.creates == 1 and api.router["upload"].call_count == 1 and api.router["content"].call_count == 1
    assert api.router["chat"].call_count == 0
    assert _scores(results) == [(GROUNDED["score"], CORRECT["score"])] * 4
    assert out["judge_stats"]["batch"]["kept_stored"] == 8 and "are stored now" in res.stderr
    assert not (results / RUN_ID / KEPT_FILE).exists() and not (results / RUN_ID / STATE_FILE).exists()


def test_replies_that_cannot_be_kept_either_are_downloaded_again_by_the_rerun(api, openai_key, results, tmp_path, monkeypatch):
    from evalkit.judges.batch import KEPT_FILE
    from evalkit.store.runs import RunDir, RunFolderError

    full = _disk_full(monkeypatch)
    full["on"] = False
    write_file = RunDir.write_file

    def no_room_for_the_kept(self: RunDir, name: str, payload: Any) -> Path:
        if name == KEPT_FILE:
            raise RunFolderError(f"{self.path / name}: cannot write {name}: No space left on device")
        return write_file(self, name, payload)

    monkeypatch.setattr(RunDir, "write_file", no_room_for_the_kept)

    def fills_up(request: httpx.Request, bid: str) -> httpx.Response:
        full["on"] = True
        return api._retrieve(request, bid)

    api.router["retrieve"].side_effect = fills_up
    res = _invoke(results, tmp_path, "--batch", "--batch-poll-interval", "0")
    assert res.exit_code == 2, res.output
    assert "nor kept in" in res.stderr and "downloads them again (no new batch, nothing paid twice)" in res.stderr
    (entry,) = json.loads((results / RUN_ID / STATE_FILE).read_text())["batches"]
    assert entry["phase"] == "submitted" and entry["batch_id"] == "batch_1"

    full["on"] = False
    api.router["retrieve"].side_effect = api._retrieve
    _ok(_invoke(results, tmp_path, "--batch", "--batch-poll-interval", "0"))
    assert api.creates == 1 and api.router["content"].call_count == 2 and api.router["chat"].call_count == 0
    assert _scores(results) == [(GROUNDED["score"], CORRECT["score"])] * 4


def test_no_room_on_the_caches_disk_for_the_verdicts_refuses_to_submit(api, openai_key, results, tmp_path, monkeypatch):
    import shutil

    from evalkit.judges import batch as batch_module

    monkeypatch.setattr(batch_module.shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(10**9, 10**9 - 4096, 4096))
    res = _invoke(results, tmp_path, "--batch", "--batch-poll-interval", "0")
    assert res.exit_code == 2, res.output
    assert "has 4,096 bytes free, and the 8 verdicts of this batch need about" in res.stderr
    assert api.router["upload"].call_count == 0 and api.creates == 0
    assert not (results / RUN_ID / STATE_FILE).exists()


# --------------------------------------------------------------------------- bad lines, copies (issue 38 item 6)


@pytest.mark.parametrize(
    "line",
    [
        "this is not json",  # names no custom_id: stands for the one request the output lacks
        "42",  # JSON, not an object
        '{"id": "r9", "custom_id": "{cid}"}',  # neither a response nor an error
        '{"id": "r9", "custom_id": "{cid}", "error": null, "response": {"status_code": 200, "bo',  # cut short
    ],
)
def test_a_bad_output_line_is_that_requests_error(api, openai_key, results, tmp_path, line):
    api.bad = {2: line}
    res = _invoke(results, tmp_path, "--batch", "--batch-poll-interval", "0")
    out = _ok(res)
    assert "Traceback" not in res.output
    b = out["judge_stats"]["batch"]["batches"][0]
    assert (b["succeeded"], b["errored"], b["unrun"], b["bad_lines"]) == (7, 1, 0, 1)
    assert api.router["chat"].call_count == 1 and api.creates == 1  # asked the normal way; no second batch
    assert _scores(results) == [(GROUNDED["score"], CORRECT["score"])] * 4
    assert "not what the provider documents" in res.stderr


def test_copies_of_one_custom_id_that_disagree_are_both_distrusted_and_asked_again(api, openai_key, results, tmp_path):
    api.copies = {0: "different", 1: "different", 4: "same"}
    res = _invoke(results, tmp_path, "--batch", "--batch-poll-interval", "0")
    out = _ok(res)
    b = out["judge_stats"]["batch"]
    assert (b["conflicting"], b["duplicates"], b["cached"]) == (2, 1, 6)
    # The two disagreeing requests are asked again; the identical copies are used once.
    assert api.router["chat"].call_count == 2
    assert _scores(results) == [(GROUNDED["score"], CORRECT["score"])] * 4  # never the wrong first copy
    assert "none was trusted" in res.stderr and "the copies identical; each was used once" in res.stderr


# --------------------------------------------------------------------------- the download (issue 38 item 9)


def test_results_over_the_download_cap_say_so_and_are_not_fetched_again(api, openai_key, results, tmp_path):
    async def endless() -> Any:
        chunk = b"x" * (1 << 20)
        for _ in range(40):  # 40 MiB: over the 32 MiB cap, sent without a Content-Length
            yield chunk

    api.router["content"].side_effect = lambda request, fid: httpx.Response(200, content=endless())
    res = _invoke(results, tmp_path, "--batch", "--batch-poll-interval", "0")
    assert res.exit_code == 2, res.output
    assert "the results of openai batch batch_1 are larger than evalkit downloads" in res.stderr
    assert "over the 33554432-byte limit" in res.stderr and "rerunning as it is meets the same cap" in res.stderr
    assert "rerun to carry on" not in res.stderr and "Connection error" not in res.stderr
    assert api.router["content"].call_count == 1 and api.router["chat"].call_count == 0
    (entry,) = json.loads((results / RUN_ID / STATE_FILE).read_text())["batches"]
    assert entry["phase"] == "submitted"  # the paid batch stays recorded


def test_a_trickled_results_file_meets_the_download_deadline(api, openai_key, results, tmp_path):
    import asyncio

    from evalkit.errors import JudgeConfigError
    from evalkit.judges import JudgeSettings
    from evalkit.judges.batch import BatchOptions
    from evalkit.net.retry import RetryPolicy
    from evalkit.rescore.answers import judge_run
    from evalkit.store.runs import RunDir

    async def trickle() -> Any:
        yield b'{"custom_id": '
        await asyncio.wait_for(asyncio.Event().wait(), 60)  # the rest never comes (the deadline ends it)

    api.router["content"].side_effect = lambda request, fid: httpx.Response(200, content=trickle())
    settings = JudgeSettings(model=OPENAI_MODEL, cache_path=tmp_path / "cache.sqlite", retry_policy=RetryPolicy.no_wait())
    with pytest.raises(JudgeConfigError) as e:
        judge_run(RunDir.open(results, RUN_ID), settings, batch=BatchOptions(poll_interval=0, download_deadline=0.2))
    assert "the results of openai batch batch_1 did not arrive whole within the download deadline of 0.2s" in str(e.value)
    assert "rerun the same command to download them again" in str(e.value)
    assert api.router["content"].call_count == 1  # the deadline bounds the download: not tried again
    assert api.router["chat"].call_count == 0
    (entry,) = json.loads((results / RUN_ID / STATE_FILE).read_text())["batches"]
    assert entry["phase"] == "submitted"
