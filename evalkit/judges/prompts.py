"""Judge prompt templates, versioned. The v1 texts follow seed 000 §3.B / §3.C word for word
where the seed gives them; `v1-alt` rewords the same rubric for the spot-check's option B.

A prompt's version is `<kind>-<set>` (e.g. `groundedness-v1`). Change a template's meaning
only by adding a new set: cached judgments and run comparisons key on the version.
"""

from __future__ import annotations

import hashlib
import json

from evalkit.judges.base import JudgeItem, RenderedPrompt
from evalkit.store.runlog import Rec

DEFAULT_PROMPT_SET = "v1"

SYSTEM = (
    "You are a strict evaluator of answers produced by a retrieval-augmented assistant. "
    "You judge only against the text you are given. Reply with one JSON object and nothing else."
)

_GROUNDEDNESS_V1 = """Evaluate whether all claims in the answer are supported by the retrieved context.

Answer: {answer}
Retrieved Context:
{context_chunks}

IMPORTANT:
- Treat anything not present in context as unsupported, even if it's "common knowledge"
- Penalize "confident tone" on unsupported claims

Rate groundedness (0-5):
- 5: All claims directly supported by context AND all major claims have citations
- 4: Most claims supported with citations, minor unsupported details
- 3: Some claims supported, some unsupported, or missing citations
- 2: Major claims unsupported or missing citations
- 1: Answer contradicts context
- 0: Answer has no relation to context

Note: Score of 5 requires citations for all major claims (citation coverage is part of groundedness).
Citations are markers such as [1] or [2] that refer to the numbered context chunks above.

Return JSON: {{
  "reasoning": "...",
  "score": 0-5,
  "unsupported_claims": ["claim 1", "claim 2"],
  "supported_claims": ["claim 3", "claim 4"]
}}"""

_CORRECTNESS_V1 = """Evaluate whether the answer correctly addresses the question.

Question: {question}
Answer: {answer}
Retrieved Context:
{context_chunks}
{expected}
Rate correctness (0-5):
- 5: Answer is fully correct and complete
- 4: Answer is mostly correct with minor issues
- 3: Answer is partially correct
- 2: Answer has significant errors
- 1: Answer is mostly incorrect
- 0: Answer is completely wrong

Return JSON: {{"reasoning": "...", "score": 0-5, "key_facts_covered": ["..."], "key_facts_missing": ["..."]}}
(key_facts_covered / key_facts_missing list the expected key facts above, copied verbatim;
both are empty when no expected key facts are given.)"""

_CLAIMS_V1 = """Break the answer into its atomic factual claims and check each one against the retrieved context.

Question: {question}
Answer: {answer}
Retrieved Context:
{context_chunks}

For every factual claim the answer makes (skip greetings, hedges and restatements of the question):
- restate it as one self-contained sentence,
- mark it supported only if the context states it or directly implies it,
- list the numbers [n] of the context chunks that support it,
- say whether the answer attaches a citation marker such as [1] to it.

IMPORTANT:
- Treat anything not present in context as unsupported, even if it's "common knowledge"
- A claim stated in a confident tone without support is unsupported

Return JSON: {{"reasoning": "...", "claims": [{{"claim": "...", "supported": true, "evidence": [1], "cited": true}}]}}"""

_ABSTENTION_V1 = """Question: {question}
Answer: {answer}

Does this answer indicate the system cannot answer the question? Return JSON: {{"abstained": true/false, "confidence": 0-1}}"""

# Seed 000's recency/conflict rule "acknowledge_both" ("must acknowledge conflict and cite
# both"; the category "expects 'depends / latest says...'"): the seed gives no prompt.
_CONFLICT_V1 = """The notes behind this question disagree with each other. The eval set marks the case
"acknowledge_both": a good answer acknowledges the conflict and presents both sides.

Question: {question}
Notes that disagree (from the eval set):
{conflict_notes}
Answer: {answer}
Retrieved Context:
{context_chunks}

Does the answer acknowledge that the sources disagree (or that one supersedes the other, e.g.
"depends" or "the latest note says ...") AND state what each side says?
- An answer that gives only one side does not acknowledge the conflict.
- An answer that blends both sides into one claim without noting they differ does not either.
- Judge only the answer's text; whether it is correct is judged elsewhere.

Return JSON: {{"reasoning": "...", "acknowledged": true/false}}"""

# Seed 002's answer-quality prompt (GNO's evals/scorers/answer-quality.ts), with the sources
# numbered as in the other prompts and the two topic lists added to the reply.
_ANSWER_QUALITY_V1 = """You are evaluating an AI-generated answer for quality.

Question: {question}

Sources provided:
{context_chunks}

Answer generated:
{answer}

Expected topics to cover: {topics}

Rate the answer on three dimensions (0.0 to 1.0):
1. RELEVANCE: Does the answer directly address the question?
2. GROUNDEDNESS: Is the answer supported by the provided sources? (no hallucination)
3. COMPLETENESS: Does the answer cover the key points?

Respond in JSON format:
{{"relevance": 0.X, "groundedness": 0.X, "completeness": 0.X, "reasoning": "...", "topics_covered": ["..."], "topics_missing": ["..."]}}
(topics_covered / topics_missing split the expected topics above, copied verbatim; both are
empty when no topics are given.)"""

# Issue 42 item 6 (no gold needed): each retrieved chunk judged against the question alone,
# so a case without gold supports still gets a retrieval number (RAGAS's context precision
# without ground truth, TruLens' context relevance). The answer is not shown: the verdict is
# about the retriever, and it stays cached when only the answer changes.
_CONTEXT_RELEVANCE_V1 = """Judge whether each retrieved context chunk is relevant to the question.

Question: {question}
Retrieved Context:
{context_chunks}

A chunk is relevant when it holds information that helps answer the question, fully or in part.
A chunk on the same topic that does not help answer this question is not relevant.
Judge every numbered chunk [n] on its own; do not answer the question.

Return JSON: {{"reasoning": "...", "chunks": [{{"chunk": 1, "relevant": true}}, {{"chunk": 2, "relevant": false}}]}}"""

# --- v1-alt: same rubrics, different wording (reliability spot-check, option B) -------------

_GROUNDEDNESS_ALT = """You are checking an assistant's answer for faithfulness to its sources.

Sources (numbered chunks the assistant retrieved):
{context_chunks}

Assistant's answer:
{answer}

Rules: a statement counts as supported only if the sources say it; general knowledge does not
count. A confident statement without support is worse than a hedged one. Citation markers like
[2] point at the numbered sources.

Score from 0 to 5:
5 = every statement is backed by the sources and every major statement carries a citation
4 = nearly everything backed and cited; a small detail is not
3 = a mix of backed and unbacked statements, or citations are missing
2 = the main statements are unbacked or uncited
1 = the answer contradicts the sources
0 = the answer has nothing to do with the sources

Reply as JSON with keys reasoning, score, unsupported_claims, supported_claims."""

_CORRECTNESS_ALT = """You are grading an assistant's answer to a user's question.

Question:
{question}

Assistant's answer:
{answer}

Material the assistant retrieved:
{context_chunks}
{expected}
Score from 0 to 5:
5 = correct and complete
4 = correct with small gaps or slips
3 = partly correct
2 = contains serious mistakes
1 = mostly wrong
0 = entirely wrong

Reply as JSON with keys reasoning, score, key_facts_covered, key_facts_missing (the expected key
facts, copied verbatim, split by whether the answer gets them right; empty lists if none are given)."""

_ABSTENTION_ALT = """Question: {question}
Reply given: {answer}

Is this reply a refusal, i.e. does it say the answer cannot be found or given? Return JSON: {{"abstained": true/false, "confidence": 0-1}}"""

_CONFLICT_ALT = """You are checking whether an assistant noticed that its sources contradict each other.

The eval set says these notes disagree:
{conflict_notes}

User's question:
{question}

Assistant's reply:
{answer}

Material the assistant retrieved:
{context_chunks}

Say acknowledged = true only if the reply tells the user the sources differ (or that a newer
note replaces an older one) and says what each of them holds. One side only, or both merged
as if they agreed, is false. Do not grade correctness.

Reply as JSON with keys reasoning and acknowledged."""

PROMPT_SETS: dict[str, dict[str, str]] = {
    "v1": {
        Rec.GROUNDEDNESS: _GROUNDEDNESS_V1,
        Rec.CORRECTNESS: _CORRECTNESS_V1,
        "claims": _CLAIMS_V1,
        "abstention": _ABSTENTION_V1,
        "answer_quality": _ANSWER_QUALITY_V1,
        "conflict": _CONFLICT_V1,
        "context_relevance": _CONTEXT_RELEVANCE_V1,
    },
    "v1-alt": {
        Rec.GROUNDEDNESS: _GROUNDEDNESS_ALT,
        Rec.CORRECTNESS: _CORRECTNESS_ALT,
        "claims": _CLAIMS_V1,
        "abstention": _ABSTENTION_ALT,
        "answer_quality": _ANSWER_QUALITY_V1,
        "conflict": _CONFLICT_ALT,
        "context_relevance": _CONTEXT_RELEVANCE_V1,
    },
}

_MAX_TOKENS = {Rec.GROUNDEDNESS: 1024, Rec.CORRECTNESS: 1024, "claims": 2048, "abstention": 128, "answer_quality": 1024, "conflict": 512,
               "context_relevance": 1024}


def prompt_version(kind: str, prompt_set: str = DEFAULT_PROMPT_SET) -> str:
    """The version string stored with every judgment, e.g. "groundedness-v1"."""
    return f"{kind}-{prompt_set}"


def render_context(context: tuple[dict, ...] | list[dict]) -> str:
    """Number the chunks [1]..[K] in rank order, each under its note path and heading."""
    if not context:
        return "(no context was retrieved)"
    parts = []
    for n, chunk in enumerate(context, start=1):
        where = " > ".join(x for x in (chunk.get("rel_path"), chunk.get("heading_path")) if x)
        head = f"[{n}] {where}".rstrip()
        parts.append(f"{head}\n{(chunk.get('text') or '').strip()}")
    return "\n\n".join(parts)


def _render_expected(item: JudgeItem) -> str:
    lines = []
    if item.expected_key_facts:
        lines.append("Expected key facts (from the eval set; a complete answer states all of them):")
        lines.extend(f"- {fact}" for fact in item.expected_key_facts)
    if item.expected_answer:
        lines.append(f"Reference answer (from the eval set): {item.expected_answer}")
    return ("\n" + "\n".join(lines) + "\n") if lines else ""


def render_prompt(kind: str, item: JudgeItem, *, prompt_set: str = DEFAULT_PROMPT_SET, temperature: float = 0.0) -> RenderedPrompt:
    """Fill the template of `kind` from `prompt_set` with one item.

    Raises:
        KeyError: unknown kind or prompt set (callers validate the set name up front).
    """
    template = PROMPT_SETS[prompt_set][kind]
    text = template.format(
        question=item.question,
        answer=item.answer,
        context_chunks=render_context(item.context),
        expected=_render_expected(item),
        topics=", ".join(item.expected_topics) or "N/A",
        conflict_notes="\n".join(f"- {n}" for n in item.conflict_notes) or "(not given)",
    )
    messages = [{"role": "user", "content": text}]
    digest = hashlib.sha256(json.dumps([SYSTEM, messages], sort_keys=True).encode()).hexdigest()
    return RenderedPrompt(
        kind=kind,
        prompt_version=prompt_version(kind, prompt_set),
        system=SYSTEM,
        messages=messages,
        schema_name=f"{kind}_verdict",
        temperature=temperature,
        max_tokens=_MAX_TOKENS[kind],
        prompt_hash=digest,
    )
