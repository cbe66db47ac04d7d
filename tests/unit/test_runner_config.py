"""RunSettings (evalkit/config.py): defaults, validation messages, what is hashed."""

from __future__ import annotations

import pytest

from evalkit.config import RESULT_AFFECTING, RunSettings, build_settings, diff_hashed, redact_url
from evalkit.errors import BadConfig
from evalkit.store.runs import config_hash


def test_defaults_are_the_documented_ones():
    s = RunSettings()
    assert s.eval_set == ["eval_set.jsonl"] and s.vault == "sample_vault" and s.results_dir == "results"
    assert s.k == [5] and s.folder_mode == "off" and s.concurrency == 4
    assert (s.rerank_vector_weight, s.rerank_lexical_weight) == (0.7, 0.3)
    assert s.judge_temperature == 0.0
    assert (
        s.regression_threshold_recall,
        s.regression_threshold_mrr,
        s.regression_threshold_scope_miss,
        s.regression_threshold_groundedness,
    ) == (0.05, 0.10, 0.10, 0.5)


def test_k_keeps_first_as_primary_and_drops_duplicates():
    s = RunSettings(k=[10, 5, 10])
    assert s.k == [10, 5] and s.primary_k == 10 and s.request_k == 10


def test_ids_accept_a_comma_list():
    assert RunSettings(ids="a, b,,c").ids == ["a", "b", "c"]


def test_bad_values_name_the_flag():
    with pytest.raises(BadConfig) as e:
        build_settings({"k": [0], "folder_mode": "sideways", "concurrency": 0})
    lines = e.value.render().splitlines()
    assert any(line.startswith("--k: K must be >= 1") for line in lines)
    assert any(line.startswith("--folder-mode: ") and "on_with_fallback" in line for line in lines)
    assert any(line.startswith("--concurrency: ") for line in lines)


def test_operational_settings_do_not_change_the_hash():
    a = RunSettings()
    b = RunSettings(concurrency=64, timeout=5, retries=0, rps=3, quiet=True, json_output=True,
                    results_dir="elsewhere", run_id="x", api_url=None, store_full_text=True, baseline="b")
    assert config_hash(a.hashed()) == config_hash(b.hashed())
    for key in ("concurrency", "timeout", "retries", "rps", "quiet", "json_output", "results_dir", "run_id"):
        assert key not in RESULT_AFFECTING


@pytest.mark.parametrize(
    "change",
    [{"k": [10]}, {"folder_mode": "on"}, {"rerank_vector_weight": 0.5}, {"params": {"x": 1}},
     {"retrieval_only": True}, {"judge_model": "m"}, {"require_snippets": True}, {"limit": 3}, {"tag": ["w"]},
     {"vault": "other_vault"}],
)
def test_result_affecting_settings_change_the_hash(change):
    assert config_hash(RunSettings().hashed()) != config_hash(RunSettings(**change).hashed())


def test_api_url_is_a_location_not_an_identity():
    a = RunSettings(api_url="http://127.0.0.1:1111").hashed()
    b = RunSettings(api_url="http://127.0.0.1:2222").hashed()
    assert a == b and a["target_kind"] == "http" and "vault" not in a


def test_diff_hashed_lists_keys():
    a = RunSettings(k=[5]).hashed()
    b = RunSettings(k=[10], folder_mode="on").hashed()
    assert diff_hashed(a, b) == ["folder_mode: the run used 'off', now 'on'", "k: the run used [5], now [10]"]


def test_public_dump_strips_credentials():
    s = RunSettings(api_url="http://user:pw@host:8080/x", judge_base_url="https://k@h/v1")
    d = s.public_dump()
    assert d["api_url"] == "http://host:8080/x" and d["judge_base_url"] == "https://h/v1"
    assert redact_url("http://h:1/a?b=c") == "http://h:1/a?b=c"


def test_stored_settings_round_trip_for_resume():
    s = RunSettings(k=[3, 7], params={"a": [1, 2]}, tag=["x"], seed=7)
    again = build_settings({"concurrency": 9}, s.model_dump(mode="json"))
    assert again.hashed() == s.hashed() and again.concurrency == 9


def test_every_default_run_eval_help_shows_is_the_one_the_run_uses() -> None:
    # issue 25 item 9 (defaults shown from one source): a "(default: X)" in a flag's help that
    # names a number or a word is RunSettings' default for that flag
    import re

    import typer.main

    from evalkit.cli.run_eval import app
    from evalkit.config import RunSettings

    checked = 0
    for param in typer.main.get_command(app).params:
        name = {"threshold": "thresholds", "json": "json_output"}.get(param.name or "", param.name or "")
        shown = re.search(r"\(default: ([^),]*)", " ".join((param.help or "").split()))
        if name not in RunSettings.model_fields or shown is None:
            continue
        field = RunSettings.model_fields[name]
        default = field.default_factory() if field.default_factory is not None else field.default  # type: ignore[call-arg]
        value = default[0] if isinstance(default, list) and len(default) == 1 else default
        text = shown.group(1).strip()
        if re.fullmatch(r"-?[0-9.]+", text):
            assert float(text) == float(value), (param.opts[0], text, default)
            checked += 1
        elif re.fullmatch(r"[a-z_.]+", text) and isinstance(value, str):
            assert text == value, (param.opts[0], text, default)
            checked += 1
    assert checked >= 20  # most flags say their default, and each says the true one
