"""Which judge made each verdict, and which judges a run's scores come from.

Every groundedness/correctness verdict a judge makes carries `judge_identity`: the
settings that change verdicts (provider, model, prompt_set, temperature, claim_level,
trials, heuristic). A partial re-judge (`--ids`) leaves other cases with their old
verdicts, so a run's scores can come from several judges; `summarize_judges` counts them
and calls the run mixed when there is more than one. Verdicts written before identities
were stored get one inferred from their `method`, `judge`, `model`, `prompt_version`
and the record's `config.judge_temperature`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from evalkit.store.runlog import Rec

IDENTITY_KEYS = ("provider", "model", "prompt_set", "temperature", "claim_level", "trials", "heuristic")
VERDICT_NAMES = (Rec.GROUNDEDNESS, Rec.CORRECTNESS)


def identity_of_description(desc: Mapping[str, Any]) -> dict[str, Any]:
    """The identity of a judge from its description (JudgeRunner.describe(), config.json)."""
    heuristic = bool(desc.get("heuristic"))
    return {
        "provider": desc.get("provider"),
        "model": desc.get("model"),
        "prompt_set": None if heuristic else desc.get("prompt_set"),
        "temperature": None if heuristic else desc.get("temperature"),
        "claim_level": bool(desc.get("claim_level")),
        "trials": 1 if heuristic else int(desc.get("trials") or 1),
        "heuristic": heuristic,
    }


def _inferred(record: Mapping[str, Any], verdict: Mapping[str, Any]) -> dict[str, Any] | None:
    method = verdict.get("method")
    g = record.get(Rec.GROUNDEDNESS)
    claim_level = bool(isinstance(g, Mapping) and g.get("claim_level"))
    if method == "heuristic":
        return {"provider": "heuristic", "model": verdict.get("model"), "prompt_set": None, "temperature": None,
                "claim_level": claim_level, "trials": 1, "heuristic": True}
    if method != "llm":
        return None
    name = str(verdict.get("judge") or "")
    version = str(verdict.get("prompt_version") or "")
    cfg = record.get("config") if isinstance(record.get("config"), Mapping) else {}
    trials = verdict.get("trials")
    n_trials = int(trials.get("n", 0)) + int(trials.get("n_failed", 0)) if isinstance(trials, Mapping) else 1
    return {
        "provider": name.split(":", 1)[0] if ":" in name else None,
        "model": verdict.get("model"),
        "prompt_set": version.split("-", 1)[1] if "-" in version else None,
        "temperature": cfg.get("judge_temperature"),
        "claim_level": claim_level,
        "trials": n_trials or 1,
        "heuristic": False,
    }


def verdict_identity(record: Mapping[str, Any], name: str) -> dict[str, Any] | None:
    """The judge identity of `record[name]`; None for no verdict or a rule-made one."""
    verdict = record.get(name)
    if not isinstance(verdict, Mapping) or verdict.get("method") not in ("llm", "heuristic"):
        return None
    stored = verdict.get("judge_identity")
    if isinstance(stored, Mapping):
        return {k: stored.get(k) for k in IDENTITY_KEYS}
    return _inferred(record, verdict)


def identity_key(identity: Mapping[str, Any]) -> str:
    """A canonical string for comparing identities."""
    return orjson.dumps({k: identity.get(k) for k in IDENTITY_KEYS}, option=orjson.OPT_SORT_KEYS).decode()


def summarize_judges(records: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The judges behind a run's groundedness/correctness verdicts.

    Returns:
        {"mixed": more than one judge, "heuristic": any judge is the heuristic (None without
        verdicts), "judges": [identity + {"n_cases", "n_groundedness", "n_correctness"}],
        most cases first}. Rule-made verdicts (abstained, empty answer) belong to no judge.
    """
    found: dict[str, dict[str, Any]] = {}
    for i, rec in enumerate(records):
        for name in VERDICT_NAMES:
            ident = verdict_identity(rec, name)
            if ident is None:
                continue
            entry = found.setdefault(identity_key(ident), {**ident, "n_cases": 0, "n_groundedness": 0, "n_correctness": 0, "_last": None})
            entry[f"n_{name}"] += 1
            if entry["_last"] != i:
                entry["n_cases"] += 1
                entry["_last"] = i
    judges = [{k: v for k, v in e.items() if k != "_last"} for e in found.values()]
    judges.sort(key=lambda e: (-e["n_cases"], identity_key(e)))
    return {
        "mixed": len(judges) > 1,
        "heuristic": any(j["heuristic"] for j in judges) if judges else None,
        "judges": judges,
    }
