"""judge_answers --batch with Anthropic: the real SDK client against respx-mocked Message
Batches endpoints (create, retrieve, results_url). Submit -> poll -> results -> cache ->
records; a kill after the submission resumes the same batch; a kill while submitting (id
not recorded) stops and asks, since Message Batches carry no metadata to look it up by."""

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
from tests.unit.judges.judge_helpers import ANTHROPIC_MODEL, CORRECT, GROUNDED, anthropic_tool_reply, make_record

RUN_ID = "20250101T000000Z-batch2"
API = "https://api.anthropic.com/v1"
VERDICTS = {"groundedness_verdict": GROUNDED, "correctness_verdict": CORRECT}


class FakeMessageBatches:
    """Anthropic's Message Batches on respx routes. A batch is "in_progress" for its first
    `polls_before_done` looks, then "ended"; `errored` / `expired` hold request indexes;
    `bad` maps an index to the line sent instead of its result (`{cid}` is its custom_id);
    `copies` maps an index to "same" (its line twice) or "different" (a wrong verdict under
    its custom_id first, then its own line)."""

    def __init__(self, router: respx.Router):
        self.batches: dict[str, dict[str, Any]] = {}
        self.requests: dict[str, list[dict[str, Any]]] = {}
        self.polls: dict[str, int] = {}
        self.polls_before_done = 1
        self.errored: set[int] = set()
        self.expired: set[int] = set()
        self.bad: dict[int, str] = {}
        self.copies: dict[int, str] = {}
        router.post(f"{API}/messages/batches", name="create").mock(side_effect=self._create)
        router.get(url__regex=rf"{API}/messages/batches/(?P<bid>[^/]+)$", name="retrieve").mock(side_effect=self._retrieve)
        router.get(url__regex=rf"{API}/messages/batches/(?P<bid>[^/]+)/results$", name="results").mock(side_effect=self._results)

    def make_batch(self, body: dict[str, Any]) -> dict[str, Any]:
        bid = f"msgbatch_{len(self.batches) + 1}"
        self.requests[bid] = body["requests"]
        self.batches[bid] = {
            "id": bid, "type": "message_batch", "processing_status": "in_progress",
            "request_counts": {"processing": len(body["requests"]), "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0},
            "created_at": "2025-01-01T00:00:00Z", "expires_at": "2025-01-02T00:00:00Z", "ended_at": None,
            "archived_at": None, "cancel_initiated_at": None, "results_url": None,
        }
        return self.batches[bid]

    def _create(self, request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=self.make_batch(json.loads(request.content)))

    def _retrieve(self, request: httpx.Request, bid: str) -> httpx.Response:
        batch = self.batches[bid]
        seen = self.polls[bid] = self.polls.get(bid, 0) + 1
        n = len(self.requests[bid])
        if seen > self.polls_before_done:
            batch.update(processing_status="ended", ended_at="2025-01-01T01:00:00Z",
                         results_url=f"{API}/messages/batches/{bid}/results",
                         request_counts={"processing": 0, "succeeded": n - len(self.errored | self.expired),
                                         "errored": len(self.errored), "canceled": 0, "expired": len(self.expired)})
        return httpx.Response(200, json=batch)

    def _results(self, request: httpx.Request, bid: str) -> httpx.Response:
        lines = []
        for i, r in enumerate(self.requests[bid]):
            if i in self.errored:
                result = {"type": "errored", "error": {"type": "error", "error": {"type": "api_error", "message": "Internal server error"}}}
            elif i in self.expired:
                result = {"type": "expired"}
            else:
                name = r["params"]["tool_choice"]["name"]
                if self.copies.get(i) == "different":  # a wrong verdict first: first-wins would keep it
                    wrong = anthropic_tool_reply({**VERDICTS[name], "score": 1}, name=name, input_tokens=1000, output_tokens=100)
                    lines.append(json.dumps({"custom_id": r["custom_id"], "result": {"type": "succeeded", "message": wrong}}))
                result = {"type": "succeeded", "message": anthropic_tool_reply(VERDICTS[name], name=name, input_tokens=1000, output_tokens=100)}
            lines.append(json.dumps({"custom_id": r["custom_id"], "result": result}))
            if self.copies.get(i) == "same":
                lines.append(lines[-1])
            if i in self.bad:
                lines[-1] = self.bad[i].replace("{cid}", r["custom_id"])
        return httpx.Response(200, content=("\n".join(lines) + "\n").encode())


def _messages(request: httpx.Request) -> httpx.Response:
    """The normal path's Messages endpoint: the verdict of the tool asked for."""
    name = json.loads(request.content)["tool_choice"]["name"]
    return httpx.Response(200, json=anthropic_tool_reply(VERDICTS[name], name=name))


@pytest.fixture
def api() -> Any:
    with respx.mock(assert_all_called=False, assert_all_mocked=True) as router:
        fake = FakeMessageBatches(router)
        router.post(f"{API}/messages", name="messages").mock(side_effect=_messages)
        fake.router = router  # type: ignore[attr-defined]
        yield fake


@pytest.fixture
def results(tmp_path: Path) -> Path:
    records = [make_record(f"q{i}", case_index=i, answer=f"The port is 8080 [1] (case {i}).") for i in range(3)]
    return write_run(tmp_path / "results", RUN_ID, records)


def _invoke(results: Path, tmp_path: Path, *args: str):
    return CliRunner().invoke(app, ["--run-id", RUN_ID, "--results-dir", str(results), "--judge-model", ANTHROPIC_MODEL,
                                    "--cache-path", str(tmp_path / "cache.sqlite"), "--json", "--batch",
                                    "--batch-poll-interval", "0", *args])


def _ok(res: Any) -> dict[str, Any]:
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout.strip().splitlines()[-1])


def _scores(results: Path) -> list[tuple[Any, Any]]:
    records = [json.loads(x) for x in (results / RUN_ID / "results.jsonl").read_text().splitlines()]
    return [(r["groundedness"]["score"], r["correctness"]["score"]) for r in records]


def test_batch_submits_polls_fills_the_cache_and_writes_the_run(api, anthropic_key, results, tmp_path):
    out = _ok(_invoke(results, tmp_path))
    assert api.router["create"].call_count == 1
    requests = api.requests["msgbatch_1"]
    assert len(requests) == 3 * 2
    params = requests[0]["params"]
    assert params["model"] == ANTHROPIC_MODEL and params["tool_choice"]["type"] == "tool" and params["tools"][0]["input_schema"]
    # in_progress, then ended (with the results_url the download uses: no third look)
    assert api.polls["msgbatch_1"] == 2
    assert api.router["messages"].call_count == 0
    assert _scores(results) == [(GROUNDED["score"], CORRECT["score"])] * 3
    batch = out["judge_stats"]["batch"]
    assert batch["cached"] == 6 and batch["provider"] == "anthropic"
    assert not (results / RUN_ID / STATE_FILE).exists()
    # A later normal judging finds every verdict in the cache.
    again = CliRunner().invoke(app, ["--run-id", RUN_ID, "--results-dir", str(results), "--judge-model", ANTHROPIC_MODEL,
                                     "--cache-path", str(tmp_path / "cache.sqlite"), "--json"])
    assert _ok(again)["judge_stats"]["cache_hits"] == 6 and api.router["messages"].call_count == 0


def test_a_killed_batch_resumes_the_same_batch_without_submitting_it_twice(api, anthropic_key, results, tmp_path):
    def killed(request: httpx.Request, bid: str) -> httpx.Response:
        raise KeyboardInterrupt

    api.router["retrieve"].side_effect = killed
    res = _invoke(results, tmp_path)
    assert res.exit_code == 130, res.output
    (entry,) = json.loads((results / RUN_ID / STATE_FILE).read_text())["batches"]
    assert entry["batch_id"] == "msgbatch_1" and entry["phase"] == "submitted"

    api.router["retrieve"].side_effect = api._retrieve
    out = _ok(_invoke(results, tmp_path))
    assert api.router["create"].call_count == 1 and len(api.batches) == 1
    assert out["judge_stats"]["batch"]["batches"][0]["batch_id"] == "msgbatch_1"
    assert _scores(results) == [(GROUNDED["score"], CORRECT["score"])] * 3


def test_an_errored_request_is_judged_the_normal_way(api, anthropic_key, results, tmp_path):
    api.errored = {2}
    out = _ok(_invoke(results, tmp_path))
    b = out["judge_stats"]["batch"]["batches"][0]
    assert (b["succeeded"], b["errored"], b["unrun"]) == (5, 1, 0)
    assert api.router["messages"].call_count == 1
    assert _scores(results) == [(GROUNDED["score"], CORRECT["score"])] * 3


def test_killed_while_submitting_asks_which_batch_then_collects_the_one_named(api, anthropic_key, results, tmp_path):
    def made_then_killed(request: httpx.Request) -> httpx.Response:
        api.make_batch(json.loads(request.content))  # Anthropic made it; its id never arrived
        raise KeyboardInterrupt

    api.router["create"].side_effect = made_then_killed
    assert _invoke(results, tmp_path).exit_code == 130
    api.router["create"].side_effect = api._create

    res = _invoke(results, tmp_path)
    assert res.exit_code == 2, res.output
    assert "before its id was recorded" in res.stderr and "--batch-id ID" in res.stderr and "--batch-resubmit" in res.stderr
    assert len(api.batches) == 1

    _ok(_invoke(results, tmp_path, "--batch-id", "msgbatch_1"))
    assert len(api.batches) == 1 and api.polls["msgbatch_1"] == 2
    assert api.router["messages"].call_count == 0
    assert _scores(results) == [(GROUNDED["score"], CORRECT["score"])] * 3


def test_killed_while_submitting_then_resubmitted(api, anthropic_key, results, tmp_path):
    def killed(request: httpx.Request) -> httpx.Response:
        raise KeyboardInterrupt  # the request never reached Anthropic

    api.router["create"].side_effect = killed
    assert _invoke(results, tmp_path).exit_code == 130
    api.router["create"].side_effect = api._create
    _ok(_invoke(results, tmp_path, "--batch-resubmit"))
    assert len(api.batches) == 1 and len(api.requests["msgbatch_1"]) == 6
    assert _scores(results) == [(GROUNDED["score"], CORRECT["score"])] * 3


def test_a_batch_id_that_holds_none_of_the_runs_requests_is_refused(api, anthropic_key, results, tmp_path):
    api.make_batch({"requests": [{"custom_id": "someone-else-1", "params": {"tool_choice": {"name": "correctness_verdict"}}}]})

    def killed(request: httpx.Request) -> httpx.Response:
        raise KeyboardInterrupt

    api.router["create"].side_effect = killed
    assert _invoke(results, tmp_path).exit_code == 130
    res = _invoke(results, tmp_path, "--batch-id", "msgbatch_1")
    assert res.exit_code == 2, res.output
    assert "batch msgbatch_1 (--batch-id) holds none of this run's requests" in res.stderr
    # The wrong id is not kept: the submission is still unknown, and resubmitting works.
    (entry,) = json.loads((results / RUN_ID / STATE_FILE).read_text())["batches"]
    assert entry["phase"] == "submitting" and "batch_id" not in entry
    api.router["create"].side_effect = api._create
    _ok(_invoke(results, tmp_path, "--batch-resubmit"))
    assert len(api.batches) == 2 and len(api.requests["msgbatch_2"]) == 6
    assert _scores(results) == [(GROUNDED["score"], CORRECT["score"])] * 3


# --------------------------------------------------------------------------- bad lines, copies (issue 38 item 6)


@pytest.mark.parametrize(
    "line",
    [
        "this is not json",  # names no custom_id: stands for the one request the output lacks
        '{"custom_id": "{cid}", "result": {"type": "succeeded", "message": {"con',  # cut short: its custom_id is read
        "[1, 2]",  # JSON, not an object
        '{"custom_id": "{cid}"}',  # no result
        '{"custom_id": "{cid}", "result": {"type": "succeeded"}}',  # succeeded without a message
    ],
)
def test_a_bad_result_line_is_that_requests_error_and_no_crash(api, anthropic_key, results, tmp_path, line):
    api.bad = {3: line}
    res = _invoke(results, tmp_path)
    out = _ok(res)
    assert "Traceback" not in res.output
    b = out["judge_stats"]["batch"]["batches"][0]
    assert (b["succeeded"], b["errored"], b["unrun"], b["bad_lines"]) == (5, 1, 0, 1)
    assert api.router["messages"].call_count == 1 and len(api.batches) == 1  # asked the normal way
    assert _scores(results) == [(GROUNDED["score"], CORRECT["score"])] * 3
    assert not (results / RUN_ID / STATE_FILE).exists()  # nothing left to trip a rerun


def test_copies_of_one_custom_id_are_used_once_when_identical_and_asked_again_when_not(api, anthropic_key, results, tmp_path):
    api.copies = {0: "different", 1: "different", 2: "same"}
    res = _invoke(results, tmp_path)
    b = _ok(res)["judge_stats"]["batch"]
    assert (b["conflicting"], b["duplicates"], b["cached"]) == (2, 1, 4)
    assert api.router["messages"].call_count == 2
    assert _scores(results) == [(GROUNDED["score"], CORRECT["score"])] * 3  # never the wrong first copy
    assert "none was trusted" in res.stderr


# --------------------------------------------------------------------------- never pay twice, the download (items 5, 9)


def test_verdicts_the_full_cache_cannot_store_are_kept_and_never_asked_again(api, anthropic_key, results, tmp_path, monkeypatch):
    import errno

    from evalkit.judges.batch import KEPT_FILE
    from evalkit.judges.cache import JudgeCache

    full = {"on": False}
    put = JudgeCache.put

    def store(self: JudgeCache, *args: Any, **kwargs: Any) -> bool:
        if full["on"]:
            raise OSError(errno.ENOSPC, "No space left on device")
        return put(self, *args, **kwargs)

    def fills_up(request: httpx.Request, bid: str) -> httpx.Response:
        full["on"] = True  # the disk fills while the batch runs
        return api._retrieve(request, bid)

    monkeypatch.setattr(JudgeCache, "put", store)
    api.router["retrieve"].side_effect = fills_up
    res = _invoke(results, tmp_path)
    assert res.exit_code == 2, res.output
    assert "6 of 6 verdicts of anthropic batch msgbatch_1 could not be stored" in res.stderr
    assert api.router["messages"].call_count == 0 and (results / RUN_ID / KEPT_FILE).exists()

    full["on"] = False
    api.router["retrieve"].side_effect = api._retrieve
    _ok(_invoke(results, tmp_path))
    assert len(api.batches) == 1 and api.router["results"].call_count == 1 and api.router["messages"].call_count == 0
    assert _scores(results) == [(GROUNDED["score"], CORRECT["score"])] * 3


def test_results_announced_over_the_download_cap_say_so(api, anthropic_key, results, tmp_path):
    api.router["results"].side_effect = lambda request, bid: httpx.Response(
        200, headers={"Content-Length": str(10**9)}, content=b"{}\n")
    res = _invoke(results, tmp_path)
    assert res.exit_code == 2, res.output
    assert "the results of anthropic batch msgbatch_1 are larger than evalkit downloads" in res.stderr
    assert "announces 1000000000 bytes, over the 33554432-byte limit" in res.stderr
    assert "rerun to carry on" not in res.stderr and api.router["results"].call_count == 1
    assert api.router["messages"].call_count == 0
