"""Parsing of --matrix, --matrix-file and --expect-order (evalkit.run.matrix)."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalkit.errors import BadConfig
from evalkit.run.matrix import Preset, load_matrix_file, parse_matrix_axes, parse_order_spec, resolve_metric


def test_one_axis_names_presets_by_value_and_parses_json() -> None:
    presets = parse_matrix_axes(["thoroughness=fast,balanced,thorough"])
    assert [p.name for p in presets] == ["fast", "balanced", "thorough"]
    assert presets[0].params == {"thoroughness": "fast"}
    assert parse_matrix_axes(["bm25_k1=0.9,1.2"])[0].params == {"bm25_k1": 0.9}


def test_axes_cross_product_first_axis_slowest_and_run_flags_split() -> None:
    presets = parse_matrix_axes(["folder-mode=off,on", "abstain_threshold=0.3,0.5"])
    assert [p.name for p in presets] == ["off_0.3", "off_0.5", "on_0.3", "on_0.5"]
    assert presets[3] == Preset("on_0.5", {"abstain_threshold": 0.5}, {"folder_mode": "on"})


@pytest.mark.parametrize("items", [["k1"], ["=1,2"], ["a=1,,2"], ["a=1,1"], ["a=1,2", "a=3,4"], ["a=1"]])
def test_bad_axes_are_refused(items: list[str]) -> None:
    with pytest.raises(BadConfig):
        parse_matrix_axes(items)


def test_matrix_file_keeps_written_order(tmp_path: Path) -> None:
    f = tmp_path / "m.toml"
    f.write_text(
        '[presets.thorough]\nparams = {bm25_b = 0}\nlatency_budget_ms = 8000\n'
        '[presets.fast]\nparams = {bm25_k1 = 10}\nfolder_mode = "on"\n',
        encoding="utf-8",
    )
    presets = load_matrix_file(f)
    assert presets == [
        Preset("thorough", {"bm25_b": 0}, {"latency_budget_ms": 8000}),
        Preset("fast", {"bm25_k1": 10}, {"folder_mode": "on"}),
    ]


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("[presets.a]\nparams = {x = 1}\n", "at least two presets"),
        ("[presets.a]\nk = 3\n[presets.b]\n", "unknown key(s) k"),
        ("[presets.a]\nparams = 3\n[presets.b]\n", "params must be a table"),
        ('[presets."a b"]\n[presets.b]\n', "preset name"),
        ("presets = [", "not valid TOML"),
        ("[other]\n", "no presets"),
    ],
)
def test_bad_matrix_files_say_what_and_where(tmp_path: Path, text: str, needle: str) -> None:
    f = tmp_path / "m.toml"
    f.write_text(text, encoding="utf-8")
    with pytest.raises(BadConfig) as e:
        load_matrix_file(f)
    assert needle in str(e.value)
    if "at least two" not in needle:
        assert str(f) in str(e.value)


def test_order_spec() -> None:
    spec = parse_order_spec("fast<=balanced<=thorough:ndcg@10")
    assert (spec.presets, spec.ops, spec.metric) == (["fast", "balanced", "thorough"], ["<=", "<="], "ndcg@10")
    spec = parse_order_spec("good >= bad")
    assert (spec.presets, spec.ops, spec.metric) == (["good", "bad"], [">="], "ndcg_at_k_avg")


@pytest.mark.parametrize("text", ["fast", "fast<=", "<=b", "a<=b:", "a<b"])
def test_bad_order_specs(text: str) -> None:
    with pytest.raises(BadConfig):
        parse_order_spec(text)


def test_metric_names_resolve_to_compare_rows() -> None:
    assert resolve_metric("ndcg@10", [5, 10]) == ("ndcg", 10)
    assert resolve_metric("ndcg_at_k_avg", [5, 10]) == ("ndcg", 5)
    assert resolve_metric("mrr_avg", [3]) == ("mrr", 3)
    assert resolve_metric("abstention_accuracy", [5]) == ("abstention_accuracy", None)
    with pytest.raises(BadConfig, match="K = 5"):
        resolve_metric("ndcg@10", [5])
    with pytest.raises(BadConfig, match="unknown metric"):
        resolve_metric("nDCG", [5])
