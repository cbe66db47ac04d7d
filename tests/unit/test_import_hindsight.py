"""`evalkit import --format hindsight`: seed 004's JSONL fixtures -> eval set + a vault of fact notes.

Built from seed 004's own example line ("Adding New Eval Cases") and a fixture in its
format with its five scenario families (tests/data/hindsight/assistant-baseline.v1.jsonl).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evalkit.cli.main import app as main_app
from evalkit.errors import BadConfig, InputError
from evalkit.evalset.load import load_eval_set
from evalkit.interop.importers import FORMATS, get_converter, import_cases
from evalkit.interop.importers.base import ImportedCase, ImportOptions
from evalkit.interop.importers.hindsight import fact_note, folder_slug
from evalkit.interop.importers.output import VAULT_MARKER, check_vault_out, write_eval_set, write_vault
from tests.jsonio_words import orjson_msg

FIXTURE = Path(__file__).parents[1] / "data" / "hindsight" / "assistant-baseline.v1.jsonl"

# Seed 004, "Adding New Eval Cases", verbatim.
SEED_LINE = (
    '{"id":"unique-id","scenario":"follow_up_recall","description":"What this tests","seedFacts":[{"content":"...",'
    '"factType":"world","confidence":1.0}],"query":"...","expected":{"mustInclude":["substring"]},"constraints":{"topK":10}}'
)



def _write(path: Path, *lines: object) -> Path:
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines), encoding="utf-8")
    return path


def _case(**over: object) -> dict:
    base = {"id": "c1", "scenario": "follow_up_recall", "query": "q?", "seedFacts": [{"content": "alpha beta"}],
            "expected": {"mustInclude": ["alpha"]}}
    return {**base, **over}


def test_seed_example_line(tmp_path: Path) -> None:
    p = _write(tmp_path / "assistant-baseline.v1.jsonl", SEED_LINE)
    [imported] = import_cases("hindsight", [p], ImportOptions(tags=("hindsight",)))
    assert imported.case == {
        "id": "unique-id",
        "question": "...",
        "answerable": True,
        "scenario": "follow_up_recall",
        "category": "factual",
        "tags": ["follow_up_recall", "hindsight"],
        "notes": "What this tests",
        "expected": {"must_include": ["substring"]},
        "constraints": {"top_k": 10},
        "folders": ["unique-id"],
        # "substring" is not in the seed's only fact, "...": no support, and a warning
        "gold_supports": [],
    }
    assert (imported.path, imported.index, imported.line) == (str(p), 0, 1)
    assert dict(imported.files) == {"unique-id/fact-01.md": '---\nfact_type: "world"\nconfidence: 1.0\n---\n\n...'}
    assert imported.warnings == (
        f"{p}:1: expected.mustInclude[0]: 'substring' is in no seedFact of case 'unique-id'; "
        "the case runs, but no note is its gold support",
    )


def test_supports_match_case_and_whitespace_insensitively_once_in_fact_order(tmp_path: Path) -> None:
    facts = [
        {"content": "Analytics runs on\nPostgreSQL   16."},  # matched across a line break
        {"content": "The analytics service stores events in MySQL 5.7."},
        {"content": "It was migrated to postgresql 16 with TimescaleDB."},  # lower case, and "TimescaleDB"
    ]
    p = _write(tmp_path / "f.jsonl", _case(seedFacts=facts, expected={
        "mustInclude": ["timescaledb", "PostgreSQL 16"], "mustExclude": ["MySQL 5.7"]}))
    [c] = import_cases("hindsight", [p])
    # fact order (1, 3), not mustInclude order; fact 3 holds both strings and is listed once
    assert c.case["gold_supports"] == [
        {"rel_path": "c1/fact-01.md", "heading_path": ""},
        {"rel_path": "c1/fact-03.md", "heading_path": ""},
    ]
    assert c.case["expected"] == {"must_include": ["timescaledb", "PostgreSQL 16"], "must_exclude": ["MySQL 5.7"]}
    assert c.warnings == ()


def test_own_tags_category_and_unknown_keys_survive(tmp_path: Path) -> None:
    p = _write(tmp_path / "f.jsonl", _case(tags=["memory"], category="general", owner="platform-team",
                                           constraints={"topK": 3, "latency_budget_ms": 500}))
    [c] = import_cases("hindsight", [p], ImportOptions(tags=("hindsight", "memory")))
    assert c.case["tags"] == ["follow_up_recall", "memory", "hindsight"]
    assert c.case["category"] == "general" and c.case["owner"] == "platform-team"
    assert c.case["constraints"] == {"top_k": 3, "latency_budget_ms": 500}


def test_fact_notes_keep_content_byte_exact_and_flatten_other_fields(tmp_path: Path) -> None:
    content = "  Line one\r\nline two: with a colon\n---\n# not front matter\n\n"
    fact = {"content": content, "factType": "experience", "confidence": 0.8, "occurredStart": "2025-01-20T00:00:00Z",
            "entities": ["Fly.io", "Heroku"], "meta": {"source": "chat"}, "pinned": True, "expires": None,
            "weird key": "x", "score": float("nan"), "note": 'say "hi"\nbye'}
    assert fact_note(fact) == (
        "---\n"
        'fact_type: "experience"\n'
        "confidence: 0.8\n"
        'occurredStart: "2025-01-20T00:00:00Z"\n'
        'entities: "[\\"Fly.io\\", \\"Heroku\\"]"\n'  # a list: JSON-encoded into a string
        'meta: "{\\"source\\": \\"chat\\"}"\n'
        "pinned: true\n"
        "expires: null\n"
        '"weird key": "x"\n'
        "score: .nan\n"
        'note: "say \\"hi\\"\\nbye"\n'
        "---\n"
        "\n" + content
    )
    yaml = pytest.importorskip("yaml")
    front = yaml.safe_load(fact_note(fact).split("---\n")[1])
    assert front["entities"] == '["Fly.io", "Heroku"]' and front["note"] == 'say "hi"\nbye' and front["expires"] is None

    # a fixture is strict JSON (jsonio): NaN is not JSON, so the file's fact has no `score`
    in_file = {k: v for k, v in fact.items() if k != "score"}
    p = _write(tmp_path / "f.jsonl", _case(seedFacts=[in_file], expected={"mustInclude": ["LINE ONE line two"]}))
    cases = import_cases("hindsight", [p])
    vault = tmp_path / "vault"
    assert write_vault(cases, vault) == 1
    data = (vault / "c1" / "fact-01.md").read_bytes()
    assert data.endswith(content.encode()) and b"\r\n" in data  # no newline translation
    assert cases[0].case["gold_supports"] == [{"rel_path": "c1/fact-01.md", "heading_path": ""}]


def test_folder_slugs_are_safe_and_unique(tmp_path: Path) -> None:
    assert folder_slug("tn-auth-migration") == "tn-auth-migration"
    assert folder_slug("Case 7: Auth/JWT?") == "case-7-auth-jwt"
    assert folder_slug("../..") == "case"
    assert folder_slug(".hidden") == "hidden"  # a hidden folder would not be indexed
    assert len(folder_slug("x" * 300)) == 64
    p = _write(tmp_path / "f.jsonl", _case(id="A b"), _case(id="a-b"), _case(id="a b"), _case(id="../.."))
    assert [c.case["folders"] for c in import_cases("hindsight", [p])] == [["a-b"], ["a-b-2"], ["a-b-3"], ["case"]]


def test_every_problem_names_file_line_and_field(tmp_path: Path) -> None:
    good = _write(tmp_path / "good.jsonl", _case(id="dup"))
    p = _write(
        tmp_path / "bad.jsonl",
        _case(id="ok"),
        "",  # blank lines are skipped, line numbers still count them
        "{not json",
        "[1, 2]",
        _case(id="  ", query=None),
        _case(id="c5", seedFacts=[]),
        _case(id="c6", seedFacts=["a fact", {"content": "  "}, {"factType": "world"}]),
        _case(id="c7", expected=["alpha"], constraints=5),
        _case(id="c8", expected={"mustInclude": "alpha", "mustExclud": ["x"]}, constraints={"topK": 0, "tokenBudget": "9"}),
        _case(id="dup"),
        _case(id="ok"),
    )
    with pytest.raises(InputError) as e:
        import_cases("hindsight", [good, p])
    assert [str(x) for x in e.value.problems] == [
        f"{p}:3: not valid JSON ({orjson_msg(b'{not json')}, column 2)",  # orjson's words (jsonio)
        f"{p}:4: expected a JSON object (one case per line), got list",
        f"{p}:5: id: expected a non-empty string, got '  '",
        f"{p}:5: query: expected a non-empty string, got None",
        f"{p}:6: seedFacts: expected a non-empty list of facts ({{content, factType, ...}}), got []",
        f"{p}:7: seedFacts[0]: expected an object {{content, factType, ...}}, got 'a fact'",
        f"{p}:7: seedFacts[1].content: expected a non-empty string, got '  '",
        f"{p}:7: seedFacts[2].content: expected a non-empty string, got None",
        f"{p}:8: expected: expected an object, got ['alpha']",
        f"{p}:8: constraints: expected an object, got 5",
        f"{p}:9: expected.mustExclud: unknown key; expected mustInclude, mustExclude, orderedHints",
        f"{p}:9: expected.mustInclude: expected a list of non-empty strings, got 'alpha'",
        f"{p}:9: constraints.tokenBudget: expected an integer >= 1, got '9'",
        f"{p}:9: constraints.topK: expected an integer >= 1, got 0",
        f"{p}:10: id: id 'dup' duplicates {good}:1",
        f"{p}:11: id: id 'ok' duplicates {p}:1",
    ]
    missing = tmp_path / "missing.jsonl"
    with pytest.raises(InputError, match=r"missing\.jsonl: cannot read"):
        import_cases("hindsight", [missing])


def test_loader_problem_is_reported_at_the_fixture_line(tmp_path: Path) -> None:
    # mustInclude and mustExclude sharing a string passes the converter; evalkit's loader refuses it.
    p = _write(tmp_path / "f.jsonl", "", _case(expected={"mustInclude": ["alpha"], "mustExclude": ["ALPHA"]}))
    cases = import_cases("hindsight", [p])
    with pytest.raises(InputError) as e:
        write_eval_set(cases, tmp_path / "es.jsonl", extra_categories=[])
    [problem] = e.value.problems
    assert (problem.path, problem.line, problem.field) == (str(p), 2, "expected")
    assert "both in must_include and must_exclude" in problem.message and "'c1'" in problem.message


def test_vault_out_refusals(tmp_path: Path) -> None:
    cases = import_cases("hindsight", [FIXTURE])
    with pytest.raises(BadConfig, match=r"--format hindsight writes the fixtures' seed facts as notes \(44 here\)"):
        check_vault_out(cases, None, fmt="hindsight")
    (tmp_path / "file").write_text("x")
    with pytest.raises(BadConfig, match="exists and is not a folder"):
        check_vault_out(cases, tmp_path / "file")
    with pytest.raises(BadConfig, match="would be inside the vault folder"):
        check_vault_out(cases, tmp_path / "v", output=tmp_path / "v" / "eval_set.jsonl")
    no_notes = [ImportedCase(case={"id": "x"}, path="q.json", index=0)]
    check_vault_out(no_notes, None)  # gno: nothing to write, nothing asked
    with pytest.raises(BadConfig, match="has no notes to write; drop --vault-out"):
        check_vault_out(no_notes, tmp_path / "v", fmt="gno")

    own = tmp_path / "my-notes"
    (own / "Garden").mkdir(parents=True)
    (own / "Garden" / "Tomatoes.md").write_text("# Tomatoes\n")
    with pytest.raises(BadConfig, match="is a non-empty folder; pass --force"):
        write_vault(cases, own)
    # --force replaces only a folder an earlier import wrote, never the user's own notes
    with pytest.raises(BadConfig, match=f"did not write \\(no {VAULT_MARKER}\\); not replacing it even with --force"):
        write_vault(cases, own, force=True)
    assert [p.name for p in own.rglob("*")] == ["Garden", "Tomatoes.md"]

    empty = tmp_path / "empty"
    empty.mkdir()
    assert write_vault(cases, empty) == 44
    few = import_cases("hindsight", [_write(tmp_path / "one.jsonl", _case())])
    assert write_vault(few, empty, force=True) == 1
    assert sorted(p.relative_to(empty).as_posix() for p in empty.rglob("*")) == [VAULT_MARKER, "c1", "c1/fact-01.md"]
    assert json.loads((empty / VAULT_MARKER).read_text())["notes"] == 1
    # no temp or moved-aside folder left beside it
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []

    bad = [ImportedCase(case={"id": "x"}, path="f", index=0, files={"../escape.md": "x"})]
    with pytest.raises(BadConfig, match="leaves the vault folder"):
        write_vault(bad, tmp_path / "new")
    assert not (tmp_path / "new").exists() and not (tmp_path / "escape.md").exists()


def test_cli_end_to_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    args = ["import", "--format", "hindsight", str(FIXTURE)]

    res = runner.invoke(main_app, args)
    assert res.exit_code == 2
    assert res.stderr.strip() == (
        "evalkit: --vault-out: --format hindsight writes the fixtures' seed facts as notes (44 here) and needs a "
        "folder for them: pass --vault-out DIR (a new or empty folder), then run the eval set with --vault DIR"
    )
    assert not (tmp_path / "eval_set.jsonl").exists()

    res = runner.invoke(main_app, [*args, "--vault-out", "vault", "-o", "hs.jsonl", "--tag", "hindsight"])
    assert res.exit_code == 0, res.output
    assert res.stderr == ""  # every mustInclude of the fixture is in a seed fact: no warning
    assert res.stdout.splitlines() == [
        "evalkit: wrote 11 cases to hs.jsonl: 24 gold supports, 0 graded-only (nDCG only), 0 cases without supports",
        "evalkit: wrote 44 notes to vault (one folder per case); run them with: "
        "evalkit run --eval-set hs.jsonl --vault vault --send-scope folders --retrieval-only",
    ]

    fixture = [json.loads(x) for x in FIXTURE.read_text().splitlines()]
    loaded = load_eval_set([tmp_path / "hs.jsonl"], [])
    assert [c.id for c in loaded.cases] == [x["id"] for x in fixture]
    assert {c.scenario for c in loaded.cases} == {
        "follow_up_recall", "temporal_narrative", "dedup_conflict", "code_location_recall", "token_budget_packing"}
    for case, item in zip(loaded.cases, fixture):
        folder = case.folders[0]
        assert case.folders == [item["id"]] and case.tags == [item["scenario"], "hindsight"]
        notes = sorted((tmp_path / "vault" / folder).iterdir())
        assert [n.name for n in notes] == [f"fact-{i:02d}.md" for i in range(1, len(item["seedFacts"]) + 1)]
        for note, fact in zip(notes, item["seedFacts"]):
            assert note.read_text(encoding="utf-8").split("---\n\n", 1)[1] == fact["content"]
        for s in case.gold_supports:
            assert (tmp_path / "vault" / s.rel_path).is_file() and s.heading_path == ""

    by_id = {c.id: c for c in loaded.cases}
    tn = by_id["tn-auth-migration"]
    assert tn.expected.ordered_hints == ["session cookies", "refresh-token rotation", "passkeys"]
    assert [s.rel_path for s in tn.gold_supports] == [f"tn-auth-migration/fact-0{i}.md" for i in (1, 2, 3)]
    dc = by_id["dc-home-city"]  # both copies of the duplicated newer fact support; the stale one does not
    assert [s.rel_path for s in dc.gold_supports] == ["dc-home-city/fact-02.md", "dc-home-city/fact-03.md"]
    assert dc.expected.must_exclude == ["Berlin"] and dc.constraints.top_k == 5
    assert by_id["tbp-dev-setup"].constraints.token_budget == 120 and by_id["tbp-dev-setup"].constraints.top_k == 8
    assert "fact_type: \"world\"" in (tmp_path / "vault" / "dc-home-city" / "fact-01.md").read_text()

    # a second import: the eval set and the vault are kept unless --force
    res = runner.invoke(main_app, [*args, "--vault-out", "vault", "-o", "other.jsonl"])
    assert res.exit_code == 2 and "vault: --vault-out: is a non-empty folder; pass --force" in res.stderr
    assert not (tmp_path / "other.jsonl").exists()
    res = runner.invoke(main_app, [*args, "--vault-out", "vault", "-o", "hs.jsonl", "--force"])
    assert res.exit_code == 0, res.output


def test_cli_prints_warnings_on_stderr(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    p = _write(tmp_path / "seed.jsonl", SEED_LINE)
    res = CliRunner().invoke(main_app, ["import", "--format", "hindsight", str(p), "--vault-out", "v"])
    assert res.exit_code == 0, res.output
    assert res.stderr.splitlines() == [
        f"evalkit: warning: {p}:1: expected.mustInclude[0]: 'substring' is in no seedFact of case 'unique-id'; "
        "the case runs, but no note is its gold support"
    ]
    assert "0 gold supports, 0 graded-only (nDCG only), 1 cases without supports" in res.stdout
    assert (tmp_path / "v" / "unique-id" / "fact-01.md").read_text().endswith("\n\n...")


def test_registry_names_hindsight() -> None:
    assert FORMATS["hindsight"] == "evalkit.interop.importers.hindsight:convert"
    assert callable(get_converter("hindsight"))
