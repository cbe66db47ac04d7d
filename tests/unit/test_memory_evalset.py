"""The eval set loader keeps cases as compressed bytes and validates them line by line
(issue 27 item 3): the cases it gives back are the models the load validated, its
problems still name file, line and field for a bad line anywhere in a large file, and
nothing runs when there is one."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

import evalkit.evalset.load as load
from evalkit.errors import BadEvalSet
from evalkit.evalset.load import CaseKey, load_eval_set, read_eval_set
from evalkit.schema import EvalCase


def _case(i: int) -> dict:
    case: dict = {
        "id": f"c{i:05d}",
        "question": f"what does note {i} say about section {i % 7}?",
        "answerable": i % 10 != 0,
        "tags": [["ops"], ["ops", "hr"], []][i % 3],
        "category": ["factual", "reasoning", None][i % 3],
    }
    if case["answerable"]:
        case["gold_supports"] = [{"rel_path": f"area{i % 5}/note{i}.md", "heading_path": f"# Note {i} > ## S{i % 7}",
                                  "relevance": 1 + i % 2}]
    return case


@pytest.fixture
def small_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Read 1 KB at a time and compress 2 KB blocks, so lines and cases cross every boundary."""
    monkeypatch.setattr(load, "_READ_BYTES", 1024)
    monkeypatch.setattr(load, "_BLOCK_BYTES", 2048)


def test_a_bad_line_in_the_middle_of_a_large_file_is_named_and_nothing_runs(tmp_path: Path, small_reads) -> None:
    lines = [json.dumps(_case(i)) for i in range(3000)]
    bad = _case(1499)
    bad["gold_supports"] = [bad["gold_supports"][0], {"rel_path": "a.md", "heading_path": 42}]
    lines[1499] = json.dumps(bad)  # line 1500
    lines[2199] = lines[2199][:-1]  # line 2200: cut JSON
    path = tmp_path / "big.jsonl"
    path.write_text("\n".join(lines) + "\n")

    with pytest.raises(BadEvalSet) as err:
        load_eval_set([path], extra_categories=())
    got = [(p.path, p.line, p.field) for p in err.value.problems]
    assert got == [(str(path), 1500, "gold_supports[1].heading_path"), (str(path), 2200, None)]
    assert str(err.value.problems[0]) == f"{path}:1500: gold_supports[1].heading_path: Input should be a valid string, got 42"
    assert str(err.value.problems[1]).startswith(f"{path}:2200: not valid JSON (")

    from evalkit import run_eval

    bot = tmp_path / "bot.py"
    bot.write_text("def ask(request):\n    raise AssertionError('asked')\n")
    with pytest.raises(BadEvalSet):
        run_eval(eval_set=str(path), target=f"python:{bot}:ask", retrieval_only=True, results_dir=str(tmp_path / "results"),
                 no_probe=True)
    assert not (tmp_path / "results").exists()  # nothing was written, nothing was asked


def test_stored_cases_are_the_models_the_load_validated(tmp_path: Path, small_reads) -> None:
    """Every way a line can end, blank lines, B.O.B lines, int ids, unknown fields and a
    folder's domain: each case read back equals validating its line as the load does."""
    folder = tmp_path / "sets"
    folder.mkdir()
    ops = [_case(i) for i in range(400)]
    ops[3] = {"id": 7, "question": "bob?", "expected_chunks": [11, "x"], "reviewer": "ana"}  # B.O.B, int id
    ops[4] = {"id": "neg", "question": "none?", "expected_chunks": []}  # B.O.B negative example
    ops[5] = {**_case(5), "domain": "own", "extra": {"nested": [1, 2.5, None]}}
    endings = ["\n", "\r\n", "\r"]
    text = "".join(json.dumps(c) + endings[i % 3] + ("\n" if i % 50 == 0 else "") for i, c in enumerate(ops))
    (folder / "ops.jsonl").write_bytes(text.encode())
    hr = [_case(1000 + i) for i in range(30)]
    (folder / "hr.jsonl").write_text("".join(json.dumps(c) + "\n" for c in hr))

    es = load_eval_set([folder], extra_categories=())
    files = sorted(folder.glob("*.jsonl"))  # hr, then ops
    expected: list[tuple[dict, str, int]] = []
    for f in files:
        for lineno, raw in enumerate(f.read_bytes().splitlines(), start=1):
            if raw.strip():
                expected.append((json.loads(raw), str(f), lineno))
    models = []
    for obj, f, _ in expected:
        if "expected_chunks" in obj:  # as the loader converts them (see its docstring)
            obj = {**obj, "gold_supports": [{"chunk_id": c} for c in obj["expected_chunks"]],
                   "answerable": bool(obj["expected_chunks"])}
        obj.setdefault("domain", Path(f).stem) if obj.get("domain") is None else None
        models.append(EvalCase.model_validate(obj))

    assert len(es) == len(expected) == 430
    assert list(es.cases) == models
    assert es.cases[-1] == models[-1] and es.cases[3] == models[3] and es.cases[200] == models[200]
    assert es.cases[45:48] == models[45:48]
    assert list(es.locations) == [(f, line) for _, f, line in expected]
    assert es.locations == [(f, line) for _, f, line in expected]  # equal to a list, as before
    assert list(es.ids) == [m.id for m in models]
    assert list(es.keys) == [CaseKey(m.id, tuple(m.tags), m.category) for m in models]
    bob = models[30 + 3]
    assert bob.id == "7" and [s.chunk_id for s in bob.gold_supports] == ["11", "x"] and bob.domain == "ops"
    assert models[30 + 5].domain == "own" and models[30 + 5].model_dump()["extra"] == {"nested": [1, 2.5, None]}
    # The version is the files' own: sha256 of the sha256s, in load order.
    shas = [hashlib.sha256(f.read_bytes()).hexdigest() for f in files]
    assert es.version == hashlib.sha256("\n".join(shas).encode()).hexdigest()
    assert [f["sha256"] for f in es.files] == shas


def test_line_numbers_follow_splitlines_across_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A \\r\\n cut between two reads is one line end, a lone \\r is one too."""
    monkeypatch.setattr(load, "_READ_BYTES", 7)
    path = tmp_path / "es.jsonl"
    line = json.dumps({"id": "a", "question": "q", "answerable": False}).encode()
    raw = line + b"\r\n\r" + line.replace(b'"a"', b'"b"') + b"\r" + b"\n" * 3 + line.replace(b'"a"', b'"c"')
    path.write_bytes(raw)
    for size in (1, 2, 7, len(line) + 1, 1 << 20):
        monkeypatch.setattr(load, "_READ_BYTES", size)
        es, problems = read_eval_set([path], extra_categories=())
        assert problems == [], size
        # a \r\n | a lone \r | b \r\n | \n | \n | c: lines 1, 3 and 6, as raw.splitlines() counts
        assert list(es.locations) == [(str(path), 1), (str(path), 3), (str(path), 6)], size
        assert [n for n, x in enumerate(raw.splitlines(), start=1) if x] == [1, 3, 6]
        assert es.version == hashlib.sha256(raw).hexdigest()


def test_a_changed_locked_file_is_still_the_first_problem_of_its_file(tmp_path: Path) -> None:
    from evalkit.evalset.lock import lock_eval_set

    path = tmp_path / "es.v1.jsonl"
    path.write_text(json.dumps(_case(1)) + "\n")
    lock_eval_set(path, "run-1")
    path.write_text(json.dumps(_case(1)) + "\n" + "{broken\n")
    _, problems = read_eval_set([path], extra_categories=())
    assert [p.line for p in problems] == [None, 2]
    assert "lock" in str(problems[0]).lower()


def test_validate_checks_anchors_in_the_same_pass(tmp_path: Path) -> None:
    """The anchor check sees each case once, while it is read, in file order."""
    from evalkit.evalset.anchorcheck import check_anchors, corpus_from_files, validate_eval_set

    path = tmp_path / "es.jsonl"
    cases = [_case(i) for i in range(1, 40)]
    path.write_text("".join(json.dumps(c) + "\n" for c in cases))
    corpus = corpus_from_files([f"area{i % 5}/note{i}.md" for i in range(1, 40, 2)])
    result = validate_eval_set([path], corpus, extra_categories=())
    assert result.problems == []
    assert result.anchor_problems == check_anchors(load_eval_set([path], extra_categories=()), corpus)
    assert len(result.anchor_problems) == sum(1 for i in range(2, 40, 2) if i % 10)  # the even notes are not there
    assert result.n_anchors == sum(1 for c in cases if c.get("gold_supports"))
