"""The exception tree. Expected failures are typed; anything else is a bug and stays loud.

EvalkitError
├── InputError      exit 2; carries every Problem found (file, line, field, message)
│   ├── RunNotFound
│   ├── BadEvalSet
│   ├── BadConfig
│   └── JudgeConfigError   (no API key, unpinned model, unknown provider)
├── TargetError     recorded per case by the runner, never reaches the CLI
├── JudgeError      recorded per case by the judges
└── GateFailed      exit 1 (regression gate)
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Literal

MAX_PROBLEMS_SHOWN = 20

# Environment variables whose values are secrets; their values never reach a file we write.
_SECRET_NAME = re.compile(r"(API_KEY|_TOKEN|_SECRET|PASSWORD)$", re.IGNORECASE)
_SECRET_SHAPES = re.compile(
    r"(?i)(bearer\s+)[^\s\"',;]+"  # an Authorization header echoed back
    r"|\b(sk-(?:ant-)?[A-Za-z0-9_-]{8,})"  # OpenAI / Anthropic key shapes
)


def redact(text: str) -> str:
    """Replace secrets in free text (server bodies, exception messages) with `***`.

    A failing server may echo our Authorization header, and a user's callable may put a key
    in its exception; that text goes into results.jsonl as an error detail, so it is
    scrubbed here, once, for every error type.
    """
    for name, value in os.environ.items():
        if len(value) >= 8 and _SECRET_NAME.search(name) and value in text:
            text = text.replace(value, "***")
    return _SECRET_SHAPES.sub(lambda m: (m.group(1) or "") + "***", text)


@dataclass(frozen=True)
class Problem:
    """One thing wrong with an input, located as precisely as we can."""

    message: str
    path: str | None = None
    line: int | None = None
    field: str | None = None

    def __str__(self) -> str:
        where = ""
        if self.path is not None:
            where = self.path if self.line is None else f"{self.path}:{self.line}"
            where += ": "
        field = f"{self.field}: " if self.field else ""
        return f"{where}{field}{self.message}"


class EvalkitError(Exception):
    """Base of every error evalkit raises on purpose."""


class InputError(EvalkitError):
    """Bad input from the user: exits 2 with one line per problem."""

    def __init__(self, problems: list[Problem] | Problem | str):
        if isinstance(problems, str):
            problems = [Problem(problems)]
        elif isinstance(problems, Problem):
            problems = [problems]
        self.problems: list[Problem] = list(problems)
        super().__init__(self.render())

    def render(self, limit: int = MAX_PROBLEMS_SHOWN) -> str:
        lines = [str(p) for p in self.problems[:limit]]
        if len(self.problems) > limit:
            lines.append(f"… and {len(self.problems) - limit} more problems")
        return "\n".join(lines)


class RunNotFound(InputError):
    """A run id that has no folder under the results directory."""


class BadEvalSet(InputError):
    """An eval set that failed validation; nothing was run."""


class BadConfig(InputError):
    """Flags or config files that contradict each other or the run being resumed."""


class JudgeConfigError(InputError):
    """A judge that cannot be built: missing key, unpinned model, unknown provider."""


# "exception": an in-process target (--target python:...) raised instead of answering.
TargetErrorKind = Literal["timeout", "http_error", "invalid_response", "empty_answer", "connect", "exception"]


class TargetError(EvalkitError):
    """The system under test failed on one case. The runner records it and goes on.

    Args:
        kind: timeout | http_error | invalid_response | empty_answer | connect | exception.
        detail: short human text; never contains secrets, truncated by the caller.
        status: HTTP status for http_error.
        attempts: tries made before giving up, when the target retries.
    """

    def __init__(self, kind: TargetErrorKind, detail: str, status: int | None = None, attempts: int | None = None):
        self.kind: TargetErrorKind = kind
        self.detail = redact(detail)[:500]
        self.status = status
        self.attempts = attempts
        super().__init__(f"{kind}{f' {status}' if status else ''}: {self.detail}")

    def to_record(self) -> dict:
        return {"kind": self.kind, "status": self.status, "detail": self.detail}


class JudgeError(EvalkitError):
    """A judge failed on one case (junk output after repair, provider error after retries)."""

    def __init__(self, reason: str, detail: str = "", raw: str | None = None):
        self.reason = reason
        self.detail = redact(detail)[:500]
        self.raw = redact(raw)[:2000] if raw else raw
        super().__init__(f"{reason}: {self.detail}")


class GateFailed(EvalkitError):
    """The regression gate found regressions: exit 1."""

    def __init__(self, regressions: list[str]):
        self.regressions = regressions
        super().__init__("; ".join(regressions))
