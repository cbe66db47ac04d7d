"""`evalkit check-target`: ask a chatbot a handful of questions and hold its answers to the
contract (docs/api-contract.md), rule by rule, before any eval set is run against it.

Each row of the report is one rule with "pass", "FAIL" or "warn" and, when it is not a
pass, an example from a response and the fix. The rules are the ones a run checks too
(`evalkit.targets.contract`), plus what only a conformance check can ask for: every
question answered, retrieved chunks sent at all, `abstained` sent, the optional index
stats and their `files` list, and `debug.versions`. A FAIL means a run against this
target measures something other than retrieval quality; a warn means it measures less
than it could.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalkit.errors import TargetError
from evalkit.schema import AskRequest
from evalkit.targets.contract import RULES, ContractCheck, chunks_of

__all__ = ["DEFAULT_QUESTIONS", "ConformanceReport", "ConformanceRow", "check_conformance", "check_target"]

# When no eval set is given: questions any notes collection can be asked.
DEFAULT_QUESTIONS = (
    "What is in these notes?",
    "How do I get started?",
    "What are the most important steps?",
    "Which settings can be changed?",
    "What is the capital of the moon?",
)


@dataclass
class ConformanceRow:
    rule: str  # a contract.RULES id, or one of this module's own
    title: str
    status: str  # "pass" | "FAIL" | "warn"
    detail: str = ""
    fix: str = ""

    def to_json(self) -> dict[str, str]:
        return {"rule": self.rule, "title": self.title, "status": self.status, "detail": self.detail, "fix": self.fix}


@dataclass
class ConformanceReport:
    target: dict[str, Any]
    questions: int
    rows: list[ConformanceRow] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        """No FAIL row (warnings pass)."""
        return all(r.status != "FAIL" for r in self.rows)

    def to_json(self) -> dict[str, Any]:
        return {"target": self.target, "questions": self.questions, "passed": self.passed,
                "rows": [r.to_json() for r in self.rows]}


async def check_conformance(target: Any, questions: Sequence[str], *, k: int = 5) -> ConformanceReport:
    """Ask `target` each question once (debug on) and judge the answers against the contract.

    Args:
        target: a built Target (evalkit.targets.build_target); it is not closed here.
        questions: what to ask (an eval set's first questions, or DEFAULT_QUESTIONS).
        k: the chunks asked for.
    """
    report = ConformanceReport(target=target.describe(), questions=len(questions))
    rows = report.rows
    errors: list[str] = []
    check = ContractCheck()
    answered = with_chunks = sent_abstained = sent_versions = 0
    too_many: str | None = None
    for q in questions:
        try:
            result = await target.ask(AskRequest(question=q, k=k, debug=True), case_id=None)
        except TargetError as e:
            errors.append(f"{q!r}: {e.kind}{f' {e.status}' if e.status else ''}: {e.detail}")
            continue
        answered += 1
        chunks = chunks_of(result.response)
        with_chunks += bool(chunks)
        if len(chunks) > k and too_many is None:
            too_many = f"{len(chunks)} chunks for k = {k} ({q!r})"
        check.add(chunks, q)
        missing = set(result.missing_fields)
        sent_abstained += "abstained" not in missing
        sent_versions += bool(getattr(result.response.debug, "versions", None)) if result.response.debug else 0

    rows.append(ConformanceRow(
        "answers", "every question answered in the contract's JSON",
        "FAIL" if errors else "pass", f"{len(errors)} of {len(questions)} failed, e.g. {errors[0]}" if errors else
        f"{answered} of {len(questions)}",
        "see the error: an HTTP status, a timeout or a body that is not the contract's JSON" if errors else "",
    ))
    if not answered:
        return report
    rows.append(ConformanceRow(
        "retrieved_chunks", "debug.retrieved_chunks sent",
        "pass" if with_chunks == answered else "FAIL" if not with_chunks else "warn",
        f"{with_chunks} of {answered} answers carry retrieved chunks",
        "" if with_chunks == answered else "send debug.retrieved_chunks when the request has debug=true: without "
        "them every retrieval metric is 0",
    ))
    rows.append(ConformanceRow(
        "k", "at most k chunks", "warn" if too_many else "pass", too_many or f"k = {k}",
        "return the top k: the metrics cut at K, and more chunks cost judge tokens" if too_many else "",
    ))
    broken = {f.rule.id: f for f in check.findings()}
    for rule in RULES.values():
        f = broken.get(rule.id)
        if f is None:
            rows.append(ConformanceRow(rule.id, rule.requirement, "pass", "no answer broke it"))
        else:
            rows.append(ConformanceRow(rule.id, rule.requirement, "FAIL" if rule.severity == "error" else "warn",
                                       f"{f.n} of {f.of} answers, e.g. {f.example}", rule.fix))
    rows.append(ConformanceRow(
        "abstained", "abstained sent (recommended)", "pass" if sent_abstained == answered else "warn",
        f"{sent_abstained} of {answered} answers",
        "" if sent_abstained == answered else "send \"abstained\": true/false; without it abstention is guessed "
        "from the answer text",
    ))
    rows.append(ConformanceRow(
        "versions", "debug.versions sent (recommended)", "pass" if sent_versions == answered else "warn",
        f"{sent_versions} of {answered} answers",
        "" if sent_versions == answered else "send debug.versions (retriever, chunker, models) so two runs can be told "
        "apart; without them evalkit records the run's flags",
    ))
    rows.append(await _conversation_row(target, questions[0], k))
    stats = await target.index_stats()
    files = getattr(stats, "files", None) if stats is not None else None
    rows.append(ConformanceRow(
        "index_stats", "index stats with their files (optional)",
        "pass" if isinstance(files, list) else "warn",
        "not served" if stats is None else f"{len(files)} files listed" if isinstance(files, list) else
        "served, without a files list",
        "" if isinstance(files, list) else "serve GET /api/v1/index/stats with a \"files\" list of rel_paths: "
        "run_eval then checks every gold label's note against it before the first case",
    ))
    return report


FOLLOW_UP = "Can you say more about that?"


async def _conversation_row(target: Any, first: str, k: int) -> ConformanceRow:
    """A conversation's second turn, as a run of an eval set with `turns` sends it (DESIGN.md
    §10): the first question and its answer as `history`, and a `conversation_id`. A target
    that refuses the two fields answers single questions still, so a refusal is a warning."""
    title = "a conversation's turn answered (history, conversation_id; optional)"
    try:
        answer = (await target.ask(AskRequest(question=first, k=k, debug=True), case_id=None)).response.answer
        history = [{"role": "user", "content": first}, {"role": "assistant", "content": answer or ""}]
        await target.ask(AskRequest(question=FOLLOW_UP, k=k, debug=True, history=history, conversation_id="evalkit-check"),
                         case_id=None)
    except TargetError as e:
        return ConformanceRow(
            "conversation", title, "warn", f"{FOLLOW_UP!r} after {first!r}: {e.kind}{f' {e.status}' if e.status else ''}: "
            f"{e.detail}", "accept `history` and `conversation_id` in the request (ignore them if you do not use them), "
            "or run eval sets with conversations using --history none")
    return ConformanceRow("conversation", title, "pass", f"{FOLLOW_UP!r} answered with the first turn as history")


def check_target(
    *,
    api_url: str | None = None,
    target: str | None = None,
    vault: str | Path | None = None,
    vault_id: str | None = None,
    questions: Sequence[str] | None = None,
    k: int = 5,
    timeout: float = 30.0,
    params: dict[str, Any] | None = None,
) -> ConformanceReport:
    """`check_conformance` on the target run_eval's flags name (--api-url, --target, or the
    reference chatbot over --vault), built with no retries so a broken one fails fast."""
    import asyncio

    from evalkit.targets import build_target

    async def go() -> ConformanceReport:
        built = build_target(
            target=target, api_url=api_url, vault=Path(vault or "sample_vault"), timeout=timeout, retries=0,
            rps=None, params=dict(params or {}), vault_id=vault_id,
        )
        try:
            return await check_conformance(built, list(questions or DEFAULT_QUESTIONS), k=k)
        finally:
            await built.aclose()

    return asyncio.run(go())
