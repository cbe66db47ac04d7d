"""Eval set validation that lets no real mistake through (issue "Eval set validation lets
real mistakes through", item 5): a required boolean `answerable`, misspelled field names,
and gold anchors checked against the corpus (evalkit.evalset.anchorcheck).

Every test here fails on the code before the issue: `answerable` defaulted to true, "yes"
was coerced, unknown keys were kept silently, and anchors were never checked.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from evalkit.errors import BadEvalSet
from evalkit.evalset.anchorcheck import (
    Corpus,
    check_anchors,
    check_support,
    corpus_from_files,
    corpus_from_index_stats,
    corpus_from_vault,
    outline_note,
    validate_eval_set,
)
from evalkit.evalset.load import load_eval_set, read_eval_set
from evalkit.schema import IndexingCoverage
from tests.support import make_case

DATA = Path(__file__).resolve().parents[1] / "data" / "eval_sets"

# A small vault, annotated: what counts as a heading, and where each text lives.
NOTES = {
    "Garden/Tomatoes.md": (
        "---\n"  # 1  front matter: not indexed, "# yaml" is no heading
        "# yaml comment\n"  # 2
        "---\n"  # 3
        "# Tomatoes\n"  # 4
        "\n"  # 5
        "Tomatoes love sun.\n"  # 6
        "\n"  # 7
        "## Watering\n"  # 8
        "\n"  # 9
        "Water deeply twice a week.\n"  # 10
        "\n"  # 11
        "### In July\n"  # 12
        "\n"  # 13
        "Every other day in a heatwave.\n"  # 14
        "\n"  # 15
        "## Pruning\n"  # 16
        "\n"  # 17
        "```bash\n"  # 18
        "# not a heading\n"  # 19
        "```\n"  # 20
        "Remove suckers below the first flower cluster.\n"  # 21
    ),
    "Kitchen/Bread.md": "# Sourdough bread\n\nBake at 250 degrees.\n",
    "Inbox.md": "Call the plumber about the kitchen tap.\n",
    "Garden/photo.png": "",
}


@pytest.fixture
def vault(tmp_path: Path) -> Path:
    root = tmp_path / "vault"
    for rel, text in NOTES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    return root


def _write(tmp_path: Path, *cases: dict | str, name: str = "es.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join((c if isinstance(c, str) else json.dumps(c)) + "\n" for c in cases), encoding="utf-8")
    return path


def _lines(exc: pytest.ExceptionInfo[BadEvalSet]) -> list[str]:
    return exc.value.render().splitlines()


# ---------------------------------------------------------------- answerable: required, strictly boolean


def test_missing_answerable_is_an_error_with_file_line_field(tmp_path: Path) -> None:
    path = _write(tmp_path, make_case(1), {"id": "c2", "question": "Where?"})
    with pytest.raises(BadEvalSet) as exc:
        load_eval_set([path], extra_categories=())
    assert _lines(exc) == [
        f"{path}:2: answerable: required field is missing: set it to true or false (does the corpus hold the answer?)"
    ]


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        pytest.param('"yes"', "'yes'", id="string-yes"),
        pytest.param('"true"', "'true'", id="string-true"),
        pytest.param("1", "1", id="integer-1"),
        pytest.param("null", "None", id="null"),
    ],
)
def test_answerable_must_be_a_json_boolean(tmp_path: Path, raw: str, shown: str) -> None:
    path = _write(tmp_path, f'{{"id": "c1", "question": "Where?", "answerable": {raw}}}')
    with pytest.raises(BadEvalSet) as exc:
        load_eval_set([path], extra_categories=())
    assert _lines(exc) == [f"{path}:1: answerable: expected a JSON boolean (true/false), got {shown}"]


def test_bob_golden_lines_still_get_answerable_from_expected_chunks() -> None:
    es = load_eval_set([DATA / "domains"], extra_categories=())
    by_id = {c.id: c for c in es.cases}
    assert by_id["1"].answerable is True and by_id["99"].answerable is False


# ---------------------------------------------------------------- misspelled field names


def test_misspelled_top_level_field_is_an_error_with_a_suggestion(tmp_path: Path) -> None:
    path = _write(tmp_path, make_case(1, golde_supports=[{"rel_path": "a.md", "heading_path": "# A"}]))
    with pytest.raises(BadEvalSet) as exc:
        load_eval_set([path], extra_categories=())
    assert _lines(exc) == [f"{path}:1: golde_supports: unknown field 'golde_supports'; did you mean 'gold_supports'?"]


def test_misspelled_gold_support_fields(tmp_path: Path) -> None:
    support = {"rel_paht": "a.md", "rel_path": "a.md", "snippet": ["x"], "heading": "# A"}
    path = _write(tmp_path, make_case(1, gold_supports=[{"rel_path": "b.md"}, support]))
    with pytest.raises(BadEvalSet) as exc:
        load_eval_set([path], extra_categories=())
    # "heading" is too far from "heading_path" (difflib ratio 14/19 < 0.8): kept as an extra
    assert _lines(exc) == [
        f"{path}:1: gold_supports[1].rel_paht: unknown field 'rel_paht'; did you mean 'rel_path'?",
        f"{path}:1: gold_supports[1].snippet: unknown field 'snippet'; did you mean 'snippets'?",
    ]


def test_typos_are_reported_with_the_other_problems_of_the_line(tmp_path: Path) -> None:
    path = _write(tmp_path, {"id": "c1", "question": "Where?", "Answerable": True})
    with pytest.raises(BadEvalSet) as exc:
        load_eval_set([path], extra_categories=())
    assert [line.split(": ", 2)[1] for line in _lines(exc)] == ["answerable", "Answerable"]
    assert _lines(exc)[1].endswith("unknown field 'Answerable'; did you mean 'answerable'?")


def test_unknown_fields_far_from_known_ones_are_kept(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        make_case(1, reviewer="ana", gold_supports=[{"rel_path": "a.md", "heading": "# A", "page": 3}]),
        {"id": "c2", "question": "Which?", "expected_chunks": [7]},
    )
    es = load_eval_set([path], extra_categories=())
    assert es.cases[0].model_dump()["reviewer"] == "ana"
    assert es.cases[0].gold_supports[0].model_dump()["heading"] == "# A"
    assert es.cases[1].model_dump()["expected_chunks"] == [7] and es.cases[1].answerable is True


def test_eval_set_records_where_each_case_came_from(tmp_path: Path) -> None:
    path = _write(tmp_path, make_case(1), "", make_case(2))
    es = load_eval_set([path], extra_categories=())
    assert es.locations == [(str(path), 1), (str(path), 3)]
    assert "location" not in es.cases[0].model_dump()  # records dump the case: keep it clean


def test_read_eval_set_keeps_the_good_cases_and_every_problem(tmp_path: Path) -> None:
    path = _write(tmp_path, make_case(1), {"id": "c2", "question": "Where?"}, make_case(3))
    es, problems = read_eval_set([path], extra_categories=())
    assert [c.id for c in es.cases] == ["c1", "c3"] and es.locations == [(str(path), 1), (str(path), 3)]
    assert [(p.line, p.field) for p in problems] == [(2, "answerable")]


# ---------------------------------------------------------------- outlines: the chunker's headings


def test_outline_uses_the_reference_chunkers_headings() -> None:
    o = outline_note(NOTES["Garden/Tomatoes.md"].encode(), "Garden/Tomatoes.md")
    # by hand: front matter and the fenced "# not a heading" are no headings; every prefix counts
    assert o.chains == [
        "",
        "# Tomatoes",
        "# Tomatoes > ## Watering",
        "# Tomatoes > ## Watering > ### In July",
        "# Tomatoes > ## Pruning",
    ]
    # by hand: "## Watering" runs from its heading (line 8) through its sub-section (line 14)
    assert o.spans[("# Tomatoes", "## Watering")] == (8, 14)
    assert o.spans[()] == (4, 21) and o.n_lines == 21


# ---------------------------------------------------------------- check_anchors against a vault


def _issues(vault: Path, support: dict, **kw) -> list[tuple[str, str]]:
    return [(i.field, i.message) for i in check_support(support, corpus_from_vault(vault), **kw)]


@pytest.mark.parametrize(
    "support",
    [
        pytest.param({"rel_path": "Garden/Tomatoes.md", "heading_path": "# Tomatoes > ## Watering"}, id="chain"),
        pytest.param({"rel_path": "Garden/Tomatoes.md", "heading_path": "# Tomatoes"}, id="prefix-of-a-chain"),
        pytest.param({"rel_path": "Garden/Tomatoes.md", "heading_path": "#Tomatoes  >##   Pruning"}, id="normalized"),
        pytest.param({"rel_path": "./Garden//Tomatoes.md"}, id="whole-file"),
        pytest.param({"rel_path": "Inbox.md", "heading_path": "", "snippets": ["KITCHEN   tap"]}, id="no-headings"),
        pytest.param(
            {"rel_path": "Garden/Tomatoes.md", "heading_path": "# Tomatoes > ## Watering", "snippets": ["heatwave"]},
            id="snippet-in-sub-section",
        ),
        pytest.param({"rel_path": "Garden/Tomatoes.md", "start_line": 10, "end_line": 21}, id="line-span"),
        pytest.param({"chunk_id": "not-checked"}, id="chunk-id-only"),
        pytest.param({"rel_path": "Garden/photo.png"}, id="non-markdown-file-exists"),
    ],
)
def test_real_anchors_pass(vault: Path, support: dict) -> None:
    assert _issues(vault, support) == []


@pytest.mark.parametrize(
    ("support", "expected"),
    [
        pytest.param(
            {"rel_path": "Garden/Tomatos.md"},
            ("rel_path", "no file 'Garden/Tomatos.md' in vault {v}; did you mean 'Garden/Tomatoes.md'?"),
            id="file-name-typo",
        ),
        pytest.param(
            {"rel_path": "Tomatoes.md"},
            ("rel_path", "no file 'Tomatoes.md' in vault {v}; did you mean 'Garden/Tomatoes.md'?"),
            id="folder-left-out",
        ),
        pytest.param(
            {"rel_path": "garden/tomatoes.md"},
            (
                "rel_path",
                "no file 'garden/tomatoes.md' in vault {v} (paths are compared case-sensitively); "
                "did you mean 'Garden/Tomatoes.md'?",
            ),
            id="case-slip",
        ),
        pytest.param({"rel_path": "Nowhere/zzz.md"}, ("rel_path", "no file 'Nowhere/zzz.md' in vault {v}"), id="no-guess"),
        pytest.param(
            {"rel_path": "Garden/Tomatoes.md", "heading_path": "# Tomatoes > ## Waterng"},
            (
                "heading_path",
                "no heading chain '# Tomatoes > ## Waterng' in Garden/Tomatoes.md; "
                "did you mean '# Tomatoes > ## Watering'?",
            ),
            id="heading-typo",
        ),
        pytest.param(
            {"rel_path": "Garden/Tomatoes.md", "heading_path": "## Pruning"},
            (
                "heading_path",
                "no heading chain '## Pruning' in Garden/Tomatoes.md; did you mean '# Tomatoes > ## Pruning'?",
            ),
            id="parent-left-out",
        ),
        pytest.param(
            {"rel_path": "Garden/Tomatoes.md", "heading_path": "# Tomatoes > ## Watering > ### In August"},
            (
                "heading_path",
                "no heading chain '# Tomatoes > ## Watering > ### In August' in Garden/Tomatoes.md; "
                "'# Tomatoes > ## Watering' exists but has no sub-heading '### In August'",
            ),
            id="no-close-sub-heading",
        ),
        pytest.param(
            {"rel_path": "Garden/Tomatoes.md", "heading_path": "# Tomatoes > ## not a heading"},
            (
                "heading_path",
                "no heading chain '# Tomatoes > ## not a heading' in Garden/Tomatoes.md; "
                "'# Tomatoes' exists but has no sub-heading '## not a heading'",
            ),
            id="fenced-line-is-no-heading",
        ),
        pytest.param(
            {"rel_path": "Inbox.md", "heading_path": "# Inbox"},
            ("heading_path", "Inbox.md has no headings; an empty heading_path means the whole file"),
            id="note-without-headings",
        ),
        pytest.param(
            {"rel_path": "Garden/Tomatoes.md", "heading_path": "# Tomatoes > ## Pruning", "snippets": ["", "deeply"]},
            (
                "snippets[1]",
                "snippet 'deeply' does not occur under '# Tomatoes > ## Pruning'; "
                "it occurs under '# Tomatoes > ## Watering'",
            ),
            id="snippet-in-another-section",
        ),
        pytest.param(
            {"rel_path": "Garden/Tomatoes.md", "heading_path": "# Tomatoes", "snippets": ["yaml comment"]},
            ("snippets[0]", "snippet 'yaml comment' does not occur in Garden/Tomatoes.md"),
            id="front-matter-is-not-indexed",
        ),
        pytest.param(
            {"rel_path": "Garden/Tomatoes.md", "start_line": 20, "end_line": 40},
            ("end_line", "line 40 is past the end of Garden/Tomatoes.md (21 lines)"),
            id="line-span-past-the-end",
        ),
    ],
)
def test_each_broken_anchor_is_reported(vault: Path, support: dict, expected: tuple[str, str]) -> None:
    field, message = expected
    assert _issues(vault, support) == [(field, message.format(v=vault))]


def test_case_insensitive_runs_accept_case_slips(vault: Path) -> None:
    support = {"rel_path": "garden/tomatoes.md", "heading_path": "# tomatoes > ## watering", "snippets": ["DEEPLY"]}
    assert _issues(vault, support, case_sensitive=False) == []
    assert [f for f, _ in _issues(vault, support)] == ["rel_path"]


def test_check_anchors_locates_each_problem_by_file_line_and_field(vault: Path, tmp_path: Path) -> None:
    good = {"rel_path": "Kitchen/Bread.md", "heading_path": "# Sourdough bread", "snippets": ["250 degrees"]}
    path = _write(
        tmp_path,
        make_case(1, gold_supports=[good]),
        make_case(2, answerable=False),
        make_case(3, gold_supports=[good, {"rel_path": "Kitchen/Bread.md", "heading_path": "# Sourdough"}]),
    )
    problems = check_anchors(load_eval_set([path], extra_categories=()), corpus_from_vault(vault))
    assert [str(p) for p in problems] == [
        f"{path}:3: gold_supports[1].heading_path: no heading chain '# Sourdough' in Kitchen/Bread.md; "
        "did you mean '# Sourdough bread'?"
    ]


def test_check_anchors_on_cases_built_in_code_names_the_case(vault: Path) -> None:
    cases = [{"id": "x1", "gold_supports": [{"rel_path": "Kitchen/Bred.md"}]}]
    (problem,) = check_anchors(cases, corpus_from_vault(vault))
    assert problem.path is None and problem.field == "gold_supports[0].rel_path"
    assert problem.message.startswith("case 'x1': no file 'Kitchen/Bred.md'")


def test_only_the_notes_anchors_name_are_parsed() -> None:
    # A 10,000-note vault: listing it is cheap; parsing every note is not.
    files = [f"area{i % 40}/note {i}.md" for i in range(10_000)]
    read: list[str] = []

    def read_note(rel: str) -> bytes:
        read.append(rel)
        return b"# Note\n\n## Part\n\nText.\n"

    corpus = Corpus(files, source="a big vault", read=read_note)
    cases = [
        {"id": f"q{i}", "gold_supports": [{"rel_path": f"area{i % 40}/note {i}.md", "heading_path": "# Note > ## Part"}]}
        for i in range(0, 10_000, 100)
    ]
    cases.append({"id": "typo", "gold_supports": [{"rel_path": "area3/nte 3.md"}]})
    problems = check_anchors(cases, corpus)
    assert len(read) == 100 and len(set(read)) == 100  # each named note once, no other
    assert [p.message for p in problems] == ["case 'typo': no file 'area3/nte 3.md' in a big vault; did you mean 'area3/note 3.md'?"]


# ---------------------------------------------------------------- file-list corpora (a target's index stats)


def test_file_list_corpus_checks_existence_only() -> None:
    corpus = corpus_from_files(["Garden/Tomatoes.md"], source="target http://x")
    assert not corpus.has_outlines
    assert check_support({"rel_path": "Garden/Tomatoes.md", "heading_path": "# Anything", "snippets": ["no"]}, corpus) == []
    (issue,) = check_support({"rel_path": "Garden/Tomatos.md"}, corpus)
    assert issue.message == "no file 'Garden/Tomatos.md' in target http://x; did you mean 'Garden/Tomatoes.md'?"
    assert issue.suggestion == "Garden/Tomatoes.md"


@pytest.mark.parametrize(
    ("stats", "files"),
    [
        pytest.param(None, None, id="no-stats"),
        pytest.param({"docs_processed": 3}, None, id="no-files-key"),
        pytest.param({"files": "a.md"}, None, id="files-not-a-list"),
        pytest.param({"files": ["b.md", "a.md"]}, ["a.md", "b.md"], id="strings"),
        pytest.param({"files": [{"rel_path": "a.md", "chunks": 2}]}, ["a.md"], id="objects"),
        pytest.param(IndexingCoverage.model_validate({"files": ["a.md"]}), ["a.md"], id="coverage-model"),
    ],
)
def test_corpus_from_index_stats(stats: object, files: list[str] | None) -> None:
    corpus = corpus_from_index_stats(stats)
    assert (corpus.files if corpus is not None else None) == files


def test_reference_chatbot_stats_list_its_files(vault: Path) -> None:
    from evalkit.reference.chatbot import ReferenceChatbot, ReferenceConfig

    stats = ReferenceChatbot(vault, config=ReferenceConfig()).index_stats()
    assert stats["files"] == ["Garden/Tomatoes.md", "Inbox.md", "Kitchen/Bread.md"]
    coverage = IndexingCoverage.model_validate(stats)  # the contract's model keeps the extra key
    assert corpus_from_index_stats(coverage).files == stats["files"]


# ---------------------------------------------------------------- validate_eval_set, and the bundled sets


def test_validate_eval_set_reports_both_kinds_together(vault: Path, tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        {"id": "c1", "question": "Where?", "answerable": "yes"},
        make_case(2, gold_supports=[{"rel_path": "Kitchen/Bread.md", "heading_path": "# Bread"}]),
    )
    result = validate_eval_set([path], corpus_from_vault(vault), extra_categories=())
    assert [(p.line, p.field) for p in result.problems] == [(1, "answerable")]
    assert [(p.line, p.field) for p in result.anchor_problems] == [(2, "gold_supports[0].heading_path")]
    assert result.n_anchors == 1 and not result.ok


def test_validate_without_a_corpus_checks_the_file_only(tmp_path: Path) -> None:
    path = _write(tmp_path, make_case(1, gold_supports=[{"rel_path": "nowhere.md"}]))
    result = validate_eval_set([path], None, extra_categories=())
    assert result.ok and result.corpus is None and result.n_anchors == 0


ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", ["eval_set.jsonl", "eval_set_sanity.jsonl"])
def test_bundled_eval_sets_validate_clean_against_sample_vault(name: str) -> None:
    result = validate_eval_set([ROOT / name], corpus_from_vault(ROOT / "sample_vault"))
    assert [str(p) for p in result.problems + result.anchor_problems] == []


def test_anchorcheck_imports_no_io_layers() -> None:
    code = (
        "import sys, evalkit.evalset.anchorcheck\n"
        "print(' '.join(m for m in ('httpx', 'rich', 'numpy', 'evalkit.targets', 'evalkit.store.runs') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == []
