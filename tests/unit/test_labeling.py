"""evalkit.authoring.labeling without a target: byte-exact rewrites, the freeze rule, anchors from chunks."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from evalkit.authoring.labeling import EvalSetFile, anchors_from_chunks, check_writable, frozen_by, next_version_path
from evalkit.errors import BadConfig, InputError
from evalkit.evalset.load import load_eval_set

# Odd spacing, an escaped and a raw non-ASCII character, an unknown field, a CRLF line,
# a blank line and no final newline: all of it must survive an edit of another line.
ODD = (
    b'{"id":"a" ,  "question": "Gr\\u00f6\\u00dfe?", "answerable": true, "reviewer": "z\xc3\xbc"}\n'
    b'{"id": "b", "question": "Two?", "answerable": true, "gold_supports": [], "x_extra": {"k": [1, 2]}}\r\n'
    b"\n"
    b'  {"answerable": false, "id": "c", "question": "Caf\xc3\xa9?"}'
)


def _lines(data: bytes) -> list[bytes]:
    return data.splitlines(keepends=True)


def test_replace_and_append_leave_every_other_line_byte_identical(tmp_path: Path) -> None:
    path = tmp_path / "es.jsonl"
    path.write_bytes(ODD)
    doc = EvalSetFile(path)
    assert doc.ids == ["a", "b", "c"]
    assert doc.line_of("c") == 4

    case = doc.case("b")
    case["gold_supports"] = [{"rel_path": "n.md", "heading_path": "# N"}]
    doc.replace("b", case)
    doc.append({"id": "d", "question": "Neu? ✓", "answerable": False})
    doc.write()

    before, after = _lines(ODD), _lines(path.read_bytes())
    assert len(after) == len(before) + 1
    assert after[0] == before[0] and after[2] == before[2]
    assert after[3] == before[3] + b"\n"  # the last line gained only the newline the appended case needs
    assert after[1].endswith(b"\r\n")  # the replaced line keeps its own line ending
    replaced = json.loads(after[1])
    assert list(replaced) == ["id", "question", "answerable", "gold_supports", "x_extra"]  # key order kept
    assert replaced["x_extra"] == {"k": [1, 2]}  # unknown field kept
    assert "Neu? ✓".encode() in after[4]  # unicode written as is
    assert [c.id for c in load_eval_set([path]).cases] == ["a", "b", "c", "d"]


def test_replacing_a_case_with_equal_json_keeps_its_spelling(tmp_path: Path) -> None:
    path = tmp_path / "es.jsonl"
    path.write_bytes(ODD)
    doc = EvalSetFile(path)
    doc.replace("a", doc.case("a"))  # line 1's odd spacing and \u escapes are not re-spelled
    assert not doc.dirty and doc.dumps() == ODD


def test_write_is_atomic_keeps_the_mode_and_leaves_no_temp_file(tmp_path: Path) -> None:
    path = tmp_path / "es.jsonl"
    path.write_bytes(ODD)
    os.chmod(path, 0o640)
    doc = EvalSetFile(path)
    doc.replace("a", doc.case("a") | {"notes": "checked"})
    doc.write()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["es.jsonl"]
    assert path.stat().st_mode & 0o777 == 0o640


def test_write_refuses_when_the_file_changed_on_disk(tmp_path: Path) -> None:
    path = tmp_path / "es.jsonl"
    path.write_bytes(ODD)
    doc = EvalSetFile(path)
    doc.replace("a", doc.case("a") | {"notes": "mine"})
    path.write_bytes(ODD + b"\n")  # someone else's edit
    with pytest.raises(InputError, match="changed on disk"):
        doc.write()
    assert path.read_bytes() == ODD + b"\n"


def test_replace_cannot_change_an_id_or_touch_an_unknown_one(tmp_path: Path) -> None:
    doc = EvalSetFile(tmp_path / "es.jsonl", data=ODD)
    with pytest.raises(InputError, match="keep id 'a'"):
        doc.replace("a", {"id": "z"})
    with pytest.raises(InputError, match="no case with id 'q'"):
        doc.case("q")
    with pytest.raises(InputError, match="already in the file"):
        doc.append({"id": "a"})


def _run(results: Path, run_id: str, config: bytes) -> None:
    (results / run_id).mkdir(parents=True)
    (results / run_id / "config.json").write_bytes(config)


def test_frozen_by_names_the_runs_that_used_the_file_as_it_is(tmp_path: Path) -> None:
    es = tmp_path / "eval_set.jsonl"
    es.write_bytes(ODD)
    sha = hashlib.sha256(ODD).hexdigest()
    results = tmp_path / "results"
    _run(results, "baseline", json.dumps({"created_at": "2026-01-01T00:00:00+00:00", "eval_set": {"files": [{"path": "x", "sha256": sha}]}}).encode())
    _run(results, "other-version", json.dumps({"eval_set": {"files": [{"sha256": "0" * 64}]}}).encode())
    _run(results, "junk", b"{not json")
    _run(results, "odd-shape", b'{"eval_set": "eval_set.jsonl"}')
    (results / "empty").mkdir()  # no config.json at all
    assert frozen_by(es, results) == ["baseline"]
    assert frozen_by(tmp_path / "missing.jsonl", results) == []
    assert frozen_by(es, tmp_path / "no-results") == []

    # A run that used a file does not freeze it (issue 28: one freeze rule, the lock)
    check_writable(es, results)
    from evalkit.evalset.lock import lock_eval_set

    lock_eval_set(es, "baseline")
    with pytest.raises(BadConfig) as e:
        check_writable(es, results)
    assert "baselined by run baseline" in str(e.value) and "--output " + str(tmp_path / "eval_set.v2.jsonl") in str(e.value)


def test_next_version_path() -> None:
    assert next_version_path("d/eval_set.jsonl") == Path("d/eval_set.v2.jsonl")
    assert next_version_path("eval_set.v2.jsonl") == Path("eval_set.v3.jsonl")


def test_anchors_from_chunks_dedupes_and_never_keeps_chunk_ids() -> None:
    chunks = [
        {"chunk_id": "c1", "rel_path": "a.md", "heading_path": "# A > ## B", "text": "x"},
        {"chunk_id": "c2", "rel_path": "a.md", "heading_path": "#A >  ## B", "text": "y"},  # same anchor, other spelling
        {"chunk_id": "c3", "rel_path": "b.md", "heading_path": "", "text": "z"},
        {"chunk_id": "c4", "rel_path": "c.md", "heading_path": "# C"},  # beyond the top 3
    ]
    assert anchors_from_chunks(chunks, 3) == [
        {"rel_path": "a.md", "heading_path": "# A > ## B"},
        {"rel_path": "b.md", "heading_path": ""},
    ]


def test_a_top_heading_anchor_keeps_its_line_span_so_it_does_not_match_the_whole_note() -> None:
    # issue 28 item 7: `# Home server` matches every chunk of the note by the prefix rule
    from evalkit.evalset.anchors import match_support

    chunks = [
        {"rel_path": "h.md", "heading_path": "# Home server", "start_line": 1, "end_line": 6},
        {"rel_path": "h.md", "heading_path": "# Home server > ## Ports", "start_line": 8, "end_line": 20},
    ]
    anchors = anchors_from_chunks(chunks, 2)
    assert anchors == [
        {"rel_path": "h.md", "heading_path": "# Home server", "start_line": 1, "end_line": 6},
        {"rel_path": "h.md", "heading_path": "# Home server > ## Ports"},
    ]
    # by hand: the intro anchor matches the intro chunk, not the Ports section below it
    assert match_support(anchors[0], chunks[0]) and not match_support(anchors[0], chunks[1])


def test_backup_takes_the_first_free_name_and_never_overwrites(tmp_path: Path) -> None:
    from evalkit.authoring.labeling import backup

    path = tmp_path / "es.v2.jsonl"
    path.write_bytes(b"one\n")
    os.chmod(path, 0o640)
    assert backup(path) == tmp_path / "es.v2.jsonl.bak"
    path.write_bytes(b"two\n")
    (tmp_path / "es.v2.jsonl.bak.1").symlink_to(tmp_path / "elsewhere")  # taken, even as a dangling link
    assert backup(path) == tmp_path / "es.v2.jsonl.bak.2"
    assert (tmp_path / "es.v2.jsonl.bak").read_bytes() == b"one\n" and (tmp_path / "es.v2.jsonl.bak.2").read_bytes() == b"two\n"
    assert not (tmp_path / "elsewhere").exists()
    assert (tmp_path / "es.v2.jsonl.bak.2").stat().st_mode & 0o777 == 0o640


def test_a_write_to_another_existing_file_is_refused_unless_replace(tmp_path: Path) -> None:
    src, out = tmp_path / "es.jsonl", tmp_path / "es.v2.jsonl"
    src.write_bytes(ODD)
    out.write_bytes(b'{"id": "labeled", "question": "Mine?", "answerable": false}\n')
    doc = EvalSetFile(src)
    with pytest.raises(BadConfig, match="pass --force to replace it"):
        doc.write(out)
    assert out.read_bytes() == b'{"id": "labeled", "question": "Mine?", "answerable": false}\n'
    assert doc.write(out, replace=True) == out and out.read_bytes() == ODD
    assert doc.backed_up == tmp_path / "es.v2.jsonl.bak"
    assert doc.backed_up.read_bytes() == b'{"id": "labeled", "question": "Mine?", "answerable": false}\n'


def test_open_version_goes_on_in_a_version_and_refuses_anything_else(tmp_path: Path) -> None:
    from evalkit.authoring.labeling import open_version

    src = tmp_path / "es.jsonl"
    src.write_bytes(ODD)
    out = tmp_path / "es.v2.jsonl"
    doc, write_to = open_version(src, out)  # no output yet: start from the source
    assert (doc.path, write_to) == (src, out)
    out.write_bytes(ODD + b'\n{"id": "d", "question": "Added?", "answerable": false}\n')
    doc, write_to = open_version(src, out)  # a version of the source: go on in it, in place
    assert (doc.path, write_to, doc.ids) == (out, None, ["a", "b", "c", "d"])
    assert open_version(src, src)[1] is None
    out.write_bytes(b'{"id": "zz", "question": "Other?", "answerable": false}\n')
    with pytest.raises(BadConfig, match="is not a version of") as e:
        open_version(src, out)
    assert "--force" in str(e.value)
    doc, write_to = open_version(src, out, force=True)  # start again from the source (the write keeps a .bak)
    assert (doc.path, write_to) == (src, out)
