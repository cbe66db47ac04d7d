"""The pairwise judge: which of two runs' answers to one case is better, A, B or a tie
(issue 42 item 4), with the position and verbosity probes built in.

Each pair is asked twice, once with run a's answer shown first and once with the order
swapped (MT-Bench's "swap positions" check). A verdict that names the same run both times is
the case's choice; one that changes with the order only is a position flip, and the case's
choice is then `equal` (as MT-Bench counts an inconsistent pair: a tie). The share of pairs
whose verdict flipped is the judge's position bias on these answers.

The verbosity probe (MT-Bench's "repetitive list" attack): on the first `VERBOSITY_PROBES`
pairs (by case id), run b's answer is set against itself padded (`bias.padded`: the answer, a
blank line, the answer again; not one claim more), both ways round. A fair judge calls that a
tie; one that picks the padded copy both times prefers length. The share of probed cases whose
padded copy won is the judge's verbosity bias.

Judges:
- an LLM judge (any provider `LLMJudge` drives), prompt `pairwise-v1`: the question, the
  reference answer when the case has one, the two answers as "Answer A" and "Answer B"; it
  replies {reasoning, winner: "A" | "B" | "tie"}. Cached like every judgment, under a key that
  holds both answers in the order shown, so the swapped question is its own entry.
- the offline heuristic (`pairwise-heuristic-v1`): each answer's share of the reference
  answer's content words (the question's when the case has none), then whether it cites a
  chunk ([n]); the higher wins, equal is a tie. It looks at each answer alone, so it never
  flips: for tests and offline runs, as weak as the heuristic graded judge.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from evalkit.judges.base import JudgeOutcome, RenderedPrompt
from evalkit.judges.bias import padded
from evalkit.judges.cache import cache_key
from evalkit.judges.heuristic import content_words

__all__ = ["PROMPT_VERSION", "VERBOSITY_PROBES", "PairVerdict", "PairwiseOutput", "heuristic_winner", "judge_pairs", "pairwise_llm"]

PROMPT_VERSION = "pairwise-v1"
HEURISTIC_VERSION = "pairwise-heuristic-v1"
KIND = "pairwise"
# Pairs that also get the verbosity probe (two more judgments each): enough to see a judge
# that prefers length most of the time, bounded so the probe never doubles a large compare's cost.
VERBOSITY_PROBES = 20
_CITE = re.compile(r"\[\d+\]")


class PairwiseOutput(BaseModel):
    """The pairwise judge's answer (extra keys from a chatty model are dropped)."""

    model_config = ConfigDict(extra="ignore")

    reasoning: str = Field(description="Short justification: what makes one answer better, or neither.")
    winner: Literal["A", "B", "tie"] = Field(description="A or B: the better answer; tie: neither is better.")


@dataclass(frozen=True)
class PairVerdict:
    """One case judged both ways round. `first`: the verdict with run a's answer shown as A;
    `swapped`: with run b's shown as A, mapped back to runs; each "a", "b", "equal", or None
    when the judge gave none. `choice`: the case's verdict (`first` when both agree, "equal"
    on a flip), None when either judgment failed."""

    case_id: str
    first: str | None
    swapped: str | None
    reasoning: str | None = None
    failure: str | None = None
    # The verbosity probe, when this pair had it: run b's answer against itself padded,
    # "original", "padded" or "equal" (a tie, or a verdict that changed with the order).
    verbosity: str | None = None

    @property
    def flipped(self) -> bool | None:
        if self.first is None or self.swapped is None:
            return None
        return self.first != self.swapped

    @property
    def choice(self) -> str | None:
        if self.flipped is None:
            return None
        return "equal" if self.flipped else self.first


def _reference(record: Mapping[str, Any]) -> str:
    case = record.get("case") if isinstance(record.get("case"), Mapping) else {}
    expected = case.get("expected_answer") or record.get("expected_answer")
    return expected if isinstance(expected, str) and expected.strip() else ""


def _answer(record: Mapping[str, Any]) -> str:
    answer = record.get("answer")
    return answer if isinstance(answer, str) else ""


def heuristic_winner(question: str, reference: str, answer_a: str, answer_b: str) -> str:
    """"a", "b" or "equal" by the offline proxy (module docstring); symmetric in a and b."""
    want = content_words(reference or question)

    def key(answer: str) -> tuple[float, int]:
        words = content_words(answer)
        cover = len(want & words) / len(want) if want else 0.0
        return round(cover, 9), int(bool(_CITE.search(answer)))

    ka, kb = key(answer_a), key(answer_b)
    return "equal" if ka == kb else ("a" if ka > kb else "b")


def _render(question: str, reference: str, first: str, second: str, temperature: float) -> RenderedPrompt:
    system = (
        "You compare two answers of retrieval-augmented chatbots to the same question and say which is better: "
        "more correct, more complete and better supported, not longer. The order the answers are shown in must not "
        "matter. Reply with a JSON object {\"reasoning\": string, \"winner\": \"A\" | \"B\" | \"tie\"} and nothing else."
    )
    user = (
        f"Question: {question}\n\n"
        + (f"Reference answer: {reference}\n\n" if reference else "")
        + f"Answer A:\n{first}\n\nAnswer B:\n{second}\n\nWhich answer is better (A, B or tie)?"
    )
    digest = hashlib.sha256((system + "\n" + user).encode("utf-8")).hexdigest()[:16]
    return RenderedPrompt(kind=KIND, prompt_version=PROMPT_VERSION, system=system,
                          messages=[{"role": "user", "content": user}], schema_name="pairwise_verdict",
                          temperature=temperature, prompt_hash=digest)


async def _ask(llm: Any, question: str, reference: str, first: str, second: str) -> tuple[str | None, str | None, str | None]:
    """(winner "A"/"B"/"tie", reasoning, failure) of one ordering."""
    prompt = _render(question, reference, first, second, llm.temperature)
    key = cache_key(kind=KIND, question=question, answer=json.dumps([first, second]),
                    context_sha256=hashlib.sha256(reference.encode("utf-8")).hexdigest(),
                    provider=llm.backend.provider, model=llm.backend.model, prompt_version=PROMPT_VERSION,
                    temperature=llm.temperature)
    outcome = await llm.complete_structured(KIND, prompt, PairwiseOutput, key)
    if not isinstance(outcome, JudgeOutcome):
        record = outcome.to_record()
        return None, None, f"{record.get('reason')}: {record.get('detail')}"
    return str(outcome.verdict.get("winner")), outcome.verdict.get("reasoning"), None


_AS_RUN = {"first": {"A": "a", "B": "b", "tie": "equal"}, "swapped": {"A": "b", "B": "a", "tie": "equal"}}


async def _judge_pairs(pairs: Sequence[tuple[str, Mapping[str, Any], Mapping[str, Any]]], llm: Any,
                       concurrency: int) -> list[PairVerdict]:
    gate = asyncio.Semaphore(max(1, concurrency))

    async def both_ways(question: str, reference: str, a: str, b: str) -> tuple[str | None, str | None, str | None, str | None]:
        """(verdict with a shown first, verdict with b shown first, each "a"/"b"/"equal" or None;
        the first's reasoning; a failure)."""
        if llm is None:
            # asked both ways round as the LLM is: "a" of the swapped call is the answer shown first, run b's
            swapped = {"a": "b", "b": "a", "equal": "equal"}[heuristic_winner(question, reference, b, a)]
            return heuristic_winner(question, reference, a, b), swapped, "heuristic", None
        async with gate:
            w1, why, f1 = await _ask(llm, question, reference, a, b)
        async with gate:
            w2, _, f2 = await _ask(llm, question, reference, b, a)
        return _AS_RUN["first"].get(w1 or ""), _AS_RUN["swapped"].get(w2 or ""), why, f1 or f2

    async def one(i: int, cid: str, ra: Mapping[str, Any], rb: Mapping[str, Any]) -> PairVerdict:
        question, reference = str(ra.get("question") or rb.get("question") or ""), _reference(rb) or _reference(ra)
        first, swapped, why, failure = await both_ways(question, reference, _answer(ra), _answer(rb))
        verbosity = None
        if i < VERBOSITY_PROBES:
            plain, pad, _, _ = await both_ways(question, reference, _answer(rb), padded(_answer(rb)))
            if plain is not None and pad is not None:  # a failed probe judgment leaves the probe out
                verbosity = "equal" if plain != pad else {"a": "original", "b": "padded", "equal": "equal"}[plain]
        return PairVerdict(cid, first, swapped, why, failure, verbosity)

    return list(await asyncio.gather(*(one(i, *p) for i, p in enumerate(pairs))))


def judge_pairs(pairs: Sequence[tuple[str, Mapping[str, Any], Mapping[str, Any]]], llm: Any = None, *,
                concurrency: int = 4) -> list[PairVerdict]:
    """Judge each (case id, run a's record, run b's record) both ways round; `llm`: an
    LLMJudge (closed when done, in the loop its client ran in), None for the offline heuristic."""

    async def run() -> list[PairVerdict]:
        try:
            return await _judge_pairs(pairs, llm, concurrency)
        finally:
            if llm is not None:
                await llm.aclose()

    return asyncio.run(run())


def pairwise_llm(spec: str) -> tuple[Any, str, str]:
    """The judge `--pairwise-judge SPEC` names: `heuristic`, `PROVIDER:MODEL`
    (openai:gpt-4o-2024-08-06, anthropic:..., openai-compatible:NAME@pin, whose URL is
    EVALKIT_JUDGE_BASE_URL) or a model alone (its provider inferred as --judge-model's is).
    Returns (LLMJudge or None, the judge's name, its prompt version).

    Raises:
        JudgeConfigError: an unknown provider, an unpinned model, a missing key.
    """
    from evalkit.judges.registry import PROVIDERS
    from evalkit.judges.settings import JudgeSettings, build_judge

    spec = spec.strip()
    if spec in ("", "heuristic"):
        return None, "heuristic", HEURISTIC_VERSION
    head, _, rest = spec.partition(":")
    provider, model = (head, rest) if head in PROVIDERS and rest else (None, spec)
    judge = build_judge(JudgeSettings(provider=provider, model=model))
    if getattr(judge, "heuristic", False):
        return None, "heuristic", HEURISTIC_VERSION
    return judge, judge.name, PROMPT_VERSION
