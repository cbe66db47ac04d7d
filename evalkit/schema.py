"""Pydantic contracts at every file and HTTP boundary. No I/O, no logic beyond validators.

Input models keep unknown fields (extra="allow") so that rewriting a file never drops
what a user or a newer tool put there. Inside the library, records travel as plain dicts
(`model_dump(mode="json")`); these models are for validating at the edges.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator, model_validator

SCHEMA_VERSION = 1

BUILTIN_CATEGORIES: tuple[str, ...] = (
    "factual",
    "reasoning",
    "multi_hop",
    "recency/conflict",
    "general",
    "adversarial",
)
RECENCY_RULES: tuple[str, ...] = ("cite_newer", "cite_both", "acknowledge_both")
FolderMode = Literal["off", "on", "on_with_fallback"]
RecencyRule = Literal["cite_newer", "cite_both", "acknowledge_both"]
Difficulty = Literal["easy", "medium", "hard"]
# A case's `label_source` until a person reviews it: "auto" (label --accept-top) or
# "generated" (evalkit generate). --review-auto walks them; a run warns about them.
AUTO = "auto"
GENERATED = "generated"
REVIEW_SOURCES = (AUTO, GENERATED)
# A question `evalkit promote` added from a run or a question log: no gold yet, labeling
# gives it (the labeler's default queue takes it; a person's edit there drops the mark).
PROMOTED = "promoted"


class _Open(BaseModel):
    """Input model: unknown fields survive a round trip."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)


# --------------------------------------------------------------------------- eval set


class GoldSupport(_Open):
    """Where the answer lives. One of three forms, tried in this order:

    - `chunk_id` (B.O.B style): matches a retrieved chunk with the same id.
    - `rel_path` + `start_line`/`end_line`: matches a chunk of the same file whose line
      range overlaps the span (for notes without useful headings).
    - `rel_path` + `heading_path` (anchor): same file, heading path prefix at a heading
      boundary; optional `snippets` must occur in the chunk text when snippets are required.
    """

    rel_path: str | None = Field(None, description="Note path relative to the vault root.")
    heading_path: str | None = Field(
        None, description='Heading hierarchy, e.g. "# Overview > ## Details". Empty = whole file.'
    )
    snippets: list[str] = Field(default_factory=list, description="Phrases the chunk must contain.")
    chunk_id: str | None = Field(None, description="Stable chunk id (matches by id).")
    start_line: int | None = Field(None, ge=1, description="1-based first line of a line-span support.")
    end_line: int | None = Field(None, ge=1, description="1-based last line (inclusive).")
    relevance: float = Field(1.0, ge=0, description="Graded relevance for nDCG (gain 2^rel - 1).")
    graded_only: bool = Field(
        False,
        strict=True,
        description="Counts for nDCG only (with its relevance); not in the recall set of recall, precision, "
        "MRR, attribution. For graded judgments beyond the relevant set (TREC qrels, GNO judgments).",
    )
    date: str | None = Field(None, description="ISO date of the note, for recency/conflict rules.")

    @field_validator("chunk_id", mode="before")
    @classmethod
    def _chunk_id_str(cls, v: Any) -> Any:
        # B.O.B golden sets use integer chunk ids.
        return str(v) if isinstance(v, int) and not isinstance(v, bool) else v

    @field_validator("date")
    @classmethod
    def _iso_date(cls, v: str | None) -> str | None:
        # Checked at load so a bad date stops the run before anything is written,
        # not in the middle of scoring (recency rules compare these dates).
        if v is not None:
            try:
                datetime.fromisoformat(v.strip())
            except ValueError:
                raise ValueError(f"not an ISO date (YYYY-MM-DD or ISO 8601), got {v!r}") from None
        return v

    @model_validator(mode="after")
    def _has_a_location(self) -> GoldSupport:
        if not self.chunk_id and not self.rel_path:
            raise ValueError("a gold support needs rel_path (with heading_path or lines) or chunk_id")
        if (self.start_line is None) != (self.end_line is None):
            raise ValueError("start_line and end_line go together")
        if self.start_line is not None and self.end_line is not None and self.end_line < self.start_line:
            raise ValueError(f"end_line {self.end_line} is before start_line {self.start_line}")
        return self


class CaseConstraints(_Open):
    """What a case asks of the answer besides its content (issues 13, 14), an open object.

    `latency_budget_ms`: this case's latency budget; it overrides the run's
    `--latency-budget-ms` for this case (see run/records.latency_budget).
    `token_budget` / `top_k` (seed 004's tokenBudget / topK): the expectation scorers
    read only the first `top_k` retrieved chunks, and fact retention only the first
    `token_budget` tokens of them (metrics/expectations.py).
    """

    latency_budget_ms: float | None = Field(
        None, gt=0, description="Latency budget of this case in ms (overrides --latency-budget-ms)."
    )
    token_budget: int | None = Field(
        None,
        gt=0,
        validation_alias=AliasChoices("token_budget", "tokenBudget"),
        description="Tokens of retrieved context the case may use: fact retention counts must_include "
        "facts inside the first token_budget tokens (seed 004's tokenBudget).",
    )
    top_k: int | None = Field(
        None,
        ge=1,
        validation_alias=AliasChoices("top_k", "topK"),
        description="The expectation scorers read only the first top_k retrieved chunks (seed 004's topK).",
    )


class CaseExpectations(BaseModel):
    """Seed 004's `expected`: strings the retrieved text and the answer must / must not hold.

    Closed (an unknown key is an error): a misspelt `must_includes` would otherwise score
    nothing without a word. camelCase names (seed 004's fixtures) are accepted.
    """

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    must_include: list[str] = Field(
        default_factory=list,
        validation_alias=AliasChoices("must_include", "mustInclude"),
        description="Substrings that must appear (case-insensitive, whitespace-normalised).",
    )
    must_exclude: list[str] = Field(
        default_factory=list,
        validation_alias=AliasChoices("must_exclude", "mustExclude"),
        description="Substrings that must not appear.",
    )
    ordered_hints: list[str] = Field(
        default_factory=list,
        validation_alias=AliasChoices("ordered_hints", "orderedHints"),
        description="Substrings in the order they must appear (temporal cases); at least two.",
    )

    @field_validator("must_include", "must_exclude", "ordered_hints")
    @classmethod
    def _no_blank(cls, v: list[str]) -> list[str]:
        if any(not s.strip() for s in v):
            raise ValueError("must not hold an empty string (it would match any text)")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> CaseExpectations:
        if len(self.ordered_hints) == 1:
            raise ValueError("ordered_hints needs at least two hints to have an order")
        both = sorted({s.casefold() for s in self.must_include} & {s.casefold() for s in self.must_exclude})
        if both:
            raise ValueError(f"{both} is both in must_include and must_exclude")
        return self


class Message(BaseModel):
    """One earlier turn of a conversation as the chatbot is sent it (DESIGN.md §10)."""

    model_config = ConfigDict(extra="forbid")

    role: Literal["user", "assistant"]
    content: str | None = Field(
        description="The text; an assistant turn whose reference answer the eval set lacks is null "
        "(only a run with live history can send it: the chatbot's own answer)."
    )


class TurnOf(BaseModel):
    """Where a turn case sits in its conversation: set by the loader from a line's `turns`,
    never written by hand (evalset/turns.py)."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(description="The conversation's id (the line's `id`).")
    turn: int = Field(ge=1, description="1-based position of this turn.")
    turns: int = Field(ge=1, description="How many turns the conversation has.")
    follow_up: str | None = Field(
        None, description="What kind of turn it is (e.g. follow-up, clarification), as the eval set says."
    )
    history: list[Message] = Field(
        default_factory=list,
        description="The reference conversation before this turn, oldest first: each earlier question and its "
        "expected_answer.",
    )


class EvalCase(_Open):
    """One line of eval_set.jsonl (seed 000, "Test Case Format", plus our additions), or one
    turn of a line that holds a conversation (`turns`, evalset/turns.py)."""

    id: str = Field(description="Unique case id (ints are turned into strings).")
    question: str = Field(min_length=1)
    answerable: bool = Field(
        strict=True,
        description="Does the corpus hold the answer? Required, a JSON boolean; false = the chatbot should abstain.",
    )
    expected_key_facts: list[str] = Field(default_factory=list)
    expected_topics: list[str] = Field(
        default_factory=list,
        description="Topics a complete answer covers (seed 002's expectedTopics): the answer-quality judge's completeness.",
    )
    gold_supports: list[GoldSupport] = Field(default_factory=list)
    required_support_groups: list[list[int]] | None = Field(
        None, description="Indices into gold_supports: OR of groups, AND within a group."
    )
    recency_conflict_rule: RecencyRule | None = None
    tags: list[str] = Field(default_factory=list)
    vaults: list[str] = Field(default_factory=list)
    folders: list[str] = Field(default_factory=list)
    category: str | None = None
    difficulty: Difficulty | None = None
    domain: str | None = None
    language: str | None = None
    doc_language: str | None = Field(
        None,
        description="Language of the gold documents when it differs from the question's `language` "
        "(a cross-language case: by_language slice `<language>-><doc_language>`).",
    )
    expected_answer: str | None = None
    notes: str | None = None
    constraints: CaseConstraints | None = Field(
        None, description="Per-case constraints: latency_budget_ms, token_budget, top_k."
    )
    expected: CaseExpectations | None = Field(
        None,
        description="Seed 004's must_include / must_exclude / ordered_hints, scored on the retrieved text "
        "and on the answer (metrics/expectations.py).",
    )
    scenario: str | None = Field(
        None, description="Scenario family (seed 004), e.g. follow_up_recall: --suite weighs scenarios."
    )
    conversation: TurnOf | None = Field(
        None, description="Set by the loader on each turn of a conversation (a line with `turns`); absent otherwise."
    )

    @field_validator("id", mode="before")
    @classmethod
    def _id_str(cls, v: Any) -> Any:
        return str(v) if isinstance(v, int) and not isinstance(v, bool) else v

    @field_validator("id", "question")
    @classmethod
    def _not_blank(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("must not be blank")
        return v


# --------------------------------------------------------------------------- target contract


class RerankWeights(BaseModel):
    vector: float = 0.7
    lexical: float = 0.3


class AskRequest(BaseModel):
    """Body of POST /api/v1/ask (DESIGN.md §5). `debug` travels as a query parameter over HTTP."""

    model_config = ConfigDict(extra="forbid")

    question: str = Field(min_length=1)
    k: int = Field(5, ge=1)
    folder_mode: FolderMode = "off"
    vaults: list[str] = Field(default_factory=list)
    folders: list[str] = Field(default_factory=list)
    rerank_weights: RerankWeights = Field(default_factory=RerankWeights)
    options: dict[str, Any] = Field(default_factory=dict)
    debug: bool = True
    # A conversation's turn (DESIGN.md §10): the earlier turns, oldest first, and the
    # conversation's id. Left out of the body of a single question (request_body).
    history: list[Message] | None = None
    conversation_id: str | None = None


class Reference(_Open):
    chunk_id: str | None = None
    rel_path: str | None = None
    heading_path: str | None = None
    start_line: int | None = None
    end_line: int | None = None


class RetrievedChunk(_Open):
    chunk_id: str | None = None
    rel_path: str
    heading_path: str = ""
    start_line: int | None = None
    end_line: int | None = None
    score_vector: float | None = None
    score_lexical: float | None = None
    score_final: float | None = None
    text: str = ""
    rank: int | None = Field(None, description="1-based rank; list order when absent.")
    token_count: int | None = None


class FolderSelection(_Open):
    mode: str | None = None
    selected_folders: list[str] = Field(default_factory=list)
    reasoning: str | None = None
    fallback_used: bool | None = None


class Timings(_Open):
    folder_selection: float | None = None
    retrieval: float | None = None
    generation: float | None = None


class Versions(_Open):
    index_build_version: str | None = None
    retriever_version: str | None = None
    answerer_version: str | None = None
    llm_model: str | None = None
    embedding_model: str | None = None
    chunker_version: str | None = None


class DebugInfo(_Open):
    retrieved_chunks: list[RetrievedChunk] = Field(default_factory=list)
    folder_selection: FolderSelection | None = None
    timings_ms: Timings | None = None
    versions: Versions | None = None


class AskResponse(_Open):
    """Response of /api/v1/ask. Only `answer` is required; the rest is tolerated missing."""

    answer: str
    references: list[Reference] = Field(default_factory=list)
    abstained: bool | None = None
    abstain_reason: str | None = None
    debug: DebugInfo | None = None


class ChunkTokenStats(_Open):
    min: float | None = None
    max: float | None = None
    mean: float | None = None
    p95: float | None = None


class DocTypeCoverage(_Open):
    processed: int = 0
    with_0_chunks: int = 0
    chunks_skipped: int = 0


class IndexingCoverage(_Open):
    """The seed's `indexing_coverage` object (GET /api/v1/index/stats)."""

    docs_processed: int = 0
    docs_with_0_chunks: int = 0
    chunks_attempted: int = 0
    chunks_embedded: int = 0
    chunks_skipped: int = 0
    chunks_skipped_reasons: dict[str, int] = Field(default_factory=dict)
    chunk_token_stats: ChunkTokenStats | None = None
    chunker_version: str | None = None
    index_version: str | None = None
    coverage_by_doc_type: dict[str, DocTypeCoverage] = Field(default_factory=dict)


# --------------------------------------------------------------------------- run folder


ErrorKind = Literal["timeout", "http_error", "invalid_response", "empty_answer", "connect", "exception"]


class CaseError(_Open):
    kind: ErrorKind
    status: int | None = None
    detail: str = ""


class Latency(_Open):
    total_ms: float | None = None
    folder_selection_ms: float | None = None
    retrieval_ms: float | None = None
    generation_ms: float | None = None
    judge_ms: float | None = None


class RecordConfig(_Open):
    """Per-record config snapshot (seed "Results JSONL Format" → config)."""

    k: int | None = None
    rerank_weights: RerankWeights | None = None
    folder_mode: FolderMode | None = None
    llm_model: str | None = None
    embedding_model: str | None = None
    judge_model: str | None = None
    judge_prompt_version: str | None = None
    judge_temperature: float | None = None
    dataset_version: str | None = None
    index_build_version: str | None = None
    retriever_version: str | None = None
    answerer_version: str | None = None


class Abstention(_Open):
    abstained: bool | None = None
    hallucinated: bool | None = None
    method: Literal["target", "judge", "heuristic"] | None = Field(
        None, description="What decided `abstained`: the target's field, an LLM classifier, or the heuristic."
    )
    reason: str | None = None
    confidence: float | None = None


class GroundednessVerdict(_Open):
    score: float | None = None
    reasoning: str = ""
    unsupported_claims: list[str] = Field(default_factory=list)
    supported_claims: list[str] = Field(default_factory=list)


class CorrectnessVerdict(_Open):
    score: float | None = None
    reasoning: str = ""


class JudgeInput(_Open):
    question: str
    answer: str
    context_chunk_ids: list[str | None] = Field(default_factory=list)
    context_chunks_truncated: list[str] = Field(default_factory=list)


class Cost(_Open):
    judge_tokens: int = 0
    judge_cost_usd: float = 0.0


class ResultRecord(_Open):
    """One line of results.jsonl (seed "Results JSONL Format", field for field, plus ours)."""

    schema_version: int = SCHEMA_VERSION
    test_case_id: str
    case_index: int = Field(description="Position of the case in the eval set (order is restorable).")
    case: dict[str, Any] = Field(
        default_factory=dict,
        description="The eval case as run (labels, tags, category...), so derived scripts need no eval set.",
    )
    question: str
    answer: str | None = None
    references: list[Reference] = Field(default_factory=list)
    retrieved_chunks: list[RetrievedChunk] = Field(default_factory=list)
    folder_selection: FolderSelection | None = None
    config: RecordConfig = Field(default_factory=RecordConfig)
    indexing_coverage: IndexingCoverage | None = None
    latency: Latency = Field(default_factory=Latency)
    retrieval_metrics: dict[str, Any] = Field(default_factory=dict)
    groundedness: GroundednessVerdict | None = None
    correctness: CorrectnessVerdict | None = None
    abstention: Abstention = Field(default_factory=Abstention)
    judge_input: JudgeInput | None = None
    cost: Cost = Field(default_factory=Cost)
    error: CaseError | None = None
    judge_errors: list[dict[str, Any]] = Field(
        default_factory=list, description="Judge failures: {judge, reason, detail}. Excluded from judge means."
    )
    missing_fields: list[str] = Field(
        default_factory=list, description="Contract fields the target did not return (partial implementation)."
    )


class RunConfig(_Open):
    """config.json: every parameter of the run. Never holds a secret."""

    schema_version: int = SCHEMA_VERSION
    run_id: str
    created_at: str
    config_hash: str
    dataset_version: str | None = None
    eval_set_commit_hash: str | None = None


class Metrics(_Open):
    """metrics.json (seed "Metrics JSON Format"). Cells are plain dicts; see EVAL.md."""

    schema_version: int = SCHEMA_VERSION
    run_id: str
    timestamp: str
    config_hash: str | None = None
    eval_set_commit_hash: str | None = None
    aggregate_metrics: dict[str, Any] = Field(default_factory=dict)
    by_tag: dict[str, Any] = Field(default_factory=dict)
    by_category: dict[str, Any] = Field(default_factory=dict)
    by_difficulty: dict[str, Any] = Field(default_factory=dict)
    by_domain: dict[str, Any] = Field(default_factory=dict)
    by_answerable: dict[str, Any] = Field(default_factory=dict)
    total_tests: int = 0
    answerable_tests: int = 0
    unanswerable_tests: int = 0
