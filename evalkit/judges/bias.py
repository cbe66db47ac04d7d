"""Bias probes for the graded judges (issue 42 item 4): `judge_answers --bias-probes N`.

A seeded sample of N judged cases is judged again, each time with one thing changed that
should not change a fair grade, and the change in the judge's score is the bias measured:

- **verbosity** (`pad`): the answer is padded with a verbatim copy of itself after a blank
  line (`PAD_VERSION`): twice as long, not one claim more. A fair judge gives the same score;
  the effect is the mean score change (padded − original) with its 95 % interval
  (metrics.stats.normal_ci over the paired differences).
- **position** (`swap`): the retrieved chunks are shown in reverse order, the answer's
  citation markers renumbered so each still points at the same chunk. The effect is the
  mean change with its interval and the **flip rate**: the share of cases whose score moves
  by FLIP_GAP (one point on 0-5) or more.

evalkit has no pairwise (A-vs-B) LLM judge: a run's answers are graded one at a time, so
the position probe swaps the order of what one graded judgment is shown (its context).

**Self-preference** is flagged when the run's answerer model (config.json
`versions.llm_model`, else the records' `config.llm_model`) and the judge's model are of one
family (`model_family`): a judge grading its own family's answers is known to favour them.
Unknown when either model is unknown (the heuristic judge has no family).

Probe judgments go through the judge as any other (an LLM judge's cache keys hold the
changed answer and context, so a rerun asks nothing again); they never change a record.
"""

from __future__ import annotations

import asyncio
import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from evalkit.judges.base import JudgeItem, JudgeOutcome
from evalkit.judges.reliability import sample_indices
from evalkit.metrics.stats import normal_ci
from evalkit.store.runlog import Rec

__all__ = ["FLIP_GAP", "PAD_VERSION", "model_family", "padded", "run_bias_probes", "self_preference", "swapped"]

PAD_VERSION = "repeat-v1"
FLIP_GAP = 1.0
CONFIDENCE = 0.95
# A citation marker: [1] or [2, 3] (as the heuristic judge reads them).
_MARKER = re.compile(r"\[(\d{1,6}(?:\s*,\s*\d{1,6})*)\]")
# Model id prefixes (lower case) -> family. Order matters only where one prefix holds another.
_FAMILIES: tuple[tuple[str, str], ...] = (
    ("gpt-", "openai"), ("chatgpt", "openai"), ("o1", "openai"), ("o3", "openai"), ("o4", "openai"), ("ft:gpt", "openai"),
    ("claude", "anthropic"), ("gemini", "google"), ("gemma", "google"), ("llama", "meta"), ("meta-llama", "meta"),
    ("mistral", "mistral"), ("mixtral", "mistral"), ("ministral", "mistral"), ("qwen", "qwen"), ("deepseek", "deepseek"),
    ("phi-", "microsoft"), ("command", "cohere"), ("grok", "xai"),
)


def model_family(model: str | None) -> str | None:
    """The family of a model id ("gpt-4o-2024-08-06" -> "openai", "Qwen/Qwen2.5-7B" -> "qwen"),
    read from its last path part (a hub name "org/model"); None when unknown."""
    if not model:
        return None
    name = str(model).strip().lower().rsplit("/", 1)[-1]
    for prefix, family in _FAMILIES:
        if name.startswith(prefix):
            return family
    return None


def self_preference(answerer_model: str | None, judge_model: str | None, *, judge_heuristic: bool = False) -> dict[str, Any]:
    """{answerer_model, judge_model, answerer_family, judge_family, same_family (None: unknown), flagged}."""
    a, j = model_family(answerer_model), None if judge_heuristic else model_family(judge_model)
    same = None if a is None or j is None else a == j
    return {"answerer_model": answerer_model, "judge_model": judge_model, "answerer_family": a, "judge_family": j,
            "same_family": same, "flagged": same is True}


def answerer_model(config: Mapping[str, Any], records: Sequence[Mapping[str, Any]]) -> str | None:
    """The run's answerer model: config.json `versions.llm_model`, else the records' most
    common `config.llm_model`; None when neither says."""
    versions = config.get("versions")
    if isinstance(versions, Mapping) and versions.get("llm_model"):
        return str(versions["llm_model"])
    seen = Counter(str(r["config"]["llm_model"]) for r in records
                   if isinstance(r.get("config"), Mapping) and r["config"].get("llm_model"))
    return seen.most_common(1)[0][0] if seen else None


def padded(answer: str) -> str:
    """The verbosity probe's answer: itself, a blank line, itself again (no new claim)."""
    return f"{answer}\n\n{answer}"


def swapped(item: JudgeItem) -> JudgeItem:
    """The position probe's item: the context reversed, the answer's markers renumbered
    (n -> K + 1 - n for 1 <= n <= K) so each still names the chunk it named."""
    k = len(item.context)

    def renumber(m: re.Match[str]) -> str:
        nums = [int(x) for x in re.split(r"\s*,\s*", m.group(1))]
        return "[" + ", ".join(str(k + 1 - n) if 1 <= n <= k else str(n) for n in nums) + "]"

    return replace(item, context=tuple(reversed(item.context)), answer=_MARKER.sub(renumber, item.answer))


def _effect(pairs: list[tuple[float, float]], *, flips: bool) -> dict[str, Any]:
    """Mean change (probe − original) with its interval, n; with `flips`, the flip rate."""
    diffs = [b - a for a, b in pairs]
    lo, hi = normal_ci(diffs, confidence=CONFIDENCE) if diffs else (None, None)
    out: dict[str, Any] = {
        "n": len(diffs),
        "mean_change": math.fsum(diffs) / len(diffs) if diffs else None,
        "ci": [lo, hi],
        "confidence": CONFIDENCE,
        "mean_original": math.fsum(a for a, _ in pairs) / len(pairs) if pairs else None,
    }
    if flips:
        out["flip_rate"] = sum(1 for d in diffs if abs(d) >= FLIP_GAP) / len(diffs) if diffs else None
        out["flip_gap"] = FLIP_GAP
    return out


def _score(kind: str, out: Any) -> float | None:
    if not isinstance(out, JudgeOutcome):
        return None
    v = out.verdict
    if kind == "claims" and out.method == "llm":
        claims = v.get("claims") or []
        return 5 * sum(1 for c in claims if c.get("supported")) / len(claims) if claims else None
    s = v.get("score")
    return float(s) if isinstance(s, (int, float)) and not isinstance(s, bool) else None


async def run_bias_probes(
    records: Sequence[Mapping[str, Any]],
    judged: Sequence[int],
    items: Mapping[int, JudgeItem],
    judge: Any,
    *,
    groundedness_kind: str,
    n: int,
    seed: int = 0,
    config: Mapping[str, Any] | None = None,
    judge_model: str | None = None,
    judge_heuristic: bool = False,
) -> dict[str, Any]:
    """The `judge_bias` block: probe a seeded sample of up to `n` of the `judged` records whose
    groundedness or correctness a judge (not a rule) scored, with the `judge` they were judged by.

    Args:
        records: the run's records, as judged.
        judged: indices of the records judged in this session.
        items: the JudgeItem each of them was judged on (full context).
        judge: the Judge (its `judge(kind, item)`).
        groundedness_kind: "groundedness" or "claims" (claim-level runs).
        n: how many cases to probe.
        seed: the sample's seed.
        config: config.json (the answerer model, for self-preference).
        judge_model: the judge's model id.
        judge_heuristic: the judge is the heuristic (no model family).
    """
    def judge_made(r: Mapping[str, Any], name: str) -> bool:
        v = r.get(name)
        return isinstance(v, Mapping) and v.get("method") in ("llm", "heuristic") and v.get("score") is not None

    names = ((Rec.GROUNDEDNESS, groundedness_kind), (Rec.CORRECTNESS, Rec.CORRECTNESS))
    eligible = [i for i in judged if i in items and any(judge_made(records[i], name) for name, _ in names)]
    chosen = [eligible[j] for j in sample_indices(len(eligible), n, seed)]
    pad: dict[str, list[tuple[float, float]]] = {name: [] for name, _ in names}
    swap: dict[str, list[tuple[float, float]]] = {name: [] for name, _ in names}
    failed = 0

    async def one(i: int) -> None:
        nonlocal failed
        item = items[i]
        for name, kind in names:
            if not judge_made(records[i], name):
                continue
            original = float(records[i][name]["score"])
            probes = [(pad, replace(item, answer=padded(item.answer)))]
            if len(item.context) > 1:  # one chunk has no order to swap
                probes.append((swap, swapped(item)))
            outs = await asyncio.gather(*(judge.judge(kind, probe) for _, probe in probes))
            for (into, _), out in zip(probes, outs, strict=True):
                score = _score(kind, out)
                if score is None:
                    failed += 1
                else:
                    into[name].append((original, score))

    await asyncio.gather(*(one(i) for i in chosen))
    cfg = config or {}
    return {
        "n_cases": len(chosen),
        "seed": seed,
        "pad": PAD_VERSION,
        "verbosity": {name: _effect(pairs, flips=False) for name, pairs in pad.items() if pairs},
        "position": {name: _effect(pairs, flips=True) for name, pairs in swap.items() if pairs},
        "n_probe_failures": failed,
        "self_preference": self_preference(answerer_model(cfg, records), judge_model, judge_heuristic=judge_heuristic),
        "case_ids": [records[i].get(Rec.CASE_ID) for i in chosen],
    }
