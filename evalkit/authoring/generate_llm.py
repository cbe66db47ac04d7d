"""Candidate eval cases written by an LLM from the notes, for a person to review (`evalkit generate --model ...`).

The offline generator (evalkit.authoring.generate) only finds questions the notes already spell out.
This one asks an LLM, through the judge machinery (`LLMJudge.complete_structured`: cached,
retried, repaired once, costed), for three kinds of candidates:

- `llm_question`: one call per sampled section. The prompt lists the section (S1, its own
  text cut to 4,000 characters) and up to 4 neighbouring sections of the same note (S2..S5,
  1,200 characters each), each with its file and heading path. The reply names the sections
  that hold the answer by id (`support_section_ids`), never by path.
- `llm_multi_hop`: one call per sampled wikilink pair {A, B} (A links to B or B to A).
  Up to 4 sections of each note are listed; the question must need facts from both, and the
  chosen ids must cover both notes. `required_support_groups` = every [A-support, B-support] pair.
- `llm_unanswerable`: questions near the vault's topics (a seeded sample of up to 40 section
  titles) whose answer the notes do not hold, each with 2-4 key terms; a question is dropped
  when one section's text holds every key term (tokens.terms).

Sections (authoring/sections.py): every heading chain of every markdown note
(anchorcheck.outline_note, so heading paths are the chatbot's), with its own text (heading
line + body, sub-sections and fenced code out). Only sections with at least MIN_BODY_WORDS words of body are sampled; sections
with any body text may be listed beside them as context.

Sample: sections are grouped by top-level folder ("" = vault root), each group and the
folder order shuffled with random.Random(seed), then taken round-robin over the folders.

Drops, each a `filtered_items` record with its reason: `llm_error` (the reply failed twice,
or the provider failed: "<reason>: <detail>"), `invalid_reply` (a reply that validates
but is unusable, e.g. blank facts), `invented_anchor` (an id not in the prompt's list),
`no_support` (no id given), `single_note` (a multi-hop reply whose ids stay in one note),
`answer_in_vault` / `no_key_terms` (unanswerable checks), then generate.filter_candidates'
`no_content_words`, `overlap` and `duplicate`, and `limit`'s seeded sample.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import random
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from evalkit.authoring.generate import (
    DEFAULT_DUPLICATE_RATIO,
    DEFAULT_K,
    DEFAULT_MAX_OVERLAP,
    GENERATED,
    Candidate,
    GenerationResult,
    candidate_id,
    filter_candidates,
    finish_candidates,
)
from evalkit.authoring.sections import (
    LinkPair,
    Section,
    sample_sections,
    vault_sections,
    wikilink_pairs,
)
from evalkit.errors import BadConfig, JudgeConfigError, Problem
from evalkit.reference.tokens import terms

__all__ = [
    "GEN_PROMPT_VERSION",
    "LLM_PATTERNS",
    "GeneratedMultiHop",
    "GeneratedQuestion",
    "GeneratedUnanswerable",
    "answer_in_vault",
    "generate_with_llm",
]

GEN_PROMPT_VERSION = "gen-v1"
LLM_PATTERNS = ("llm_question", "llm_multi_hop", "llm_unanswerable")
MIN_BODY_WORDS = 25
SECTION_CHARS = 4000
OTHER_CHARS = 1200
MAX_OTHERS = 4
PAIR_SECTIONS = 4
TOPIC_TITLES = 40
PER_CALL = 5
MAX_TOKENS = 1500
# The repo's eval sets file answerable:false cases under "adversarial" (a built-in
# category); "unanswerable" is not one, so the eval-set loader would reject it.
UNANSWERABLE_CATEGORY = "adversarial"



# --------------------------------------------------------------------------- output models


def _clean_list(v: Any) -> Any:
    if isinstance(v, list):
        return [x.strip() for x in v if isinstance(x, str) and x.strip()] if all(isinstance(x, str) for x in v) else v
    return v


class _Reply(BaseModel):
    """What every reply model shares: unknown keys ignored, the question and the lists of
    short strings trimmed (each validator applies to the models that have the field)."""

    model_config = ConfigDict(extra="ignore")

    _strip = field_validator("question", mode="before", check_fields=False)(lambda v: v.strip() if isinstance(v, str) else v)
    _lists = field_validator("expected_key_facts", "support_section_ids", "key_terms", mode="before", check_fields=False)(
        _clean_list
    )


class GeneratedQuestion(_Reply):
    """One question written from a section (and its neighbours)."""

    question: str = Field(min_length=1, description="The question, in the words of a person who uses these notes; not copied from the sections.")
    expected_key_facts: list[str] = Field(
        min_length=1, max_length=6, description="1 to 6 short facts a correct answer states; each is stated in the listed sections."
    )
    difficulty: Literal["easy", "medium", "hard"] = Field(description="How hard the question is to answer from the notes.")
    category: Literal["factual", "reasoning"] = Field(description="factual: a look-up; reasoning: needs combining or explaining.")
    support_section_ids: list[str] = Field(
        description='Ids of the listed sections that hold the answer, e.g. ["S1"]; only ids from the list.'
    )


class GeneratedMultiHop(_Reply):
    """One question that needs facts from two linked notes."""

    question: str = Field(min_length=1, description="The question; answering it needs facts from BOTH notes.")
    expected_key_facts: list[str] = Field(
        min_length=1, max_length=6, description="1 to 6 short facts a correct answer states; each is stated in the listed sections."
    )
    difficulty: Literal["easy", "medium", "hard"] = Field(description="How hard the question is to answer from the notes.")
    support_section_ids: list[str] = Field(
        description='Ids of the listed sections that hold the answer, from both notes, e.g. ["S1", "S5"]; only ids from the list.'
    )


class UnanswerableQuestion(_Reply):
    question: str = Field(min_length=1, description="A question the notes do not answer.")
    key_terms: list[str] = Field(
        min_length=1, max_length=6, description="2 to 4 words or short phrases an answer would have to contain."
    )


class GeneratedUnanswerable(_Reply):
    """Questions near the vault's topics that the notes cannot answer."""

    questions: list[UnanswerableQuestion] = Field(description="The questions, each with its key terms.")


# --------------------------------------------------------------------------- prompts

SYSTEM = (
    "You write test questions for a chatbot that answers from a person's markdown notes. "
    "Follow the rules exactly and reply with one JSON object only."
)

QUESTION_TEMPLATE = """\
Sections of the notes, each with its id, file and heading path:

{sections}

Write ONE question that a person who uses these notes would really ask, answered by section S1 \
(the other sections may add to the answer).
Rules:
- Do not copy the section's wording: paraphrase, and do not reuse the words of its headings.
- The question must be answerable from the listed sections alone.
- expected_key_facts: 1 to 6 short facts a correct answer states, each stated in the sections.
- difficulty: "easy", "medium" or "hard".
- category: "factual" (a look-up) or "reasoning" (needs combining or explaining).
- support_section_ids: the ids of the sections that hold the answer, ONLY ids from the list above \
(such as "S1"); never a file name or heading.
Reply with a JSON object with the keys question, expected_key_facts, difficulty, category, support_section_ids.
"""

MULTI_HOP_TEMPLATE = """\
Sections of two linked notes, each with its id, file and heading path.

Note A: {note_a}
{sections_a}

Note B: {note_b}
{sections_b}

Write ONE question that a person who uses these notes would really ask and whose answer needs facts \
from BOTH notes (at least one section of note A and one of note B).
Rules:
- Do not copy the sections' wording: paraphrase, and do not reuse the words of their headings.
- The question must be answerable from the listed sections alone.
- expected_key_facts: 1 to 6 short facts a correct answer states, each stated in the sections.
- difficulty: "easy", "medium" or "hard".
- support_section_ids: the ids of the sections that hold the answer, from both notes, ONLY ids from \
the list above (such as "S1"); never a file name or heading.
Reply with a JSON object with the keys question, expected_key_facts, difficulty, support_section_ids.
"""

UNANSWERABLE_TEMPLATE = """\
A person's notes cover these topics (file > heading path):
{topics}

Write {count} questions that someone using these notes might plausibly ask, on or near these topics, \
but whose answer the notes do NOT contain.
For each, give key_terms: 2 to 4 words or short phrases that an answer would have to contain.
{avoid}Reply with a JSON object {{"questions": [{{"question": ..., "key_terms": [...]}}, ...]}}.
"""

PROMPT_HASH = hashlib.sha256(
    json.dumps([GEN_PROMPT_VERSION, SYSTEM, QUESTION_TEMPLATE, MULTI_HOP_TEMPLATE, UNANSWERABLE_TEMPLATE]).encode()
).hexdigest()


# --------------------------------------------------------------------------- unanswerable check


def answer_in_vault(key_terms: Sequence[str], section_terms: Sequence[set[str]]) -> bool | None:
    """True when one section's terms hold every term of every key term; None when the key
    terms have no content word (nothing to check)."""
    needed = {t for kt in key_terms for t in terms(kt)}
    if not needed:
        return None
    return any(needed <= st for st in section_terms)


# --------------------------------------------------------------------------- prompt rendering


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit].rstrip() + " [...]"


def _render_sections(listed: Sequence[tuple[str, Section, int]]) -> str:
    parts = []
    for sid, sec, limit in listed:
        parts.append(f"[{sid}] file: {sec.rel_path}\nheading path: {sec.heading_path or '(top of the note)'}\n"
                     f"<<<\n{_cut(sec.text, limit)}\n>>>")
    return "\n\n".join(parts)


def _neighbours(note: Sequence[Section], chosen: Section, limit: int) -> list[Section]:
    others = [(i, s) for i, s in enumerate(note) if s != chosen]
    at = next((i for i, s in enumerate(note) if s == chosen), 0)
    near = sorted(others, key=lambda p: (abs(p[0] - at), p[0]))[:limit]
    return [s for _, s in sorted(near, key=lambda p: p[0])]


def _pair_sections(note: Sequence[Section], first: Sequence[Section]) -> list[Section]:
    chosen = list(dict.fromkeys(first))[:PAIR_SECTIONS]
    for s in note:
        if len(chosen) >= PAIR_SECTIONS:
            break
        if s not in chosen:
            chosen.append(s)
    return chosen


def _heading_match(note: Sequence[Section], heading: str | None) -> list[Section]:
    if not heading:
        return []
    want = heading.casefold().strip()
    return [s for s in note if s.chain and s.chain[-1].lstrip("#").strip().casefold() == want][:1]


# --------------------------------------------------------------------------- the run


@dataclass
class _Ctx:
    judge: Any
    settings: Any
    notes_label: str
    dropped: list[dict[str, Any]] = field(default_factory=list)
    raw_counts: Counter = field(default_factory=Counter)

    def drop(self, pattern: str, reason: str, detail: str, *, source: str, question: str | None = None, cid: str | None = None) -> None:
        self.dropped.append({"id": cid, "question": question, "pattern": pattern, "reason": reason, "detail": detail, "source": source})


def _prompt(kind: str, schema_name: str, text: str, temperature: float) -> Any:
    from evalkit.judges.base import RenderedPrompt

    return RenderedPrompt(
        kind=kind,
        prompt_version=GEN_PROMPT_VERSION,
        system=SYSTEM,
        messages=[{"role": "user", "content": text}],
        schema_name=schema_name,
        temperature=temperature,
        max_tokens=MAX_TOKENS,
        prompt_hash=PROMPT_HASH,
    )


async def _ask(ctx: _Ctx, kind: str, schema_name: str, text: str, output: type[BaseModel]) -> Any:
    from evalkit.judges.cache import cache_key

    judge = ctx.judge
    prompt = _prompt(kind, schema_name, text, judge.temperature)
    key = cache_key(
        kind=kind, question="", answer="", context_sha256=hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest(),
        provider=judge.backend.provider, model=judge.backend.model, prompt_version=GEN_PROMPT_VERSION,
        temperature=judge.temperature,
    )
    return await judge.complete_structured(kind, prompt, output, key)


def _notes(ctx: _Ctx, where: str) -> str:
    return f"generated by {ctx.notes_label} (prompt {GEN_PROMPT_VERSION}) from {where}"


def _case(ctx: _Ctx, question: str, supports: Sequence[Section], *, category: str, difficulty: str | None,
          facts: Sequence[str], answerable: bool = True, where: str = "", extra_notes: str = "") -> dict[str, Any]:
    first = supports[0] if supports else None
    question = " ".join(question.split())
    case: dict[str, Any] = {
        "id": candidate_id(first.rel_path if first else "", first.heading_path if first else "", question),
        "question": question,
        "answerable": answerable,
        "expected_key_facts": [" ".join(f.split()) for f in facts],
        "gold_supports": [s.anchor() for s in supports],
        "category": category,
        "tags": [GENERATED, "llm"],
        "notes": _notes(ctx, where or (first.title if first else "the vault's topics")) + extra_notes,
        "label_source": GENERATED,
    }
    if difficulty:
        case["difficulty"] = difficulty
    return case


def _failure_detail(out: Any) -> str:
    return f"{out.reason}: {out.detail}"


def _resolve_ids(ids: Sequence[str], table: Mapping[str, Section]) -> tuple[list[str], str | None]:
    """The ids in order without repeats, or the first id not in `table`."""
    norm = []
    for raw in ids:
        sid = raw.strip().strip("[]").strip().upper()
        if sid not in table:
            return [], raw
        if sid not in norm:
            norm.append(sid)
    return norm, None


def _checked(
    ctx: _Ctx, pattern: str, v: Mapping[str, Any], table: Mapping[str, Section], source: str, *, need_support: bool = True
) -> tuple[str, list[str], list[str]] | None:
    """(question, key facts, support ids) of a question reply, or None after recording why
    it is dropped: `invalid_reply`, `invented_anchor`, or (with need_support) `no_support`."""
    question = (v.get("question") or "").strip()
    facts = [f for f in v.get("expected_key_facts") or [] if f.strip()]
    if not question or not 1 <= len(facts) <= 6:
        ctx.drop(pattern, "invalid_reply", "a blank question or not 1-6 key facts", source=source, question=question or None)
        return None
    ids, bad = _resolve_ids(v.get("support_section_ids") or [], table)
    if bad is not None:
        ctx.drop(pattern, "invented_anchor", f"support section id {bad!r} is not in the prompt's list ({', '.join(table)})",
                 source=source, question=question)
        return None
    if need_support and not ids:
        ctx.drop(pattern, "no_support", "the reply names no support section", source=source, question=question)
        return None
    return question, facts, ids


async def _single(ctx: _Ctx, sec: Section, note: Sequence[Section]) -> Candidate | None:
    from evalkit.judges.base import JudgeFailure

    pattern = "llm_question"
    listed = [("S1", sec, SECTION_CHARS)] + [(f"S{i}", s, OTHER_CHARS) for i, s in enumerate(_neighbours(note, sec, MAX_OTHERS), start=2)]
    table = {sid: s for sid, s, _ in listed}
    text = QUESTION_TEMPLATE.format(sections=_render_sections(listed))
    out = await _ask(ctx, "generate_question", "generated_question", text, GeneratedQuestion)
    ctx.raw_counts[pattern] += 1
    if isinstance(out, JudgeFailure):
        ctx.drop(pattern, "llm_error", _failure_detail(out), source=sec.title)
        return None
    v = out.verdict
    checked = _checked(ctx, pattern, v, table, sec.title)
    if checked is None:
        return None
    question, facts, ids = checked
    supports = [table[i] for i in ids]
    case = _case(ctx, question, supports, category=v.get("category") or "factual", difficulty=v.get("difficulty"),
                 facts=facts, where=sec.title)
    evidence = "\n".join(s.text for s in supports)
    return Candidate(case, pattern, evidence, sec.first_line)


async def _multi_hop(ctx: _Ctx, pair: LinkPair, sections: Mapping[str, Sequence[Section]]) -> Candidate | None:
    from evalkit.judges.base import JudgeFailure

    pattern = "llm_multi_hop"
    note_a, note_b = sections[pair.a], sections[pair.b]
    a_secs = _pair_sections(note_a, [s for s in note_a if s.chain == pair.a_chain])
    b_secs = _pair_sections(note_b, _heading_match(note_b, pair.b_heading))
    listed_a = [(f"S{i}", s, OTHER_CHARS) for i, s in enumerate(a_secs, start=1)]
    listed_b = [(f"S{i}", s, OTHER_CHARS) for i, s in enumerate(b_secs, start=len(a_secs) + 1)]
    table = {sid: s for sid, s, _ in listed_a + listed_b}
    in_a = {sid for sid, _, _ in listed_a}
    text = MULTI_HOP_TEMPLATE.format(note_a=pair.a, sections_a=_render_sections(listed_a),
                                     note_b=pair.b, sections_b=_render_sections(listed_b))
    source = f"{pair.a} + {pair.b}"
    out = await _ask(ctx, "generate_multi_hop", "generated_multi_hop", text, GeneratedMultiHop)
    ctx.raw_counts[pattern] += 1
    if isinstance(out, JudgeFailure):
        ctx.drop(pattern, "llm_error", _failure_detail(out), source=source)
        return None
    v = out.verdict
    checked = _checked(ctx, pattern, v, table, source, need_support=False)
    if checked is None:
        return None
    question, facts, ids = checked
    a_ids = [i for i in ids if i in in_a]
    b_ids = [i for i in ids if i not in in_a]
    if not a_ids or not b_ids:
        ctx.drop(pattern, "single_note", f"support sections {', '.join(ids) or '(none)'} do not cover both notes",
                 source=source, question=question)
        return None
    supports = [table[i] for i in a_ids + b_ids]
    case = _case(ctx, question, supports, category="multi_hop", difficulty=v.get("difficulty"), facts=facts,
                 where=f"{table[a_ids[0]].title} and {table[b_ids[0]].title}")
    case["required_support_groups"] = [[i, len(a_ids) + j] for i in range(len(a_ids)) for j in range(len(b_ids))]
    evidence = "\n".join(s.text for s in supports)
    return Candidate(case, pattern, evidence, table[a_ids[0]].first_line)


async def _unanswerable(ctx: _Ctx, wanted: int, topics: Sequence[Section], section_terms: Sequence[set[str]]) -> list[Candidate]:
    from evalkit.judges.base import JudgeFailure

    pattern = "llm_unanswerable"
    kept: list[Candidate] = []
    asked: list[str] = []
    calls = 0
    max_calls = math.ceil(wanted / PER_CALL) + 1
    topic_lines = "\n".join(f"- {s.title}" for s in topics)
    while len(kept) < wanted and calls < max_calls:
        calls += 1
        count = min(PER_CALL, wanted - len(kept))
        avoid = ""
        if asked:
            avoid = "Do not repeat or rephrase these questions:\n" + "\n".join(f"- {q}" for q in asked) + "\n"
        text = UNANSWERABLE_TEMPLATE.format(topics=topic_lines, count=count, avoid=avoid)
        out = await _ask(ctx, "generate_unanswerable", "generated_unanswerable", text, GeneratedUnanswerable)
        if isinstance(out, JudgeFailure):
            ctx.raw_counts[pattern] += 1
            ctx.drop(pattern, "llm_error", _failure_detail(out), source=f"unanswerable call {calls}")
            continue
        for item in out.verdict.get("questions") or []:
            if len(kept) >= wanted:
                break  # more than asked for: the rest is not read
            ctx.raw_counts[pattern] += 1
            question = " ".join((item.get("question") or "").split())
            key_terms = [k for k in item.get("key_terms") or [] if k.strip()]
            if not question:
                ctx.drop(pattern, "invalid_reply", "a blank question", source="the vault's topics")
                continue
            asked.append(question)
            found = answer_in_vault(key_terms, section_terms)
            if found is None:
                ctx.drop(pattern, "no_key_terms", f"key terms {key_terms} have no content word", source="the vault's topics",
                         question=question)
                continue
            if found:
                ctx.drop(pattern, "answer_in_vault", f"one section holds every key term: {'; '.join(key_terms)}",
                         source="the vault's topics", question=question)
                continue
            case = _case(ctx, question, [], category=UNANSWERABLE_CATEGORY, difficulty=None, facts=[], answerable=False,
                         where="the vault's topics", extra_notes=f"; key terms: {'; '.join(key_terms)}")
            case["tags"].append("unanswerable")
            kept.append(Candidate(case, pattern, "", 0))
    return kept


@dataclass
class LLMGenerationResult(GenerationResult):
    """GenerationResult plus the run's config (what `<stem>.config.json` holds)."""

    config: dict[str, Any] = field(default_factory=dict)


def generate_with_llm(
    vault: Path | str,
    *,
    settings: Any,
    n: int = 20,
    multi_hop: int | None = None,
    unanswerable: int | None = None,
    seed: int = 0,
    limit: int | None = None,
    max_overlap: float = DEFAULT_MAX_OVERLAP,
    duplicate_ratio: float = DEFAULT_DUPLICATE_RATIO,
    k: int = DEFAULT_K,
    check_retrieval: bool = True,
    mix: Mapping[str, float] | None = None,
) -> LLMGenerationResult:
    """Candidates written by the LLM `settings` describe (see module docstring).

    Args:
        vault: the notes folder.
        settings: a judges.settings.JudgeSettings naming the provider/model (its `seed` is set to `seed`).
        n: sections to write single-section questions from.
        multi_hop: wikilink pairs to write multi-hop questions from (default round(0.2 n)).
        unanswerable: unanswerable questions to gather (default round(0.1 n)).
        seed: seeds the section sample, the pair sample, the topic sample, `limit` and the provider.
        limit, max_overlap, duplicate_ratio, k, check_retrieval, mix: as generate_candidates.

    Raises:
        InputError: no vault; BadConfig for a bad argument or settings without an LLM;
        JudgeConfigError: bad key, unpinned or unknown model (generation stops).
    """
    from evalkit.judges.settings import redact_base_url

    _check_arguments(n=n, multi_hop=multi_hop, unanswerable=unanswerable, limit=limit, max_overlap=max_overlap)
    multi_hop = round(0.2 * n) if multi_hop is None else multi_hop
    unanswerable = round(0.1 * n) if unanswerable is None else unanswerable
    plan = _sample(vault, n=n, multi_hop=multi_hop, seed=seed)
    judge = _build_llm(settings, seed)
    base_url = redact_base_url(getattr(judge.backend, "base_url", None))
    label = f"{judge.backend.provider}:{judge.backend.model}"
    ctx = _Ctx(judge, settings, label)
    try:
        raw = asyncio.run(_ask_all(ctx, plan, unanswerable))
    except JudgeConfigError as e:
        raise _with_generate_flags(e) from None

    kept, filtered = filter_candidates(raw, max_overlap=max_overlap, duplicate_ratio=duplicate_ratio)
    dropped = ctx.dropped + filtered
    config = {
        "seed": seed, "limit": limit, "max_overlap": max_overlap, "duplicate_ratio": duplicate_ratio,
        "k": k, "check_retrieval": check_retrieval, "n": n, "multi_hop": multi_hop, "unanswerable": unanswerable,
    }
    by_pattern = {p: ctx.raw_counts.get(p, 0) for p in LLM_PATTERNS}
    kept, report = finish_candidates(kept, dropped, vault=vault, config=config, generated_by_pattern=by_pattern, mix=mix)
    report.update(
        sections={"total": len(plan.everything), "eligible": len(plan.eligible), "sampled": len(plan.sample)},
        wikilink_pairs={"total": plan.n_pairs, "sampled": len(plan.pairs)},
        llm=_llm_report(judge, base_url),
    )
    try:
        from evalkit import __version__ as version
    except ImportError:  # pragma: no cover
        version = None
    config = {
        "vault": str(vault),
        "seed": seed,
        "n": n,
        "multi_hop": multi_hop,
        "unanswerable": unanswerable,
        "limit": limit,
        "sample": [s.anchor() for s in plan.sample],
        "pairs": [p.to_json() for p in plan.pairs],
        "provider": judge.backend.provider,
        "model": judge.backend.model,
        "base_url": base_url,
        "prompt_version": GEN_PROMPT_VERSION,
        "prompt_hash": PROMPT_HASH,
        "temperature": judge.temperature,
        "max_overlap": max_overlap,
        "duplicate_ratio": duplicate_ratio,
        "k": k,
        "check_retrieval": check_retrieval,
        "evalkit_version": version,
    }
    return LLMGenerationResult(kept, report, config)


def _check_arguments(
    *, n: int, multi_hop: int | None, unanswerable: int | None, limit: int | None, max_overlap: float
) -> None:
    """BadConfig, naming the flag, for a count below 0, a limit below 1 or an overlap outside [0, 1]."""
    if not 0 <= max_overlap <= 1:
        raise BadConfig(Problem(f"expected a number from 0 to 1, got {max_overlap}", field="--max-overlap"))
    for name, value in (("--n", n), ("--multi-hop", multi_hop), ("--unanswerable", unanswerable)):
        if value is not None and value < 0:
            raise BadConfig(Problem(f"expected 0 or more, got {value}", field=name))
    if limit is not None and limit < 1:
        raise BadConfig(Problem(f"expected a positive number, got {limit}", field="--limit"))


@dataclass(frozen=True)
class _Plan:
    """What the LLM is shown: the vault's sections and the seeded samples drawn from them."""

    sections: dict[str, list[Section]]  # by note
    everything: list[Section]
    eligible: list[Section]  # at least MIN_BODY_WORDS words of body
    sample: list[Section]  # one single-section question each
    n_pairs: int  # wikilink pairs in the vault
    pairs: list[LinkPair]  # one multi-hop question each
    topics: list[Section]  # the titles unanswerable questions are written near


def _sample(vault: Path | str, *, n: int, multi_hop: int, seed: int) -> _Plan:
    """The vault's sections, and the seeded samples of sections, wikilink pairs and topics."""
    sections = vault_sections(vault)
    everything = [s for note in sections.values() for s in note]
    eligible = [s for s in everything if s.body_words >= MIN_BODY_WORDS]
    sample = sample_sections(eligible, n, seed)
    pairs_all = wikilink_pairs(sections)
    pairs = random.Random(f"{seed}:pairs").sample(pairs_all, min(multi_hop, len(pairs_all)))
    topics = random.Random(f"{seed}:topics").sample(eligible or everything, min(TOPIC_TITLES, len(eligible or everything)))
    return _Plan(sections, everything, eligible, sample, len(pairs_all), pairs, topics)


def _build_llm(settings: Any, seed: int) -> Any:
    """The LLMJudge that writes the candidates, seeded; BadConfig for settings naming no LLM,
    and the judge's JudgeConfigError naming `evalkit generate`'s flags."""
    from dataclasses import replace

    from evalkit.judges.settings import build_judge

    try:
        judge = build_judge(replace(settings, seed=seed))
    except JudgeConfigError as e:
        raise _with_generate_flags(e) from None
    if getattr(judge, "heuristic", False):
        raise BadConfig(Problem("generation with an LLM needs --model/--provider/--base-url", field="--model"))
    return judge


async def _ask_all(ctx: _Ctx, plan: _Plan, unanswerable: int) -> list[Candidate]:
    """Every call at once: one per sampled section and pair, and the unanswerable questions.
    The judge is closed when they are done; the first exception is raised after that."""
    judge = ctx.judge
    try:
        jobs = [_single(ctx, s, plan.sections[s.rel_path]) for s in plan.sample]
        jobs += [_multi_hop(ctx, p, plan.sections) for p in plan.pairs]
        section_terms = [set(terms(s.full_text or s.text)) for s in plan.everything]
        jobs.append(_unanswerable(ctx, unanswerable, plan.topics, section_terms) if unanswerable else _nothing())
        results = await asyncio.gather(*jobs, return_exceptions=True)
    finally:
        await judge.aclose()
    for r in results:
        if isinstance(r, BaseException):
            raise r
    out: list[Candidate] = []
    for r in results:
        if isinstance(r, list):
            out.extend(r)
        elif r is not None:
            out.append(r)
    return out


def _llm_report(judge: Any, base_url: str | None) -> dict[str, Any]:
    """The report's `llm`: which model wrote the candidates, with what prompt, at what cost."""
    stats = judge.stats()
    return {
        "provider": judge.backend.provider,
        "model": judge.backend.model,
        "base_url": base_url,
        "prompt_version": GEN_PROMPT_VERSION,
        "prompt_hash": PROMPT_HASH,
        "temperature": judge.temperature,
        "calls": stats.calls,
        "cache_hits": stats.cache_hits,
        "prompt_tokens": stats.prompt_tokens,
        "completion_tokens": stats.completion_tokens,
        "cost_usd": round(stats.cost_usd, 8),
        "price_known": judge.price is not None,
        "repairs": stats.repairs,
        "failures": dict(stats.failures),
    }


async def _nothing() -> None:
    return None


_FLAGS = (("--judge-model", "--model"), ("--judge-provider", "--provider"), ("--judge-base-url", "--base-url"))


def _with_generate_flags(e: JudgeConfigError) -> JudgeConfigError:
    """The judge's error, naming `evalkit generate`'s flags instead of the judge's."""

    def swap(text: str | None) -> str | None:
        for old, new in _FLAGS:
            text = text.replace(old, new) if text else text
        return text

    return JudgeConfigError([Problem(swap(p.message) or "", p.path, p.line, swap(p.field)) for p in e.problems])
