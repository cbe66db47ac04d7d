"""Suite files (--suite): parsing, every refusal, and the weighted global score by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalkit.errors import BadConfig
from evalkit.metrics.suite import Suite, load_suite, suite_block


def _suite(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "suite.toml"
    path.write_text(text)
    return path


def test_seed_004_suite_loads(tmp_path: Path) -> None:
    path = _suite(tmp_path, 'name = "hs"\n[scenarios.follow_up_recall]\nmetric = "must_include_mrr"\nweight = 0.3\n'
                            '[scenarios.temporal_narrative]\nmetric = "ordering_accuracy"\nweight = 0.2\n')
    suite = load_suite(path)
    assert suite.name == "hs" and [(s.name, s.metric, s.weight) for s in suite.scenarios] == [
        ("follow_up_recall", "must_include_mrr", 0.3), ("temporal_narrative", "ordering_accuracy", 0.2)]
    assert len(suite.sha256) == 64
    assert Suite.from_json(suite.to_json()) == suite  # config.json keeps it for later scripts


@pytest.mark.parametrize(
    "text, message",
    [
        ("name = 1\n", "name: must be a string"),
        ('[scenarios.a]\nmetric = "must_include_mrr"\nweight = 0\n', "scenarios.a.weight: must be a number > 0, got 0"),
        ('[scenarios.a]\nmetric = "must_include_mrr"\nweight = true\n', "scenarios.a.weight: must be a number > 0, got True"),
        ('[scenarios.a]\nmetric = "must_exclude_hit_rate"\nweight = 1\n',
         "scenarios.a.metric: 'must_exclude_hit_rate' is a rate where lower is better"),
        ('[scenarios.a]\nmetric = "mrr"\nweight = 1\n', "scenarios.a.metric: must be one of recall_at_k_avg, mrr_avg"),
        ('[scenarios.a]\nmetric = "mrr_avg"\nweight = 1\nweigth = 2\n', "scenarios.a.weigth: unknown key"),
        ('scenarios = 3\n', "scenarios: no scenario"),
        ("[scenarios\n", "not a TOML file"),
        ('extra = 1\n[scenarios.a]\nmetric = "mrr_avg"\nweight = 1\n', "extra: unknown key"),
    ],
)
def test_every_mistake_is_named(tmp_path: Path, text: str, message: str) -> None:
    path = _suite(tmp_path, text)
    with pytest.raises(BadConfig) as exc:
        load_suite(path)
    assert message in exc.value.render() and str(path) in exc.value.render()


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(BadConfig, match="cannot read the suite file"):
        load_suite(tmp_path / "nope.toml")


def test_global_score_is_the_weighted_mean(tmp_path: Path) -> None:
    suite = load_suite(_suite(tmp_path, '[scenarios.a]\nmetric = "mrr_avg"\nweight = 3\n'
                                        '[scenarios.b]\nmetric = "fact_retention"\nweight = 1\n'))
    metrics = {"by_scenario": {
        "a": {"n_cases": 4, "mrr_avg": 0.5, "n": {"mrr_avg": 4}},
        "b": {"n_cases": 2, "fact_retention": 0.9, "n": {"fact_retention": 2}},
        "c": {"n_cases": 1, "n": {}},
    }}
    block = suite_block(metrics, suite)
    # By hand: (3 * 0.5 + 1 * 0.9) / (3 + 1) = 2.4 / 4 = 0.6 (weights need not sum to 1).
    assert block["global_score"] == pytest.approx(0.6) and block["weight_total"] == 4.0
    assert block["unweighted_scenarios"] == {"c": 1}
    # A scenario whose cases the metric applies to none of: no global score, and why.
    metrics["by_scenario"]["b"] = {"n_cases": 2, "n": {}}
    block = suite_block(metrics, suite)
    assert block["global_score"] is None
    assert block["problems"] == ["fact_retention applies to none of the 2 cases of scenario 'b'"]
