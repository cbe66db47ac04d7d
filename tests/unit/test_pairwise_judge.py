"""Issue 42 item 4: the pairwise judge (judges/pairwise.py): which of two runs' answers to a case
is better, asked both ways round (the position probe), kept in run b's pairwise_judge.jsonl and
tallied by compare beside the human side-by-side reviews (compare/pairwise.py's tally)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from evalkit.compare import compare_runs
from evalkit.compare.pairwise import JUDGE_FILE, answer_sha256, append_choice
from evalkit.judges.pairwise import heuristic_winner
from evalkit.store.runs import RunDir
from tests.unit.test_compare import make_run, rec

GOOD = "The port is 8080 [1]."
MEH = "The port is set in the settings."
EXPECTED = "The server port is 8080."


def _rec(cid: str, answer: str, **kw) -> dict:
    r = rec(cid, answer=answer, **kw)
    r["case"]["expected_answer"] = EXPECTED
    return r


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    # q0-q2: run b's answer is the better one; q3: run a's; q4, q5 alike; q6: run a failed (not asked)
    make_run(tmp_path, "a", [_rec("q0", MEH), _rec("q1", MEH), _rec("q2", MEH), _rec("q3", GOOD), _rec("q4", GOOD),
                             _rec("q5", MEH), _rec("q6", "", error="timeout")])
    make_run(tmp_path, "b", [_rec("q0", GOOD), _rec("q1", GOOD), _rec("q2", GOOD), _rec("q3", MEH), _rec("q4", GOOD),
                             _rec("q5", MEH), _rec("q6", GOOD)])
    return tmp_path


def _compare(results: Path, judge: str | None = None):
    """`evalkit compare a b [--pairwise-judge JUDGE]` as the CLI does it: the judge asked first
    (rescore.pairwise), then compare tallies what run b's folder keeps."""
    from evalkit.compare import open_source
    from evalkit.rescore.pairwise import judge_runs

    if judge is not None:
        judge_runs(open_source("a", results), open_source("b", results), judge)
    return compare_runs("a", "b", results_dir=results, resamples=200)


def _lines(results: Path) -> list[dict]:
    return [json.loads(x) for x in (results / "b" / JUDGE_FILE).read_text().splitlines()]


def test_the_heuristic_is_symmetric() -> None:
    assert heuristic_winner("which port?", EXPECTED, GOOD, MEH) == "a"
    assert heuristic_winner("which port?", EXPECTED, MEH, GOOD) == "b"
    assert heuristic_winner("which port?", EXPECTED, GOOD, GOOD) == "equal"


def test_the_heuristic_pairwise_judge_from_compare(runs: Path) -> None:
    c = _compare(runs, "heuristic")
    # by hand: b better on q0-q2, a on q3, equal on q4, q5; q6 is not a pair (run a failed); it never flips
    # the verbosity probe (all 6 pairs are within VERBOSITY_PROBES): an answer padded with itself covers the
    # same words and cites the same, so the heuristic calls every probe a tie
    assert c.pairwise_judge == [{"judge": "heuristic", "a": 1, "b": 3, "equal": 2, "stale": 0, "cases": 6,
                                 "n_flipped": 0, "flip_rate": 0.0, "n_verbosity_probed": 6, "n_prefers_padded": 0,
                                 "verbosity_rate": 0.0}]
    assert any(n.startswith("pairwise judge heuristic (pairwise_judge.jsonl): run a better 1, run b better 3, equal 2 "
                            "over 6 case(s); position probe: 0 of 6") and "verbosity probe: 0 of 6 preferred" in n
               for n in c.notes)
    lines = _lines(runs)
    assert [x["test_case_id"] for x in lines] == ["q0", "q1", "q2", "q3", "q4", "q5"]
    assert {x["verbosity"] for x in lines} == {"equal"}
    assert lines[0]["reviewer"] == "judge:heuristic" and lines[0]["first"] == lines[0]["swapped"] == "b"
    # kept: a later compare without the flag tallies them again, beside a human's choice
    run_b = RunDir.open(runs, "b")
    records = {r["test_case_id"]: r for r in RunDir.open(runs, "a").iter_results()}
    mine = {r["test_case_id"]: r for r in run_b.iter_results()}
    append_choice(run_b, {"test_case_id": "q3", "run_a": "a", "run_b": "b", "choice": "b", "reviewer": "ana",
                          "answer_a_sha256": answer_sha256(records["q3"]), "answer_b_sha256": answer_sha256(mine["q3"])})
    again = _compare(runs)
    assert again.pairwise_judge == c.pairwise_judge
    assert any(n.startswith("human pairwise review") and "run b better 1" in n for n in again.notes)
    # a changed answer makes its verdict stale, as a human choice's
    rows = [json.loads(x) for x in (runs / "b" / "results.jsonl").read_text().splitlines()]
    rows[0]["answer"] = "Something else now."
    (runs / "b" / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    stale = _compare(runs).pairwise_judge[0]
    assert (stale["b"], stale["stale"], stale["cases"]) == (2, 1, 5)


def _llm(prefers_first: bool, calls: list[str], prefers_longer: bool = False):
    def reply(request: httpx.Request) -> httpx.Response:
        from tests.unit.judges.judge_helpers import openai_reply

        body = json.loads(request.content)
        assert body["response_format"]["json_schema"]["name"] == "pairwise_verdict"
        text = body["messages"][-1]["content"]
        calls.append(text)
        first, second = text.split("Answer A:\n")[1].split("\n\nAnswer B:\n")
        second = second.split("\n\nWhich answer")[0]
        if prefers_first:
            winner = "A"
        elif prefers_longer:
            winner = "tie" if len(first) == len(second) else ("A" if len(first) > len(second) else "B")
        else:  # a fair judge: the answer with the port number wins
            winner = "tie" if ("8080" in first) == ("8080" in second) else ("A" if "8080" in first else "B")
        return httpx.Response(200, json=openai_reply(json.dumps({"reasoning": "r", "winner": winner})))

    return reply


def test_an_llm_pairwise_judge_and_its_position_probe(runs: Path, tmp_path: Path, monkeypatch) -> None:
    import respx

    from tests.unit.judges.judge_helpers import OPENAI_MODEL, OPENAI_URL

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-000000000000000000000000")
    monkeypatch.chdir(tmp_path)  # the judge cache: cache/judge_cache.sqlite here
    calls: list[str] = []
    with respx.mock(assert_all_mocked=True) as router:
        router.post(OPENAI_URL).mock(side_effect=_llm(True, calls))
        biased = _compare(runs, f"openai:{OPENAI_MODEL}")
    # 6 pairs, each asked both ways round: 12 prompts, but q4's and q5's two answers are the same text, so
    # their swapped prompt is the same prompt, answered from the cache: 10 calls; plus the verbosity probe
    # on each of the 6 pairs, run b's answer against itself padded both ways round: 12 more (each case's
    # question differs, so none is cached): 22. A judge that always picks the first answer flips on every
    # pair, and on every probe, which therefore counts as a tie, not as a taste for length
    assert len(calls) == 22 and "Reference answer: The server port is 8080." in calls[0]
    t = biased.pairwise_judge[0]
    assert t["judge"] == f"openai:{OPENAI_MODEL}" and (t["a"], t["b"], t["equal"]) == (0, 0, 6)
    assert t["n_flipped"] == 6 and t["flip_rate"] == 1.0
    assert (t["n_verbosity_probed"], t["n_prefers_padded"], t["verbosity_rate"]) == (6, 0, 0.0)
    # a fair judge (its own cache entries: another reply to the same prompts needs --refresh; use a fresh cache)
    (tmp_path / "cache" / "judge_cache.sqlite").unlink()
    calls.clear()
    with respx.mock(assert_all_mocked=True) as router:
        router.post(OPENAI_URL).mock(side_effect=_llm(False, calls))
        fair = _compare(runs, f"openai:{OPENAI_MODEL}")
        assert len(calls) == 22
        t = fair.pairwise_judge[0]
        # the fair judge: both copies hold 8080 or neither does, so every probe is a tie
        assert (t["a"], t["b"], t["equal"], t["n_flipped"], t["flip_rate"]) == (1, 3, 2, 0, 0.0)
        assert (t["n_verbosity_probed"], t["n_prefers_padded"]) == (6, 0)
        again = _compare(runs, f"openai:{OPENAI_MODEL}")
        assert len(calls) == 22 and again.pairwise_judge == fair.pairwise_judge  # every verdict from the cache
    line = _lines(runs)[-1]
    assert line["reviewer"] == f"judge:openai:{OPENAI_MODEL}" and line["prompt_version"] == "pairwise-v1"


def test_an_unpinned_pairwise_judge_is_refused(runs: Path, monkeypatch) -> None:
    from evalkit.cli.compare_runs import app

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-000000000000000000000000")
    out = CliRunner().invoke(app, ["a", "b", "--results-dir", str(runs), "--pairwise-judge", "openai:gpt-4o"])
    assert out.exit_code == 2 and not (runs / "b" / JUDGE_FILE).exists()
    ok = CliRunner().invoke(app, ["a", "b", "--results-dir", str(runs), "--pairwise-judge", "heuristic", "--format", "json"])
    assert ok.exit_code in (0, 1, 4), ok.output
    assert json.loads(ok.stdout)["pairwise_judge"][0]["judge"] == "heuristic"


def test_the_verbosity_probe_finds_a_judge_that_prefers_length(runs: Path, tmp_path: Path, monkeypatch) -> None:
    import respx

    from tests.unit.judges.judge_helpers import OPENAI_MODEL, OPENAI_URL

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-000000000000000000000000")
    monkeypatch.chdir(tmp_path)
    calls: list[str] = []
    with respx.mock(assert_all_mocked=True) as router:
        router.post(OPENAI_URL).mock(side_effect=_llm(False, calls, prefers_longer=True))
        c = _compare(runs, f"openai:{OPENAI_MODEL}")
    t = c.pairwise_judge[0]
    # by hand: the padded copy is longer whichever side it is shown on, so it wins both ways round on
    # all 6 probed pairs; on the pairs themselves the longer answer wins both ways: GOOD (21 chars) vs MEH
    # (32 chars) -> MEH: run a on q0-q2, run b on q3, q4 and q5 equal lengths -> tie
    assert (t["n_verbosity_probed"], t["n_prefers_padded"], t["verbosity_rate"]) == (6, 6, 1.0)
    assert (t["a"], t["b"], t["equal"]) == (3, 1, 2)
    assert any("verbosity probe: 6 of 6 preferred an answer padded with itself (100%)" in n for n in c.notes)
    assert [x["verbosity"] for x in _lines(runs)] == ["padded"] * 6


def test_only_the_first_pairs_get_the_verbosity_probe(tmp_path: Path, monkeypatch) -> None:
    from evalkit.judges import pairwise

    monkeypatch.setattr(pairwise, "VERBOSITY_PROBES", 2)
    pairs = [(f"q{i}", _rec(f"q{i}", MEH), _rec(f"q{i}", GOOD)) for i in range(4)]
    verdicts = pairwise.judge_pairs(pairs)
    assert [v.verbosity for v in verdicts] == ["equal", "equal", None, None]
    assert [v.choice for v in verdicts] == ["b"] * 4
