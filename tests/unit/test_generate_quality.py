"""Candidates worth reviewing (issue 28 item 7): the offline template screens, the heading
context, the top-heading anchor span, --mix applied with --limit, and the output file mode."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evalkit.authoring.generate import (
    Candidate,
    apply_mix,
    extract_candidates,
    filter_candidates,
    generate_candidates,
    is_bare_term,
)
from evalkit.authoring.screening import VaultWords, defines, screen_reason, vault_words
from evalkit.cli.main import app
from evalkit.evalset.anchorcheck import check_anchors, corpus_from_vault
from evalkit.evalset.anchors import match_support

ROOT = Path(__file__).resolve().parents[2]
TASKS = ROOT.parent / "shared" / "corpora" / "obsidian-tasks" / "vault"

# The issue's three examples, each from the kind of line that made it.
ISSUE_NOTE = """\
# Deploy process

## When you may deploy

- Friday: before 12:00 CET only.

## Follow-ups

- Alex: HNSW parameters (`m = 16`) to start.

Ask Alex before changing them.

## Conversions

| Amount | Metric |
| --- | --- |
| 1 cup flour | 120 g |
"""


def _write(root: Path, name: str, text: str) -> Path:
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return root


def _reasons(report: dict) -> dict[str, str]:
    return {d["question"]: d["reason"] for d in report["filtered_items"]}


def test_the_issue_examples_are_dropped_each_by_its_rule(tmp_path: Path) -> None:
    vault = _write(tmp_path / "v", "Deploy.md", ISSUE_NOTE)
    r = generate_candidates(vault, check_retrieval=False)
    assert r.report["written"] == 0 and r.report["generated"] == 3
    assert _reasons(r.report) == {
        "What is Friday?": "not_a_definition",  # "before 12:00 CET only." says when, not what
        "What is Alex?": "name",  # "Ask Alex": capitalised mid-sentence, never lower case
        "What is 1 cup flour's metric?": "bare_term",  # the subject is a quantity
    }


def test_sample_vault_writes_none_of_the_issue_examples() -> None:
    r = generate_candidates(ROOT / "sample_vault", check_retrieval=False)
    written = {c["question"] for c in r.cases}
    reasons = _reasons(r.report)
    for q in ("What is Friday?", "What is Alex?", "What is 1 cup flour's metric?"):
        assert q not in written and q in reasons, q
    assert reasons["What is Alex?"] == "name"
    assert check_anchors(r.cases, corpus_from_vault(ROOT / "sample_vault")) == []


def test_is_name_needs_a_mid_sentence_capital_and_no_lower_case(tmp_path: Path) -> None:
    words = VaultWords(lower=frozenset({"pharmacy", "crema"}), mid_sentence=frozenset({"Alex", "Pharmacy", "HNSW"}))
    assert words.is_name("Alex")  # "Ask Alex", never "alex"
    assert not words.is_name("Pharmacy")  # "the pharmacy" somewhere: a common word
    assert not words.is_name("Crema")  # only at the start of its glossary line
    assert not words.is_name("HNSW")  # an acronym
    got = vault_words(_write(tmp_path, "n.md", "Ask Alex, Sam and the pharmacy. Pharmacy: open."))
    assert got.is_name("Alex") and got.is_name("Sam") and not got.is_name("Pharmacy")


@pytest.mark.parametrize(
    ("term", "definition", "section", "expected"),
    [
        pytest.param("Crema", "the foam of emulsified oils on top of a shot.", "", True, id="genus-the"),
        pytest.param("Dark launch", "a release hidden behind a flag.", "", True, id="genus-a"),
        pytest.param("Crema", "see below.", "Crema is the foam of emulsified oils.", True, id="X-is-sentence"),
        pytest.param("Friday", "before 12:00 CET only.", "", False, id="a-time"),
        pytest.param("Pharmacy", "the one on the corner of the market.", "", False, id="the-one-points"),
        pytest.param("Weekly active users", "about 11,000 (February 2025).", "", False, id="a-number"),
    ],
)
def test_defines(term: str, definition: str, section: str, expected: bool) -> None:
    assert defines(term, definition, section) is expected


NO_NAMES = VaultWords()


def _def(term: str, definition: str) -> dict[str, str]:
    return {"term": term, "definition": definition, "section": ""}


def _cell(key: str, header: str, value: str, first: str = "Item") -> dict[str, str]:
    return {"key": key, "header": header, "value": value, "first_header": first}


@pytest.mark.parametrize(
    ("pattern", "parts", "reason"),
    [
        pytest.param("definition", _def("The Amazon lodge", "a night walk with tarantulas."), "not_a_definition", id="opens-with-the"),
        pytest.param("definition", _def("The operators are case-sensitive", "they must be capitalised."), "not_a_definition", id="a-clause"),
        pytest.param("definition", _def("Prefers written, async updates", "a short doc first."), "not_a_definition", id="a-list"),
        pytest.param("definition", _def("Crema", "the foam of emulsified oils."), None, id="a-real-definition"),
        pytest.param("table_cell", _cell("template syntax", "Daily Notes", "`due on`", first=""), "table_header", id="matrix"),
        pytest.param("table_cell", _cell("`task.due`", "Type 2", "`TasksDate`"), "table_header", id="numbered-header"),
        pytest.param("table_cell", _cell("`on`", "Tasks 2.0.0 onwards", "matches"), "table_header", id="versioned-header"),
        pytest.param("table_cell", _cell("Syncthing", "What for", "phone photos"), "table_header", id="question-word"),
        pytest.param("table_cell", _cell("Version", "Before", "15.6"), "table_header", id="before-after"),
        pytest.param("table_cell", _cell("Salt", "grams", "15"), "table_header", id="unit"),
        pytest.param("table_cell", _cell("Olive oil", "baker's %", "2"), "table_header", id="percent"),
        pytest.param("table_cell", _cell("Flights, 2 people", "EUR", "412"), "table_header", id="currency"),
        pytest.param("table_cell", _cell("Flight out", "Details", "Fri, AMS 17:40"), "table_header", id="generic"),
        pytest.param("table_cell", _cell("Typhoid", "Valid until", "2022"), "table_header", id="ends-in-preposition"),
        pytest.param("table_cell", _cell("📅 due date", "Text that is added", "📅"), "table_header", id="a-clause-header"),
        pytest.param("table_cell", _cell("Example Task", "TODO", "`- [ ] demo`"), "table_header", id="an-enum-value"),
        pytest.param("table_cell", _cell("Obsidian Hub:", "Link", "https://x"), "table_key", id="a-label"),
        pytest.param("table_cell", _cell("`x`", "Status Type", "`DONE`"), "table_key", id="a-symbol"),
        pytest.param("table_cell", _cell("`weekend`", "Expanded text", "`sat`"), "table_key", id="a-literal"),
        pytest.param("table_cell", _cell("Lena, Jonas", "Q1 focus", "Kestrel"), "table_key", id="two-things"),
        pytest.param("table_cell", _cell("In query results", "Viewing mode", "Reading mode"), "table_key", id="a-condition"),
        pytest.param("table_cell", _cell("(empty)", "Matching files", "`a.md`"), "table_key", id="a-placeholder"),
        pytest.param("table_cell", _cell("[Old Docs](https://x)", "Location", "docs"), "table_key", id="a-link"),
        pytest.param("table_cell", _cell("Number-only tags", "Obsidian", "Tags must<br>contain"), "table_value", id="a-list-cell"),
        pytest.param("table_cell", _cell("Keep", "Behaviour of the action", " ".join(["word"] * 13)), "table_value", id="an-explanation"),
        pytest.param("table_cell", _cell("`task.happens`", "Kind", "``"), "table_value", id="no-value"),
        pytest.param("table_cell", _cell("Jellyfin", "Port", "8096", first="Service"), None, id="a-real-attribute"),
        pytest.param("table_cell", _cell("`query.allTasks`", "Type", "`Task[]`", first="Field"), None, id="an-api-field"),
    ],
)
def test_screen_reason(pattern: str, parts: dict[str, str], reason: str | None) -> None:
    got = screen_reason(pattern, parts, NO_NAMES)
    assert (got[0] if got else None) == reason


def test_bare_terms_days_months_and_quantities() -> None:
    assert is_bare_term("What is Friday?") and is_bare_term("What is May?")
    assert is_bare_term("What is 1 cup flour's metric?")
    assert not is_bare_term("What is Crema?")


# --------------------------------------------------------------------------- heading context


CONTEXT_NOTE = """\
# Deploy process

## Who to ask

`#deploys`. Sam owns the pipeline.

## Alerts

### HighLatency

#### What to do

Check the dashboard first.

### IndexLag

#### What to do

Restart the indexer pods.

## Why use tags in deploy notes?

Tags find every deploy of a service.
"""


def test_a_heading_question_that_leans_on_its_note_gets_the_title_or_its_parent(tmp_path: Path) -> None:
    vault = _write(tmp_path / "v", "Deploy.md", CONTEXT_NOTE)
    got = [(c.case["question"], c.case["category"]) for c in extract_candidates(vault) if c.pattern == "heading_question"]
    assert got == [
        ("Deploy process: who to ask?", "factual"),  # 1 content word (ask), not in the title
        ("HighLatency: what to do?", "factual"),  # "What to do" twice in the note: its parent tells them apart
        ("IndexLag: what to do?", "factual"),
        ("Why use tags in deploy notes?", "reasoning"),  # "deploy" is in the title: as written
    ]


def test_faq_answers_are_not_the_next_question(tmp_path: Path) -> None:
    note = "# Harbor\n\n## Open questions\n\n- Do we index deleted invoices?\n- Per-workspace synonyms? Aiko asks.\n\n" \
           "## FAQ\n\n**Who owns the index?**\nPriya owns it.\n"
    vault = _write(tmp_path / "v", "Harbor.md", note)
    assert [c.case["question"] for c in extract_candidates(vault) if c.pattern == "faq"] == ["Who owns the index?"]


# --------------------------------------------------------------------------- anchors


TOP_NOTE = """\
# Home server

**Jellyfin**: a media server for the films on the NAS.

## Ports

| Service | Port |
| --- | --- |
| Jellyfin | 8096 |

## Backups

Nightly to the NAS.
"""


def test_a_label_never_stands_on_the_top_heading_alone_when_the_note_has_deeper_sections(tmp_path: Path) -> None:
    # issue 28 item 7: `# Home server` matches every chunk of the note by the prefix rule
    vault = _write(tmp_path / "v", "Home server.md", TOP_NOTE)
    by_q = {c.case["question"]: c.case["gold_supports"][0] for c in extract_candidates(vault)}
    intro = by_q["What is Jellyfin?"]
    assert (intro["heading_path"], intro["start_line"], intro["end_line"]) == ("# Home server", 1, 3)  # the intro's lines
    port = by_q["What is Jellyfin's port?"]
    assert port["heading_path"] == "# Home server > ## Ports" and "start_line" not in port  # the deeper heading
    assert check_anchors([{"id": "x", "question": "q", "answerable": True, "gold_supports": [intro, port]}],
                         corpus_from_vault(vault)) == []
    # by hand: the intro anchor matches the intro chunk and not the Ports or Backups chunks
    chunk = {"rel_path": "Home server.md", "text": ""}
    assert match_support(intro, dict(chunk, heading_path="# Home server", start_line=1, end_line=4))
    assert not match_support(intro, dict(chunk, heading_path="# Home server > ## Ports", start_line=5, end_line=9))
    assert not match_support(intro, dict(chunk, heading_path="# Home server > ## Backups", start_line=11, end_line=13))


def test_a_note_with_one_section_and_a_top_heading_question_keep_the_bare_heading(tmp_path: Path) -> None:
    _write(tmp_path / "v", "Flat.md", "# Flat\n\n**Crema**: the foam of emulsified oils.\n")
    vault = _write(tmp_path / "v", "How to style backlinks.md",
                   "# How to style backlinks?\n\nWith a CSS snippet.\n\n## Steps\n\nAdd the class.\n")
    supports = {c.case["question"]: c.case["gold_supports"][0] for c in extract_candidates(vault)}
    assert supports["What is Crema?"] == {"rel_path": "Flat.md", "heading_path": "# Flat", "snippets": ["the foam of emulsified oils."]}
    # the question is the note's title: it asks about the whole note, whose every section answers it
    assert "start_line" not in supports["How to style backlinks?"]


# --------------------------------------------------------------------------- --mix


def _cands(n_factual: int, n_reasoning: int) -> list[Candidate]:
    out = []
    for i in range(n_factual + n_reasoning):
        cat = "factual" if i < n_factual else "reasoning"
        out.append(Candidate({"id": f"c{i:02d}", "question": f"q{i}?", "category": cat}, "heading_question", ""))
    return out


def test_mix_is_applied_toward_the_counts_it_asks_for() -> None:
    # issue 28 item 7: --mix factual=0.6,reasoning=0.4 was reported, not applied (40 of 40 factual)
    kept, dropped, unmet, wanted = apply_mix(_cands(30, 30), {"factual": 0.6, "reasoning": 0.4}, seed=1, limit=40)
    # by hand: 0.6 x 40 = 24 and 0.4 x 40 = 16
    assert wanted == {"factual": 24, "reasoning": 16} and unmet == []
    assert [c.case["category"] for c in kept].count("reasoning") == 16 and len(kept) == 40
    assert len(dropped) == 60 - 40 and {d["reason"] for d in dropped} == {"mix"}
    assert [c.case["id"] for c in kept] == sorted(c.case["id"] for c in kept)  # file order kept
    again = apply_mix(_cands(30, 30), {"factual": 0.6, "reasoning": 0.4}, seed=1, limit=40)[0]
    assert [c.case["id"] for c in again] == [c.case["id"] for c in kept]  # seeded


def test_a_short_category_stays_short_and_nobody_goes_over_its_share() -> None:
    kept, _, unmet, wanted = apply_mix(_cands(30, 5), {"factual": 0.6, "reasoning": 0.4}, seed=1, limit=40)
    # by hand: targets 24 / 16; only 5 reasoning exist; factual stays at 24 (not 35)
    assert wanted == {"factual": 24, "reasoning": 16} and unmet == []
    assert [c.case["category"] for c in kept].count("factual") == 24 and len(kept) == 24 + 5
    kept, _, unmet, _ = apply_mix(_cands(10, 0), {"factual": 0.6, "reasoning": 0.4}, seed=1, limit=10)
    assert unmet == ["reasoning"] and len(kept) == 6  # by hand: 0.6 x 10


def test_mix_without_limit_uses_every_candidate_as_n() -> None:
    kept, _, _, wanted = apply_mix(_cands(8, 2), {"factual": 0.5, "reasoning": 0.5}, seed=0)
    assert wanted == {"factual": 5, "reasoning": 5} and len(kept) == 5 + 2  # by hand: 0.5 x 10


@pytest.mark.skipif(not TASKS.is_dir(), reason="../shared/corpora/obsidian-tasks is not here")
def test_obsidian_tasks_mix_with_limit_is_exact(tmp_path: Path) -> None:
    out = tmp_path / "c.jsonl"
    res = CliRunner().invoke(app, ["generate", "--vault", str(TASKS), "-o", str(out), "--no-retrieval", "--limit", "20",
                                   "--seed", "1", "--mix", "factual=0.6,reasoning=0.4", "--json"])
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    assert report["categories"] == {"factual": 12, "reasoning": 8}  # by hand: 0.6 x 20, 0.4 x 20
    assert report["mix"]["reasoning"]["n_target"] == 8


# --------------------------------------------------------------------------- files


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o027, 0o640)])
def test_candidates_and_report_follow_the_umask(tmp_path: Path, umask: int, mode: int) -> None:
    # issue 28 item 7: the output files were mode 0600
    vault = _write(tmp_path / "v", "Home server.md", TOP_NOTE)
    out = tmp_path / "c.jsonl"
    old = os.umask(umask)
    try:
        res = CliRunner().invoke(app, ["generate", "--vault", str(vault), "-o", str(out), "--no-retrieval"])
    finally:
        os.umask(old)
    assert res.exit_code == 0, res.output
    # by hand: 0666 & ~umask
    assert stat.S_IMODE(out.stat().st_mode) == mode
    assert stat.S_IMODE((tmp_path / "c.report.json").stat().st_mode) == mode


def test_filter_candidates_keeps_the_shared_rules_for_the_llm_path() -> None:
    c = Candidate({"id": "a", "question": "What is Friday?", "answerable": True, "tags": []}, "definition", "before noon")
    assert filter_candidates([c])[1][0]["reason"] == "bare_term"
