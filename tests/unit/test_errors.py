"""Secrets never reach an error detail (which goes into results.jsonl)."""

from __future__ import annotations

import pytest

from evalkit.errors import JudgeError, TargetError, redact
from evalkit.judges.base import JudgeFailure


@pytest.fixture(autouse=True)
def _secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVAL_API_KEY", "secret-api-key-XYZ")
    monkeypatch.setenv("MY_SERVICE_TOKEN", "tok-0123456789")
    monkeypatch.setenv("SHORT_API_KEY", "abc")  # too short to redact safely: would mangle text


def test_env_secrets_and_key_shapes_are_redacted() -> None:
    # regression: review finding 1 — a 500 body echoing the Authorization header was stored
    text = 'HTTP 500: {"got": "Bearer secret-api-key-XYZ", "k": "sk-proj-abcdefgh12", "t": "tok-0123456789"} abc'
    assert redact(text) == 'HTTP 500: {"got": "Bearer ***", "k": "***", "t": "***"} abc'


def test_every_error_type_scrubs_its_detail() -> None:
    assert "secret-api-key-XYZ" not in TargetError("http_error", "echo secret-api-key-XYZ", 500).detail
    je = JudgeError("provider_error", "key sk-ant-api03-zzzzzzzz rejected", raw="Bearer secret-api-key-XYZ")
    assert "sk-ant" not in je.detail and "secret-api-key-XYZ" not in (je.raw or "")
    rec = JudgeFailure(kind="groundedness", reason="provider_error", detail="tok-0123456789 refused").to_record()
    assert rec["detail"] == "*** refused"


def test_encoded_and_spelled_out_copies_of_a_key_are_redacted() -> None:
    # issue 29 item 8: a server that echoed the key percent-encoded, in base64 (a Basic header,
    # a token blob) or spelled out with spaces leaked it. Encodings computed here independently.
    import base64
    import urllib.parse

    key = "secret-api-key-XYZ"
    for form in (urllib.parse.quote(key, safe=""), base64.b64encode(key.encode()).decode().rstrip("="),
                 base64.urlsafe_b64encode(key.encode()).decode().rstrip("="), " ".join(key)):
        out = redact(f"echo: {form} end")
        assert form not in out and "***" in out, form
    assert redact("nothing secret here, just words") == "nothing secret here, just words"


def test_a_mistyped_path_is_answered_with_the_close_existing_name(tmp_path, monkeypatch) -> None:
    # Issue 43: `--vault sample_vaul` and `--eval-set eval_se.jsonl` said only "not found".
    from evalkit.errors import InputError, did_you_mean
    from evalkit.evalset.load import resolve_eval_set_paths
    from evalkit.reference.corpus import build_corpus

    monkeypatch.chdir(tmp_path)
    (tmp_path / "sample_vault").mkdir()
    (tmp_path / "eval_set.jsonl").write_text("")
    (tmp_path / "notes").mkdir()
    assert did_you_mean("sample_vaul", folders=True) == "; did you mean 'sample_vault'?"
    assert did_you_mean("eval_set.jsonl") == ""  # it exists: nothing to suggest
    assert did_you_mean("sample_vaul", folders=False) == ""  # only files asked for
    assert did_you_mean("wholly_other") == "" and did_you_mean("no/such/dir/x") == ""
    assert did_you_mean(tmp_path / "eval_se.jsonl") == f"; did you mean {str(tmp_path / 'eval_set.jsonl')!r}?"
    with pytest.raises(InputError) as e:
        resolve_eval_set_paths(["eval_se.jsonl"])
    assert "eval_se.jsonl: --eval-set: no such file or folder; did you mean 'eval_set.jsonl'?" in str(e.value)
    with pytest.raises(InputError) as e:
        build_corpus(tmp_path / "sample_vaul")
    assert f"did you mean {str(tmp_path / 'sample_vault')!r}?" in str(e.value)
