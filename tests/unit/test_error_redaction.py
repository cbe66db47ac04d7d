"""No error kind can carry a key out: every EvalkitError, every Problem, format_error (the
CLI's only way to say an error) and exit_on_known_errors' last-resort handler redact.

regression: hardening issue item 2, a rejected judge key was printed in full.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import typer

import evalkit
import evalkit.embeddings.embedders
import evalkit.reference.openai_compat
import evalkit.store.runs
import evalkit.store.resultsdb
import evalkit.studio.editing
import evalkit.studio.fixing
import evalkit.studio.grading
import evalkit.studio.pairs
import evalkit.studio.reviewing
from evalkit.cli.common import EXIT_INPUT, EXIT_INTERNAL, EXIT_INTERRUPTED, exit_on_known_errors
from evalkit.compare.compute import IncomparableRuns
from evalkit.errors import (
    BadConfig,
    BadEvalSet,
    EvalkitError,
    GateFailed,
    InputError,
    JudgeConfigError,
    JudgeError,
    Problem,
    RunNotFound,
    TargetError,
    format_error,
    redact,
    redact_data,
)

# No known key shape: only the environment rule can catch it.
SENTINEL = "opaque-SENTINEL-1234567890"
SHAPED = "sk-test-SENTINEL-1234567890"
TEXT = f"server said: key {SENTINEL} / Bearer {SHAPED}"

# Every EvalkitError subclass, built with the sentinel in everything it says.
MAKERS = {
    EvalkitError: lambda: EvalkitError(TEXT),
    InputError: lambda: InputError([Problem(TEXT, path="eval_set.jsonl", line=3, field="question"), Problem(TEXT)]),
    RunNotFound: lambda: RunNotFound(Problem(TEXT, path="results/x")),
    BadEvalSet: lambda: BadEvalSet(TEXT),
    BadConfig: lambda: BadConfig([Problem(TEXT)] * 25),  # more than are shown
    JudgeConfigError: lambda: JudgeConfigError(Problem(TEXT, field="--judge-model")),
    evalkit.store.runs.RunFolderError: lambda: evalkit.store.runs.RunFolderError(Problem(TEXT)),
    evalkit.store.runs.RunBusy: lambda: evalkit.store.runs.RunBusy(Problem(TEXT)),
    TargetError: lambda: TargetError("http_error", TEXT, status=401),
    JudgeError: lambda: JudgeError("provider_error", TEXT, raw=TEXT),
    GateFailed: lambda: GateFailed([TEXT]),
    evalkit.reference.openai_compat.BackendError: lambda: evalkit.reference.openai_compat.BackendError(TEXT),
    IncomparableRuns: lambda: IncomparableRuns("a", "b", [TEXT]),
    # the studio's refusals (the case a Conflict carries is the user's own eval set line, sent back to their page)
    evalkit.studio.editing.Conflict: lambda: evalkit.studio.editing.Conflict(Path("eval_set.jsonl"), TEXT, {"id": "c"}),
    evalkit.studio.editing.EditRefused: lambda: evalkit.studio.editing.EditRefused(Problem(TEXT, field="op")),
    evalkit.studio.fixing.Busy: lambda: evalkit.studio.fixing.Busy(Problem(TEXT, path="eval_set.jsonl")),
    evalkit.studio.fixing.PlanChanged: lambda: evalkit.studio.fixing.PlanChanged(Problem(TEXT, path="eval_set.jsonl")),
    evalkit.studio.reviewing.AlreadyDecided: lambda: evalkit.studio.reviewing.AlreadyDecided(Problem(TEXT)),
    evalkit.studio.grading.GradeConflict: lambda: evalkit.studio.grading.GradeConflict(TEXT, {"answer_sha256": "0" * 64}),
    evalkit.studio.pairs.PairConflict: lambda: evalkit.studio.pairs.PairConflict(TEXT, {"a": "0" * 64}),
    # the results database's refusals (a run folder it leaves out, a file of another layout)
    evalkit.store.resultsdb.NotIndexable: lambda: evalkit.store.resultsdb.NotIndexable(Problem(TEXT, path="results/r")),
    evalkit.store.resultsdb.StaleSchema: lambda: evalkit.store.resultsdb.StaleSchema(Problem(TEXT, path="runs.sqlite")),
    # an embeddings endpoint that failed (its reply's text is in the message)
    evalkit.embeddings.embedders.EmbeddingError: lambda: evalkit.embeddings.embedders.EmbeddingError(
        Problem(TEXT, field="--embed-base-url")),
}


@pytest.fixture(autouse=True)
def _keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_COMPAT_API_KEY", SENTINEL)
    monkeypatch.setenv("OPENAI_API_KEY", SHAPED)


def _error_classes() -> set[str]:
    """Names of EvalkitError and every class deriving from it in evalkit/, read from the
    source (importing every module would pull in the provider SDKs)."""
    bases: dict[str, set[str]] = {}
    for path in Path(evalkit.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                bases.setdefault(node.name, set()).update(b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases)
    found = {"EvalkitError"}
    while new := {name for name, of in bases.items() if of & found} - found:
        found |= new
    return found


def test_every_error_kind_is_covered():
    # A new EvalkitError subclass must be added to MAKERS, so that it is checked below.
    assert _error_classes() == {cls.__name__ for cls in MAKERS}


@pytest.mark.parametrize("kind", list(MAKERS), ids=lambda c: c.__name__)
def test_no_error_kind_says_the_key(kind):
    exc = MAKERS[kind]()
    said = [str(exc), repr(exc), *map(str, exc.args), *format_error(exc)]
    said += [str(v) for v in vars(exc).values()]  # detail, raw, problems, regressions
    if isinstance(exc, InputError):
        said.append(exc.render(limit=100))
    for text in said:
        assert SENTINEL not in text and SHAPED not in text, text
    assert "***" in format_error(exc)[-1] or "***" in format_error(exc)[0]


def test_problem_rendering_keeps_the_location_and_scrubs_the_message():
    assert str(Problem(f"bad key {SENTINEL}", path="a.jsonl", line=2, field="x")) == "a.jsonl:2: x: bad key ***"


def test_an_unexpected_exception_is_shown_redacted_with_its_chain():
    try:
        try:
            raise ValueError(f"inner {SENTINEL}")
        except ValueError as inner:
            raise RuntimeError(f"outer Bearer {SHAPED}") from inner
    except RuntimeError as e:
        lines = format_error(e)
    text = "\n".join(lines)
    assert lines[0].startswith("evalkit: internal error")
    assert "Traceback (most recent call last):" in text
    assert "ValueError: inner ***" in text and "RuntimeError: outer Bearer ***" in text
    assert SENTINEL not in text and SHAPED not in text


def _exit_code(exc: BaseException, capsys: pytest.CaptureFixture[str], **kw) -> tuple[int, str]:
    with pytest.raises(typer.Exit) as info:
        with exit_on_known_errors(**kw):
            raise exc
    out = capsys.readouterr()
    assert out.out == ""
    return info.value.exit_code, out.err


def test_exit_on_known_errors_says_everything_redacted(capsys):
    code, err = _exit_code(JudgeConfigError(Problem(f"refused ({SENTINEL})")), capsys)
    assert (code, err) == (EXIT_INPUT, "evalkit: refused (***)\n")
    # A bug: exit 70 (not 1, "gate failed"), its traceback on stderr, redacted.
    code, err = _exit_code(KeyError(f"no {SENTINEL}"), capsys)
    assert code == EXIT_INTERNAL and "Traceback" in err and "KeyError: 'no ***'" in err and SENTINEL not in err
    code, err = _exit_code(KeyboardInterrupt(), capsys, resume_hint="judge_answers.py --run-id r")
    assert (code, err) == (EXIT_INTERRUPTED, "evalkit: interrupted; resume with: judge_answers.py --run-id r\n")


def test_an_error_that_stopped_a_resumable_run_says_how_to_resume(capsys):
    exc = JudgeConfigError([Problem("first"), Problem("openai refused the judge request (HTTP 401)")])
    exc.resume_command = "python scripts/run_eval.py --resume r1"
    code, err = _exit_code(exc, capsys)
    assert code == EXIT_INPUT
    assert err.splitlines() == [
        "evalkit: first",
        "evalkit: openai refused the judge request (HTTP 401); resume with: python scripts/run_eval.py --resume r1",
    ]


def test_typer_exits_pass_through_unchanged(capsys):
    with pytest.raises(typer.Exit) as info:
        with exit_on_known_errors():
            raise typer.Exit(3)
    assert info.value.exit_code == 3 and capsys.readouterr().err == ""


@pytest.mark.parametrize(
    ("env", "text", "expected"),
    [
        pytest.param("k-42", "key k-42, not k-420", "key ***, not k-420", id="short key: whole token only"),
        pytest.param("abc", "abc abc", "abc abc", id="under 4 characters: left alone"),
        pytest.param("ollama", "ollama said no", "ollama said no", id="a local server's placeholder"),
        pytest.param("opaque-SENTINEL-1234567890", "cut: opaque-SENTINEL-12", "cut: ***", id="a key cut before it was scrubbed"),
        pytest.param("opaque-SENTINEL-1234567890", "common head opaque-SENT", "common head opaque-SENT", id="a short head stays"),
    ],
)
def test_environment_secrets(monkeypatch, env, text, expected):
    monkeypatch.setenv("OPENAI_COMPAT_API_KEY", env)
    assert redact(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"api_key": "zzz-123"}', '{"api_key": "***"}'),
        ("{'x-api-key': 'zzz-123'}", "{'x-api-key': '***'}"),
        ("x-api-key: zzz-123", "x-api-key: ***"),
        ("https://bob:hunter2@proxy.example/v1", "https://bob:***@proxy.example/v1"),
        ("http://127.0.0.1:8080/v1", "http://127.0.0.1:8080/v1"),
        ("settings.api_key: expected a string, got 42", "settings.api_key: expected a string, got 42"),
        ("Proxy-Authorization: Basic Ym9iOmh1bnRlcjI=\r\n", "Proxy-Authorization: Basic ***\r\n"),
        ('{"authorization": "Basic Ym9iOmh1bnRlcjI="}', '{"authorization": "Basic ***"}'),
        ("basic questions, Basic setup", "basic questions, Basic setup"),
    ],
)
def test_key_shapes(text, expected):
    assert redact(text) == expected


# Issue 38 item 8: the credentials in a proxy URL, in each form a proxy's error page shows them.
# The Basic values are computed here independently: base64.b64encode(b"user:s3cret") etc.
_PLAIN_BASIC = "dXNlcjpzM2NyZXQ="  # user:s3cret
_DECODED_BASIC = "ZXZhbGtpdC11c2VyOnBAczNjcmV0"  # evalkit-user:p@s3cret


@pytest.mark.parametrize("name", ["HTTP_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"])
def test_proxy_credentials_are_secrets(monkeypatch, name):
    monkeypatch.setenv(name, "http://user:s3cret@127.0.0.1:3128")
    text = (f"407 from the proxy: Proxy-Authorization: {_PLAIN_BASIC} (as user:s3cret); the password s3cret; "
            f"unpadded {_PLAIN_BASIC.rstrip('=')}; via http://user:s3cret@127.0.0.1:3128/")
    assert redact(text) == ("407 from the proxy: Proxy-Authorization: *** (as ***); the password ***; "
                            "unpadded ***; via http://***@127.0.0.1:3128/")
    assert redact("the user is user, a s3cretary is not the password") == "the user is user, a s3cretary is not the password"


def test_proxy_credentials_percent_encoded_and_without_a_scheme(monkeypatch):
    monkeypatch.setenv("HTTPS_PROXY", "evalkit-user:p%40s3cret@proxy.example:3128")  # no scheme: httpx takes http://
    text = f"Basic {_DECODED_BASIC}, evalkit-user:p%40s3cret, evalkit-user:p@s3cret, p@s3cret, p%40s3cret"
    assert redact(text) == "Basic ***, ***, ***, ***, ***"
    monkeypatch.setenv("HTTPS_PROXY", "http://tok-1234567890@proxy.example")  # a token alone is the credential
    assert redact("echo tok-1234567890 and its base64 dG9rLTEyMzQ1Njc4OTA") == "echo *** and its base64 ***"


def test_no_proxy_and_proxies_without_credentials_add_no_secret(monkeypatch):
    monkeypatch.setenv("NO_PROXY", "user@host.example,127.0.0.1")
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.example:3128")
    assert redact("user@host.example via http://proxy.example:3128") == "user@host.example via http://proxy.example:3128"


def test_redact_data_scrubs_every_string_and_keeps_the_shape():
    value = {"reasoning": f"echo {SENTINEL}", "score": 4, "claims": [{"claim": SHAPED, "supported": True}]}
    assert redact_data(value) == {"reasoning": "echo ***", "score": 4, "claims": [{"claim": "***", "supported": True}]}
    assert value["reasoning"] == f"echo {SENTINEL}"  # the input is not modified
