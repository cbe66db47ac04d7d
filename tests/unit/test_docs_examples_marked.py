"""Every output block of the docs is marked as made by its command or as illustrative (issue 43
item 6), and docs/tools/examples.py's normalization hides only what must vary between runs.
tests/integration/test_docs_examples.py runs the marked commands."""

from __future__ import annotations

from pathlib import Path

from tests.support import docs_examples_tool

ROOT = Path(__file__).resolve().parents[2]


_tool = docs_examples_tool


def test_every_output_block_is_generated_or_illustrative() -> None:
    assert _tool().unmarked() == []


def test_every_marker_reads_and_names_a_declared_session() -> None:
    sessions, examples, problems = _tool().collect()
    assert problems == []
    assert {"sample-pair"} <= set(sessions) and len(examples) >= 5


def test_an_unmarked_output_block_is_named(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# P\n\n```bash\nevalkit run\n```\n\n```text\nPASS\n```\n\n<!-- illustrative: a real judge -->\n"
                    "````markdown\n```text\nnested\n```\n````\n", encoding="utf-8")
    found = _tool().unmarked([page])
    assert len(found) == 1 and found[0].startswith(f"{page}:7: an output block (text)")


def test_normalizing_hides_run_ids_times_and_latencies_but_no_metric() -> None:
    normalize = _tool().normalize
    doc = "run 20260102T030405Z-1a2b3c at 2026-01-02T03:04:05Z\n| latency_p50_ms | 1.81 | 4.66 | +2.85 |\n" \
          "│ Recall@5   │  0.879 │  58 │\n───────\n"
    run = "run 20261129T183100Z-9f8e7d at 2026-11-29T18:31:00.5+00:00\n| latency_p50_ms | 12.5 | 3.1 | -9.40 |\n" \
          "│ Recall@5 │ 0.879 │ 58 │\n──────────────\n"
    assert normalize(doc, []) == normalize(run, [])
    assert normalize(doc, []) != normalize(doc.replace("0.879", "0.897"), [])
    assert normalize(doc, []) != normalize(doc.replace("│  58 │", "│  59 │"), [])
    assert normalize("the firewall blocks 12 ports", []) != normalize("the firewall blocks 13 ports", [])
    assert normalize("0.3  66  4.9/33.4", [r"[\d.]+/[\d.]+"]) == normalize("0.3 66 2.1/7.0", [r"[\d.]+/[\d.]+"])


def test_an_excerpt_keeps_its_order_and_its_adjacent_lines() -> None:
    is_excerpt = _tool().is_excerpt_of
    out = ["a", "b", "c", "d", "e"]
    assert is_excerpt(["a", "b", "…", "d"], out)
    assert not is_excerpt(["a", "c"], out)  # adjacent in the docs, not in the output
    assert not is_excerpt(["d", "…", "b"], out)


def test_a_block_generated_by_another_test_names_a_test_that_reads_its_page() -> None:
    named = _tool().generated_by()
    assert named
    for block, test in named:
        path = ROOT / test
        assert path.is_file() and path.name.startswith("test_"), (block.where, test)
        assert block.page.name in path.read_text(encoding="utf-8"), (block.where, test)
