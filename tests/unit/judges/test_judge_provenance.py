"""Which judge made each verdict: stored identities, identities inferred for verdicts written
before they were stored, and the run-level summary (mixed or not)."""

from __future__ import annotations

import asyncio
import copy

from evalkit.judges import JudgeSettings, build_judge_runner
from evalkit.judges.provenance import identity_of_description, summarize_judges, verdict_identity
from tests.unit.judges.judge_helpers import make_record


def _judged(case_id: str, **kw) -> tuple[dict, dict]:
    runner = build_judge_runner(JudgeSettings(**kw))
    rec = asyncio.run(runner.judge_record(make_record(case_id)))
    return rec, runner.describe()


def _legacy(rec: dict) -> dict:
    out = copy.deepcopy(rec)
    for name in ("groundedness", "correctness"):
        out[name].pop("judge_identity")
    return out


def test_every_verdict_carries_its_judges_identity():
    rec, desc = _judged("q1")
    assert rec["groundedness"]["judge_identity"] == rec["correctness"]["judge_identity"] == identity_of_description(desc)
    assert rec["groundedness"]["judge_identity"] == {
        "provider": "heuristic", "model": "heuristic-v1", "prompt_set": None, "temperature": None,
        "claim_level": False, "trials": 1, "heuristic": True,
    }


def test_identity_of_a_verdict_written_before_identities_is_inferred_alike():
    rec, desc = _judged("q1", claim_level=True)
    assert verdict_identity(_legacy(rec), "groundedness") == identity_of_description(desc)


def test_inferred_llm_identity_matches_the_description():
    rec = make_record("q1")
    rec["config"] = {"judge_temperature": 0.0}
    rec["correctness"] = {"score": 4, "method": "llm", "judge": "openai-compatible:qwen2.5:14b@845dbda0ea48",
                          "model": "qwen2.5:14b@845dbda0ea48", "prompt_version": "correctness-v1-alt"}
    desc = {"provider": "openai-compatible", "model": "qwen2.5:14b@845dbda0ea48", "prompt_set": "v1-alt",
            "temperature": 0.0, "claim_level": False, "trials": 1, "heuristic": False}
    assert verdict_identity(rec, "correctness") == identity_of_description(desc)


def test_summary_counts_cases_per_judge_and_ignores_rule_verdicts():
    a, _ = _judged("q1")
    b, _ = _judged("q2", claim_level=True)
    c = make_record("q3")
    c["correctness"] = {"score": 0, "reasoning": "abstained on an answerable question", "method": "rule"}
    s = summarize_judges([a, _legacy(b), c])
    assert s["mixed"] is True and s["heuristic"] is True
    assert sorted((j["claim_level"], j["n_cases"], j["n_groundedness"], j["n_correctness"]) for j in s["judges"]) == [
        (False, 1, 1, 1), (True, 1, 1, 1)]
    one = summarize_judges([a, _legacy(_judged("q2")[0]), c])
    assert one["mixed"] is False and one["judges"][0]["n_cases"] == 2
    assert summarize_judges([c]) == {"mixed": False, "heuristic": None, "judges": []}
