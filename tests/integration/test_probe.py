"""A dead or foreign target stops the run before the first case (exit 2, one line, nothing
written); a run whose target failed on some cases is incomplete (exit 3)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.integration.fault_server import fault_server  # noqa: F401
from tests.support import make_case, run_eval_cli, run_eval_script, write_eval_set

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
GOLD = [{"rel_path": "notes/alpha.md", "heading_path": "# Alpha"}]


def _eval_set(tmp_path: Path, questions: list[str]) -> Path:
    cases = [make_case(i, question=q, gold_supports=GOLD) for i, q in enumerate(questions)]
    return write_eval_set(tmp_path / "es.jsonl", cases)


def test_an_unreachable_target_exits_2_within_seconds(tmp_path):
    es = _eval_set(tmp_path, [f"q{i}" for i in range(30)])
    # Port 9 (discard) on loopback: nothing listens. Default retries (3) and timeout (60 s):
    # the probe alone decides, with one try.
    proc = run_eval_script(eval_set=es, api_url="http://127.0.0.1:9", results_dir=tmp_path / "r", retrieval_only=True)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("evalkit: --api-url: cannot reach the target at http://127.0.0.1:9")
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").iterdir())


@pytest.mark.parametrize(
    ("behaviour", "says"),
    [
        ("bad_json", "does not speak the /api/v1/ask contract"),
        ("invalid_schema", "does not speak the /api/v1/ask contract"),
        ({"behaviour": "status", "status": 404}, "has no /api/v1/ask (HTTP 404)"),
        ({"behaviour": "status", "status": 401}, "refused the request (HTTP 401)"),
    ],
)
def test_a_target_that_does_not_speak_the_contract_exits_2(fault_server, tmp_path, behaviour, says):  # noqa: F811
    srv = fault_server({"first": behaviour})
    es = _eval_set(tmp_path, ["first", "second"])
    out = run_eval_cli(eval_set=es, api_url=srv.base_url, results_dir=tmp_path / "r", retrieval_only=True)
    assert out.exit_code == 2, out.output
    assert says in out.stderr and "--no-probe" in out.stderr
    assert srv.hits.get("second", 0) == 0  # no case was asked
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").iterdir())


def test_no_probe_runs_anyway_and_the_failures_make_the_run_incomplete(fault_server, tmp_path):  # noqa: F811
    srv = fault_server({"first": "bad_json"})
    es = _eval_set(tmp_path, ["first", "second"])
    out = run_eval_cli(eval_set=es, api_url=srv.base_url, results_dir=tmp_path / "r", retrieval_only=True, no_probe=True)
    assert out.exit_code == 3, out.output
    assert "incomplete run: the target failed 1 of 2 cases" in out.stderr
    assert srv.hits["first"] == 1 and srv.hits["second"] == 1


def test_an_unknown_vault_is_an_error_not_an_empty_search(tmp_path):
    # The reference chatbot's vault id is its folder's name unless --vault-id names it (or the
    # eval set's one vault does, under --send-scope vaults); this eval set names sample_vault.
    vault = tmp_path / "other_vault"
    shutil.copytree(ROOT / "sample_vault", vault)
    es = ROOT / "eval_set_sanity.jsonl"
    run = {"eval_set": es, "vault": vault, "results_dir": tmp_path / "r", "retrieval_only": True}
    out = run_eval_cli(**run, send_scope="vaults", vault_id="other_vault")
    assert out.exit_code == 2, out.output
    assert "unknown vault 'sample_vault'; this server serves 'other_vault'" in out.stderr
    # The eval set's one vault is served when --vault-id is not given.
    assert run_eval_cli(**run, send_scope="vaults").exit_code == 0
    # Without --send-scope nothing names a vault: the same run measures the chatbot.
    ok = run_eval_cli(**run, json=True)
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.stdout.strip().splitlines()[-1])["aggregate_metrics"]["recall_at_k_avg"] > 0.5


def test_reference_server_answers_400_for_an_unknown_vault(reference_server):
    import httpx

    with httpx.Client(trust_env=False) as client:
        r = client.post(f"{reference_server}/api/v1/ask", json={"question": "water", "vaults": ["nope"]})
    assert r.status_code == 400
    assert "unknown vault 'nope'; this server serves" in r.json()["error"]


def test_runs_that_retrieve_nothing_say_so(tmp_path):
    # A target that answers but retrieves nothing: every metric is 0 and the run must say why.
    bot = tmp_path / "bot.py"
    bot.write_text(
        "def ask(request):\n"
        "    return {'answer': 'I could not find that.', 'references': [], 'abstained': False,\n"
        "            'debug': {'retrieved_chunks': []}}\n"
    )
    es = _eval_set(tmp_path, ["a", "b", "c"])
    out = run_eval_cli(eval_set=es, target=f"python:{bot}:ask", results_dir=tmp_path / "r", retrieval_only=True,
                       json=True)
    assert out.exit_code == 0, out.output
    payload = json.loads(out.stdout.strip().splitlines()[-1])
    kinds = {w["kind"]: w for w in payload["warnings"]}
    # by hand: 3 of 3 answerable cases retrieved nothing (> 1/3); their gold was never retrieved
    assert kinds["no_chunks"]["n"] == 3 and kinds["no_chunks"]["of"] == 3
    assert kinds["gold_never_retrieved"]["n"] == 3 and kinds["gold_never_retrieved"]["severity"] == "warning"
    assert "retrieved no chunk at all" in out.stderr
    metrics = json.loads((Path(payload["run_dir"]) / "metrics.json").read_text())
    assert metrics["warnings"] == payload["warnings"]


def test_a_5xx_on_the_probe_is_not_fatal_but_a_target_failing_every_case_is_incomplete(fault_server, tmp_path):  # noqa: F811
    # A 500 may belong to one question: the probe lets the run go on, and the run says the rest.
    srv = fault_server({"first": "500", "second": "500"})
    es = _eval_set(tmp_path, ["first", "second"])
    out = run_eval_cli(eval_set=es, api_url=srv.base_url, results_dir=tmp_path / "r", retrieval_only=True, retries=0,
                       json=True)
    assert out.exit_code == 3, out.output
    payload = json.loads(out.stdout.strip().splitlines()[-1])
    config = json.loads((Path(payload["run_dir"]) / "config.json").read_text())
    assert config["sessions"][0]["probe"]["ok"] is False and config["sessions"][0]["probe"]["error"]["status"] == 500
