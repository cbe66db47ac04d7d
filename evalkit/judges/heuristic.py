"""The offline heuristic judge: deterministic, free, and a weak proxy for an LLM judge.

It is the default when no LLM judge is configured, so that a fresh checkout produces
groundedness/correctness numbers without a key. It only measures word overlap; every
score it produces is labelled `heuristic` in results, config.json and terminal tables.
EVAL.md, section "Judges", states the formulas below.

- Claims are the answer's sentences (bullets and lines split too) that keep at least one
  content word once citation markers are removed.
- Content words: lower-cased alphanumeric tokens of 3+ characters (or any number) that are
  not stop words; a trailing plural "s" is dropped from tokens longer than 4 characters.
- A claim is supported when some context chunk contains at least SUPPORT_THRESHOLD (60%)
  of the claim's content words.
- A claim is cited when it carries a marker [n] (or [n, m]); citation coverage =
  cited claims / claims.
- groundedness = 5 × s × (0.6 + 0.4 × c), with s = supported claims / claims and c =
  citation coverage; claim-level mode uses 5 × s.
- correctness = 5 × covered key facts / key facts (a fact is covered when the answer holds
  60% of its content words); without key facts, 5 × recall of the expected answer's content
  words; without either, 5 × (0.5 × q + 0.5 × s), q = share of the question's content
  words the answer uses.
- abstention: a refusal phrase (REFUSAL_PATTERNS) in the first sentence, or anywhere in an
  answer of at most 40 words.
- conflict (acknowledge_both cases): acknowledged when the answer holds a conflict phrase
  (CONFLICT_PATTERNS: "conflict", "contradict", "the older note says", "depends", ...) and
  draws on at least two different notes of the context (a claim cites [n] or is supported
  by a chunk of each).
- context relevance (no gold needed): a retrieved chunk is relevant when it holds at least
  RELEVANCE_THRESHOLD (50%) of the question's content words; the score is relevant chunks /
  chunks (None for a question without content words).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from evalkit.judges.base import JudgeFailure, JudgeItem, JudgeOutcome, JudgeStats
from evalkit.store.runlog import Rec

HEURISTIC_VERSION = "heuristic-v1"
SUPPORT_THRESHOLD = 0.6
CITATION_WEIGHT = 0.4
SHORT_ANSWER_WORDS = 40
# Lower than SUPPORT_THRESHOLD: a question is short and names its topic in few words, and a
# chunk that answers it rarely repeats all of them.
RELEVANCE_THRESHOLD = 0.5

STOPWORDS = frozenset(
    """a about above after again against all also am an and any are aren as at be because been before
    being below between both but by can cannot could did didn do does doesn doing don down during each
    few for from further had has have having he her here hers herself him himself his how however i if
    in into is isn it its itself just let me more most much must my myself no nor not now of off on
    once only or other our ours ourselves out over own per same she should so some such than that the
    their theirs them themselves then there these they this those through thus to too under until up
    upon use used using very via was wasn we were what when where which while who whom why will with
    within without would yes yet you your yours yourself yourselves one two may might shall""".split()
)

REFUSAL_PATTERNS: tuple[str, ...] = (
    r"\bi (?:do not|don't|dont) know\b",
    r"\bi(?:'m| am) not sure\b",
    r"\b(?:cannot|can't|can not|could not|couldn't|unable to|not able to) (?:find|answer|locate|determine|tell|say|help)\b",
    r"\bno (?:relevant |specific |such )?(?:information|mention|details?|data|notes?|context|record)s? (?:about|on|regarding|of|for|in|is|was|were|are)\b",
    r"\b(?:is|are|was|were) not (?:mentioned|covered|found|available|specified|stated|documented|described|provided)\b",
    r"\b(?:notes|context|documents?|vault|sources?|provided information) (?:do|does|did) not (?:contain|mention|say|include|cover|specify|provide)\b",
    r"\b(?:insufficient|not enough) (?:information|context|evidence)\b",
    r"\bthere is no (?:information|mention|record|answer)\b",
    r"\bi (?:have no|don't have|do not have) (?:information|access|enough)\b",
    r"\bnot (?:in|covered by|part of) (?:the|my) (?:notes|context|documents|vault|sources)\b",
)
_REFUSAL = re.compile("|".join(REFUSAL_PATTERNS), re.I)
CONFLICT_PATTERNS: tuple[str, ...] = (
    r"\b(?:conflict\w*|contradict\w*|disagree\w*|inconsisten\w*|discrepan\w*)\b",
    r"\b(?:notes?|sources?|documents?|versions?) (?:differ|disagree|say different|do not agree|don't agree)\b",
    r"\b(?:older|earlier|previous|outdated|old|superseded|newer|later|latest|updated|current|new) "
    r"(?:note|version|document|source|page)s? (?:says?|said|states?|stated|mentions?|recommends?|replaces?|supersedes?)\b",
    r"\b(?:superseded|supersedes|replaced by|no longer (?:valid|current|applies))\b",
    r"\b(?:on the other hand|it depends|depends on which)\b",
)
_CONFLICT = re.compile("|".join(CONFLICT_PATTERNS), re.I)
_TOKEN = re.compile(r"[^\W_]+", re.U)
# At most 6 digits: a marker is a passage number, and int() of a 5,000-digit run raises.
_MARKER = re.compile(r"\[(\d{1,6}(?:\s*,\s*\d{1,6})*)\]")
_BULLET = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_SPACE_BEFORE_PUNCT = re.compile(r"\s+([.,;:!?])")


def content_words(text: str) -> set[str]:
    """The content-word set of `text` (see module docstring)."""
    out = set()
    for tok in _TOKEN.findall(text.lower()):
        if tok in STOPWORDS or (len(tok) < 3 and not tok.isdigit()):
            continue
        if len(tok) > 4 and tok.endswith("s") and not tok.endswith("ss"):
            tok = tok[:-1]
        out.add(tok)
    return out


def split_claims(answer: str) -> list[dict[str, Any]]:
    """Answer sentences as claims: [{"claim": text without markers, "markers": [n, ...]}].

    A piece holding only markers (`... 8080. [1]`) gives its markers to the claim before it.
    """
    claims: list[dict[str, Any]] = []
    for line in answer.splitlines():
        line = _BULLET.sub("", line).strip()
        if not line:
            continue
        for piece in _SENTENCE_END.split(line):
            markers = [int(n) for group in _MARKER.findall(piece) for n in re.split(r"\s*,\s*", group)]
            text = _SPACE_BEFORE_PUNCT.sub(r"\1", " ".join(_MARKER.sub(" ", piece).split()))
            if not content_words(text):
                if markers and claims:
                    claims[-1]["markers"].extend(markers)
                continue
            claims.append({"claim": text, "markers": markers})
    return claims


def citation_check(answer: str, n_context: int, n_references: int = 0) -> dict[str, Any]:
    """Deterministic citation facts about an answer (stored beside the groundedness verdict).

    Returns:
        has_citations (any [n] marker), markers (sorted distinct), claims, cited_claims,
        coverage = cited_claims / claims (None without claims), out_of_range = markers
        larger than the number of context chunks and references.
    """
    claims = split_claims(answer)
    markers = sorted({int(n) for group in _MARKER.findall(answer) for n in re.split(r"\s*,\s*", group)})
    limit = max(n_context, n_references)
    cited = sum(1 for c in claims if c["markers"])
    return {
        "has_citations": bool(markers),
        "markers": markers,
        "claims": len(claims),
        "cited_claims": cited,
        "coverage": cited / len(claims) if claims else None,
        "out_of_range": [n for n in markers if n < 1 or n > limit] if limit else [],
    }


def _overlap(words: set[str], other: set[str]) -> float:
    return len(words & other) / len(words) if words else 0.0


def judge_claims(answer: str, context: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each claim with its best overlap, the chunks [n] reaching the threshold, and `supported`."""
    chunk_words = [content_words(c.get("text") or "") for c in context]
    out = []
    for c in split_claims(answer):
        words = content_words(c["claim"])
        overlaps = [_overlap(words, cw) for cw in chunk_words]
        best = max(overlaps, default=0.0)
        out.append(
            {
                "claim": c["claim"],
                "supported": best >= SUPPORT_THRESHOLD,
                "overlap": round(best, 4),
                "evidence": [n for n, o in enumerate(overlaps, start=1) if o >= SUPPORT_THRESHOLD],
                "cited": bool(c["markers"]),
            }
        )
    return out


def groundedness_score(claims: Sequence[dict[str, Any]], *, claim_level: bool = False) -> float | None:
    """5 × s × (0.6 + 0.4 × c), or 5 × s in claim-level mode; None without claims."""
    if not claims:
        return None
    s = sum(1 for c in claims if c["supported"]) / len(claims)
    if claim_level:
        return 5 * s
    cov = sum(1 for c in claims if c["cited"]) / len(claims)
    return 5 * s * ((1 - CITATION_WEIGHT) + CITATION_WEIGHT * cov)


def detect_refusal(answer: str) -> dict[str, Any]:
    """The refusal-phrase detector: {"abstained", "confidence", "phrase"}."""
    text = " ".join(answer.split())
    if not text:
        return {"abstained": False, "confidence": 0.5, "phrase": None}
    first = _SENTENCE_END.split(text, maxsplit=1)[0]
    n_words = len(text.split())
    m_first = _REFUSAL.search(first)
    m_any = m_first or _REFUSAL.search(text)
    if m_first:
        return {"abstained": True, "confidence": 0.9 if n_words <= SHORT_ANSWER_WORDS else 0.75, "phrase": m_first.group(0)}
    if m_any and n_words <= SHORT_ANSWER_WORDS:
        return {"abstained": True, "confidence": 0.7, "phrase": m_any.group(0)}
    return {"abstained": False, "confidence": 0.7, "phrase": None}


def conflict_check(answer: str, context: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The conflict heuristic: {"acknowledged", "phrase", "notes", "reasoning"}.

    acknowledged = a CONFLICT_PATTERNS phrase is in the answer AND the answer draws on at
    least two distinct notes (`rel_path`) of the context: a claim cites chunk [n] of one, or
    is supported by one (SUPPORT_THRESHOLD overlap). `notes` counts those notes.
    """
    m = _CONFLICT.search(" ".join(answer.split()))
    used: set[str] = set()
    paths = [str(c.get("rel_path") or c.get("chunk_id") or n) for n, c in enumerate(context, start=1)]
    markers = {n for c in split_claims(answer) for n in c["markers"]}
    used.update(paths[n - 1] for n in markers if 1 <= n <= len(paths))
    used.update(paths[n - 1] for c in judge_claims(answer, context) for n in c["evidence"])
    acknowledged = m is not None and len(used) >= 2
    phrase = m.group(0) if m else None
    return {
        "acknowledged": acknowledged,
        "phrase": phrase,
        "notes": len(used),
        "reasoning": f"heuristic: {'conflict phrase ' + repr(phrase) if phrase else 'no conflict phrase'}; "
        f"the answer draws on {len(used)} note{'' if len(used) == 1 else 's'} of the context (2 needed)",
    }


def relevance_score(chunks: Sequence[dict[str, Any]], n_chunks: int) -> float | None:
    """Relevant chunks / `n_chunks` (the share of the top K that bears on the question), from
    per-chunk verdicts [{"chunk": n, "relevant": bool}]; a chunk number outside 1..n_chunks,
    or named twice, counts once or not at all. None when there is no chunk."""
    if n_chunks <= 0:
        return None
    relevant = {int(c["chunk"]) for c in chunks if c.get("relevant") and 1 <= int(c["chunk"]) <= n_chunks}
    return len(relevant) / n_chunks


def context_relevance(question: str, context: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The heuristic context-relevance verdict: each chunk with its share of the question's
    content words, relevant at RELEVANCE_THRESHOLD; score = relevant / chunks."""
    words = content_words(question)
    chunks = []
    for n, c in enumerate(context, start=1):
        overlap = _overlap(words, content_words(c.get("text") or ""))
        chunks.append({"chunk": n, "relevant": bool(words) and overlap >= RELEVANCE_THRESHOLD, "overlap": round(overlap, 4)})
    n_relevant = sum(1 for c in chunks if c["relevant"])
    return {
        "score": relevance_score(chunks, len(chunks)) if words else None,
        "chunks": chunks,
        "n_chunks": len(chunks),
        "n_relevant": n_relevant,
        "reasoning": f"heuristic: {n_relevant}/{len(chunks)} chunks hold {RELEVANCE_THRESHOLD:.0%} of the question's "
        "content words" if words else "heuristic: the question has no content words to look for",
    }


class HeuristicJudge:
    """The Judge protocol without a model: lexical overlap, citation markers, refusal phrases."""

    heuristic = True
    name = "heuristic"
    version = HEURISTIC_VERSION

    def __init__(self, *, claim_level: bool = False):
        self.claim_level = claim_level
        self._stats = JudgeStats()

    def describe(self) -> dict[str, Any]:
        return {
            "provider": "heuristic",
            "model": HEURISTIC_VERSION,
            "name": self.name,
            "version": self.version,
            "heuristic": True,
            "support_threshold": SUPPORT_THRESHOLD,
            "citation_weight": CITATION_WEIGHT,
            "note": "offline lexical-overlap proxy, not an LLM judge; do not compare with LLM-judged scores",
        }

    def stats(self) -> JudgeStats:
        return self._stats

    async def aclose(self) -> None:
        return None

    async def judge(self, kind: str, item: JudgeItem, *, trial: int = 0) -> JudgeOutcome | JudgeFailure:
        """Judge deterministically; `trial` is ignored (every trial is the same)."""
        if kind in (Rec.GROUNDEDNESS, "claims"):
            verdict = self._groundedness(item, claim_level=kind == "claims" or self.claim_level)
        elif kind == Rec.CORRECTNESS:
            verdict = self._correctness(item)
        elif kind == "answer_quality":
            verdict = self._answer_quality(item)
        elif kind == "abstention":
            r = detect_refusal(item.answer)
            verdict = {"abstained": r["abstained"], "confidence": r["confidence"], "phrase": r["phrase"]}
        elif kind == "conflict":
            verdict = conflict_check(item.answer, item.context)
        elif kind == "context_relevance":
            verdict = context_relevance(item.question, item.context)
        else:
            raise ValueError(f"unknown judge kind {kind!r}")
        return JudgeOutcome(
            kind=kind,
            verdict=verdict,
            method="heuristic",
            judge=self.name,
            model=HEURISTIC_VERSION,
            prompt_version=HEURISTIC_VERSION,
        )

    def _groundedness(self, item: JudgeItem, *, claim_level: bool) -> dict[str, Any]:
        claims = judge_claims(item.answer, item.context)
        score = groundedness_score(claims, claim_level=claim_level)
        supported = [c["claim"] for c in claims if c["supported"]]
        unsupported = [c["claim"] for c in claims if not c["supported"]]
        cited = sum(1 for c in claims if c["cited"])
        if score is None:
            reasoning = "heuristic: the answer has no checkable claims"
        else:
            reasoning = (
                f"heuristic: {len(supported)}/{len(claims)} claims reach {SUPPORT_THRESHOLD:.0%} content-word "
                f"overlap with a context chunk; {cited}/{len(claims)} carry a citation marker"
            )
        return {
            "score": score,
            "reasoning": reasoning,
            "supported_claims": supported,
            "unsupported_claims": unsupported,
            "claims": claims,
        }

    def _answer_quality(self, item: JudgeItem) -> dict[str, Any]:
        """Seed 002's three dimensions on 0-1, lexically: relevance = share of the question's
        content words in the answer; groundedness = share of the answer's claims supported by
        a chunk; completeness = share of expected topics found (a topic is found when
        SUPPORT_THRESHOLD of its content words are in the answer), None without topics.
        The score is the mean of the dimensions that are not None."""
        answer_words = content_words(item.answer)
        relevance = _overlap(content_words(item.question), answer_words)
        claims = judge_claims(item.answer, item.context)
        grounded = sum(1 for c in claims if c["supported"]) / len(claims) if claims else 0.0
        covered = [t for t in item.expected_topics if _overlap(content_words(t), answer_words) >= SUPPORT_THRESHOLD]
        completeness = len(covered) / len(item.expected_topics) if item.expected_topics else None
        dims = [d for d in (relevance, grounded, completeness) if d is not None]
        return {
            "score": sum(dims) / len(dims),
            "relevance": relevance,
            Rec.GROUNDEDNESS: grounded,
            "completeness": completeness,
            "topics_covered": covered,
            "topics_missing": [t for t in item.expected_topics if t not in covered],
            "reasoning": (
                f"heuristic: the answer uses {relevance:.0%} of the question's content words, "
                f"{grounded:.0%} of its claims are supported by the context"
                + (f", {len(covered)}/{len(item.expected_topics)} expected topics found" if item.expected_topics else
                   "; no expected topics, so no completeness")
            ),
        }

    def _correctness(self, item: JudgeItem) -> dict[str, Any]:
        answer_words = content_words(item.answer)
        if item.expected_key_facts:
            covered = [f for f in item.expected_key_facts if _overlap(content_words(f), answer_words) >= SUPPORT_THRESHOLD]
            missing = [f for f in item.expected_key_facts if f not in covered]
            n = len(item.expected_key_facts)
            return {
                "score": 5 * len(covered) / n,
                "reasoning": f"heuristic: {len(covered)}/{n} expected key facts found in the answer",
                "key_facts_covered": covered,
                "key_facts_missing": missing,
                "basis": "key_facts",
            }
        if item.expected_answer and content_words(item.expected_answer):
            r = _overlap(content_words(item.expected_answer), answer_words)
            return {
                "score": 5 * r,
                "reasoning": f"heuristic: the answer holds {r:.0%} of the expected answer's content words",
                "key_facts_covered": [],
                "key_facts_missing": [],
                "basis": "expected_answer",
            }
        # Nothing to check the answer against: unscoreable, never a guess. The question's words
        # and the context's support gave a wrong answer 4.0 of 5 (issue 43). The judge runner
        # does not ask without expected facts; an expected answer of no content words lands here.
        return {
            "score": None,
            "reasoning": "heuristic: no expected key facts and no expected answer, correctness is unscoreable",
            "key_facts_covered": [],
            "key_facts_missing": [],
            "basis": None,
        }
