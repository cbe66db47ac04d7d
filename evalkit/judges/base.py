"""The two judge layers (STYLE §6.2) and the verdict models every judge answers with.

`JudgeBackend` is one provider's wire call; `Judge` is what the judge runner talks to
(implemented by `LLMJudge` over any backend, and by `HeuristicJudge`). Verdict models use
`Field(description=...)` so the descriptions reach the JSON schema sent for structured output.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from evalkit.errors import redact
from evalkit.store.runlog import Rec

JudgeKind = Literal["groundedness", "correctness", "claims", "abstention", "answer_quality", "conflict", "context_relevance"]
JUDGE_KINDS: tuple[str, ...] = (
    Rec.GROUNDEDNESS, Rec.CORRECTNESS, "claims", "abstention", "answer_quality", "conflict", "context_relevance",
)


# --------------------------------------------------------------------------- verdict models


class _Verdict(BaseModel):
    # Extra keys from a chatty model are dropped, not fatal; a missing or mistyped key the
    # seed's own reply shape has fails. Keys beyond the seed's are optional: a judge that
    # follows the seed's prompt word for word must not fail every case (issue item 7).
    model_config = ConfigDict(extra="ignore")


class GroundednessOutput(_Verdict):
    """The groundedness judge's answer (seed 000 §3.B, groundedness template)."""

    reasoning: str = Field(description="Short justification of the score, naming unsupported claims.")
    score: int = Field(ge=0, le=5, description="Groundedness on the 0-5 rubric (integer).")
    unsupported_claims: list[str] = Field(description="Claims of the answer that the context does not support.")
    supported_claims: list[str] = Field(description="Claims of the answer that the context supports.")


class CorrectnessOutput(_Verdict):
    """The correctness judge's answer (seed 000 §3.B, correctness template + expected key facts)."""

    reasoning: str = Field(description="Short justification of the score.")
    score: int = Field(ge=0, le=5, description="Correctness on the 0-5 rubric (integer).")
    # Not in the seed's reply ({"score", "reasoning"}): null when the judge did not say,
    # which is not the same as "no key fact covered".
    key_facts_covered: list[str] | None = Field(
        None, description="Expected key facts the answer states correctly (empty when none were given)."
    )
    key_facts_missing: list[str] | None = Field(
        None, description="Expected key facts the answer omits or gets wrong (empty when none were given)."
    )


class ClaimJudgement(_Verdict):
    """One atomic claim of the answer, judged on its own."""

    claim: str = Field(description="The claim, restated as one self-contained sentence.")
    supported: bool = Field(description="True only if the retrieved context states or directly implies it.")
    # The seed names no claim-level reply shape; only `claim` and `supported` are needed to
    # score, the rest is null when the judge did not say.
    evidence: list[int] | None = Field(None, description="Numbers [n] of the context chunks that support it (empty if none).")
    cited: bool | None = Field(None, description="True if the answer attaches a citation marker such as [1] to this claim.")


class ClaimsOutput(_Verdict):
    """The claim-level groundedness judge's answer (seed 000 nice-to-have A)."""

    reasoning: str = Field("", description="One or two sentences on the overall picture.")
    claims: list[ClaimJudgement] = Field(description="Every factual claim the answer makes, in order.")


class AbstentionOutput(_Verdict):
    """The abstention classifier's answer (seed 000 §3.C, option 2)."""

    abstained: bool = Field(description="True if the answer says the system cannot answer the question.")
    confidence: float = Field(ge=0, le=1, description="Confidence in `abstained`, from 0 to 1.")


class AnswerQualityOutput(_Verdict):
    """Seed 002's answer-quality judge (GNO's `answerQuality` scorer): three dimensions on
    0.0-1.0, as its prompt asks; the score is their mean (computed by the runner)."""

    reasoning: str = Field("", description="Short justification of the three ratings.")
    relevance: float = Field(ge=0, le=1, description="Does the answer directly address the question? 0.0 to 1.0.")
    groundedness: float = Field(ge=0, le=1, description="Is the answer supported by the provided sources (no hallucination)? 0.0 to 1.0.")
    completeness: float = Field(ge=0, le=1, description="Does the answer cover the key points and the expected topics? 0.0 to 1.0.")
    # Not in seed 002's reply: null when the judge did not say.
    topics_covered: list[str] | None = Field(None, description="Expected topics the answer covers, copied verbatim.")
    topics_missing: list[str] | None = Field(None, description="Expected topics the answer does not cover, copied verbatim.")


class ConflictOutput(_Verdict):
    """The conflict judge's answer: does the answer acknowledge that its sources disagree
    (a case with `recency_conflict_rule: acknowledge_both`)?"""

    reasoning: str = Field(description="Short justification, quoting where the answer acknowledges the conflict, if it does.")
    acknowledged: bool = Field(
        description="True only if the answer says the sources disagree (or that one supersedes the other) "
        "and states what each side says."
    )


class ChunkRelevance(_Verdict):
    """One retrieved chunk, judged for relevance to the question alone."""

    chunk: int = Field(description="The chunk's number [n] in the retrieved context.")
    relevant: bool = Field(description="True if the chunk holds information that helps answer the question.")


class ContextRelevanceOutput(_Verdict):
    """The context-relevance judge's answer (issue 42 item 6, no gold needed): which of the
    retrieved chunks bear on the question; the score (relevant chunks / chunks) is the runner's."""

    reasoning: str = Field("", description="One or two sentences on what the relevant chunks hold.")
    chunks: list[ChunkRelevance] = Field(description="One entry per numbered context chunk, in order.")


OUTPUT_MODELS: dict[str, type[_Verdict]] = {
    Rec.GROUNDEDNESS: GroundednessOutput,
    Rec.CORRECTNESS: CorrectnessOutput,
    "claims": ClaimsOutput,
    "abstention": AbstentionOutput,
    "answer_quality": AnswerQualityOutput,
    "conflict": ConflictOutput,
    "context_relevance": ContextRelevanceOutput,
}


# --------------------------------------------------------------------------- plain values


@dataclass(frozen=True)
class JudgeItem:
    """Everything a judge may look at for one answer. `context` chunks are in rank order.

    Each context chunk is a dict with at least `text` (and usually chunk_id, rel_path,
    heading_path). Chunk n in prompts and citation markers is context[n - 1].
    """

    question: str
    answer: str
    context: tuple[dict[str, Any], ...] = ()
    expected_key_facts: tuple[str, ...] = ()
    expected_answer: str | None = None
    expected_topics: tuple[str, ...] = ()  # the answer-quality judge's completeness (seed 002)
    answerable: bool = True
    n_references: int = 0
    # The conflict judge's: the notes the eval set says disagree ("path > heading (dated D)").
    conflict_notes: tuple[str, ...] = ()


@dataclass
class RenderedPrompt:
    """A prompt ready for the wire. `messages` alternate user/assistant (repair appends two)."""

    kind: str
    prompt_version: str
    system: str
    messages: list[dict[str, str]]
    schema_name: str
    temperature: float = 0.0
    max_tokens: int = 2048
    prompt_hash: str = ""

    def with_repair(self, raw: str, error: str) -> RenderedPrompt:
        """The same prompt plus the bad reply and the validation error, for one repair try."""
        out = copy.copy(self)
        out.messages = [
            *self.messages,
            {"role": "assistant", "content": raw or "(empty reply)"},
            {
                "role": "user",
                "content": (
                    "Your reply did not match the required JSON schema:\n"
                    f"{error}\n"
                    "Reply again with only the corrected JSON object, nothing else."
                ),
            },
        ]
        return out


@dataclass
class Completion:
    """One provider reply: the raw text (or the tool input as a dict), usage and identity."""

    text: str
    data: dict[str, Any] | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    answered_model_id: str | None = None
    system_fingerprint: str | None = None
    finish_reason: str | None = None


@dataclass(frozen=True)
class RetryDecision:
    """What to do after a provider call raised. `wait` (seconds) comes from Retry-After."""

    retry: bool
    wait: float | None = None
    fatal: bool = False  # the whole run cannot succeed (bad key, unknown model): stop it
    reason: str = ""
    provider_error: bool = True  # False: not an error the provider raised, i.e. our bug


@dataclass
class JudgeOutcome:
    """A successful judgment plus everything needed to audit and price it."""

    kind: str
    verdict: dict[str, Any]
    method: str  # "llm" | "heuristic"
    judge: str
    model: str
    prompt_version: str
    prompt_hash: str = ""
    answered_model_id: str | None = None
    system_fingerprint: str | None = None
    raw: str | None = None
    cached: bool = False
    repaired: bool = False
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    price_known: bool = True

    def meta(self) -> dict[str, Any]:
        """What goes beside the scores in results.jsonl (inspect's metadata["grading"])."""
        return {
            "method": self.method,
            "judge": self.judge,
            "model": self.model,
            "answered_model_id": self.answered_model_id,
            "system_fingerprint": self.system_fingerprint,
            "prompt_version": self.prompt_version,
            "prompt_hash": self.prompt_hash,
            "cached": self.cached,
            "repaired": self.repaired,
            "raw": self.raw,
        }


@dataclass
class JudgeFailure:
    """A judgment that could not be made. Excluded from means and counted, never a 0."""

    kind: str
    reason: str  # "parse_failure" | "provider_error"
    detail: str
    judge: str = ""
    raw: str | None = None
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    price_known: bool = True

    def to_record(self) -> dict[str, Any]:
        out: dict[str, Any] = {"judge": self.kind, "reason": self.reason, "detail": redact(self.detail)[:500]}
        if self.raw:
            out["raw"] = redact(self.raw)[:2000]
        return out


@dataclass
class JudgeStats:
    """Counters for one judge over a run (summed into metrics.json)."""

    calls: int = 0
    cache_hits: int = 0
    cache_misses: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    repairs: int = 0
    failures: dict[str, int] = field(default_factory=dict)
    unpriced_models: set[str] = field(default_factory=set)
    answered_model_ids: set[str] = field(default_factory=set)
    system_fingerprints: set[str] = field(default_factory=set)

    def to_dict(self) -> dict[str, Any]:
        return {
            "calls": self.calls,
            "cache_hits": self.cache_hits,
            "cache_misses": self.cache_misses,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
            "cost_usd": round(self.cost_usd, 8),
            "repairs": self.repairs,
            "failures": dict(self.failures),
            "unpriced_models": sorted(self.unpriced_models),
            "answered_model_ids": sorted(self.answered_model_ids),
            "system_fingerprints": sorted(self.system_fingerprints),
        }


@dataclass
class BatchStatus:
    """One look at a provider's batch (OpenAI Batch API, Anthropic Message Batches).

    `status` is the provider's own word (OpenAI: validating, in_progress, finalizing,
    completed, failed, expired, cancelling, cancelled; Anthropic: in_progress, canceling,
    ended). `done` counts requests the provider has finished, well or not; `failed` those
    that errored, expired or were cancelled. `error` says why a batch failed as a whole
    (OpenAI's input validation). `handle` holds what fetching the results needs.
    """

    batch_id: str
    status: str
    ended: bool
    total: int | None = None
    done: int = 0
    failed: int = 0
    error: str | None = None
    handle: dict[str, Any] = field(default_factory=dict)


@dataclass
class BatchReply:
    """One request's outcome in a finished batch: a completion, or the provider's error
    (also "expired" / "canceled" for requests the batch never ran).

    A line of the results file that is not what the provider documents (not JSON, not an
    object, no result) is a reply too, with `bad_line` set and its error: the request's
    error when its custom_id can still be read (`custom_id_in`), else with custom_id "".
    """

    custom_id: str
    completion: Completion | None = None
    error: str | None = None
    unrun: bool = False  # the batch expired or was cancelled before running it
    bad_line: bool = False


_CUSTOM_ID = re.compile(rb'"custom_id"\s*:\s*"([A-Za-z0-9_.:-]{1,200})"')


def custom_id_in(line: bytes) -> str:
    """The custom_id a damaged results line still names ("" if none): a line cut short or
    otherwise unparseable is then that request's error, not an anonymous one."""
    m = _CUSTOM_ID.search(line)
    return m.group(1).decode("ascii") if m else ""


# --------------------------------------------------------------------------- protocols


class JudgeBackend(Protocol):
    """One LLM provider's wire call. Knows nothing about prompts' meaning or caching."""

    provider: str  # "openai" | "anthropic" | "openai-compatible"
    model: str  # the pinned id as configured (what goes into cache keys and config.json)

    async def complete(self, prompt: RenderedPrompt, output: type[BaseModel]) -> Completion: ...

    def retry_decision(self, exc: BaseException) -> RetryDecision: ...

    def describe(self) -> dict[str, Any]: ...

    async def aclose(self) -> None: ...


class Judge(Protocol):
    """What the judge runner talks to. Implemented by LLMJudge (any backend) and HeuristicJudge."""

    name: str  # goes to config.json and every record
    version: str  # model id (or heuristic version) + prompt versions
    heuristic: bool

    async def judge(self, kind: str, item: JudgeItem, *, trial: int = 0) -> JudgeOutcome | JudgeFailure: ...

    def describe(self) -> dict[str, Any]: ...

    def stats(self) -> JudgeStats: ...

    async def aclose(self) -> None: ...


# --------------------------------------------------------------------------- schema helpers

# Keywords OpenAI's strict structured output accepts; range checks stay in pydantic.
_STRICT_KEYS = {"type", "properties", "required", "additionalProperties", "items", "description", "enum", "anyOf", "$ref", "$defs", "title"}


def strict_json_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The model's JSON schema in OpenAI's strict subset.

    Every object gets `additionalProperties: false` and lists all its properties as
    required; keywords outside the subset (minimum, maximum, default ...) are dropped,
    because the pydantic model re-checks them on our side anyway.
    """

    def walk(node: Any) -> Any:
        if isinstance(node, list):
            return [walk(x) for x in node]
        if not isinstance(node, dict):
            return node
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key not in _STRICT_KEYS:
                continue
            if key in ("properties", "$defs"):
                out[key] = {name: walk(sub) for name, sub in value.items()}
            else:
                out[key] = walk(value)
        if out.get("type") == "object":
            out["additionalProperties"] = False
            out["required"] = list(out.get("properties", {}))
        return out

    return walk(model.model_json_schema())


def inline_refs(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema with every local `$ref` replaced by its definition and `$defs` removed.

    Some tool-use endpoints handle a flat schema more reliably than one with references.
    """
    defs = schema.get("$defs", {})

    def walk(node: Any) -> Any:
        if isinstance(node, list):
            return [walk(x) for x in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            return walk(defs[ref.removeprefix("#/$defs/")])
        return {k: walk(v) for k, v in node.items() if k != "$defs"}

    return walk(schema)
