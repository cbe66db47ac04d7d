"""evalset_lock: baselined eval sets are immutable (issue 14 item 6)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from evalkit.errors import BadConfig, BadEvalSet
from evalkit.evalset import lock as lk
from evalkit.evalset.load import load_eval_set, read_eval_set

CASE_A = {"id": "a", "question": "Where is the starter?", "answerable": True, "gold_supports": [{"rel_path": "a.md"}]}
CASE_B = {"id": "b", "question": "What is the capital of Mars?", "answerable": False}


def _write(path: Path, *cases: dict) -> Path:
    path.write_text("".join(json.dumps(c) + "\n" for c in cases), encoding="utf-8")
    return path


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture()
def v1(tmp_path: Path) -> Path:
    return _write(tmp_path / "eval_set.v1.jsonl", CASE_A, CASE_B)


def test_lock_writes_a_stable_sorted_manifest_beside_the_file(v1: Path) -> None:
    entry = lk.lock_eval_set(v1, "run-1")
    lock = v1.parent / "eval_sets.lock"
    text = lock.read_text(encoding="utf-8")
    data = json.loads(text)
    assert data == {
        "eval_sets": {
            "eval_set.v1.jsonl": {"cases": 2, "locked_at": entry.locked_at, "run_id": "run-1", "sha256": _sha(v1)}
        },
        "schema_version": 1,
    }
    assert text == json.dumps(data, indent=2, sort_keys=True) + "\n"  # keys sorted, trailing newline
    assert entry.locked_at.endswith("Z") and entry.name == "eval_set.v1.jsonl"
    assert not [p for p in v1.parent.iterdir() if p.name.endswith(".tmp")]  # the temp file was renamed

    # Locking again, unchanged: confirmed as it is (run id and time kept, nothing written).
    again = lk.lock_eval_set(v1, "run-2")
    assert again == entry and lock.read_text(encoding="utf-8") == text
    assert lk.locked(v1) == entry


def test_an_unchanged_locked_file_loads_and_no_manifest_is_a_no_op(v1: Path, tmp_path: Path) -> None:
    lk.check_eval_set(tmp_path / "elsewhere" / "x.v1.jsonl")  # no manifest: nothing read, nothing raised
    assert lk.eval_set_problem(v1) is None
    lk.lock_eval_set(v1)
    lk.check_eval_set(v1)
    lk.check_eval_set(v1, _sha(v1))
    assert len(load_eval_set([v1])) == 2
    other = _write(tmp_path / "other.jsonl", CASE_A)  # same folder, not locked
    lk.check_eval_set(other)
    assert len(load_eval_set([other])) == 1


def test_a_changed_locked_file_is_refused_with_the_next_version_named(v1: Path) -> None:
    lk.lock_eval_set(v1, "base")
    old = _sha(v1)
    _write(v1, CASE_A, {**CASE_B, "question": "What is the capital of Venus?"})
    new = _sha(v1)

    with pytest.raises(BadEvalSet) as e:
        lk.check_eval_set(v1)
    (problem,) = e.value.problems
    assert problem.path == str(v1)
    lock = v1.parent / "eval_sets.lock"
    assert problem.message == (
        f"changed since it was baselined by run base ({lock}: sha256 {old[:8]}…, now {new[:8]}…); "
        f"a baselined eval set is immutable: write the changed cases to {v1.parent / 'eval_set.v2.jsonl'} and run "
        f"that (or `evalkit lock --remove {v1}` to unlock it, which makes runs before and after incomparable)"
    )
    # Every script loads through the loader: it reports the same problem (one line, exit 2 in a CLI).
    with pytest.raises(BadEvalSet) as loaded:
        load_eval_set([v1])
    assert [str(p) for p in loaded.value.problems] == [str(problem)]
    # validate's reader lists it with the file's own problems.
    _, problems = read_eval_set([v1])
    assert [str(p) for p in problems] == [str(problem)]
    # Nor can it be locked again under its changed content.
    with pytest.raises(BadEvalSet, match="eval_set.v2.jsonl"):
        lk.lock_eval_set(v1)


def test_a_locked_name_is_not_writable_whatever_the_content(v1: Path, tmp_path: Path) -> None:
    lk.lock_eval_set(v1, "base")
    with pytest.raises(BadConfig) as e:
        lk.check_writable(v1)  # unchanged content: still immutable
    message = str(e.value)
    assert message.startswith(f"{v1}: baselined by run base ({tmp_path / 'eval_sets.lock'})")
    assert f"--output {tmp_path / 'eval_set.v2.jsonl'}" in message and "evalkit lock --remove" in message
    lk.check_writable(tmp_path / "eval_set.v2.jsonl")  # the next version may be written
    lk.check_writable(tmp_path / "new" / "eval_set.v1.jsonl")  # same name, another folder: another manifest


def test_unlock_removes_the_entry_and_a_second_unlock_is_refused(v1: Path) -> None:
    entry = lk.lock_eval_set(v1)
    assert lk.unlock_eval_set(v1) == entry
    assert lk.locked(v1) is None
    assert json.loads((v1.parent / "eval_sets.lock").read_text()) == {"eval_sets": {}, "schema_version": 1}
    _write(v1, CASE_A)  # unlocked: may change
    lk.check_eval_set(v1)
    lk.check_writable(v1)
    with pytest.raises(BadConfig, match="not locked"):
        lk.unlock_eval_set(v1)


@pytest.mark.parametrize(
    "name, expected",
    [
        ("eval_set.v1.jsonl", "eval_set.v2.jsonl"),
        ("eval_set.jsonl", "eval_set.v2.jsonl"),  # an unversioned file is version 1
        ("x.v9.jsonl", "x.v10.jsonl"),
        ("assistant-baseline.v1.jsonl", "assistant-baseline.v2.jsonl"),
        ("a.v1.v3.jsonl", "a.v1.v4.jsonl"),
    ],
)
def test_next_version_name(tmp_path: Path, name: str, expected: str) -> None:
    assert lk.next_version_name(tmp_path / name) == expected


def test_next_version_name_skips_names_on_disk_and_in_the_manifest(tmp_path: Path) -> None:
    v1 = _write(tmp_path / "eval_set.v1.jsonl", CASE_A)
    (tmp_path / "eval_set.v2.jsonl").write_text("")
    assert lk.next_version_name(v1) == "eval_set.v3.jsonl"
    v3 = _write(tmp_path / "eval_set.v3.jsonl", CASE_B)
    lk.lock_eval_set(v3)
    v3.unlink()  # deleted, but its name stays locked: never reused for other content
    assert lk.next_version_name(v1) == "eval_set.v4.jsonl"


def test_is_versioned() -> None:
    assert lk.is_versioned("data/eval_set.v1.jsonl") and lk.is_versioned("x.v12.jsonl")
    assert not lk.is_versioned("eval_set.jsonl") and not lk.is_versioned("eval_set.v1.json")
    assert not lk.is_versioned("eval_set.vx.jsonl")


@pytest.mark.parametrize(
    "content, field",
    [
        (b"{not json", None),
        (b'{"schema_version": 2, "eval_sets": {}}\n', "schema_version"),
        (b'{"schema_version": 1, "eval_sets": []}\n', "eval_sets"),
        (b'{"schema_version": 1, "eval_sets": {"eval_set.v1.jsonl": {"sha256": "abc"}}}\n', "eval_sets.eval_set.v1.jsonl.sha256"),
    ],
)
def test_a_broken_manifest_is_a_located_error(v1: Path, content: bytes, field: str | None) -> None:
    lock = v1.parent / "eval_sets.lock"
    lock.write_bytes(content)
    with pytest.raises(BadConfig) as e:
        lk.check_eval_set(v1)
    (problem,) = e.value.problems
    assert problem.path == str(lock) and problem.field == field
    with pytest.raises(BadEvalSet) as loaded:
        load_eval_set([v1])
    assert [p.path for p in loaded.value.problems] == [str(lock)]
    with pytest.raises(BadConfig):
        lk.lock_eval_set(v1)
    with pytest.raises(BadConfig):
        lk.check_writable(v1)


def test_lock_baselined_locks_what_the_run_read_and_skips_locked_files(tmp_path: Path) -> None:
    folder = tmp_path / "sets"
    folder.mkdir()
    plain = _write(folder / "a.jsonl", CASE_A)
    versioned = _write(folder / "b.v1.jsonl", CASE_B, {**CASE_A, "id": "c"})
    eval_set = load_eval_set([folder])

    assert lk.lock_baselined(eval_set, "run-1", versioned_only=True) == [versioned]
    assert lk.locked(plain) is None
    entry = lk.locked(versioned)
    assert (entry.run_id, entry.cases, entry.sha256) == ("run-1", 2, _sha(versioned))

    # The bytes the run read are locked, even when the file changed since it was loaded.
    _write(plain, CASE_A, {**CASE_A, "id": "z"})
    assert lk.lock_baselined(eval_set, "base") == [plain]  # b.v1 already locked: left as it is
    assert lk.locked(plain).sha256 == eval_set.files[0]["sha256"] != _sha(plain)
    assert lk.locked(versioned).run_id == "run-1"
    with pytest.raises(BadEvalSet, match="a.v2.jsonl"):
        load_eval_set([folder])


def test_manifest_status(v1: Path, tmp_path: Path) -> None:
    assert lk.manifest_status(tmp_path) == []
    gone = _write(tmp_path / "gone.v1.jsonl", CASE_A)
    lk.lock_eval_set(v1)
    lk.lock_eval_set(gone)
    gone.unlink()
    assert [(e.name, state) for e, state in lk.manifest_status(tmp_path)] == [
        ("eval_set.v1.jsonl", "ok"), ("gone.v1.jsonl", "missing")
    ]
    _write(v1, CASE_A)
    assert lk.manifest_status(tmp_path)[0][1] == "changed"


def test_the_importer_refuses_a_locked_output_before_writing_anything(v1: Path) -> None:
    from evalkit.interop.importers.base import ImportedCase
    from evalkit.interop.importers.output import write_eval_set

    lk.lock_eval_set(v1)
    before = sorted(p.name for p in v1.parent.iterdir())
    data = v1.read_bytes()
    cases = [ImportedCase({**CASE_A, "id": "new"}, "fixture.json", 0)]
    with pytest.raises(BadConfig, match="baselined") as e:
        write_eval_set(cases, v1, force=True, extra_categories=[])
    assert "eval_set.v2.jsonl" in str(e.value)
    assert v1.read_bytes() == data and sorted(p.name for p in v1.parent.iterdir()) == before
    write_eval_set(cases, v1.parent / "eval_set.v2.jsonl", extra_categories=[])  # a new version is fine


def test_the_labeling_writers_refuse_a_locked_file(v1: Path, tmp_path: Path) -> None:
    from evalkit.authoring import labeling
    lk.lock_eval_set(v1)
    data = v1.read_bytes()
    with pytest.raises(BadConfig, match="baselined"):
        labeling.check_writable(v1, tmp_path / "results")
    with pytest.raises(BadConfig, match=r"--output .*eval_set\.v2\.jsonl"):
        labeling.new_case(v1, question="A new question?", results_dir=tmp_path / "results")
    assert v1.read_bytes() == data
    case_id, written = labeling.new_case(
        v1, question="A new question?", output=tmp_path / "eval_set.v2.jsonl", results_dir=tmp_path / "results"
    )
    assert written == tmp_path / "eval_set.v2.jsonl" and v1.read_bytes() == data
