"""The run report as an HTML string (no browser): hostile run text is escaped, the sections
and numbers are there, the page is self-contained, and the CLI writes it (exit 0 / 2)."""

from __future__ import annotations

import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evalkit.errors import RunNotFound
from evalkit.report.html.env import environment, fmt_ms, fmt_num, fmt_pct, fmt_signed, fmt_usd, static_text
from evalkit.report.html.page import render_page
from evalkit.report.html.run import write_run_report
from tests.browser.hostile import HOSTILE_DOMAIN, HOSTILE_PATH, HOSTILE_TAG, IMG, SCRIPT, make_hostile_run

N_CASES = 12


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    return make_hostile_run(tmp_path_factory.mktemp("hostile"), n=N_CASES)


@pytest.fixture(scope="module")
def html(hostile: tuple[Path, str]) -> str:
    results, run_id = hostile
    path = write_run_report(run_id, results_dir=results)
    assert path == results / run_id / "report.html"
    return path.read_text(encoding="utf-8")


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def _tags(html: str) -> list[tuple[str, dict[str, str | None]]]:
    parser = _Tags()
    parser.feed(html)
    return parser.tags


def test_hostile_text_is_escaped_everywhere(html: str) -> None:
    for raw in (SCRIPT, IMG, HOSTILE_TAG, HOSTILE_DOMAIN, HOSTILE_PATH, "<svg onload"):
        assert raw not in html, raw
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html  # shown, as text
    assert "&lt;b&gt;bold&lt;/b&gt;" in html  # the domain, in the breakdown table
    tags = _tags(html)
    assert [t for t, _ in tags if t == "script"] == ["script"]  # ours only
    assert not [t for t, _ in tags if t in ("img", "iframe", "object", "embed")]
    assert not [(t, a) for t, attrs in tags for a in attrs if a.lower().startswith("on")]


def test_the_page_is_self_contained(html: str) -> None:
    tags = _tags(html)
    for tag, attrs in tags:
        for name in ("src", "href", "action", "srcset", "poster", "data"):
            value = attrs.get(name)
            if value is not None:
                assert value.startswith(("#", "data:")), (tag, name, value)
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", html, re.I)
    assert "@import" not in html and "url(" not in html
    (csp,) = [a["content"] for t, a in tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"]
    assert "default-src 'none'" in csp and "img-src data:" in csp


def test_sections_numbers_and_cases_are_there(html: str, hostile: tuple[Path, str]) -> None:
    results, run_id = hostile
    for anchor in ("headline", "at-k", "breakdowns", "latency", "cost", "judge", "cases", "config"):
        assert f'id="{anchor}"' in html
    for table in ("by-category", "by-tag", "by-difficulty", "by-domain", "by-answerable", "cases-table", "at-k-table"):
        assert f'id="{table}"' in html
    assert 'class="sortable' in html and "<svg" in html
    assert f"Run {run_id}" in html
    assert len(re.findall(r'<tr data-category=', html)) == N_CASES
    for i in range(N_CASES):
        assert f'data-id="h-{i:03d}"' in html
    assert 'data-filter-key="category"' in html and 'data-filter-key="outcome"' in html
    import orjson

    agg = orjson.loads((results / run_id / "metrics.json").read_bytes())["aggregate_metrics"]
    assert fmt_num(agg["recall_at_k_avg"]) in html  # the stored number, as stored
    assert "Recall@5 (any)" in html  # the primary K of k=[5, 3]
    assert '<td data-sort="3">3</td>' in html and '<td data-sort="5">5</td>' in html  # the per-K rows


def test_the_per_case_table_is_capped_with_a_note(hostile: tuple[Path, str], tmp_path: Path) -> None:
    results, run_id = hostile
    out = write_run_report(run_id, results_dir=results, output=tmp_path / "r.html", max_cases=5)
    text = out.read_text(encoding="utf-8")
    ids = re.findall(r'data-id="(h-\d+)"', text)
    assert ids == [f"h-{i:03d}" for i in range(5)]  # the first five of the eval set
    assert f"Showing the first 5 of {N_CASES} cases" in text


def test_a_run_without_metrics_still_reports_its_cases(hostile: tuple[Path, str], tmp_path: Path) -> None:
    results, run_id = hostile
    copy = tmp_path / "results" / run_id
    shutil.copytree(results / run_id, copy)
    (copy / "metrics.json").unlink()
    text = write_run_report(run_id, results_dir=tmp_path / "results").read_text(encoding="utf-8")
    assert "has no metrics.json yet" in text
    assert len(re.findall(r'<tr data-category=', text)) == N_CASES


def test_an_unknown_run_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(RunNotFound):
        write_run_report("nope", results_dir=tmp_path)


def test_cli_writes_the_report_and_prints_its_path(hostile: tuple[Path, str], tmp_path: Path) -> None:
    from evalkit.cli.main import app

    results, run_id = hostile
    out = tmp_path / "x.html"
    r = CliRunner().invoke(app, ["report", "--run-id", run_id, "--results-dir", str(results), "--output", str(out)])
    assert r.exit_code == 0, r.output
    assert r.stdout.strip() == str(out) and out.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")


@pytest.mark.parametrize(
    "args, message",
    [
        (["--run-id", "nope"], "no run 'nope'"),
        ([], "give exactly one of --run-id"),
        (["--run-id", "a", "--trend"], "(got --run-id and --trend)"),
        (["--run-id", "bad id"], "--run-id"),
    ],
)
def test_cli_bad_input_exits_2_with_one_line(args: list[str], message: str, tmp_path: Path) -> None:
    from evalkit.cli.report import app

    r = CliRunner().invoke(app, [*args, "--results-dir", str(tmp_path)])
    assert r.exit_code == 2, r.output
    assert message in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_environment_autoescapes_and_is_strict() -> None:
    env = environment()
    assert env.from_string("{{ x }}").render(x="<b>") == "&lt;b&gt;"
    with pytest.raises(Exception, match="undefined"):
        env.from_string("{{ missing }}").render()
    with pytest.raises(Exception, match="undefined"):
        render_page("run.html.j2")  # no `page`, no `run`: an error, not a blank page


def test_static_files_inline_and_never_close_their_element() -> None:
    for name in ("report.css", "report.js"):
        text = str(static_text(name)).lower()
        assert text and "</script" not in text and "</style" not in text


@pytest.mark.parametrize(
    "fn, value, expected",
    [
        (fmt_num, 0.86274, "0.863"), (fmt_num, 1234, "1,234"), (fmt_num, None, "—"), (fmt_num, float("nan"), "—"),
        (fmt_num, True, "yes"), (fmt_pct, 0.8627, "86.3%"), (fmt_pct, None, "—"),
        (fmt_signed, 0.05, "+0.050"), (fmt_signed, -0.05, "−0.050"), (fmt_signed, 0.0, "±0.000"), (fmt_signed, None, "—"),
        (fmt_ms, 3.94, "3.9 ms"), (fmt_ms, 1834.2, "1,834 ms"), (fmt_ms, None, "—"), (fmt_usd, 0.00012, "$0.0001"),
    ],
)
def test_number_filters(fn, value, expected) -> None:
    assert fn(value) == expected
