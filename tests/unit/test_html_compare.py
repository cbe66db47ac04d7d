"""The HTML compare report (issue 12): a renderer over `Comparison` that recomputes nothing,
escapes every text from the runs, needs no network, and still renders runs that break an
invariant, with the violations on top."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from evalkit.compare import compare_runs
from evalkit.metrics.registry import label_of
from evalkit.report.compare import all_case_differs, by_case, distinct_rows, headline, method_line, shown_values
from evalkit.report.html.compare import compare_view, default_compare_output, diff_segments, write_compare_report
from tests.unit.test_compare import RUN_A, RUN_B, R, make_run, rec

SCRIPT = "<script>alert(1)</script>"
IMG = "<img src=x onerror=alert(2)>"
# A network reference: src/href (or CSS url()) pointing at http(s) or a protocol-relative URL.
NETWORK = re.compile(r"""(?:\b(?:src|href|action|poster)\s*=\s*["']?\s*|url\(\s*["']?)(?:https?:)?//""", re.IGNORECASE)


@pytest.fixture
def ab(tmp_path: Path) -> Path:
    make_run(tmp_path, "a", RUN_A)
    make_run(tmp_path, "b", RUN_B, config={"settings": {"params": {"abstain_threshold": 0.5}}})
    return tmp_path


def test_the_view_reads_every_number_off_the_comparison(ab):
    c = compare_runs("a", "b", results_dir=ab, resamples=R)
    view = compare_view(c)
    assert view["verdict"]["headline"] == headline(c) and view["method"] == method_line(c)
    assert view["verdict"]["failures"] == c.gate.failures and view["verdict"]["passed"] is c.gate.passed
    # every delta row, in the model's order, with its numbers untouched
    assert [(r["metric"], r["scope"], r["k"]) for r in view["deltas"]["rows"]] == [(r.metric, r.scope, r.k) for r in c.deltas]
    for shown, row in zip(view["deltas"]["rows"], c.deltas):
        a, b = shown_values(row)  # the means Δ is the difference of; metrics.json's beside them
        assert (shown["a"], shown["b"], shown["delta"], shown["p_adjusted"]) == (a, b, row.reported_delta, row.p_adjusted)
        assert (shown["a_all"], shown["b_all"], shown["all_case"]) == (row.a, row.b, all_case_differs(row))
        assert [shown["ci_lo"], shown["ci_hi"]] == (row.ci95 or [None, None])
    sig, _ = distinct_rows(c.significant_deltas())
    assert [r["label"] for r in view["significant"]["rows"]] == [label_of(r.metric, r.k) for r in sig]  # the registry's
    # flips grouped by case as the terminal report groups them, with both runs' retrieval
    assert [f["id"] for f in view["flips"]["regressions"]] == [g[0].id for g in by_case(c.flips.regressions)]
    c2 = next(f for f in view["flips"]["regressions"] if f["id"] == "c2")
    assert c2["top_b"] == ["notes/wrong.md › # Wrong > ## Place"] and c2["top_a"] == ["notes/x.md › # X"]
    assert (c2["first_hit_a"], c2["first_hit_b"]) == ("2", "—")
    assert view["config_diff"]["rows"] == [{"key": "settings.params.abstain_threshold", "a": "null", "b": "0.5"}]
    # per-domain deltas: every case is in domain "work"
    assert [row["domain"] for row in view["domains"]["rows"]] == ["work"]
    assert view["domains"]["columns"][0] == "Recall@5"  # the registry's short label, as in the other slice tables
    work_recall = next(r for r in c.deltas if r.scope == "domain:work" and r.metric == "recall_any" and r.k == 5)
    assert view["domains"]["rows"][0]["cells"][0]["delta"] == work_recall.reported_delta


def test_intervals_are_the_paired_mean_and_its_bootstrap_interval(ab):
    c = compare_runs("a", "b", results_dir=ab, resamples=R)
    view = compare_view(c)
    by_label = {i["label"]: i for i in view["overall_intervals"]}
    recall = next(r for r in c.deltas if r.scope == "overall" and r.metric == "recall_any" and r.k == 5)
    assert by_label["Recall@5 (any)"] == {
        "label": "Recall@5 (any)", "value": recall.paired_delta, "lo": recall.ci95[0], "hi": recall.ci95[1],
        "tone": "neutral", "significant": False, "title": f"Recall@5 (any): {recall.note}",
    }
    # a metric no paired case changed is left out of the chart, and counted
    unchanged = [r for r in distinct_rows([r for r in c.deltas if r.scope == "overall" and r.ci95 and r.ci95[0] is not None])[0]
                 if not r.n_changed]
    assert view["overall_unchanged"] == len(unchanged) > 0
    assert not any(i["label"] == "error_rate" for i in view["overall_intervals"])


@pytest.mark.parametrize(
    ("diff", "segments"),
    [
        pytest.param("same words", [("same", "same words")], id="no-change"),
        pytest.param("keep [-old one-] {+new+} tail", [("same", "keep "), ("del", "old one"), ("same", " "), ("add", "new"), ("same", " tail")], id="replace"),
        pytest.param("{+all new+}", [("add", "all new")], id="added-only"),
        pytest.param("a [-unclosed", [("same", "a [-unclosed")], id="unclosed-stays-text"),
    ],
)
def test_diff_segments_parse_the_word_diff(diff, segments):
    assert [(s["kind"], s["text"]) for s in diff_segments(diff)] == segments


def _hostile_runs(root: Path) -> None:
    top = [(f"notes/{IMG}.md", f"# {SCRIPT} > ## ok")]
    a = [rec("h1", rank=1, question=f"why {SCRIPT}?", answer=f"old answer {IMG} here", top=top),
         rec("h2", rank=1, question=IMG, top=top)]
    b = [rec("h1", rank=None, question=f"why {SCRIPT}?", answer=f"new answer {SCRIPT} there", top=top),
         rec("h2", rank=1, question=IMG, answer=f"changed {IMG}", top=top)]
    make_run(root, "a", a)
    make_run(root, "b", b, config={"settings": {"params": {"note": SCRIPT}}})


def test_hostile_text_is_escaped_and_the_page_needs_no_network(tmp_path):
    _hostile_runs(tmp_path)
    path = write_compare_report("a", "b", results_dir=tmp_path, resamples=R)
    html = path.read_text(encoding="utf-8")
    assert path == tmp_path / "compare-a-vs-b.html"
    # shown as text (question, answer diff, chunk path and heading, config value) ...
    assert html.count("&lt;script&gt;alert(1)&lt;/script&gt;") >= 4
    assert "&lt;img src=x onerror=alert(2)&gt;" in html
    # ... and never as markup
    assert SCRIPT not in html and "<img" not in html and "alert(1)</script>" not in html
    assert len(re.findall(r"<script\b", html)) == 1  # the page's own inline script, no src
    assert not NETWORK.search(html)
    assert 'http-equiv="Content-Security-Policy"' in html


def test_broken_invariants_still_render_with_the_violations_on_top(tmp_path):
    make_run(tmp_path, "a", RUN_A)
    make_run(tmp_path, "b", RUN_B, dataset_version="e" * 64)
    html = write_compare_report("a", "b", results_dir=tmp_path, resamples=R).read_text(encoding="utf-8")
    banner = html.index('id="invariants"')
    assert banner < html.index('id="significant"')
    assert "compare_runs refuses these runs" in html and "eval sets differ" in html[banner:]
    assert "not comparable: every number" in html
    assert html.count('class="not-comparable"') == len(compare_runs("a", "b", results_dir=tmp_path, resamples=R,
                                                                     ignore_invariants=True).deltas)


def test_ignore_invariants_given_is_not_called_a_refusal(tmp_path):
    make_run(tmp_path, "a", RUN_A)
    make_run(tmp_path, "b", RUN_B, dataset_version="e" * 64)
    c = compare_runs("a", "b", results_dir=tmp_path, resamples=R, ignore_invariants=True)
    view = compare_view(c)
    assert view["invariants"]["refused"] is False and view["invariants"]["ignored"] is True
    assert [nc["which"] for nc in view["invariants"]["not_comparable"]] == ["every number"]


def test_links_to_each_runs_own_report_only_when_it_exists(ab):
    (ab / "a" / "report.html").write_text("<p>run a</p>", encoding="utf-8")
    out = ab / "pages" / "cmp.html"
    html = write_compare_report("a", "b", results_dir=ab, output=out, resamples=R).read_text(encoding="utf-8")
    assert 'href="../a/report.html"' in html and "b/report.html" not in html


def test_default_output_names_are_safe_file_names(tmp_path):
    assert default_compare_output(tmp_path, "a", "b") == tmp_path / "compare-a-vs-b.html"
    assert default_compare_output(tmp_path, "base line/x", "b") == tmp_path / "compare-base_line_x-vs-b.html"


def test_drift_references_link_to_their_notes_in_each_runs_vault(tmp_path):
    # issue 43 item 4: the notes that caused drift were named, not linked.
    from urllib.parse import quote

    vault = tmp_path / "vault"
    odd = 'notes/a "q" & <b>.md'
    for rel in ("notes/c1.md", odd):
        (vault / rel).parent.mkdir(parents=True, exist_ok=True)
        (vault / rel).write_text("# Gold\n\ntext\n", encoding="utf-8")
    a = [rec("c1", answer="the first answer of c1"), rec("c2", answer="the first answer of c2")]
    b = [rec("c1", answer="a wholly new reply"), rec("c2", answer="another new reply")]
    b[0]["references"] = [{"rel_path": odd, "heading_path": "# Gold > ## Step-by-step, A&B"}]
    b[1]["references"] = [{"rel_path": "../outside.md", "heading_path": "# X"}]
    (tmp_path / "outside.md").write_text("x", encoding="utf-8")
    config = {"target": {"kind": "reference", "params": {}, "vault": str(vault)}}
    make_run(tmp_path, "a", a, config=config)
    make_run(tmp_path, "b", b, config=config)
    view = compare_view(compare_runs("a", "b", results_dir=tmp_path, resamples=R))

    cases = {case["id"]: case for case in view["drift"]["cases"]}
    note_uri = (vault / "notes" / "c1.md").resolve().as_uri()
    assert cases["c1"]["references_removed"] == [{"text": "notes/c1.md › # Gold", "href": f"{note_uri}#:~:text=Gold"}]
    odd_uri = (vault / odd).resolve().as_uri()
    assert cases["c1"]["references_added"] == [
        {"text": f"{odd} › # Gold > ## Step-by-step, A&B", "href": f"{odd_uri}#:~:text=Step%2Dby%2Dstep%2C%20A%26B"}
    ]
    # a path that climbs out of the vault is named, never linked
    assert cases["c2"]["references_added"] == [{"text": "../outside.md › # X", "href": None}]

    html = write_compare_report("a", "b", results_dir=tmp_path, resamples=R).read_text(encoding="utf-8")
    assert f'href="{note_uri}#:~:text=Gold"' in html
    assert quote('a "q" & <b>.md') in odd_uri and f'href="{odd_uri}#:~:text=' in html
    assert "<b>" not in html and "&lt;b&gt;.md" in html  # the link text escaped


def test_drift_references_are_named_without_a_vault_to_link_to(tmp_path):
    # an HTTP target's run (no vault in config.json), or a vault gone since the run
    a = [rec("c1", answer="the first answer of c1")]
    b = [rec("c1", answer="a wholly new reply")]
    b[0]["references"] = [{"rel_path": "notes/new.md", "heading_path": "# New"}]
    make_run(tmp_path, "a", a)
    make_run(tmp_path, "b", b, config={"target": {"kind": "reference", "params": {}, "vault": str(tmp_path / "gone")}})
    case = compare_view(compare_runs("a", "b", results_dir=tmp_path, resamples=R))["drift"]["cases"][0]
    assert case["references_removed"] == [{"text": "notes/c1.md › # Gold", "href": None}]
    assert case["references_added"] == [{"text": "notes/new.md › # New", "href": None}]
    html = write_compare_report("a", "b", results_dir=tmp_path, resamples=R).read_text(encoding="utf-8")
    assert '<span class="mono">notes/new.md › # New</span>' in html
