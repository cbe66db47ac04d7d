"""JudgeRunner: judges one results.jsonl record at a time, applying EVAL.md's scoring rules.

Used by the runner (run_eval, judging as cases complete) and by judge_answers (re-judging
a stored run). The rules, in order:

1. A case the target failed (`error` set, kind other than empty_answer) is not judged.
2. When the target gave no `abstained`, the abstention classifier decides (LLM judge:
   the seed's tiny prompt; heuristic: refusal phrases) and `abstention.method` says which
   ("judge" / "heuristic"); re-judging decides such cases again with the new judge.
3. A correct abstention (unanswerable case) is not judged: the abstention metrics score it.
4. An abstention on an answerable case gets correctness 0 (method "rule") and no groundedness.
5. An empty answer gets 0 on both (method "rule").
6. An answer to an unanswerable case gets correctness 0 (method "rule"); groundedness is judged.
7. An answer to an answerable case without expected_key_facts or expected_answer gets
   correctness null (method "unscoreable", counted in `correctness_unscoreable`): there is
   nothing to score it against.
8. Anything else is judged on both; a judge failure is recorded in `judge_errors`, the
   score stays null and the run goes on.
9. A case with `recency_conflict_rule: acknowledge_both` also gets the conflict judge
   (`conflict.acknowledged`); a target error, an abstention or an empty answer is
   `acknowledged: false` (method "rule"). The verdict completes the case's
   `retrieval_metrics.recency` (pass = all_retrieved and acknowledged).
9. The context-relevance judge (opt-in) judges what was retrieved, whatever the answer:
   every answerable case the target did not fail, abstained or not; score = relevant
   chunks / chunks retrieved; no chunk retrieved is score null (method "rule").

Only the judge evaluators `JudgeSettings.evaluators` selects run (`--evaluators`); a verdict
of one that does not run stays null.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from evalkit.config import CLAIM_STORE_CHARS, LIST_STORE_ITEMS, stored_answer
from evalkit.defaults import TRUNCATE_CHARS
from evalkit.errors import JudgeConfigError, Problem
from evalkit.judges.base import Judge, JudgeFailure, JudgeItem, JudgeOutcome
from evalkit.judges.cache import context_hash
from evalkit.judges.cost import PRICES_AS_OF
from evalkit.judges.heuristic import HEURISTIC_VERSION, citation_check, relevance_score
from evalkit.judges.pinning import is_pinned
from evalkit.judges.prompts import prompt_version
from evalkit.judges.reliability import case_trial_stats, run_trial_stats
from evalkit.judges.settings import (
    JUDGE_EVALUATORS,
    JudgeSettings,
    build_judge,
    judge_evaluators,
    redact_base_url,
    resolve_judge,
)
from evalkit.metrics.abstention import score_case_abstention
from evalkit.metrics.retrieval import with_acknowledgement
from evalkit.store.runlog import Rec

__all__ = [
    "JudgeRunner",
    "build_judge_runner",
    "conflict_notes",
    "context_from_record",
    "judge_input_of",
    "judge_item",
]



def build_judge_runner(settings: JudgeSettings) -> JudgeRunner:
    """Build the judge `settings` describe and wrap it in a JudgeRunner.

    Raises:
        JudgeConfigError: see build_judge.
    """
    if settings.trials < 1:
        raise JudgeConfigError(Problem(f"--judge-trials must be >= 1, got {settings.trials}", field="--judge-trials"))
    unknown = [n for n in settings.evaluators or () if n not in JUDGE_EVALUATORS]
    if unknown:
        raise JudgeConfigError(
            Problem(f"unknown judge evaluator {unknown[0]!r}; expected some of {', '.join(JUDGE_EVALUATORS)}", field="--evaluators")
        )
    return JudgeRunner(build_judge(settings), settings)


# --------------------------------------------------------------------------- records


def context_from_record(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The record's retrieved chunks in rank order (texts may be truncated to 200 chars)."""
    chunks = [dict(c) for c in record.get("retrieved_chunks") or []]
    return sorted(chunks, key=lambda c: (c.get("rank") is None, c.get("rank") or 0))


def judge_input_of(
    question: str, answer: str, context: list[dict[str, Any]], *, truncated: bool, answer_truncated: bool = False
) -> dict[str, Any]:
    """The seed's judge_input (question, chunk ids, 200-char texts) plus the context hash.

    The answer is the record's `answer`, stored once: here only its first 200 characters,
    and the length and sha256 of the answer the judge received. `answer_was_truncated`:
    the judge received an answer already cut for storage (re-judging a stored record).
    """
    return {
        "question": question,
        "answer": answer[:TRUNCATE_CHARS],
        "answer_chars": len(answer),
        "answer_sha256": hashlib.sha256(answer.encode("utf-8", "surrogatepass")).hexdigest(),
        "answer_was_truncated": answer_truncated,
        "context_chunk_ids": [c.get("chunk_id") for c in context],
        "context_chunks_truncated": [(c.get("text") or "")[:TRUNCATE_CHARS] for c in context],
        "context_sha256": context_hash(context),
        "context_was_truncated": truncated,
    }


def judge_item(record: Mapping[str, Any], context: list[dict[str, Any]], *, conflict: bool = False) -> JudgeItem:
    """What a judge is shown of one record: its question, answer, `context` (in rank order)
    and the case's expectations; the conflict notes only for a judged conflict case."""
    case = record.get("case") or {}
    return JudgeItem(
        question=record.get("question") or case.get("question") or "",
        answer=record.get("answer") or "",
        context=tuple(context),
        expected_key_facts=tuple(case.get("expected_key_facts") or ()),
        expected_answer=case.get("expected_answer"),
        expected_topics=tuple(case.get("expected_topics") or ()),
        answerable=bool(case.get("answerable", True)),
        # references beyond the stored ones still count for citation markers [n]
        n_references=len(record.get("references") or []) + int(record.get(Rec.REFERENCES_DROPPED) or 0),
        conflict_notes=conflict_notes(case) if conflict else (),
    )


def _rule(score: float, reasoning: str) -> dict[str, Any]:
    return {"score": score, "reasoning": reasoning, "method": "rule"}


_QUALITY_DIMENSIONS = ("relevance", Rec.GROUNDEDNESS, "completeness")


def _quality_score(verdict: Mapping[str, Any]) -> float:
    """Seed 002's answer-quality score: the mean of its three 0-1 dimensions."""
    return math.fsum(float(verdict[d]) for d in _QUALITY_DIMENSIONS) / 3


NO_EXPECTED_FACTS = "the case has no expected_key_facts and no expected_answer: nothing to check the answer against"


def has_expected(item: JudgeItem) -> bool:
    """Whether correctness can be scored: the case says what a correct answer holds."""
    return bool(item.expected_key_facts) or bool((item.expected_answer or "").strip())


def _unscoreable() -> dict[str, Any]:
    # Issue 43: without expected facts the heuristic gave a wrong answer 4.0 of 5 (question
    # words + support) and an LLM would guess; the score stays null, out of every mean.
    return {"score": None, "reasoning": NO_EXPECTED_FACTS, "method": "unscoreable"}


def _quality_rule(reasoning: str, *, completeness: bool) -> dict[str, Any]:
    # As correctness: no answer to an answerable question is the worst answer on every
    # dimension; completeness only where the judge would have measured it (the heuristic
    # needs expected_topics), so its mean stays over the cases it applies to.
    return {"score": 0.0, "relevance": 0.0, Rec.GROUNDEDNESS: 0.0, "completeness": 0.0 if completeness else None,
            "reasoning": reasoning, "method": "rule"}


def _conflict_rule(reasoning: str) -> dict[str, Any]:
    # No answer to acknowledge anything with: the rule fails, as correctness is 0.
    return {"acknowledged": False, "score": 0.0, "reasoning": reasoning, "method": "rule"}


def _set_conflict(rec: dict[str, Any], verdict: dict[str, Any] | None) -> None:
    """Store the conflict verdict (None: the judge failed) and apply it to the record's
    acknowledge_both `recency` (pass = all_retrieved and acknowledged)."""
    rec["conflict"] = verdict
    rm = rec.get(Rec.RETRIEVAL_METRICS)
    if isinstance(rm, dict) and isinstance(rm.get("recency"), dict):
        acknowledged = verdict.get("acknowledged") if verdict is not None else None
        rec[Rec.RETRIEVAL_METRICS] = {**rm, "recency": with_acknowledgement(rm["recency"], acknowledged)}


def conflict_notes(case: Mapping[str, Any]) -> tuple[str, ...]:
    """The gold supports of a conflict case as the conflict judge is shown them:
    "path > heading (dated D)"."""
    out = []
    for s in case.get("gold_supports") or []:
        if not isinstance(s, Mapping):
            continue
        where = " > ".join(str(x) for x in (s.get("rel_path") or s.get("chunk_id"), s.get("heading_path")) if x)
        out.append(where + (f" (dated {s['date']})" if s.get("date") else ""))
    return tuple(out)


def _claims_as_groundedness(verdict: dict[str, Any]) -> dict[str, Any]:
    """An LLM claim-level verdict as a groundedness verdict: score = 5 × supported / claims."""
    claims = verdict.get("claims") or []
    supported = [c["claim"] for c in claims if c.get("supported")]
    unsupported = [c["claim"] for c in claims if not c.get("supported")]
    return {
        "score": 5 * len(supported) / len(claims) if claims else None,
        "reasoning": verdict.get("reasoning", ""),
        "supported_claims": supported,
        "unsupported_claims": unsupported,
        "claims": claims,
    }


def _stored_verdict(verdict: dict[str, Any]) -> dict[str, Any]:
    """A groundedness verdict as stored: each claim's text once, at most LIST_STORE_ITEMS
    claims and citation markers, claim texts cut to CLAIM_STORE_CHARS characters.

    When `claims` holds the judged claims, their texts live only in `supported_claims` /
    `unsupported_claims` (in claim order: the n-th claim with `supported` true is
    supported_claims[n]). `claims_dropped` counts claims not stored, `claim_texts_cut` the
    texts cut; the score was computed on every claim, whole.
    """
    out = dict(verdict)
    cut = 0

    def text(t: Any) -> Any:
        nonlocal cut
        if isinstance(t, str) and len(t) > CLAIM_STORE_CHARS:
            cut += 1
            return t[:CLAIM_STORE_CHARS]
        return t

    citations = verdict.get("citations")
    if isinstance(citations, dict):
        citations = dict(citations)
        for key in ("markers", "out_of_range"):
            items = citations.get(key) or []
            citations[key] = items[:LIST_STORE_ITEMS]
            citations[f"{key}_dropped"] = max(0, len(items) - LIST_STORE_ITEMS)
        out["citations"] = citations
    claims = verdict.get("claims")
    supported = verdict.get("supported_claims")
    unsupported = verdict.get("unsupported_claims")
    if claims is None and supported is None and unsupported is None:
        return out
    dropped = 0
    texts_in_lists = (
        isinstance(claims, list)
        and all(isinstance(c, dict) and "claim" in c for c in claims)
        and supported == [c["claim"] for c in claims if c.get("supported")]
        and unsupported == [c["claim"] for c in claims if not c.get("supported")]
    )
    if texts_in_lists:
        kept = claims[:LIST_STORE_ITEMS]
        dropped = len(claims) - len(kept)
        out["supported_claims"] = [text(c["claim"]) for c in kept if c.get("supported")]
        out["unsupported_claims"] = [text(c["claim"]) for c in kept if not c.get("supported")]
        out["claims"] = [{k: v for k, v in c.items() if k != "claim"} for c in kept]
    else:
        for key in ("supported_claims", "unsupported_claims", "claims"):
            items = verdict.get(key)
            if not isinstance(items, list):
                continue
            dropped += max(0, len(items) - LIST_STORE_ITEMS)
            out[key] = [
                {**c, "claim": text(c["claim"])} if isinstance(c, dict) and "claim" in c else text(c)
                for c in items[:LIST_STORE_ITEMS]
            ]
    out["claims_dropped"] = dropped
    out["claim_texts_cut"] = cut
    return out


@dataclass
class _CaseCost:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    cached_calls: int = 0
    calls: int = 0
    price_known: bool = True

    def add(self, o: JudgeOutcome | JudgeFailure) -> None:
        self.prompt_tokens += o.prompt_tokens
        self.completion_tokens += o.completion_tokens
        self.cost_usd += o.cost_usd
        self.calls += o.calls
        self.price_known = self.price_known and o.price_known
        if isinstance(o, JudgeOutcome) and o.cached:
            self.cached_calls += 1

    def to_record(self) -> dict[str, Any]:
        return {
            "judge_tokens": self.prompt_tokens + self.completion_tokens,
            "judge_cost_usd": self.cost_usd,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cached_calls": self.cached_calls,
            "judge_calls": self.calls,
            "price_known": self.price_known,
        }


@dataclass
class _RunCounters:
    records: int = 0
    judged: int = 0
    not_judged_target_error: int = 0
    not_judged_correct_abstention: int = 0
    rule_scored: int = 0
    correctness_unscoreable: int = 0  # answered answerable cases without expected facts
    abstention_classified: int = 0
    judge_errors: dict[str, int] = field(default_factory=dict)
    judgments_ok: int = 0
    trial_scores: dict[str, list[list[float]]] = field(default_factory=dict)
    scores: dict[str, list[float]] = field(default_factory=dict)


class JudgeRunner:
    """Judges records with one Judge under EVAL.md's scoring rules (module docstring)."""

    def __init__(self, judge: Judge, settings: JudgeSettings):
        self.judge = judge
        self.settings = settings
        self.heuristic = bool(judge.heuristic)
        # The heuristic is deterministic: more trials would only repeat the same numbers.
        self.trials = 1 if self.heuristic else max(1, settings.trials)
        self._counters = _RunCounters()
        self._resolved = resolve_judge(settings)
        self._identity: dict[str, Any] | None = None

    @property
    def groundedness_kind(self) -> str:
        return "claims" if self.settings.claim_level else Rec.GROUNDEDNESS

    @property
    def evaluators(self) -> frozenset[str]:
        """The judge evaluators this runner runs (JudgeSettings.evaluators, resolved)."""
        return judge_evaluators(self.settings)

    def describe(self) -> dict[str, Any]:
        """config.json's "judge": provider, model, prompt versions, temperature, heuristic, version."""
        d = self.judge.describe()
        r = self._resolved
        prompt_set = self.settings.prompt_set
        on = self.evaluators
        # The conflict judge only when there is a conflict to judge: a run without an
        # acknowledge_both case keeps the identity it had before the judge existed.
        kinds = [k for k in (Rec.CORRECTNESS, "abstention", "answer_quality", "context_relevance") if k in on]
        kinds += ["conflict"] if "conflict" in on and self.settings.conflict_cases else []
        if self.heuristic:
            versions = {k: HEURISTIC_VERSION for k in ([Rec.GROUNDEDNESS] if Rec.GROUNDEDNESS in on else []) + kinds}
        else:
            g = [self.groundedness_kind] if Rec.GROUNDEDNESS in on else []
            versions = {k: prompt_version(k, prompt_set) for k in g + kinds}
        return {
            **d,
            "provider": r.provider,
            "model": r.model,
            "base_url": redact_base_url(d.get("base_url")),
            "heuristic": self.heuristic,
            "version": self.judge.version,
            "prompt_set": None if self.heuristic else prompt_set,
            "prompt_version": versions,
            "temperature": None if self.heuristic else self.settings.temperature,
            "pinned": True if self.heuristic else is_pinned(r.provider, r.model),
            "allow_unpinned": self.settings.allow_unpinned,
            "claim_level": self.settings.claim_level,
            "answer_quality": "answer_quality" in on,
            "evaluators": [k for k in JUDGE_EVALUATORS if k in on],
            "trials": self.trials,
            "cache": None
            if self.heuristic
            else {"enabled": self.settings.use_cache, "refresh": self.settings.refresh_cache, "path": str(self.settings.cache_path)},
            "prices_as_of": None if self.heuristic else PRICES_AS_OF,
            "price_file": str(self.settings.price_file) if self.settings.price_file else None,
        }

    def identity(self) -> dict[str, Any]:
        """What every verdict of this judge carries as `judge_identity` (judges/provenance.py)."""
        if self._identity is None:
            from evalkit.judges.provenance import identity_of_description

            self._identity = identity_of_description(self.describe())
        return dict(self._identity)

    def stats(self) -> dict[str, Any]:
        """Counters for metrics.json's aggregate_metrics.judge (cache, calls, tokens, cost, trials)."""
        c = self._counters
        js = self.judge.stats().to_dict()
        out: dict[str, Any] = {
            "provider": self._resolved.provider,
            "model": self._resolved.model,
            "heuristic": self.heuristic,
            **js,
            "cost_usd_total": js["cost_usd"],
            "records": c.records,
            "judged": c.judged,
            "not_judged_target_error": c.not_judged_target_error,
            "not_judged_correct_abstention": c.not_judged_correct_abstention,
            "rule_scored": c.rule_scored,
            "correctness_unscoreable": c.correctness_unscoreable,
            "abstention_classified": c.abstention_classified,
            "n_judge_errors": sum(c.judge_errors.values()),
            # Verdicts of this session (abstention, groundedness, correctness) made or failed:
            # none made and some failed means the judge failed every call.
            "judgments": {"ok": c.judgments_ok, "failed": sum(c.judge_errors.values())},
            "judge_errors_by_judge": dict(sorted(c.judge_errors.items())),
            "scores": {
                # fsum: the mean must not depend on the order cases finished in (concurrency)
                k: {"mean": (math.fsum(v) / len(v)) if v else None, "n": len(v)}
                for k, v in sorted(c.scores.items())
            },
        }
        if self.trials > 1:
            out["trials"] = {"n_trials": self.trials, **{k: run_trial_stats(v) for k, v in sorted(c.trial_scores.items())}}
        return out

    async def aclose(self) -> None:
        await self.judge.aclose()

    # ------------------------------------------------------------------ one record

    async def judge_record(self, record: dict[str, Any], context: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """Judge one record; returns a new dict (the input is not modified).

        Args:
            record: a results.jsonl record.
            context: the retrieved chunks with FULL text when the caller has them; else the
                record's (possibly 200-char) chunk texts are used.

        Returns:
            The record with groundedness, correctness, judge_input, cost, judge_errors,
            latency.judge_ms and (when the target gave none) abstention filled.

        Raises:
            JudgeConfigError: the provider refused in a way every case would hit.
        """
        # Shallow: every nested value changed below is rebuilt, never edited in place, so the
        # input stays as it was; a deep copy of the chunks cost ~0.2 ms of CPU per record.
        rec = dict(record)
        t0 = time.perf_counter()
        self._counters.records += 1
        case = rec.get("case") or {}
        answerable = bool(case.get("answerable", True))
        question = rec.get("question") or case.get("question") or ""
        answer = rec.get("answer") or ""
        ctx = context_from_record(rec) if context is None else [dict(c) for c in context]
        # acknowledge_both: the answer must acknowledge the conflict (the conflict judge).
        conflict = "conflict" in self.evaluators and answerable and case.get("recency_conflict_rule") == "acknowledge_both"
        self._clear_verdicts(rec, question, answer, ctx, conflict=conflict)
        cost = _CaseCost()
        self._stamp_config(rec)

        error = rec.get("error")
        if error and error.get("kind") != "empty_answer":
            self._counters.not_judged_target_error += 1
            if conflict:  # a system failure fails its rule, as it scores 0 on retrieval
                _set_conflict(rec, _conflict_rule("the target failed the case"))
            return self._finish(rec, cost, t0, judged=False)

        item = judge_item(rec, ctx, conflict=conflict)
        if "context_relevance" in self.evaluators and answerable:
            rec["context_relevance"] = await self._context_relevance(item, rec, cost)
        abstained = await self._decide_abstention(item, rec, cost)
        if abstained is True and not answerable:
            self._counters.not_judged_correct_abstention += 1
            return self._finish(rec, cost, t0, judged=False)
        if abstained is True:
            self._score_by_rule(rec, item, "abstained on an answerable question", conflict=conflict, groundedness=False)
            return self._finish(rec, cost, t0, judged=True)
        if not answer.strip():
            self._score_by_rule(rec, item, "empty answer", conflict=conflict, groundedness=True)
            return self._finish(rec, cost, t0, judged=True)
        return await self._judge_answer(rec, item, cost, t0, conflict=conflict)

    def _clear_verdicts(
        self, rec: dict[str, Any], question: str, answer: str, ctx: list[dict[str, Any]], *, conflict: bool
    ) -> None:
        """The record's judge_input, and its verdicts emptied before this judge fills them: a
        verdict of an evaluator that does not run now does not stay applied."""
        # A re-read context can still hold chunks nobody could recover: say so.
        truncated = any(c.get("text_truncated") for c in ctx)
        rec["judge_input"] = judge_input_of(
            question, answer, ctx, truncated=truncated, answer_truncated=bool(rec.get(Rec.ANSWER_TRUNCATED))
        )
        rec[Rec.JUDGE_ERRORS] = []
        rec[Rec.GROUNDEDNESS] = None
        rec[Rec.CORRECTNESS] = None
        if not conflict and "conflict" in rec:  # re-judged without it: no stale verdict stays applied
            _set_conflict(rec, None)
            del rec["conflict"]
        # Only a run judged for answer quality has the key: re-judging without it drops a stale one.
        rec.pop("answer_quality", None)
        if "answer_quality" in self.evaluators:
            rec["answer_quality"] = None
        rec.pop("context_relevance", None)  # as answer_quality: only a run judged for it has the key
        if "context_relevance" in self.evaluators:
            rec["context_relevance"] = None

    async def _decide_abstention(self, item: JudgeItem, rec: dict[str, Any], cost: _CaseCost) -> bool | None:
        """Rule 2: the record's `abstention`, decided by this judge's classifier when the target
        gave none or an earlier classifier decided it. Returns whether the answer abstained."""
        abst = dict(rec.get("abstention") or {})
        # Re-judging re-decides what an earlier classifier decided; the target's own field stays.
        classify = "abstention" in self.evaluators
        if not classify and abst.get("method") in ("judge", "heuristic"):
            # An earlier classifier's decision is not this judge's: without the evaluator it is dropped.
            abst.update(abstained=None, hallucinated=None, false_abstention=None, method=None, reason=None, confidence=None)
        if classify and item.answer.strip() and (abst.get("abstained") is None or abst.get("method") in ("judge", "heuristic")):
            if abst.get("method") in ("judge", "heuristic"):
                abst.update(reason=None, confidence=None)
            abst.update(abstained=None, hallucinated=None, false_abstention=None, method=None)
            await self._classify_abstention(item, abst, rec, cost)
        rec["abstention"] = abst
        return abst.get("abstained")

    def _score_by_rule(self, rec: dict[str, Any], item: JudgeItem, reasoning: str, *, conflict: bool, groundedness: bool) -> None:
        """Rules 4 and 5: an abstention on an answerable case, or an empty answer, gets 0 (method
        "rule") on every verdict that runs; groundedness only for the empty answer."""
        on = self.evaluators
        if groundedness and Rec.GROUNDEDNESS in on:
            rec[Rec.GROUNDEDNESS] = _rule(0, reasoning)
        if Rec.CORRECTNESS in on:
            rec[Rec.CORRECTNESS] = _rule(0, reasoning)
        if "answer_quality" in on and item.answerable:
            rec["answer_quality"] = _quality_rule(reasoning, completeness=self._completes(item))
        if conflict:
            _set_conflict(rec, _conflict_rule(reasoning))
        self._counters.rule_scored += 1

    async def _judge_answer(
        self, rec: dict[str, Any], item: JudgeItem, cost: _CaseCost, t0: float, *, conflict: bool
    ) -> dict[str, Any]:
        """Rules 6 to 8: ask the judge for every verdict that runs, at once; an answer to an
        unanswerable case gets correctness 0 by rule."""
        on = self.evaluators
        # (name, kind) of the verdicts to ask for, in this order.
        asked: list[tuple[str, str]] = []
        if Rec.GROUNDEDNESS in on:
            asked.append((Rec.GROUNDEDNESS, self.groundedness_kind))
        if Rec.CORRECTNESS in on and item.answerable and not has_expected(item):
            rec[Rec.CORRECTNESS] = _unscoreable()
            self._counters.correctness_unscoreable += 1
        elif Rec.CORRECTNESS in on and item.answerable:
            asked.append((Rec.CORRECTNESS, Rec.CORRECTNESS))
        elif Rec.CORRECTNESS in on:
            rec[Rec.CORRECTNESS] = _rule(0, "answered a question the eval set marks unanswerable")
            self._counters.rule_scored += 1
        if "answer_quality" in on and item.answerable:
            asked.append(("answer_quality", "answer_quality"))
        if conflict:
            asked.append(("conflict", "conflict"))
        results = await asyncio.gather(*(self._judge_kind(kind, item, rec, cost) for _, kind in asked))
        for (name, _), verdict in zip(asked, results, strict=True):
            if name == "conflict":
                _set_conflict(rec, verdict)
            else:
                rec[name] = verdict
        if rec[Rec.GROUNDEDNESS] is not None:
            rec[Rec.GROUNDEDNESS]["citations"] = citation_check(item.answer, len(item.context), item.n_references)
        return self._finish(rec, cost, t0, judged=bool(asked) or rec[Rec.CORRECTNESS] is not None)

    async def _context_relevance(self, item: JudgeItem, rec: dict[str, Any], cost: _CaseCost) -> dict[str, Any] | None:
        """Rule 9: the context-relevance verdict (None: the judge failed); no chunk, no judge call."""
        if not item.context:
            return {"score": None, "chunks": [], "n_chunks": 0, "n_relevant": 0, "method": "rule",
                    "reasoning": "no context was retrieved"}
        return await self._judge_kind("context_relevance", item, rec, cost)

    def _completes(self, item: JudgeItem) -> bool:
        """Whether the answer-quality judge measures completeness here (an LLM always does)."""
        return bool(item.expected_topics) or not self.heuristic

    def _stamp_config(self, rec: dict[str, Any]) -> None:
        cfg = rec.get("config")
        cfg = dict(cfg) if isinstance(cfg, dict) else {}
        cfg["judge_model"] = self._resolved.model
        cfg["judge_prompt_version"] = HEURISTIC_VERSION if self.heuristic else self.settings.prompt_set
        cfg["judge_temperature"] = None if self.heuristic else self.settings.temperature
        rec["config"] = cfg

    def _finish(self, rec: dict[str, Any], cost: _CaseCost, t0: float, *, judged: bool) -> dict[str, Any]:
        # Judged whole, stored bounded: the answer and claims are cut only now.
        rec.update(stored_answer(rec))
        if isinstance(rec.get(Rec.GROUNDEDNESS), dict):
            rec[Rec.GROUNDEDNESS] = _stored_verdict(rec[Rec.GROUNDEDNESS])
        rec["cost"] = {**(rec.get("cost") or {}), **cost.to_record()}
        latency = dict(rec.get("latency") or {})
        latency["judge_ms"] = (time.perf_counter() - t0) * 1000 if judged or cost.calls else None
        rec["latency"] = latency
        if judged:
            self._counters.judged += 1
        for kind in (Rec.GROUNDEDNESS, Rec.CORRECTNESS, "answer_quality", "conflict", "context_relevance"):
            v = rec.get(kind)
            if isinstance(v, dict) and v.get("score") is not None:
                self._counters.scores.setdefault(kind, []).append(float(v["score"]))
        return rec

    def _record_failure(self, rec: dict[str, Any], failure: JudgeFailure, judge: str) -> None:
        entry = failure.to_record()
        entry["judge"] = judge
        rec[Rec.JUDGE_ERRORS].append(entry)
        self._counters.judge_errors[judge] = self._counters.judge_errors.get(judge, 0) + 1

    async def _classify_abstention(self, item: JudgeItem, abst: dict[str, Any], rec: dict[str, Any], cost: _CaseCost) -> None:
        out = await self.judge.judge("abstention", item)
        cost.add(out)
        if isinstance(out, JudgeFailure):
            self._record_failure(rec, out, "abstention")
            return
        self._counters.abstention_classified += 1
        self._counters.judgments_ok += 1
        abst.update(score_case_abstention(item.answerable, bool(out.verdict["abstained"])))
        abst["method"] = "heuristic" if self.heuristic else "judge"
        abst["confidence"] = out.verdict.get("confidence")
        if out.verdict.get("phrase"):
            abst["reason"] = f"refusal phrase: {out.verdict['phrase']!r}"

    async def _judge_kind(self, kind: str, item: JudgeItem, rec: dict[str, Any], cost: _CaseCost) -> dict[str, Any] | None:
        """Run `kind` for every trial; the verdict of trial 0 plus the trials' mean score."""
        name = Rec.GROUNDEDNESS if kind == "claims" else kind
        outs = await asyncio.gather(*(self.judge.judge(kind, item, trial=t) for t in range(self.trials)))
        for o in outs:
            cost.add(o)
        ok = [o for o in outs if isinstance(o, JudgeOutcome)]
        failures = [o for o in outs if isinstance(o, JudgeFailure)]
        if not ok:
            self._record_failure(rec, failures[0], name)
            return None
        verdicts = []
        for o in ok:
            v = _claims_as_groundedness(o.verdict) if (kind == "claims" and o.method == "llm") else dict(o.verdict)
            if kind == "answer_quality" and o.method == "llm":
                v["score"] = _quality_score(v)
            if kind == "conflict":  # 1 acknowledged, 0 not: trials average it like a score
                v["score"] = 1.0 if v.get("acknowledged") else 0.0
            if kind == "context_relevance" and o.method == "llm":
                n = len(item.context)
                v["score"] = relevance_score(v.get("chunks") or [], n)
                v["n_chunks"] = n
                v["n_relevant"] = round(v["score"] * n) if v["score"] is not None else 0
            verdicts.append(v)
        self._counters.judgments_ok += 1
        verdict = {**verdicts[0], **ok[0].meta(), "judge_identity": self.identity()}
        if kind == "claims":
            verdict["claim_level"] = True
        if self.trials > 1:
            scores = [float(v["score"]) for v in verdicts if v.get("score") is not None]
            stats = case_trial_stats(scores)
            verdict["score"] = stats["mean"]
            if kind == "conflict":  # a majority of the trials (a tie is not acknowledged)
                verdict["acknowledged"] = stats["mean"] is not None and stats["mean"] > 0.5
            verdict["trials"] = {**stats, "n_failed": len(failures), "cached": sum(1 for o in ok if o.cached)}
            if scores:
                self._counters.trial_scores.setdefault(name, []).append(scores)
        return verdict
