"""The labeler's keys through Textual's test pilot, over the in-process reference chatbot.

Issue 11's scenario: select two chunks, change a depth, add a snippet, quit; resume and
mark a case unanswerable, quit. The file then holds exactly those supports, and every
line the session did not edit is byte-identical.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("textual")

from evalkit.authoring.labeler import open_session  # noqa: E402
from evalkit.cli.label_app import LabelApp  # noqa: E402
from evalkit.targets import ReferenceTarget  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _unlabel(line: bytes) -> bytes:
    obj = json.loads(line)
    obj["gold_supports"] = []
    return (json.dumps(obj, ensure_ascii=False) + "\n").encode()


@pytest.fixture
def eval_file(tmp_path: Path) -> tuple[Path, list[bytes]]:
    # sv-001..sv-005 of the shipped set; sv-002 and sv-004 are made unlabeled (the input).
    lines = (ROOT / "eval_set.jsonl").read_bytes().splitlines(keepends=True)[:5]
    lines[1], lines[3] = _unlabel(lines[1]), _unlabel(lines[3])
    path = tmp_path / "set.jsonl"
    path.write_bytes(b"".join(lines))
    return path, lines


async def _session_run(path: Path, tmp_path: Path, keys: list[list[str]]) -> LabelApp:
    session = open_session(path, results_dir=tmp_path / "results")
    app = LabelApp(session, ReferenceTarget(ROOT / "sample_vault"), k=20)
    async with app.run_test(size=(120, 40)) as pilot:
        for group in keys:
            for _ in range(200):  # each case's chunks arrive from a worker
                if app.loaded:
                    break
                await pilot.pause(0.02)
            await pilot.press(*group)
            await pilot.pause()
    return app


def test_pilot_scenario_select_depth_snippet_quit_resume_unanswerable(eval_file: tuple[Path, list[bytes]], tmp_path: Path) -> None:
    path, before = eval_file

    # Session 1, case sv-002 ("What's the name of my bread starter?"). The reference chatbot
    # ranks: 1 "# Sourdough > ## The starter", 2 "# Sourdough > ## Country loaf > ### Dough".
    # space on rank 1, down + space on rank 2, d on rank 2, up + s + enter (best sentence) on rank 1, q.
    app = asyncio.run(_session_run(path, tmp_path, [["space", "down", "space", "d", "up", "s"], ["enter", "q"]]))
    assert app.saved_to == path

    after = path.read_bytes().splitlines(keepends=True)
    assert [i for i, (a, b) in enumerate(zip(before, after)) if a != b] == [1]
    assert json.loads(after[1])["gold_supports"] == [
        {"rel_path": "personal/recipes/Sourdough.md", "heading_path": "# Sourdough > ## The starter", "snippets": ["Her name is Gus (yes, her)."]},
        {"rel_path": "personal/recipes/Sourdough.md", "heading_path": "# Sourdough > ## Country loaf"},
    ]

    # Session 2 (resume): only sv-004 is still unlabeled. u marks it unanswerable, q saves.
    assert open_session(path, results_dir=tmp_path / "results").case_ids == ["sv-004"]
    asyncio.run(_session_run(path, tmp_path, [["u", "q"]]))
    final = path.read_bytes().splitlines(keepends=True)
    assert [i for i, (a, b) in enumerate(zip(before, final)) if a != b] == [1, 3]
    assert final[1] == after[1]
    case4 = json.loads(final[3])
    assert (case4["answerable"], case4["gold_supports"]) == (False, [])
    assert {k: v for k, v in case4.items() if k != "answerable"} == {k: v for k, v in json.loads(before[3]).items() if k != "answerable"}


def test_the_chunk_list_follows_the_cursor_in_a_small_terminal(eval_file: tuple[Path, list[bytes]], tmp_path: Path) -> None:
    path, _ = eval_file

    async def go() -> tuple[int, float, int]:
        session = open_session(path, results_dir=tmp_path / "results")
        app = LabelApp(session, ReferenceTarget(ROOT / "sample_vault"), k=20)
        async with app.run_test(size=(100, 24)) as pilot:  # a 24-line terminal: 20 chunks do not fit
            for _ in range(200):
                if app.loaded:
                    break
                await pilot.pause(0.02)
            await pilot.press(*["down"] * 15)
            await pilot.pause()
            pane = app.query_one("#chunks")
            return session.cursor, pane.scroll_y, pane.scrollable_content_region.height

    cursor, top, visible = asyncio.run(go())
    assert cursor == 15  # the reference chatbot returns more than 16 chunks for this question
    assert top <= cursor < top + visible  # the highlighted chunk is on screen


def test_at_80x24_three_chunks_and_the_whole_footer_are_on_screen(tmp_path: Path) -> None:
    # issue 28 item 10: at 80x24 the labeler showed about 1.5 chunks (long rows wrapped) and
    # cut the footer (its keys ran to column 119). sv-044 has three supports: a tall case pane.
    lines = [ln for ln in (ROOT / "eval_set.jsonl").read_bytes().splitlines(keepends=True) if b'"sv-044"' in ln]
    path = tmp_path / "set.jsonl"
    path.write_bytes(b"".join(lines))

    async def go() -> tuple[Any, ...]:
        from textual.widgets import Footer
        from textual.widgets._footer import FooterKey

        session = open_session(path, results_dir=tmp_path / "results", all_cases=True)
        app = LabelApp(session, ReferenceTarget(ROOT / "sample_vault"), k=20)
        async with app.run_test(size=(80, 24)) as pilot:
            for _ in range(200):
                if app.loaded:
                    break
                await pilot.pause(0.02)
            await pilot.pause()
            screen = app.screen.region
            footer = app.query_one(Footer)
            keys = [k.region for k in app.query(FooterKey)]
            pane = app.query_one("#chunks")
            return (screen, footer.region, keys, pane.scrollable_content_region, len(session.case.chunks or []),
                    app.query_one("#chunk-list").region.height, {b.key for b in app.BINDINGS if b.show})

    screen, footer, keys, chunk_rows, n_chunks, list_height, shown = asyncio.run(go())
    assert screen.contains_region(footer) and footer.height == 1
    assert len(keys) == len(shown) == 8  # every key the footer names, none behind the palette
    assert all(screen.contains_region(k) for k in keys)  # the whole footer: no key past column 80
    assert n_chunks >= 3 and list_height == n_chunks  # one line per chunk: no row wraps
    assert screen.contains_region(chunk_rows) and chunk_rows.height >= 3  # at least 3 chunks visible
