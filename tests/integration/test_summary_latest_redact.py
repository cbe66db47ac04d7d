"""summary.md, results/latest and `evalkit redact` on run folders written by run_eval
(a Python-callable target in process, the offline heuristic judge) (issue 12, parts 2 and 3)."""

from __future__ import annotations

import json
import logging
import os
import textwrap
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from evalkit import run_eval, score_abstention, score_retrieval
from evalkit.cli.compare_runs import app as compare_app
from evalkit.cli.judge_answers import app as judge_app
from evalkit.cli.redact import app as redact_app
from evalkit.cli.run_eval import app as run_app
from evalkit.cli.score_retrieval import app as score_app
from evalkit.compare import compare_runs
from evalkit.errors import BadConfig
from evalkit.interop.redact import REDACTED_PREFIX, redact_run
from evalkit.store.runs import RunDir, RunFolderError, list_runs

pytestmark = pytest.mark.integration

# Per question: (chunks as (chunk_id, rel_path, heading_path, text), answer). VARIANT changes one answer.
BOT = textwrap.dedent(
    '''
    import os
    PLAN = {
        "Which port does the staging proxy listen on?": (
            [("c1", "ops/proxy.md", "# Proxy > ## Staging", "The staging proxy listens on port 8443 behind the VPN."),
             ("c2", "ops/dns.md", "# DNS", "Internal zones are served by the two resolvers in the basement rack.")],
            "The staging proxy listens on port 8443 [1]."),
        "Who signed the lease for the allotment garden?": (
            [("c3", "home/garden.md", "# Garden", "Marguerite signed the allotment lease on a rainy Tuesday.")],
            "Marguerite signed the allotment lease [1]."),
        "What colour was the first bicycle I ever owned?": (
            [("c4", "home/bikes.md", "# Bikes", "The workshop sells tubeless tyre sealant in bulk bottles.")],
            "I cannot find that in your notes."),
        "How many sourdough loaves fit in the cast iron pot?": (
            [("c5", "food/bread.md", "# Bread > ## Baking", "Only a single loaf fits in the cast iron pot at once.")],
            "Exactly one loaf fits in the cast iron pot at a time [1]."),
    }

    def ask(request):
        chunks, answer = PLAN[request["question"]]
        if os.environ.get("EVALKIT_TEST_VARIANT") == "b" and "allotment" in request["question"]:
            answer = "Nobody knows who signed the allotment paperwork."
        return {"answer": answer,
                "references": [{"chunk_id": c, "rel_path": p, "heading_path": h} for c, p, h, _ in chunks[:1]],
                "abstained": answer.startswith("I cannot"),
                "debug": {"retrieved_chunks": [
                    {"chunk_id": c, "rel_path": p, "heading_path": h, "start_line": 1, "end_line": 3, "text": t, "rank": i}
                    for i, (c, p, h, t) in enumerate(chunks, start=1)]}}
    '''
)

CASES = [
    {"id": "p1", "question": "Which port does the staging proxy listen on?", "answerable": True, "category": "factual",
     "expected_answer": "Port 8443, only reachable over the VPN.", "expected_key_facts": ["port 8443 on staging"],
     "gold_supports": [{"rel_path": "ops/proxy.md", "heading_path": "# Proxy > ## Staging", "snippets": ["listens on port 8443"]}],
     "private_memo": "Remember to ask Jonas about the firewall exception"},
    {"id": "p2", "question": "Who signed the lease for the allotment garden?", "answerable": True, "category": "factual",
     "expected_key_facts": ["Marguerite signed it"],
     "gold_supports": [{"rel_path": "home/garden.md", "heading_path": "# Garden"}], "notes": "checked against the paper copy"},
    {"id": "p3", "question": "What colour was the first bicycle I ever owned?", "answerable": False, "category": "adversarial"},
    {"id": "p4", "question": "How many sourdough loaves fit in the cast iron pot?", "answerable": True, "category": "reasoning",
     "gold_supports": [{"rel_path": "food/other.md", "heading_path": "# Other"}]},
]


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """(results_dir, run kwargs): an eval set and a Python target; the heuristic judge runs."""
    (tmp_path / "bot.py").write_text(BOT)
    es = tmp_path / "es.jsonl"
    es.write_text("".join(json.dumps(c) + "\n" for c in CASES))
    monkeypatch.delenv("EVALKIT_TEST_VARIANT", raising=False)
    results = tmp_path / "results"
    kwargs = dict(eval_set=str(es), k=[3, 2], target=f"python:{tmp_path / 'bot.py'}:ask", results_dir=str(results),
                  no_probe=True)
    return results, kwargs


def _json(path: Path) -> dict:
    return orjson.loads(path.read_bytes())


def _summary(results: Path, run_id: str) -> str:
    return (results / run_id / "summary.md").read_text(encoding="utf-8")


# --------------------------------------------------------------------------- summary.md


def test_run_eval_writes_summary_md_with_the_exact_headline_numbers(env) -> None:
    results, kwargs = env
    res = run_eval(**kwargs, run_id="r1")
    text = _summary(results, "r1")
    metrics = _json(results / "r1" / "metrics.json")
    agg = metrics["aggregate_metrics"]
    # The table rounds to 3 places, as the terminal table does; n is metrics.json's.
    assert f"| Recall@3 (any) | {agg['recall_at_k_avg']:.3f} | {agg['n']['recall_at_k_avg']} |" in text
    assert f"| MRR@3 | {agg['mrr_avg']:.3f} | {agg['n']['mrr_avg']} |" in text
    assert f"| Groundedness (0-5) (heuristic) | {agg['groundedness_avg']:.3f} | {agg['n']['groundedness_avg']} |" in text
    assert f"| Abstention accuracy | {agg['abstention_accuracy']:.3f} | {agg['n']['abstention_accuracy']} |" in text
    # By hand: p1 and p2 retrieve their gold at rank 1, p4 misses it: recall 2/3.
    assert agg["recall_at_k_avg"] == 2 / 3 and "| Recall@3 (any) | 0.667 | 3 |" in text
    # By category: factual has 2 cases, both found.
    assert "| factual | 2 | 1.000 | 1.000 |" in text
    # Worst cases: p4 missed its gold (and is listed with its question).
    worst = text.split("## Worst cases")[1]
    assert "| p4 | reasoning | missed gold |" in worst
    assert "How many sourdough loaves fit in the cast iron pot?" in worst
    assert res.run_dir == results / "r1"


def test_summary_md_follows_every_rewrite_of_metrics_json(env) -> None:
    results, kwargs = env
    run_eval(**kwargs, run_id="r1")
    assert "| Recall@3 (any) |" in _summary(results, "r1")
    score_retrieval("r1", results_dir=results, ks=[2], primary_k=2)
    text = _summary(results, "r1")
    assert "| Recall@2 (any) |" in text and "| Recall@3 (any) |" not in text
    (results / "r1" / "summary.md").unlink()
    score_abstention("r1", results_dir=results)
    assert (results / "r1" / "summary.md").exists()
    (results / "r1" / "summary.md").unlink()
    out = CliRunner().invoke(judge_app, ["--run-id", "r1", "--results-dir", str(results), "--judge-provider", "heuristic",
                                         "--no-cache", "--quiet"])
    assert out.exit_code == 0, out.output
    text = _summary(results, "r1")
    agg = _json(results / "r1" / "metrics.json")["aggregate_metrics"]
    assert f"| Correctness (0-5) (heuristic) | {agg['correctness_avg']:.3f} | {agg['n']['correctness_avg']} |" in text


def test_a_failed_summary_write_warns_and_leaves_the_run_alone(env, monkeypatch, caplog) -> None:
    results, kwargs = env
    run_eval(**kwargs, run_id="r1")
    before = (results / "r1" / "summary.md").read_bytes()

    def refuse(self, text):
        from evalkit.errors import Problem

        raise RunFolderError(Problem("cannot write summary.md: No space left on device", path=str(self.path)))

    monkeypatch.setattr(RunDir, "write_summary", refuse)
    with caplog.at_level(logging.WARNING, logger="evalkit"):
        res = score_retrieval("r1", results_dir=results, ks=[2], primary_k=2)
    assert res.metrics["ks"] == [2] and _json(results / "r1" / "metrics.json")["ks"] == [2]
    assert "summary.md not written" in caplog.text and "No space left" in caplog.text
    assert (results / "r1" / "summary.md").read_bytes() == before  # old one kept whole


# --------------------------------------------------------------------------- results/latest


def test_latest_points_at_the_run_run_eval_finished_last(env) -> None:
    results, kwargs = env
    run_eval(**kwargs, run_id="r1")
    assert os.readlink(results / "latest") == "r1"
    run_eval(**kwargs, run_id="r2")
    assert os.readlink(results / "latest") == "r2"
    assert list_runs(results) == ["r2", "r1"]  # the pointer itself is not a run
    run_eval(resume="r1", results_dir=kwargs["results_dir"], no_probe=True)
    assert os.readlink(results / "latest") == "r1"  # a resumed run is the newest finished one
    assert not (results / "latest.json").exists()


def test_latest_json_where_the_os_makes_no_symlinks(env, monkeypatch) -> None:
    results, kwargs = env

    def no_symlinks(*args, **kwargs):
        raise OSError(1, "Operation not permitted")

    monkeypatch.setattr(os, "symlink", no_symlinks)
    run_eval(**kwargs, run_id="r1")
    run_eval(**kwargs, run_id="r2")
    assert not (results / "latest").exists()
    assert _json(results / "latest.json") == {"run_id": "r2"}
    assert list_runs(results) == ["r2", "r1"]
    out = CliRunner().invoke(score_app, ["--run-id", "latest", "--results-dir", str(results), "--quiet", "--json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout.strip().splitlines()[-1])["run_id"] == "r2"


def test_run_id_latest_through_the_score_compare_and_judge_clis(env) -> None:
    results, kwargs = env
    run_eval(**kwargs, run_id="r1")
    run_eval(**kwargs, run_id="r2")
    out = CliRunner().invoke(score_app, ["--run-id", "latest", "--results-dir", str(results), "--k", "2", "--primary-k", "2", "--quiet", "--json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout.strip().splitlines()[-1])["run_id"] == "r2"
    assert _json(results / "r2" / "metrics.json")["ks"] == [2] and _json(results / "r1" / "metrics.json")["ks"] == [3, 2]

    out = CliRunner().invoke(compare_app, ["--run-id-1", "r1", "--run-id-2", "latest", "--results-dir", str(results),
                                           "--format", "json", "--resamples", "200"])
    assert out.exit_code in (0, 1, 4), out.output  # pass, fail or not enough evidence: any decision, not an error
    report = json.loads(out.stdout)
    assert (report["run_id_1"], report["run_id_2"]) == ("r1", "r2")

    out = CliRunner().invoke(judge_app, ["--run-id", "latest", "--results-dir", str(results), "--judge-provider", "heuristic",
                                         "--no-cache", "--quiet", "--json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout.strip().splitlines()[-1])["run_id"] == "r2"


def test_latest_is_refused_as_a_new_run_id(env) -> None:
    results, kwargs = env
    args = ["--eval-set", kwargs["eval_set"], "--target", kwargs["target"], "--results-dir", str(results), "--no-probe"]
    out = CliRunner().invoke(run_app, [*args, "--run-id", "latest"])
    assert out.exit_code == 2, out.output
    assert out.stderr.strip().splitlines() == [
        "evalkit: --run-id: 'latest' is reserved: it names the newest run (results/latest); choose another run id"
    ]
    assert not results.exists() or not any(results.iterdir())
    with pytest.raises(BadConfig, match="reserved"):
        RunDir.create(results, "latest")


def test_latest_before_any_run_is_a_one_line_error(env) -> None:
    results, _ = env
    out = CliRunner().invoke(score_app, ["--run-id", "latest", "--results-dir", str(results)])
    assert out.exit_code == 2
    assert out.stderr.strip().splitlines() == [
        f"evalkit: --run-id: no latest run under {results}: run_eval points latest at each run it finishes, "
        "and none has finished here yet"
    ]


def test_baseline_latest_gates_against_the_previous_run(env) -> None:
    results, kwargs = env
    run_eval(**kwargs, run_id="r1")
    res = run_eval(**kwargs, run_id="r2", baseline="latest")
    assert res.gate["baseline_run_id"] == "r1"
    assert _json(results / "r2" / "config.json")["settings"]["baseline"] == "r1"


# --------------------------------------------------------------------------- redact


def _free_texts(run_dir: Path) -> set[str]:
    """Every question, answer, chunk, judge, snippet and note text of a run (>= 8 characters)."""
    texts: set[str] = set()

    def add(value) -> None:
        if isinstance(value, str) and len(value) >= 8:
            texts.add(value)
        elif isinstance(value, list):
            for v in value:
                add(v)

    for line in (run_dir / "results.jsonl").read_text().splitlines():
        r = json.loads(line)
        case = r["case"]
        for key in ("question", "expected_answer", "expected_key_facts", "notes", "private_memo"):
            add(case.get(key))
        for s in case.get("gold_supports") or []:
            add(s.get("snippets"))
        add(r.get("question"))
        add(r.get("answer"))
        add([c.get("text") for c in r.get("retrieved_chunks") or []])
        for judge in ("groundedness", "correctness"):
            v = r.get(judge) or {}
            for key in ("reasoning", "supported_claims", "unsupported_claims", "key_facts_covered", "key_facts_missing", "raw"):
                add(v.get(key))
        ji = r.get("judge_input") or {}
        for key in ("question", "answer", "context_chunks_truncated", "answer_sha256", "context_sha256"):
            add(ji.get(key))
        add((r.get("folder_selection") or {}).get("reasoning"))
    return texts


def test_redacted_copy_holds_no_note_text(env) -> None:
    results, kwargs = env
    run_eval(**kwargs, run_id="r1")
    out = redact_run("r1", results_dir=results, output=None, salt=None)
    assert out == results / "r1-redacted"
    texts = _free_texts(results / "r1")
    # The fixture's own strings are among them (the scan is not vacuous).
    assert {"Which port does the staging proxy listen on?", "The staging proxy listens on port 8443 [1].",
            "The staging proxy listens on port 8443 behind the VPN.", "listens on port 8443",
            "Remember to ask Jonas about the firewall exception", "checked against the paper copy"} <= texts
    files = sorted(p.name for p in out.iterdir())
    assert files == ["config.json", "metrics.json", "redaction.json", "results.json", "results.jsonl", "summary.md"]
    for path in out.iterdir():
        data = path.read_bytes()
        for text in texts:
            assert text.encode() not in data, (path.name, text)
            assert json.dumps(text)[1:-1].encode() not in data, (path.name, text)

    # Structure, ids, anchors and scores are kept.
    a = [json.loads(line) for line in (results / "r1" / "results.jsonl").read_text().splitlines()]
    b = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    for ra, rb in zip(a, b, strict=True):
        assert rb["test_case_id"] == ra["test_case_id"] and rb["retrieval_metrics"] == ra["retrieval_metrics"]
        assert [(c["chunk_id"], c["rel_path"], c["heading_path"], c["rank"]) for c in rb["retrieved_chunks"]] == [
            (c["chunk_id"], c["rel_path"], c["heading_path"], c["rank"]) for c in ra["retrieved_chunks"]]
        assert (rb["groundedness"] or {}).get("score") == (ra["groundedness"] or {}).get("score")
        assert rb["answer"].startswith(REDACTED_PREFIX)
    assert b[0]["case"]["private_memo"].startswith(REDACTED_PREFIX)  # an unknown field: redacted by default
    metrics_a, metrics_b = _json(results / "r1" / "metrics.json"), _json(out / "metrics.json")
    assert metrics_b["aggregate_metrics"] == metrics_a["aggregate_metrics"]
    assert metrics_b["by_category"] == metrics_a["by_category"]
    assert _json(out / "config.json") == _json(results / "r1" / "config.json")
    summary = (out / "summary.md").read_text()
    assert "| p4 | reasoning | missed gold |" in summary and REDACTED_PREFIX in summary
    manifest = _json(out / "redaction.json")
    assert manifest["redacted_from"] == "r1" and manifest["salt"] == "random, not kept"


def test_redact_refuses_an_existing_folder_and_random_salts_differ(env, tmp_path) -> None:
    results, kwargs = env
    run_eval(**kwargs, run_id="r1")
    redact_run("r1", results_dir=results)
    with pytest.raises(BadConfig, match="already exists"):
        redact_run("r1", results_dir=results)
    redact_run("r1", results_dir=results, output=tmp_path / "second")
    one = (results / "r1-redacted" / "results.jsonl").read_text().splitlines()[0]
    two = (tmp_path / "second" / "results.jsonl").read_text().splitlines()[0]
    assert json.loads(one)["answer"] != json.loads(two)["answer"]  # no salt given: not linkable
    out = CliRunner().invoke(redact_app, ["--run-id", "r1", "--results-dir", str(results)])
    assert out.exit_code == 2
    assert out.stderr.strip() == f"evalkit: --output: {results / 'r1-redacted'} already exists; remove it or pass another --output"


def test_compare_runs_works_between_two_redacted_copies(env, monkeypatch) -> None:
    results, kwargs = env
    run_eval(**kwargs, run_id="a")
    monkeypatch.setenv("EVALKIT_TEST_VARIANT", "b")
    run_eval(**kwargs, run_id="b")
    for run_id in ("a", "b"):
        out = CliRunner().invoke(redact_app, ["--run-id", run_id, "--results-dir", str(results), "--salt", "shared secret"])
        assert out.exit_code == 0, out.output
        assert out.stdout.strip() == str(results / f"{run_id}-redacted")
    assert _json(results / "a-redacted" / "redaction.json")["salt_id"] == _json(results / "b-redacted" / "redaction.json")["salt_id"]

    plain = compare_runs("a", "b", results_dir=results, resamples=200)
    redacted = compare_runs("a-redacted", "b-redacted", results_dir=results, resamples=200)
    assert [r.model_dump() for r in redacted.deltas] == [r.model_dump() for r in plain.deltas]
    # Flips are the same cases with the same scores; only their question text is a hash.
    assert _without_text(redacted.flips.model_dump()) == _without_text(plain.flips.model_dump())
    assert redacted.flips.regressions and all(REDACTED_PREFIX in f.question for f in redacted.flips.regressions)
    # Drift still works: the one changed answer (p2) is found, and only it.
    assert plain.drift.ids == redacted.drift.ids == ["p2"]
    assert redacted.drift.n_compared == plain.drift.n_compared
    assert all(REDACTED_PREFIX in (c.answer_a or "") for c in redacted.drift.cases)

    out = CliRunner().invoke(compare_app, ["a-redacted", "b-redacted", "--results-dir", str(results), "--format", "json",
                                           "--resamples", "200"])
    assert out.exit_code in (0, 1, 4), out.output  # pass, fail or not enough evidence: any decision, not an error
    report = json.loads(out.stdout)
    assert report["drift"]["ids"] == ["p2"] and report["run_id_1"] == "a-redacted"


def _without_text(obj):
    """`obj` without its free-text fields (question, answer)."""
    if isinstance(obj, dict):
        return {k: _without_text(v) for k, v in obj.items() if k not in ("question", "answer", "answer_a", "answer_b")}
    if isinstance(obj, list):
        return [_without_text(v) for v in obj]
    return obj
