"""The runner against a fault-injecting loopback server: exactly the faulty cases are
marked, each with the right error class, and the rates say so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from evalkit.schema import ResultRecord
from tests.support import make_case, read_records, run_eval_api, run_eval_cli, write_eval_set

pytestmark = pytest.mark.integration

GOLD = [{"rel_path": "notes/alpha.md", "heading_path": "# Alpha"}]

# question -> (behaviour, expected error kind or None, expected HTTP status)
FAULTS = {
    "q-ok-1": ("ok", None, None),
    "q-500": ("500", "http_error", 500),
    "q-404": ({"behaviour": "status", "status": 404}, "http_error", 404),
    "q-hang": ({"behaviour": "hang", "hang_s": 120}, "timeout", None),  # released when the server stops
    "q-bad-json": ("bad_json", "invalid_response", None),
    "q-invalid": ("invalid_schema", "invalid_response", None),
    "q-empty": ("empty_answer", "empty_answer", None),
    "q-flaky": ({"behaviour": "503-then-ok", "times": 1}, None, None),
    "q-partial": ("partial", None, None),
    "q-ok-2": ("ok", None, None),
}


def _eval_set(path: Path) -> Path:
    return write_eval_set(path, [make_case(f"case-{q}", question=q, gold_supports=GOLD, tags=["faults"]) for q in FAULTS])


def test_each_fault_is_classified_and_counted(fault_server, tmp_path):  # noqa: F811
    srv = fault_server({q: b for q, (b, _, _) in FAULTS.items()})
    result = run_eval_api(
        eval_set=_eval_set(tmp_path / "faults.jsonl"),
        api_url=srv.base_url,
        timeout=2.0,  # far above a loopback answer on a loaded machine, far below the hang
        retries=1,
        concurrency=4,
        retrieval_only=True,
        results_dir=tmp_path / "results",
    )
    records = {r["test_case_id"]: r for r in read_records(result.run_dir)}
    assert len(records) == len(FAULTS)
    for q, (_, kind, status) in FAULTS.items():
        rec = records[f"case-{q}"]
        ResultRecord.model_validate(rec)
        if kind is None:
            assert rec["error"] is None, (q, rec["error"])
        else:
            assert rec["error"]["kind"] == kind, (q, rec["error"])
            assert rec["error"]["status"] == status, q
            assert rec["error"]["detail"]

    # A target error is a system failure: retrieval scores 0 (not None) and the record stays.
    assert records["case-q-500"]["retrieval_metrics"]["recall_at_k"] == 0.0
    # An empty answer keeps its retrieval metrics (the server retrieved alpha at rank 1).
    assert records["case-q-empty"]["retrieval_metrics"]["recall_at_k"] == 1.0
    # The flaky case needed its retry; the partial one says what it lacked.
    assert srv.hits["q-flaky"] == 2 and records["case-q-flaky"]["attempts"] == 2
    assert "debug" in records["case-q-partial"]["missing_fields"]
    assert records["case-q-partial"]["retrieval_metrics"]["recall_at_k"] == 0.0

    ops = result.metrics["aggregate_metrics"]["operational_metrics"]
    # by hand: 6 of 10 cases failed (500, 404, hang, bad json, invalid schema, empty answer)
    assert ops["error_rate"] == 6 / 10
    assert ops["timeout_rate"] == 1 / 10
    assert ops["empty_response_rate"] == 1 / 10
    assert ops["error_kinds"] == {"empty_answer": 1, "http_error": 2, "invalid_response": 2, "timeout": 1}
    # by hand: 5 of 10 target failures (the empty answer is the system's answer) > --max-error-rate 0
    assert result.n_errors == 5 and result.error_rate == 0.5 and result.incomplete and not result.success


def test_cli_json_reports_the_error_rate(fault_server, tmp_path, monkeypatch):  # noqa: F811
    srv = fault_server({"q-500": "500"})
    monkeypatch.setenv("EVAL_API_URL", srv.base_url)  # the env var names the API when --api-url is absent
    es = write_eval_set(tmp_path / "es.jsonl",
                        [make_case(i, question=q, gold_supports=GOLD) for i, q in enumerate(["a", "q-500", "b", "c"])])
    out = run_eval_cli(eval_set=es, retries=0, retrieval_only=True, results_dir=tmp_path / "r", json=True)
    # 1 failed case of 4 is over the default --max-error-rate 0: the run is incomplete (exit 3)
    assert out.exit_code == 3, out.output
    assert "incomplete run: the target failed 1 of 4 cases" in out.stderr
    payload = json.loads(out.stdout.strip().splitlines()[-1])
    assert {"run_id", "run_dir", "aggregate_metrics", "gate"} <= set(payload)
    assert payload["gate"]["passed"] is True and payload["gate"]["regressions"] == []
    # by hand: 1 of 4 cases answered 500
    assert payload["aggregate_metrics"]["operational_metrics"]["error_rate"] == 1 / 4
    assert payload["error_rate"] == 1 / 4 and payload["incomplete"] is True and payload["success"] is False
    assert [w["kind"] for w in payload["warnings"]] == ["target_errors"] and payload["warnings"][0]["ids"] == ["c1"]
    # allowing a quarter of the cases to fail makes the same run complete (exit 0)
    ok = run_eval_cli(eval_set=es, retries=0, retrieval_only=True, results_dir=tmp_path / "r2", json=True,
                      max_error_rate=0.25)
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.stdout.strip().splitlines()[-1])["success"] is True
    config = json.loads((Path(payload["run_dir"]) / "config.json").read_text())
    assert config["target"]["kind"] == "http" and config["target"]["api_url"] == srv.base_url


def test_every_case_failing_is_not_a_success(tmp_path):
    es = write_eval_set(tmp_path / "es.jsonl", [make_case("c1", question="q", gold_supports=GOLD)])
    # Port 9 (discard) on loopback: nothing listens, the connection is refused at once.
    # --no-probe: let the run start, so every case fails in the target.
    result = run_eval_api(
        eval_set=es, api_url="http://127.0.0.1:9", retries=0, retrieval_only=True,
        results_dir=tmp_path / "r", no_probe=True,
    )
    (rec,) = read_records(result.run_dir)
    assert rec["error"]["kind"] == "connect"
    assert not result.success and result.n_errors == 1


def test_eval_api_url_names_the_api_for_the_library_too(fault_server, tmp_path, monkeypatch):  # noqa: F811
    srv = fault_server()
    monkeypatch.setenv("EVAL_API_URL", srv.base_url)
    es = write_eval_set(tmp_path / "es.jsonl", [make_case("c1", question="a", gold_supports=GOLD)])
    result = run_eval_api(eval_set=es, retrieval_only=True, results_dir=tmp_path / "r")
    config = json.loads((result.run_dir / "config.json").read_text())
    assert config["target"]["kind"] == "http" and config["hashed"]["target_kind"] == "http"
    assert config["settings"]["api_url"] == srv.base_url
    assert srv.hits["a"] == 2  # the probe, then the case


class _Waits:
    """A progress sink that keeps the waits the retry loop announces (seconds, why)."""

    def __init__(self) -> None:
        self.waits: list[tuple[float, str]] = []

    def start(self, **_: object) -> None: ...

    def advance(self, record: object) -> None: ...

    def close(self) -> None: ...

    def waiting(self, seconds: float, reason: str) -> None:
        self.waits.append((seconds, reason))


def test_max_retry_wait_caps_a_servers_retry_after(fault_server, tmp_path):  # noqa: F811
    # The server asks for 30 s; --max-retry-wait 0.2 cuts each wait to 0.2 s.
    srv = fault_server({"slow-down": {"behaviour": "429-then-ok", "times": 1, "retry_after": "30"}})
    es = write_eval_set(tmp_path / "es.jsonl", [make_case("c1", question="slow-down", gold_supports=GOLD)])
    sink = _Waits()
    result = run_eval_api(eval_set=es, api_url=srv.base_url, retrieval_only=True, results_dir=tmp_path / "r",
                          no_probe=True, retries=1, max_retry_wait=0.2, progress=sink)
    assert sink.waits == [(0.2, "Retry-After")]  # one wait, the server's 30 s capped
    (rec,) = read_records(result.run_dir)
    assert rec["error"] is None and rec["attempts"] == 2
    config = json.loads((result.run_dir / "config.json").read_text())
    assert config["settings"]["max_retry_wait"] == 0.2
