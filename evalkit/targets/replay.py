"""ReplayTarget: score responses logged earlier (`--target replay:path.jsonl`) without a chatbot."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from evalkit.errors import InputError, Problem, TargetError
from evalkit.jsonio import loads
from evalkit.schema import AskRequest, AskResponse, IndexingCoverage
from evalkit.targets.base import AskResult, field_path, parse_ask_response

# Logs are often flat: these debug sections may sit at the top level of a line.
_DEBUG_SECTIONS = ("retrieved_chunks", "folder_selection", "timings_ms", "versions")
_KEYS = ("id", "question")


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
        self._by_id: dict[str, tuple[int, dict[str, Any], float | None]] = {}
        self._by_question: dict[str, list[tuple[int, dict[str, Any], float | None]]] = {}
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
            raw = self._response_of(obj)
            try:
                AskResponse.model_validate(raw)
            except ValidationError as e:
                for err in e.errors():
                    field = field_path(err["loc"]) or None
                    problems.append(Problem(err.get("msg", "invalid"), path=where, line=lineno, field=field))
                continue
            latency = obj.get("latency_ms")
            latency = float(latency) if isinstance(latency, int | float) and not isinstance(latency, bool) else None
            entry = (lineno, raw, latency)
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
        lineno, raw, latency = entry
        result = parse_ask_response(raw, request, source=f"{self.path}:{lineno}")
        result.logged_total_ms = latency
        return result

    async def index_stats(self) -> IndexingCoverage | None:
        """A log has no index: always None."""
        return None

    def describe(self) -> dict:
        """Target settings for config.json: the log's path and content hash. A replay is
        deterministic (the same log answers the same); its tie-break is the logged one's."""
        return {"kind": "replay", "path": str(self.path), "sha256": self.sha256, "responses": len(self),
                "deterministic": True}

    async def aclose(self) -> None:
        return None
