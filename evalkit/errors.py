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

No secret leaves through an error: every EvalkitError's message and every Problem is
redacted when made or rendered, and the CLI prints errors only through `format_error`.
"""

from __future__ import annotations

import functools
import os
import re
import traceback
from dataclasses import dataclass
from typing import Any, Literal

MAX_PROBLEMS_SHOWN = 20

# Environment variables whose values are secrets (OPENAI_API_KEY, ANTHROPIC_API_KEY,
# OPENAI_COMPAT_API_KEY, EVAL_API_KEY, ... also when python-dotenv loaded them from .env).
_SECRET_SUFFIXES = ("APIKEY", "_KEY", "_TOKEN", "_SECRET", "PASSWORD", "PASSWD", "_PASS")
# Not secrets: what local OpenAI-compatible servers document as "any key will do", and
# flag values; common words that scrubbing would mangle.
_PLACEHOLDERS = frozenset({"none", "null", "true", "false", "empty", "dummy", "ollama", "lm-studio", "not-needed"})
_MIN_SECRET, _MIN_ANYWHERE, _MIN_PARTIAL = 4, 8, 16
_SECRET_SHAPES = re.compile(
    r"(?i)(bearer\s+)[^\s\"',;]+"  # an Authorization header echoed back
    r"|\b(sk-(?:ant-)?[A-Za-z0-9_-]{8,})"  # OpenAI / Anthropic key shapes
    r"|((?:x-)?api[_-]?key(?:[\"']\s*:|\s*=)\s*[\"']?|x-api-key:\s*)[^\s\"',;}&]+"  # "api_key": ..., x-api-key: ...
    r"|(\b[a-z][a-z0-9+.-]*://[^/\s:@]+:)[^/\s@]+(?=@)"  # a password in a URL's user info
    r"|((?:proxy-)?authorization[\"']?\s*[:=]\s*[\"']?basic\s+)[A-Za-z0-9+/_-]+=*"  # a Basic header echoed back
)
# The proxy settings httpx and urllib read (HTTP_PROXY, HTTPS_PROXY, ALL_PROXY, any other
# *_PROXY, either case); NO_PROXY lists hosts, not a proxy.
_PROXY_SUFFIX, _NOT_A_PROXY = "_PROXY", "NO_PROXY"


def _secrets() -> list[str]:
    """Values of the secret-named environment variables worth scrubbing, and the credentials
    in the proxy settings' URLs (`_proxy_credentials`), longest first, each followed by its
    encoded forms (`_encodings`)."""
    values = [os.environ.get(name, "") for name in os.environ if name.upper().endswith(_SECRET_SUFFIXES)]
    for name, value in os.environ.items():
        if "@" in value and name.upper().endswith(_PROXY_SUFFIX) and name.upper() != _NOT_A_PROXY:
            values += _proxy_credentials(value)
    found = {v for v in values if len(v) >= _MIN_SECRET and v.lower() not in _PLACEHOLDERS}
    forms = {f for v in found if len(v) >= _MIN_ANYWHERE for f in _encodings(v)}
    return sorted(found | forms, key=len, reverse=True)


@functools.lru_cache(maxsize=16)
def _proxy_credentials(value: str) -> tuple[str, ...]:
    """The credentials in a proxy URL (`http://user:pass@proxy:3128`), in every form a proxy's
    error page or a log can show them (issue 38 item 8): the user info as written and
    percent-decoded, the password alone (the user name alone is no secret; without a
    password the user name is the credential), and the `Proxy-Authorization: Basic` value
    httpx sends, base64 of the decoded `user:pass`, with and without its padding. The
    longer forms get `_encodings` like any key."""
    import base64  # here: only a run with a proxy that has credentials pays for them
    import urllib.parse

    netloc = urllib.parse.urlsplit(value if "://" in value else f"http://{value}").netloc
    userinfo = netloc.rpartition("@")[0]
    if not userinfo:
        return ()
    user, colon, password = userinfo.partition(":")
    decoded = f"{urllib.parse.unquote(user)}:{urllib.parse.unquote(password)}"
    basic = base64.b64encode(decoded.encode("utf-8")).decode("ascii")
    secret = (password, urllib.parse.unquote(password)) if colon else (user, urllib.parse.unquote(user))
    return tuple(dict.fromkeys((userinfo, decoded, basic, basic.rstrip("="), *secret)))


@functools.lru_cache(maxsize=64)
def _encodings(value: str) -> tuple[str, ...]:
    """The forms a key takes when a server echoes it encoded: percent-encoded (a query string
    or a form), and base64 and URL-safe base64 (padding dropped), alone and inside a longer
    blob. Inside one (a Basic header encodes `user:key`) the key starts at any of three byte
    offsets, and each encodes it differently: for each, the characters that only the key's
    bytes decide (the 4-character groups at either end also hold a neighbour's bits)."""
    import base64  # here: only a run with a configured key pays for them
    import urllib.parse

    raw = value.encode("utf-8")
    forms = {urllib.parse.quote(value, safe=""), urllib.parse.quote(value), urllib.parse.quote_plus(value)}
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        forms.add(encode(raw).decode().rstrip("="))
        for shift in range(3):
            whole = (shift + len(raw)) // 3  # 3-byte groups that end within the key
            forms.add(encode(b"\0" * shift + raw).decode()[4 if shift else 0 : 4 * whole])
    return tuple(f for f in forms if f != value and len(f) >= _MIN_ANYWHERE)


def _spaced(value: str) -> re.Pattern[str]:
    """The key spaced out: whitespace or dashes between its characters (a reply that spelled
    it out, wrapped it over lines, or wrote it in groups such as `abcd-efgh` or `abcd efgh`)."""
    return re.compile(r"[\s-]*".join(re.escape(ch) for ch in value))


def _scrub(text: str, secrets: list[str]) -> str:
    # Whole copies first: a head of one secret that another's copy starts with (two base64
    # forms of a proxy's `user:pass` share their first 18 characters) must not take that copy
    # for a cut one and leave its tail, which still encodes bits of the password.
    for value in secrets:
        if len(value) >= _MIN_ANYWHERE and value in text:
            text = text.replace(value, "***")
    for value in secrets:
        if len(value) < _MIN_ANYWHERE:
            # A short key (a local server's) only as a whole token: "abcd" must not eat "abcdef".
            text = re.sub(rf"(?<![\w-]){re.escape(value)}(?![\w-])", "***", text)
            continue
        head = value[:_MIN_ANYWHERE]
        if head not in text:
            continue
        out, i = [], 0
        while (j := text.find(head, i)) != -1:
            k = j + len(head)
            while k < len(text) and k - j < len(value) and text[k] == value[k - j]:
                k += 1
            # The whole key, or a long enough head of it (text cut before it was scrubbed).
            if k - j == len(value) or k - j >= _MIN_PARTIAL:
                out += [text[i:j], "***"]
            else:
                out.append(text[i:k])
            i = k
        text = "".join(out) + text[i:]
    for value in secrets:
        # a long key spaced out (whitespace or dashes between its characters)
        if len(value) >= _MIN_PARTIAL and value[0] in text and ("-" in text or any(c.isspace() for c in text)):
            text = _spaced(value).sub("***", text)
    return _SECRET_SHAPES.sub(lambda m: (m.group(1) or m.group(3) or m.group(4) or m.group(5) or "") + "***", text)


def redact(text: str) -> str:
    """Replace secrets in free text (server bodies, exception messages, judge replies) with `***`.

    Scrubbed: the value of every environment variable named like a secret (*API_KEY, *_KEY,
    *_TOKEN, *_SECRET, *PASSWORD, *_PASS), also a head of 16+ characters of one (text cut
    before it was scrubbed); values under 8 characters only as a whole token and under 4
    not at all, nor placeholders such as "ollama"; and key shapes: `Bearer ...`, `sk-...`,
    `"api_key": ...`, `x-api-key: ...`, a URL's password, an `Authorization: Basic ...` or
    `Proxy-Authorization: Basic ...` header; the credentials in HTTP_PROXY, HTTPS_PROXY,
    ALL_PROXY (any *_PROXY) URLs, raw, percent-decoded and as their Basic header value
    (`_proxy_credentials`); and a key of 8+ characters also
    percent-encoded, in base64 or URL-safe base64 (also inside a longer base64 blob, such as
    a Basic header), and (16+) spaced out with whitespace or dashes between its characters.
    Every EvalkitError, every Problem
    and `format_error` pass through here, so no error message can carry a key out.
    """
    return _scrub(text, _secrets())


def redact_data(value: Any) -> Any:
    """`value` (JSON-like: dicts, lists, strings) with every string redacted; a new object."""
    secrets = _secrets()

    def walk(v: Any) -> Any:
        if isinstance(v, str):
            return _scrub(v, secrets)
        if isinstance(v, dict):
            return {k: walk(x) for k, x in v.items()}
        if isinstance(v, list | tuple):
            return [walk(x) for x in v]
        return v

    return walk(value)


@dataclass(frozen=True)
class Problem:
    """One thing wrong with an input, located as precisely as we can. `message` is redacted."""

    message: str
    path: str | None = None
    line: int | None = None
    field: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "message", redact(self.message))

    def __str__(self) -> str:
        where = ""
        if self.path is not None:
            where = self.path if self.line is None else f"{self.path}:{self.line}"
            where += ": "
        field = f"{self.field}: " if self.field else ""
        return redact(f"{where}{field}{self.message}")


def did_you_mean(path: str | os.PathLike[str], *, folders: bool | None = None) -> str:
    """`; did you mean 'sample_vault'?` when a name beside a missing `path` is close to its
    own (difflib's ratio >= 0.8, the closest first), else "". `folders`: only folders (True),
    only files (False), either (None). A typo'd name said back with the right one (issue 43)."""
    import difflib
    from pathlib import Path

    p = Path(path)
    parent = p.parent if str(p.parent) else Path(".")
    try:
        names = [c.name for c in parent.iterdir() if folders is None or c.is_dir() == folders]
    except OSError:
        return ""
    close = difflib.get_close_matches(p.name, names, n=1, cutoff=0.8)
    if not close or close[0] == p.name:
        return ""
    return f"; did you mean {str(p.with_name(close[0]))!r}?"


class EvalkitError(Exception):
    """Base of every error evalkit raises on purpose. Its message is redacted when it is made.

    Attributes:
        resume_command: set when the error stopped a run that can be finished: the command
            that finishes it (printed after the message, as for Ctrl-C).
    """

    resume_command: str | None = None

    def __init__(self, *args: object):
        super().__init__(*(redact(a) if isinstance(a, str) else a for a in args))


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
        lines = [str(p) for p in self.problems[:limit]]  # str(Problem) is redacted
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
TargetErrorKind = Literal["timeout", "http_error", "invalid_response", "empty_answer", "connect", "exception", "response_too_large"]


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
    """The regression gate found regressions: exit 1; or the merge decision found not enough
    evidence: exit 4 (`exit_code`)."""

    def __init__(self, regressions: list[str], *, title: str = "regression gate failed", exit_code: int = 1):
        self.regressions = [redact(r) for r in regressions]
        self.title = title  # "threshold check failed" for --threshold (issue 13): same exit 1
        self.exit_code = exit_code
        super().__init__("; ".join(regressions))


def format_error(exc: BaseException, *, resume_hint: str | None = None) -> list[str]:
    """The lines the CLI prints on stderr for `exc`, every one redacted.

    The only way an error leaves the process: exit_on_known_errors prints nothing else.
    InputError: one `evalkit: ` line per problem. GateFailed: the regressions.
    KeyboardInterrupt: "interrupted". OSError: the path and the reason. Anything else is a
    bug (a TargetError or JudgeError is recorded per case, never raised this far): its
    traceback, with the exceptions it chained. The error's `resume_command` (else
    `resume_hint`, for an interrupt) ends the last `evalkit:` line.

    Args:
        exc: the exception that stopped the command.
        resume_hint: how to finish the interrupted work, when the command knows.

    Returns:
        The lines, without newlines.
    """
    resume = getattr(exc, "resume_command", None)
    if isinstance(exc, InputError):
        lines = [f"evalkit: {line}" for line in exc.render().splitlines()]
    elif isinstance(exc, GateFailed):
        lines = [f"evalkit: {getattr(exc, 'title', 'regression gate failed')}:", *(f"  - {r}" for r in exc.regressions)]
    elif isinstance(exc, KeyboardInterrupt):
        lines, resume = ["evalkit: interrupted"], resume or resume_hint
    elif isinstance(exc, OSError):  # a bad path or a full disk: the path and the reason
        where = f"{os.fsdecode(exc.filename)}: " if exc.filename is not None else ""
        lines = [f"evalkit: {where}{exc.strerror or exc}"]
    else:
        lines = [
            "evalkit: internal error (a bug in evalkit; please report it with this traceback):",
            *"".join(traceback.format_exception(exc)).rstrip("\n").splitlines(),
        ]
    if resume:
        last = max(i for i, line in enumerate(lines) if line.startswith("evalkit: "))
        lines[last] += f"; resume with: {resume}"
    return redact("\n".join(lines)).split("\n")
