"""Issue 41 item 6: the studio in a real browser (Debian's chromium through Playwright).

A labeling session end to end, by keyboard and mouse as a person does it: open the printed
URL, walk the unlabeled queue, select a run's chunk, write key facts, mark a case
unanswerable, take a support from a note's outline, close the tab with key facts typed and
unsaved, reopen it, label a conversation's turn. The eval set file must then equal, byte for
byte, what the terminal labeler's own functions write for the same choices. Two tabs on one
case: the second edit is refused and shown, never written over the first. Every page passes
axe-core's accessibility rules, and no hostile text ever runs (no dialog, no page error).
"""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from evalkit.authoring.labeler import LabelSession
from evalkit.authoring.labeling import EvalSetFile
from evalkit.studio.project import StudioProject
from tests.studio_project import add_second_run, running_studio, write_project


@pytest.fixture
def studio(tmp_path: Path) -> Iterator[tuple[dict[str, Path], str]]:
    # in a thread of its own: the run (asyncio.run) must not meet Playwright's event loop
    made: dict[str, Path] = {}
    maker = threading.Thread(target=lambda: made.update(write_project(tmp_path)))
    maker.start()
    maker.join()
    p = made
    add_second_run(p["results"])
    (tmp_path / "original.jsonl").write_bytes(p["eval_set"].read_bytes())
    project = StudioProject([p["eval_set"]], p["vault"], p["results"], root=p["root"])
    with running_studio(project) as url:
        yield p, url


class Watch:
    """What must not happen on a studio page: a dialog (injected script ran), a page error, a
    console error, a request to anywhere but the studio."""

    def __init__(self, origin: str):
        self.origin = origin
        self.bad: list[str] = []

    def attach(self, page: Any) -> Any:
        page.on("dialog", lambda d: (self.bad.append(f"dialog: {d.message}"), d.dismiss()))
        page.on("pageerror", lambda e: self.bad.append(f"page error: {e}"))
        page.on("console", lambda m: self.bad.append(f"console: {m.text}") if m.type == "error" else None)
        page.on("request", lambda r: None if r.url.startswith(self.origin) or r.url.startswith("data:") else self.bad.append(f"request: {r.url}"))
        return page


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def _act(page: Any, do: Any) -> None:
    """An edit: the page posts it, then reloads with the case as written."""
    with page.expect_navigation():
        do()


def _chunks(p: dict[str, Path], case_id: str) -> list[dict[str, Any]]:
    for line in (p["results"] / "r1" / "results.jsonl").read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        if record["test_case_id"] == case_id:
            return record["retrieved_chunks"]
    raise AssertionError(case_id)


def test_a_labeling_session_writes_what_the_terminal_labeler_writes(browser: Any, studio: tuple[dict[str, Path], str]) -> None:
    p, url = studio
    origin = _origin(url)
    watch = Watch(origin)
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = watch.attach(context.new_page())
    page.goto(url)  # the printed URL: the token becomes a cookie
    assert urlsplit(page.url).query == "" and page.get_by_role("heading", name="evalkit studio").is_visible()

    page.goto(f"{origin}/queue?set=eval_set.jsonl&filter=unlabeled&run=r1")
    page.keyboard.press("j")
    _act(page, lambda: page.keyboard.press("Enter"))
    assert page.locator("h1").inner_text().startswith("g-1")
    _act(page, lambda: page.keyboard.press("1"))  # the run's rank-1 chunk: # Garden > ## Tomatoes
    assert "Drop support 0" in page.locator(".chunk").first.inner_text()
    page.keyboard.press("f")
    page.keyboard.type("in May")
    _act(page, lambda: page.keyboard.press("Control+Enter"))
    assert page.locator("#facts").input_value() == "in May"

    _act(page, lambda: page.keyboard.press("j"))  # g-1 left the unlabeled queue; the next one is g-3
    assert page.locator("h1").inner_text().startswith("g-3")
    _act(page, lambda: page.keyboard.press("u"))
    assert page.get_by_role("button", name="Unanswerable (u)").get_attribute("aria-pressed") == "true"

    _act(page, lambda: page.keyboard.press("j"))
    assert page.locator("h1").inner_text().startswith("g-4")  # the hostile one: its text stays text
    _act(page, lambda: page.get_by_role("link", name="car/Car.md").click())
    _act(page, lambda: page.get_by_role("button", name="use # Car > ## Tyres as a support").click())
    assert page.get_by_role("button", name="drop support 0 covering # Car > ## Tyres").is_visible()
    # words selected in the note's text, under ## Tyres, become that support's snippet (`s`)
    page.locator("#L9").evaluate("""line => { const t = line.lastChild; const r = document.createRange();
        r.setStart(t, 0); r.setEnd(t, 'Winter tyres go on in November'.length);
        getSelection().removeAllRanges(); getSelection().addRange(r); }""")
    _act(page, lambda: page.keyboard.press("s"))
    assert page.locator(".snippet").all_inner_texts() == ["Winter tyres go on in November"]

    _act(page, lambda: page.keyboard.press("j"))
    assert page.locator("h1").inner_text().startswith("g-5")
    g5 = page.url
    page.keyboard.press("f")
    page.keyboard.type("no moon base")
    page.close()  # mid-edit: typed, never saved

    page = watch.attach(context.new_page())
    page.goto(g5)
    assert page.locator("#facts").input_value() == "no moon base"
    assert page.locator("#draft").inner_text() == "unsaved draft restored: save it or edit it"
    _act(page, lambda: page.get_by_role("button", name="Save key facts (Ctrl+Enter)").click())
    assert page.locator("#draft").inner_text() == ""

    _act(page, lambda: page.keyboard.press("j"))
    assert page.locator("h1").inner_text().startswith("c-1#1")
    assert page.get_by_role("list", name="turns of this conversation").is_visible()
    _act(page, lambda: page.keyboard.press("1"))
    context.close()
    assert watch.bad == []

    # The terminal labeler, the same choices, one session and one save.
    terminal = p["root"] / "original.jsonl"
    session = LabelSession(EvalSetFile(terminal), ["g-1", "g-3", "g-4", "g-5", "c-1#1"])
    session.set_chunks(_chunks(p, "g-1"))
    session.toggle(0)
    session.set_key_facts(["in May"])
    session.next()
    session.unanswerable()
    session.next()
    session.set_chunks([{"rel_path": "car/Car.md", "heading_path": "# Car > ## Tyres"}])
    session.toggle(0)
    session.add_snippet("Winter tyres go on in November", 0)
    session.next()
    session.set_key_facts(["no moon base"])
    session.next()
    session.set_chunks(_chunks(p, "c-1#1"))
    session.toggle(0)
    session.save()
    assert p["eval_set"].read_bytes() == terminal.read_bytes()
    assert EvalSetFile(terminal).case("g-1")["gold_supports"] == [{"rel_path": "garden/Garden.md", "heading_path": "# Garden > ## Tomatoes"}]


def test_two_tabs_on_one_case_the_second_edit_is_shown_as_a_conflict(browser: Any, studio: tuple[dict[str, Path], str]) -> None:
    p, url = studio
    origin = _origin(url)
    watch = Watch(origin)
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    first = watch.attach(context.new_page())
    first.goto(url)
    case_url = f"{origin}/case?set=eval_set.jsonl&id=g-2&run=r1"
    first.goto(case_url)
    second = watch.attach(context.new_page())
    second.goto(case_url)

    _act(first, lambda: first.get_by_role("button", name="remove support 0").click())
    assert EvalSetFile(p["eval_set"]).case("g-2")["gold_supports"] == []
    written = p["eval_set"].read_bytes()

    second.keyboard.press("u")  # made against the page as it loaded: refused
    dialog = second.get_by_role("alertdialog")
    dialog.wait_for()
    assert "changed since the page was loaded" in dialog.inner_text()
    assert json.loads(second.locator("#conflict-current").inner_text())["gold_supports"] == []
    assert p["eval_set"].read_bytes() == written  # nothing written over the first tab's edit

    _act(second, lambda: second.get_by_role("button", name="Load the current version").click())
    _act(second, lambda: second.keyboard.press("u"))  # redone on the case as it is now
    case = EvalSetFile(p["eval_set"]).case("g-2")
    assert (case["answerable"], case["gold_supports"]) == (False, [])
    context.close()
    # chromium logs the refused POST itself; nothing else went wrong
    assert watch.bad == ["console: Failed to load resource: the server responded with a status of 409 (Conflict)"]


def test_grading_by_keyboard_writes_the_terminal_graders_lines(browser: Any, studio: tuple[dict[str, Path], str]) -> None:
    from evalkit.judges.grades import grade_cases, read_grade_lines
    from evalkit.store.runs import RunDir

    p, url = studio
    origin = _origin(url)
    watch = Watch(origin)
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = watch.attach(context.new_page())
    page.goto(url)
    page.goto(f"{origin}/grades?run=r1&grader=ana&filter=ungraded")
    page.keyboard.press("j")
    _act(page, lambda: page.keyboard.press("Enter"))
    assert page.locator("h1").inner_text().startswith("g-1")
    page.keyboard.press("2")
    page.keyboard.press("3")
    _act(page, lambda: page.keyboard.press("Enter"))  # saved, and on to the next answer
    assert page.locator("h1").inner_text().startswith("g-2")
    page.get_by_role("radio", name="5").first.check()
    page.keyboard.press("4")  # the next key goes to correctness
    _act(page, lambda: page.get_by_role("button", name="Save grade (Enter)").click())
    page.goto(f"{origin}/grade?run=r1&id=g-2&grader=ana")
    assert page.locator("#grade-status").inner_text().startswith("Graded: groundedness 5, correctness 4")
    context.close()
    assert watch.bad == []

    terminal = p["root"] / "terminal-results"
    shutil.copytree(p["results"], terminal, ignore=shutil.ignore_patterns("human_grades.jsonl"))
    run = RunDir.open(terminal, "r1")
    records = {r["test_case_id"]: r for r in run.read_results()}
    answers = iter(["2", "3", "5", "4"])
    grade_cases(run, [records["g-1"], records["g-2"]], ask=lambda _: next(answers), show=lambda _: None, grader="ana")

    def lines(results: Path) -> list[dict[str, Any]]:
        return [{k: v for k, v in g.items() if k != "graded_at"} for g in read_grade_lines(RunDir.open(results, "r1"))]

    assert lines(p["results"]) == lines(terminal) and len(lines(terminal)) == 2


def test_side_by_side_review_by_keyboard_writes_compares_lines(browser: Any, studio: tuple[dict[str, Path], str]) -> None:
    from evalkit.compare.pairwise import append_choice, read_choice_lines
    from evalkit.store.runs import RunDir

    p, url = studio
    origin = _origin(url)
    watch = Watch(origin)
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = watch.attach(context.new_page())
    page.goto(url)
    with page.expect_navigation():
        page.get_by_role("button", name="Side by side").click()  # the home page offers the two runs
    assert "/pairs?" in page.url
    page.goto(f"{origin}/pairs?a=r1&b=r2&reviewer=ana")
    page.keyboard.press("j")
    _act(page, lambda: page.keyboard.press("Enter"))
    assert page.locator("h1").inner_text().startswith("g-2")
    _act(page, lambda: page.keyboard.press("a"))  # saved, and on to the next changed case
    assert page.locator("h1").inner_text().startswith("g-4")
    _act(page, lambda: page.keyboard.press("e"))
    page.goto(f"{origin}/pair?a=r1&b=r2&id=g-4&reviewer=ana")
    assert page.locator("#pair-status").inner_text().startswith("Your choice: equal")
    context.close()
    assert watch.bad == []  # the hostile answer ran nothing

    run_b = RunDir.open(p["results"], "r2")
    got = [{k: v for k, v in x.items() if k != "reviewed_at"} for x in read_choice_lines(run_b)]
    terminal = p["root"] / "terminal-results"
    shutil.copytree(p["results"], terminal, ignore=shutil.ignore_patterns("pairwise_review.jsonl"))
    from evalkit.compare.pairwise import answer_sha256

    records = {run: {r["test_case_id"]: r for r in RunDir.open(terminal, run).read_results()} for run in ("r1", "r2")}
    for cid, choice in (("g-2", "a"), ("g-4", "equal")):
        append_choice(RunDir.open(terminal, "r2"), {"test_case_id": cid, "run_a": "r1", "run_b": "r2", "choice": choice, "reviewer": "ana",
                                                    "answer_a_sha256": answer_sha256(records["r1"][cid]),
                                                    "answer_b_sha256": answer_sha256(records["r2"][cid])})
    want = [{k: v for k, v in x.items() if k != "reviewed_at"} for x in read_choice_lines(RunDir.open(terminal, "r2"))]
    assert got == want and len(got) == 2


def test_dropping_a_tag_from_cases_selected_by_keyboard(browser: Any, studio: tuple[dict[str, Path], str]) -> None:
    p, url = studio
    origin = _origin(url)
    watch = Watch(origin)
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = watch.attach(context.new_page())
    page.goto(url)
    page.goto(f"{origin}/queue?set=eval_set.jsonl")
    page.keyboard.press("j")
    page.keyboard.press("x")  # g-1
    page.keyboard.press("j")
    page.keyboard.press("j")
    page.keyboard.press("x")  # g-3
    assert page.locator("#n-picked").inner_text() == "2 selected"
    page.locator("#drop-tag").select_option("garden")
    _act(page, lambda: page.locator("button[data-drop=tag]").click())
    context.close()
    assert watch.bad == []
    cases = {c["id"]: c for c in map(json.loads, p["eval_set"].read_text(encoding="utf-8").splitlines())}
    assert cases["g-1"]["tags"] == [] and cases["g-3"]["tags"] == [] and cases["g-2"]["tags"] == ["car"]


def test_every_page_passes_axe_and_names_its_controls(browser: Any, studio: tuple[dict[str, Path], str]) -> None:
    from axe_playwright_python.sync_playwright import Axe

    _, url = studio
    origin = _origin(url)
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    page.goto(url)
    axe = Axe()
    for path in ("/", "/queue?set=eval_set.jsonl&run=r1",
                 "/case?set=eval_set.jsonl&id=g-4&run=r1&note=Hostile.md&q=inside",
                 "/case?set=eval_set.jsonl&id=c-1%232&run=r1&note=car/Car.md", "/grades?run=r1&grader=ana",
                 "/grade?run=r1&id=g-4&grader=ana", "/fixes?set=eval_set.jsonl", "/pairs?a=r1&b=r2&reviewer=ana",
                 "/pair?a=r1&b=r2&id=g-4&reviewer=ana", "/rename?set=eval_set.jsonl&from=car/Car.md&to=garden/Garden.md"):
        page.goto(origin + path)
        results = axe.run(page)
        violations = [(v["id"], v["impact"], [n["target"] for n in v["nodes"]][:3]) for v in results.response["violations"]]
        assert violations == [], (path, violations)
        assert len(results.response["passes"]) >= 10  # axe ran (its script got past the page's CSP)
        # labels and roles, also by hand: every control has a name a screen reader reads
        for control in page.locator("button, select, textarea, input:not([type=hidden])").all():
            assert control.evaluate("e => e.labels?.length > 0 || !!e.getAttribute('aria-label') || !!e.textContent.trim()"), path
    context.close()


@pytest.mark.parametrize("width", [1400, 800])
def test_the_layout_holds_at_1400_and_800_pixels(browser: Any, studio: tuple[dict[str, Path], str], width: int) -> None:
    # wide: the case and the notes side by side; narrow: one above the other; never a page
    # wider than the window (long paths, chunk text and note lines wrap)
    _, url = studio
    origin = _origin(url)
    context = browser.new_context(viewport={"width": width, "height": 900})
    watch = Watch(origin)
    page = watch.attach(context.new_page())
    page.goto(url)
    for path in ("/queue?set=eval_set.jsonl&run=r1", "/case?set=eval_set.jsonl&id=g-4&run=r1&note=Hostile.md&q=inside",
                 "/grade?run=r1&id=g-4&grader=ana", "/pair?a=r1&b=r2&id=g-4&reviewer=ana"):
        page.goto(origin + path)
        assert page.evaluate("document.documentElement.scrollWidth") <= width, (path, width)
        cols = page.locator(".col").all()
        if cols:
            first, second = cols[0].bounding_box(), cols[1].bounding_box()
            if width == 1400:
                assert second["x"] > first["x"] + first["width"] - 1 and abs(second["y"] - first["y"]) < 1, path
            else:
                assert second["y"] >= first["y"] + first["height"] - 1 and abs(second["x"] - first["x"]) < 1, path
    context.close()
    assert watch.bad == []  # the hostile question, note, chunk and answer ran nothing


def test_reviewing_candidates_by_keyboard_writes_the_terminal_reviews_version(browser: Any, tmp_path: Path) -> None:
    from evalkit.authoring.review import Choice, ReviewSession, apply_edits, run_review
    from tests.unit.test_studio_reviewing import _project

    made: dict[str, Any] = {}
    maker = threading.Thread(target=lambda: made.update(zip(("s", "t"), (_project(tmp_path / "s"), _project(tmp_path / "t")))))
    maker.start()
    maker.join()
    (p, review), (q, _) = made["s"], made["t"]
    project = StudioProject([p["eval_set"]], p["vault"], p["results"], root=p["root"], review=review)
    with running_studio(project) as url:
        origin = _origin(url)
        watch = Watch(origin)
        context = browser.new_context(viewport={"width": 1400, "height": 900})
        page = watch.attach(context.new_page())
        page.goto(url)
        page.goto(origin + "/review")
        page.keyboard.press("j")
        _act(page, lambda: page.keyboard.press("Enter"))
        page.get_by_label("Reviewer").fill("ana")
        page.get_by_label("Expected key facts (one per line)").fill("in May\nafter the last frost")
        page.keyboard.press("Escape")
        _act(page, lambda: page.keyboard.press("a"))  # accepted as edited; on to the next pending
        assert page.locator("h1").inner_text().startswith("gen-2")
        _act(page, lambda: page.keyboard.press("r"))
        assert page.locator("h1").inner_text().startswith("gen-3")
        _act(page, lambda: page.keyboard.press("a"))  # the last: back to the list
        assert page.url == origin + "/review"
        from axe_playwright_python.sync_playwright import Axe

        for path in ("/review", "/review/case?id=gen-2"):
            page.goto(origin + path)
            assert Axe().run(page).response["violations"] == [], path
        context.close()
    assert watch.bad == []
    session = ReviewSession(q["root"] / "candidates" / "candidates.jsonl", q["eval_set"], results_dir=q["results"], reviewer="ana")
    edited = apply_edits(session.candidates_all[0], key_facts=["in May", "after the last frost"])
    choices = iter([Choice("accept", edited), Choice("reject"), Choice("accept")])
    run_review(session, lambda c, n, total: next(choices))
    assert (p["root"] / "eval_set.v2.jsonl").read_bytes() == (q["root"] / "eval_set.v2.jsonl").read_bytes()
