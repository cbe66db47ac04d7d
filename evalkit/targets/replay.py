"""ReplayTarget: score responses logged earlier (`--target replay:path.jsonl`) without a chatbot."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from evalkit.errors import InputError, Problem, TargetError
from evalkit.jsonio import loads
from evalkit.schema import AskRequest, AskResponse, IndexingCoverage
from evalkit.store.runlog import Rec
from evalkit.targets.base import AskResult, field_path, parse_ask_response

# Logs are often flat: these debug sections may sit at the top level of a line.
_DEBUG_SECTIONS = ("retrieved_chunks", "folder_selection", "timings_ms", "versions")
_KEYS = ("id", "question")
# The retriever version a run writes is the target's own + the run's flags (records.versions_tuple);
# a replay gives back the target's own part, so the replay's run adds its flags once.
_RUN_FLAGS = re.compile(r"(?:^|\+)k\d+\+rerank_\d+_\d+\+folder_[a-z_]+$")
# `latency` keys of a record that are not a target's phase timings.
_NOT_PHASES = frozenset({"total_ms", "judge_ms"})


def normalize_question(question: str) -> str:
    """Collapse runs of whitespace and trim; case is kept (matching is exact otherwise)."""
    return " ".join(question.split())


class ReplayTarget:
    """Answers each case from a JSONL log of earlier responses.

    One JSON object per line: `id` and/or `question`, plus the response fields of the
    contract (`answer`, `references`, `abstained`, `debug` ...), either at the top level
    or under a `response` key. Debug sections (`retrieved_chunks`, `folder_selection`,
    `timings_ms`, `versions`) may also sit at the top level. An optional numeric
    `latency_ms` is reported as the case's elapsed time.

    An evalkit results.jsonl (a run folder's records) is a log too: a record's answer,
    references, chunks, folder selection, phase timings, versions, the target's own
    abstention (`abstention` with method "target"), its missing fields, its error and its
    latency are given back as the target gave them, so a replayed run scores as the run did
    (chunk text and a judged answer as stored: cut unless the run had --store-full-text).
    Records of trials after the first are not matched.

    A case is matched by id first, then by its exact question (whitespace-normalised).
    The whole file is checked when the target is built, and every problem is reported
    at once with file:line.

    Args:
        path: the JSONL log.

    Raises:
        InputError: missing file, or lines that are not JSON objects, have neither id nor
            question, duplicate an id, or fail the response contract.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.name = f"replay:{self.path}"
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            raise InputError(Problem("replay log not found", path=str(self.path), field="--target")) from None
        except OSError as e:
            raise InputError(Problem(f"cannot read replay log: {e.strerror}", path=str(self.path))) from None
        self.sha256 = hashlib.sha256(data).hexdigest()
        self._by_id: dict[str, tuple[int, dict[str, Any] | None, float | None, dict[str, Any] | None]] = {}
        self._by_question: dict[str, list[tuple[int, dict[str, Any] | None, float | None, dict[str, Any] | None]]] = {}
        self._coverage: dict[str, Any] | None = None
        problems = self._load(data)
        if not problems and not self._by_id and not self._by_question:
            problems.append(Problem("replay log has no responses", path=str(self.path)))
        if problems:
            raise InputError(problems)

    def _load(self, data: bytes) -> list[Problem]:
        where = str(self.path)
        problems: list[Problem] = []
        # Lines end at b"\n", as jsonio counts them; a first line's byte order mark is skipped.
        for lineno, line in enumerate(data.removeprefix(b"\xef\xbb\xbf").split(b"\n"), start=1):
            if not line.strip():
                continue
            try:
                obj = loads(line, path=where, line=lineno)  # not UTF-8, not JSON, too deep: said where
            except InputError as e:
                problems.extend(e.problems)
                continue
            if not isinstance(obj, dict):
                got = "an array" if isinstance(obj, list) else type(obj).__name__
                problems.append(Problem(f"expected a JSON object, got {got}", path=where, line=lineno))
                continue
            record = _is_record(obj)
            if record:
                if obj.get(Rec.TRIAL) not in (None, 1):
                    continue
                obj = {**obj, "id": obj[Rec.CASE_ID]}
                if self._coverage is None and isinstance(obj.get(Rec.INDEXING_COVERAGE), dict):
                    self._coverage = obj[Rec.INDEXING_COVERAGE]
            case_id = obj.get("id")
            if isinstance(case_id, int) and not isinstance(case_id, bool):
                case_id = str(case_id)
            question = obj.get("question")
            has_id = isinstance(case_id, str) and case_id.strip() != ""
            has_q = isinstance(question, str) and question.strip() != ""
            if not has_id and not has_q:
                message = "needs an `id` or a `question` to match it to a case"
                problems.append(Problem(message, path=where, line=lineno, field="id"))
                continue
            if record:
                raw, latency, extras = _response_of_record(obj)
            else:
                raw, latency, extras = self._response_of(obj), obj.get("latency_ms"), None
            if raw is not None:
                try:
                    AskResponse.model_validate(raw)
                except ValidationError as e:
                    for err in e.errors():
                        field = field_path(err["loc"]) or None
                        problems.append(Problem(err.get("msg", "invalid"), path=where, line=lineno, field=field))
                    continue
            latency = float(latency) if isinstance(latency, int | float) and not isinstance(latency, bool) else None
            entry = (lineno, raw, latency, extras)
            if has_id:
                if case_id in self._by_id:
                    first = self._by_id[case_id][0]
                    problems.append(
                        Problem(f"id '{case_id}' duplicates line {first}", path=where, line=lineno, field="id")
                    )
                    continue
                self._by_id[case_id] = entry
            if has_q:
                self._by_question.setdefault(normalize_question(question), []).append(entry)
        return problems

    @staticmethod
    def _response_of(obj: dict[str, Any]) -> dict[str, Any]:
        if "answer" not in obj and isinstance(obj.get("response"), dict):
            raw = dict(obj["response"])
        else:
            raw = {k: v for k, v in obj.items() if k not in _KEYS and k != "latency_ms"}
        flat = {s: raw.pop(s) for s in _DEBUG_SECTIONS if s in raw}
        if flat:
            debug = dict(raw.get("debug") or {})
            for section, value in flat.items():
                debug.setdefault(section, value)
            raw["debug"] = debug
        return raw

    def __len__(self) -> int:
        lines = {e[0] for e in self._by_id.values()}
        lines |= {e[0] for entries in self._by_question.values() for e in entries}
        return len(lines)

    async def ask(self, request: AskRequest, *, case_id: str | None = None) -> AskResult:
        """The logged response for this case.

        Raises:
            TargetError: "invalid_response" when no line matches, or when several lines
                without a matching id share the question.
        """
        entry = self._by_id.get(case_id) if case_id is not None else None
        if entry is None:
            entries = self._by_question.get(normalize_question(request.question), [])
            if not entries:
                raise TargetError("invalid_response", "no logged response for this case")
            if len(entries) > 1:
                lines = ", ".join(str(e[0]) for e in entries[:5])
                raise TargetError(
                    "invalid_response",
                    f"{len(entries)} logged responses share this question (lines {lines}); give them ids",
                )
            entry = entries[0]
        lineno, raw, latency, extras = entry
        if raw is None:  # a record of a case the target failed: the same failure
            error = (extras or {}).get("error") or {}
            raise TargetError(error.get("kind") or "invalid_response", str(error.get("detail") or ""),
                              status=error.get("status"))
        result = parse_ask_response(raw, request, source=f"{self.path}:{lineno}")
        result.logged_total_ms = latency
        if extras is not None:
            # What the target left out, as the run found it on the whole answer (not on the record).
            result.missing_fields = list(extras.get(Rec.MISSING_FIELDS) or [])
            attempts = extras.get(Rec.ATTEMPTS)
            if type(attempts) is int:
                result.attempts = attempts
        return result

    async def index_stats(self) -> IndexingCoverage | None:
        """A run's records give back the index stats the run recorded; another log has no
        index: None."""
        if self._coverage is None:
            return None
        try:
            return IndexingCoverage.model_validate(self._coverage)
        except ValidationError:
            return None

    def describe(self) -> dict:
        """Target settings for config.json: the log's path and content hash. A replay is
        deterministic (the same log answers the same); its tie-break is the logged one's."""
        return {"kind": "replay", "path": str(self.path), "sha256": self.sha256, "responses": len(self),
                "deterministic": True}

    async def aclose(self) -> None:
        return None


def _is_record(obj: dict[str, Any]) -> bool:
    """An evalkit results.jsonl record (rather than a chatbot's log line)."""
    return Rec.SCHEMA_VERSION in obj and isinstance(obj.get(Rec.CASE_ID), str) and isinstance(obj.get(Rec.LATENCY), dict)


def _response_of_record(record: dict[str, Any]) -> tuple[dict[str, Any] | None, Any, dict[str, Any]]:
    """The answer a run's record holds, rebuilt as the target sent it: (response or None for a
    failed case, its latency, the record's missing fields / attempts / error)."""
    extras = {k: record.get(k) for k in (Rec.MISSING_FIELDS, Rec.ATTEMPTS, Rec.ERROR)}
    latency = record[Rec.LATENCY]
    error = record.get(Rec.ERROR)
    if isinstance(error, dict) and error.get(Rec.KIND) != "empty_answer" and not isinstance(record.get("answer"), str):
        return None, latency.get(Rec.TOTAL_MS), extras
    missing = set(record.get(Rec.MISSING_FIELDS) or ())
    response: dict[str, Any] = {"answer": record.get("answer") or "", "references": record.get("references") or []}
    abstention = record.get(Rec.ABSTENTION) or {}
    if abstention.get("method") == "target":  # the target said it; a classifier's call is made again
        response["abstained"] = abstention.get(Rec.ABSTAINED)
        if abstention.get(Rec.ABSTAINED) and "abstain_reason" not in missing:
            response["abstain_reason"] = abstention.get("reason")
    debug: dict[str, Any] = {}
    if "debug" not in missing:
        chunks = []
        for chunk in record.get(Rec.RETRIEVED_CHUNKS) or []:
            chunk = dict(chunk)
            chunk.pop("text_truncated", None)  # the run's storage mark, not the target's
            chunks.append(chunk)
        debug["retrieved_chunks"] = chunks
        if record.get(Rec.FOLDER_SELECTION) is not None:
            debug["folder_selection"] = record[Rec.FOLDER_SELECTION]
        if "debug.timings_ms" not in missing:
            timings = {}
            for key, value in latency.items():
                if key not in _NOT_PHASES and key.endswith("_ms") and value is not None:
                    timings[key[: -len("_ms")]] = value
            debug["timings_ms"] = timings
        config = record.get(Rec.CONFIG) or {}
        if "debug.versions" not in missing:
            versions = {k: config.get(k) for k in ("llm_model", "embedding_model", "index_build_version",
                                                   "answerer_version")}
            retriever = config.get("retriever_version")
            if isinstance(retriever, str):
                retriever = _RUN_FLAGS.sub("", retriever) or None
            versions["retriever_version"] = retriever
            debug["versions"] = versions
        if record.get(Rec.TRACES) is not None:
            debug["traces"] = record[Rec.TRACES]
        response["debug"] = debug
    return response, latency.get(Rec.TOTAL_MS), extras
