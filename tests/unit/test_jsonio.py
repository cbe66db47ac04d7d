"""The one bounded reader of untrusted JSON, JSON lines and text (issue 29): exact lines from
binary reads, strict UTF-8 said at its line and byte, a depth and a size limit; and every
importer, loader and manifest reader going through it."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from evalkit import jsonio
from evalkit.errors import BadConfig, InputError, JudgeConfigError, Problem
from evalkit.jsonio import MAX_DEPTH, MAX_WRITTEN_DEPTH, iter_jsonl, iter_lines, loads, read_bytes, read_json, read_text
from tests.jsonio_words import orjson_msg

TOO_DEEP = "nested too deeply: more than 64 levels of arrays and objects"



NAN_DOC, NO_VALUE_DOC = b'{"a": NaN}', b'{"n": }'


def _nest(depth: int) -> Any:
    """A list nested `depth` levels: [] is 1, [[]] is 2."""
    value: Any = []
    for _ in range(depth - 1):
        value = [value]
    return value


def _deep(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def _problems(fn: Callable[[], Any]) -> list[str]:
    with pytest.raises(InputError) as e:
        fn()
    return [str(p) for p in e.value.problems]


# ----------------------------------------------------------------- what the parsers do

def test_orjson_has_its_own_depth_limit_and_the_stdlib_recurses() -> None:
    # The facts the reader is built on. orjson parses up to 1024 levels and refuses deeper with
    # a JSONDecodeError (no crash, but deeper than evalkit's walkers take); the stdlib recurses
    # and raises RecursionError (exit 70 before issue 29), so the reader never uses it.
    # orjson 3.10+ refuses more than 1024 levels with a JSONDecodeError; 3.9 (the lower bound)
    # parses any depth: either way no crash, and the reader's own bound decides (below).
    orjson.loads(_deep(1024))
    try:
        orjson.loads(_deep(100_000))
    except orjson.JSONDecodeError:
        pass
    with pytest.raises(RecursionError):
        json.loads("[" * 100_000)
    # what orjson writes: at most 254 levels, so the run-folder readers' limit reads all of it back
    orjson.dumps(_nest(MAX_WRITTEN_DEPTH))
    with pytest.raises(orjson.JSONEncodeError):
        orjson.dumps(_nest(MAX_WRITTEN_DEPTH + 1))
    assert MAX_DEPTH < MAX_WRITTEN_DEPTH  # a case (64 levels) still fits in a record


@pytest.mark.parametrize(
    ("data", "why"),
    [
        pytest.param(_deep(65), "orjson parses it; the reader refuses it", id="65-levels"),
        pytest.param(_deep(1000), "orjson parses it; the reader refuses it", id="1000-levels"),
        pytest.param(b"[" * 100_000, "orjson refuses it (its own limit); said as depth, not syntax", id="open-100000"),
        pytest.param(b'{"a": ' * 100 + b"1" + b"}" * 100, "objects count as arrays do", id="objects"),
    ],
)
def test_too_deep_is_bad_input(data: bytes, why: str) -> None:
    assert _problems(lambda: loads(data, path="x.json")) == [f"x.json: JSON {TOO_DEEP}"], why


def test_depth_at_the_limit_and_brackets_in_strings() -> None:
    assert loads(_deep(MAX_DEPTH)) == _nest(MAX_DEPTH)
    # 1,000 brackets inside a string are text, not nesting: 2 levels
    text = "[" * 1000 + "{" * 1000
    assert loads(orjson.dumps({"a": [text]})) == {"a": [text]}
    assert loads(_deep(100), max_depth=100) == _nest(100)  # a caller's own limit
    # ... and an escaped quote does not end the string early
    assert loads(b'["\\"[[[[' + b"[" * 100 + b'"]') == ['"[[[[' + "[" * 100]


def test_not_json_is_said_with_line_and_column() -> None:
    # a document: the line counted in it; one line of a JSONL file: the given line
    assert _problems(lambda: loads(b'{\n "a": 1,\n x}', path="d.json")) == [
        f"d.json:3: not valid JSON ({orjson_msg(b'{ x}')}, column 2)"
    ]
    assert _problems(lambda: loads(b'{"a": NaN}', path="f.jsonl", line=7)) == [
        f"f.jsonl:7: not valid JSON ({orjson_msg(NAN_DOC)}, column 7)"  # strict JSON
    ]


def test_a_bad_byte_is_said_at_its_line_and_byte() -> None:
    data = b'{\n  "a": 1,\n  "b": "caf\xe9"\n}'  # latin-1, not UTF-8: the 12th byte of line 3
    assert _problems(lambda: loads(data, path="d.json")) == [
        "d.json:3: not UTF-8 (invalid continuation byte: byte 0xe9 at byte 12 of the line)"
    ]
    assert _problems(lambda: loads(b'{"a": "\xff"}', path="f.jsonl", line=4, field="--x")) == [
        "f.jsonl:4: --x: not UTF-8 (invalid start byte: byte 0xff at byte 8 of the line)"
    ]


# ----------------------------------------------------------------- files and their limits

def test_read_json_bom_size_and_missing(tmp_path: Path) -> None:
    p = tmp_path / "a.json"
    p.write_bytes(b'\xef\xbb\xbf{"a": [1]}\r\n')  # Notepad's byte order mark and line ending
    assert read_json(p) == {"a": [1]}
    assert read_json(p, max_bytes=p.stat().st_size) == {"a": [1]}
    assert _problems(lambda: read_json(p, max_bytes=10, what="the schema", field="--response-schema")) == [
        f"{p}: --response-schema: the schema is too large (15 bytes): over 10 bytes, the most evalkit reads as one file"
    ]
    with pytest.raises(BadConfig):  # the caller's error class
        read_json(p, max_bytes=10, error=BadConfig)
    assert _problems(lambda: read_json(tmp_path / "gone.json")) == [f"{tmp_path / 'gone.json'}: cannot read (No such file or directory)"]


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_a_file_without_a_size_is_read_up_to_the_limit_only() -> None:
    # /dev/zero has no size to check first and never ends: read up to the limit, then refused
    assert _problems(lambda: read_bytes("/dev/zero", max_bytes=1 << 20)) == [
        "/dev/zero: too large: over 1 MB, the most evalkit reads as one file"
    ]


def test_jsonl_line_numbers_are_exact(tmp_path: Path) -> None:
    p = tmp_path / "f.jsonl"
    # CRLF endings, a blank line, a whitespace-only line, a BOM, a U+2028 in a string (not a
    # line break), and a last line without a newline
    p.write_bytes(b'\xef\xbb\xbf{"n": 1}\r\n\r\n{"n": 3, "s": "a\xe2\x80\xa8b"}\r\n   \n{"n": 5}')
    assert list(iter_jsonl(p)) == [(1, {"n": 1}), (3, {"n": 3, "s": "a\u2028b"}), (5, {"n": 5})]
    # a syntax error's column is on its line, not past its CRLF
    p.write_bytes(b'{"n": 1}\r\n{"n": }\r\n')
    assert _problems(lambda: list(iter_jsonl(p))) == [f"{p}:2: not valid JSON ({orjson_msg(NO_VALUE_DOC)}, column 7)"]


def test_jsonl_bad_byte_on_line_2001_is_said_on_line_2001(tmp_path: Path) -> None:
    # regression: issue 29, a text-mode reader decoded ahead and said line 1950
    p = tmp_path / "corpus.jsonl"
    lines = [b'{"_id": "d%d", "text": "caf\xc3\xa9 au lait %d"}\n' % (i, i) for i in range(1, 3001)]
    lines[2000] = b'{"_id": "d2001", "text": "caf\xe9"}\n'
    p.write_bytes(b"".join(lines))
    problems: list[Problem] = []
    got = [n for n, _ in iter_jsonl(p, on_problem=problems.append)]
    assert [str(x) for x in problems] == [f"{p}:2001: not UTF-8 (invalid continuation byte: byte 0xe9 at byte 30 of the line)"]
    assert got == [*range(1, 2001), *range(2002, 3001)]  # every other line is read
    with pytest.raises(InputError, match=r"corpus\.jsonl:2001: not UTF-8"):  # without on_problem: raised
        list(iter_jsonl(p))


def test_a_line_over_the_limit_is_skipped_and_counted(tmp_path: Path) -> None:
    p = tmp_path / "f.jsonl"
    p.write_bytes(b'{"a": 1}\n{"a": "' + b"x" * 5000 + b'"}\n{"a": ' + _deep(70) + b"}\n" + b'{"a": 4}')
    problems: list[Problem] = []
    assert list(iter_jsonl(p, max_line_bytes=1024, on_problem=problems.append)) == [(1, {"a": 1}), (4, {"a": 4})]
    assert [str(x) for x in problems] == [
        f"{p}:2: line longer than 1 KB, the most evalkit reads as one line",
        f"{p}:3: JSON {TOO_DEEP}",
    ]
    # a line exactly at the limit (its newline not counted) is read
    p.write_bytes(b'"' + b"y" * 1022 + b'"\n')
    assert list(iter_jsonl(p, max_line_bytes=1024)) == [(1, "y" * 1022)]


def test_text_lines_and_text(tmp_path: Path) -> None:
    p = tmp_path / "q.tsv"
    p.write_bytes(b"\xef\xbb\xbfq1\td1\t1\r\n\nq2\td\xff\t1\nq3\td3\t1")
    problems: list[Problem] = []
    assert list(iter_lines(p, on_problem=problems.append)) == [(1, "q1\td1\t1"), (2, ""), (4, "q3\td3\t1")]
    assert [str(x) for x in problems] == [f"{p}:3: not UTF-8 (invalid start byte: byte 0xff at byte 5 of the line)"]
    assert _problems(lambda: read_text(p)) == [f"{p}:3: not UTF-8 (invalid start byte: byte 0xff at byte 5 of the line)"]
    p.write_bytes(b"\xef\xbb\xbfa\r\nb")
    assert read_text(p) == "a\r\nb"


# ----------------------------------------------------------------- every reader uses it
# A file 100 levels deep is valid JSON that both parsers read; before issue 29 every one of
# these readers accepted it (or crashed further on). Now each refuses it, naming the file.

def _eval_case(i: int = 1) -> dict:
    return {"id": f"c{i}", "question": "q?", "answerable": False}


def _gno(tmp_path: Path) -> Callable[[], Any]:
    from evalkit.interop.importers import import_cases

    p = tmp_path / "queries.json"
    p.write_bytes(_deep(100))
    return lambda: import_cases("gno", [p])


def _hindsight(tmp_path: Path) -> Callable[[], Any]:
    from evalkit.interop.importers import import_cases

    p = tmp_path / "h.jsonl"
    p.write_bytes(b'{"id": "c1", "query": "q?", "seedFacts": [{"content": "a"}], "x": ' + _deep(100) + b"}\n")
    return lambda: import_cases("hindsight", [p])


def _trec_topics(tmp_path: Path) -> Callable[[], Any]:
    from evalkit.interop.importers.trec import read_topics

    p = tmp_path / "topics.jsonl"
    p.write_bytes(b'{"_id": "q1", "text": "q?", "x": ' + _deep(100) + b"}\n")

    def run() -> None:
        problems: list[Problem] = []
        read_topics(p, problems)
        raise InputError(problems)

    return run


def _docid_map(tmp_path: Path) -> Callable[[], Any]:
    from evalkit.interop.importers.docids import load_docid_map

    p = tmp_path / "map.json"
    p.write_bytes(b'{"d1": ' + _deep(100) + b"}")
    return lambda: load_docid_map(p)


def _eval_set(tmp_path: Path) -> Callable[[], Any]:
    from evalkit.evalset.load import load_eval_set

    p = tmp_path / "set.jsonl"
    p.write_bytes(orjson.dumps({**_eval_case(), "extra": _nest(100)}) + b"\n")
    return lambda: load_eval_set([p], extra_categories=())


def _lock(tmp_path: Path) -> Callable[[], Any]:
    from evalkit.evalset.load import load_eval_set

    p = tmp_path / "set.jsonl"
    p.write_bytes(orjson.dumps(_eval_case()) + b"\n")
    (tmp_path / "eval_sets.lock").write_bytes(b'{"eval_sets": ' + _deep(100) + b', "schema_version": 1}')
    return lambda: load_eval_set([p], extra_categories=())


def _schema(tmp_path: Path) -> Callable[[], Any]:
    from evalkit.metrics.validity import build_response_validator

    p = tmp_path / "schema.json"
    p.write_bytes(b'{"type": "object", "x": ' + _deep(100) + b"}")
    return lambda: build_response_validator(p)


def _price_file(tmp_path: Path) -> Callable[[], Any]:
    from evalkit.judges.cost import PriceTable

    p = tmp_path / "prices.json"
    p.write_bytes(b'{"models": ' + _deep(100) + b"}")
    return lambda: PriceTable.load(p)


def _replay_log(tmp_path: Path) -> Callable[[], Any]:
    from evalkit.targets.replay import ReplayTarget

    p = tmp_path / "log.jsonl"
    p.write_bytes(b'{"id": "c1", "answer": "a", "x": ' + _deep(100) + b"}\n")
    return lambda: ReplayTarget(p)


@pytest.mark.parametrize(
    ("make", "name", "line"),
    [
        pytest.param(_gno, "queries.json", None, id="gno"),
        pytest.param(_hindsight, "h.jsonl", 1, id="hindsight"),
        pytest.param(_trec_topics, "topics.jsonl", 1, id="trec-topics"),
        pytest.param(_docid_map, "map.json", None, id="docid-map"),
        pytest.param(_eval_set, "set.jsonl", 1, id="eval-set"),
        pytest.param(_lock, "eval_sets.lock", None, id="eval-sets-lock"),
        pytest.param(_schema, "schema.json", None, id="response-schema"),
        pytest.param(_price_file, "prices.json", None, id="price-file"),
        pytest.param(_replay_log, "log.jsonl", 1, id="replay-log"),
    ],
)
def test_every_reader_refuses_a_file_nested_too_deeply(tmp_path: Path, make, name: str, line: int | None) -> None:
    with pytest.raises(InputError) as e:
        make(tmp_path)()
    deep = [p for p in e.value.problems if TOO_DEEP in p.message]
    assert len(deep) == 1, [str(p) for p in e.value.problems]
    assert Path(deep[0].path).name == name and deep[0].line == line


def test_the_beir_importer_refuses_a_deep_corpus_line(tmp_path: Path) -> None:
    from evalkit.interop.importers.beir import import_beir

    root = tmp_path / "b"
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_bytes(b'{"_id": "d1", "text": "a"}\n{"_id": "d2", "text": "b", "x": ' + _deep(100) + b"}\n")
    (root / "queries.jsonl").write_text('{"_id": "q1", "text": "q?"}\n')
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    assert _problems(lambda: import_beir(root, vault_out=tmp_path / "v", output=tmp_path / "o.jsonl")) == [
        f"{root / 'corpus.jsonl'}:2: JSON {TOO_DEEP}"
    ]


def test_run_folder_files_read_back_what_evalkit_writes_and_no_deeper(tmp_path: Path) -> None:
    from evalkit.store.runs import RunDir

    run = RunDir(tmp_path)
    ok = orjson.dumps({"test_case_id": "a", "response": _nest(MAX_WRITTEN_DEPTH - 1)})  # 254 levels: orjson wrote it
    deep = b'{"test_case_id": "b", "x": ' + _deep(300) + b"}"  # tampered: orjson never writes this
    (tmp_path / "results.jsonl").write_bytes(ok + b"\n" + deep + b"\n")
    with pytest.raises(InputError) as e:
        list(run.iter_results())
    assert [str(p) for p in e.value.problems] == [
        f"{run.results_path}:2: corrupt record: JSON nested too deeply: more than {MAX_WRITTEN_DEPTH} levels of arrays and objects"
    ]
    (tmp_path / "results.jsonl").write_bytes(ok + b"\n" + deep)  # a deep unterminated last line is not taken for a torn one
    with pytest.raises(InputError, match="corrupt record: JSON nested too deeply"):
        list(run.iter_results())
    (tmp_path / "results.jsonl").write_bytes(ok + b"\n" + b'{"test_case_id": "c", "x": [')  # a torn one is dropped
    assert [r["test_case_id"] for r in run.iter_results()] == ["a"]


def test_counted_lines_are_the_lines_and_their_bracket_counts(tmp_path: Path) -> None:
    # The block reader's count is what `bytes.count` says, line by line, wherever a block ends:
    # lines across block boundaries, a line longer than the buffer, blank lines, brackets in
    # strings, an unterminated last line; and `end` stops before the first line starting there.
    import io
    import random

    rng = random.Random(7)
    lines = [b"\n", b'{"a": "[{[{"}\n', _deep(300) + b"\n", b'{"x": "' + b"y" * 5000 + b'", "z": [[{}]]}\n']
    lines += [bytes(rng.choice(b'[]{}ab"\\ ') for _ in range(rng.randrange(1, 900))) + b"\n" for _ in range(200)]
    lines.append(b'{"last": [1]}')  # no line ending
    data = b"".join(lines)
    for chunk in (64, 1000, 1 << 18):
        got = list(jsonio.iter_counted_lines(io.BytesIO(data), chunk=chunk))
        assert [raw for raw, _ in got] == lines
        assert [n for _, n in got] == [raw.count(b"[") + raw.count(b"{") for raw in lines]
        cut = len(lines[0]) + len(lines[1]) + 1  # inside line 2: lines 1-3 start before it
        assert [raw for raw, _ in jsonio.iter_counted_lines(io.BytesIO(data), cut, chunk=chunk)] == lines[:3]
    assert list(jsonio.iter_counted_lines(io.BytesIO(b""))) == []
    # And loads takes the count instead of counting: the guard walks what it says is deep.
    assert loads(_deep(200), max_depth=MAX_WRITTEN_DEPTH, openers=200) == _nest(200)
    with pytest.raises(InputError, match="nested too deeply"):
        loads(_deep(300), max_depth=MAX_WRITTEN_DEPTH, openers=600)


def test_a_deep_record_is_refused_wherever_the_reader_blocks_fall(tmp_path: Path) -> None:
    # results.jsonl is read a block at a time: a deep record longer than a block (its brackets
    # in several blocks) or after many ordinary ones is refused at its own line all the same.
    from evalkit.store.runs import RunDir

    run = RunDir(tmp_path)
    ok = orjson.dumps({"test_case_id": "a", "text": "w " * 200, "response": _nest(MAX_WRITTEN_DEPTH - 1)})
    long_deep = b'{"test_case_id": "b", "pad": "' + b"p" * 600_000 + b'", "x": ' + _deep(300) + b"}"
    for body, line in ((ok + b"\n" + long_deep + b"\n", 2), (ok + b"\n" * 1 + (ok + b"\n") * 2000 + long_deep + b"\n", 2002)):
        (tmp_path / "results.jsonl").write_bytes(body)
        with pytest.raises(InputError) as e:
            list(run.iter_results())
        assert [str(p) for p in e.value.problems] == [
            f"{run.results_path}:{line}: corrupt record: JSON nested too deeply: more than {MAX_WRITTEN_DEPTH} levels "
            "of arrays and objects"
        ]
    (tmp_path / "results.jsonl").write_bytes((ok + b"\n") * 3000)  # 254 levels, as orjson writes: read back
    assert sum(1 for _ in run.iter_results()) == 3000
    spans = run.split_results(3)
    assert sum(sum(1 for _ in run.iter_results(a, b)) for a, b in spans) == 3000


# ----------------------------------------------------------------- bad bytes at their lines

def test_bad_bytes_in_tsv_inputs_are_said_at_their_line(tmp_path: Path) -> None:
    from evalkit.interop.importers.beir import import_beir
    from evalkit.interop.importers.docids import load_docid_map
    from evalkit.interop.importers.trec import read_qrels

    # BEIR qrels: a traceback (exit 70) before; now the line
    root = tmp_path / "b"
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text('{"_id": "d1", "text": "a"}\n')
    (root / "queries.jsonl").write_text('{"_id": "q1", "text": "q?"}\n')
    qrels = root / "qrels" / "test.tsv"
    qrels.write_bytes(b"query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td\xff\t1\n")
    assert _problems(lambda: import_beir(root, vault_out=tmp_path / "v", output=tmp_path / "o.jsonl")) == [
        f"{qrels}:3: not UTF-8 (invalid start byte: byte 0xff at byte 5 of the line)"
    ]
    # TREC qrels and a docid map: said without a line before
    trec = tmp_path / "qrels.txt"
    trec.write_bytes(b"q1 0 d1 1\nq1 0 d\xff 1\n")
    problems: list[Problem] = []
    read_qrels(trec, problems)
    assert [str(p) for p in problems] == [f"{trec}:2: not UTF-8 (invalid start byte: byte 0xff at byte 7 of the line)"]
    docids = tmp_path / "map.tsv"
    docids.write_bytes(b"d1\ta.md\nd2\tb\xff.md\n")
    assert _problems(lambda: load_docid_map(docids)) == [
        f"{docids}:2: --docid-map: not UTF-8 (invalid start byte: byte 0xff at byte 5 of the line)"
    ]


def test_bad_bytes_in_json_inputs_are_said_at_their_line(tmp_path: Path) -> None:
    from evalkit.evalset.load import load_eval_set
    from evalkit.metrics.validity import build_response_validator

    es = tmp_path / "set.jsonl"
    es.write_bytes(orjson.dumps(_eval_case(1)) + b"\n" + b'{"id": "c2", "question": "caf\xe9?", "answerable": false}\n')
    # before: "not valid JSON (str is not valid UTF-8: surrogates not allowed: line 1 column 1 (char 0))"
    assert _problems(lambda: load_eval_set([es], extra_categories=())) == [
        f"{es}:2: not UTF-8 (invalid continuation byte: byte 0xe9 at byte 30 of the line)"
    ]
    schema = tmp_path / "schema.json"
    schema.write_bytes(b'{\n  "description": "caf\xe9",\n  "type": "object"\n}')
    with pytest.raises(BadConfig) as e:  # before: no line
        build_response_validator(schema)
    assert [str(p) for p in e.value.problems] == [
        f"{schema}:2: --response-schema: not UTF-8 (invalid continuation byte: byte 0xe9 at byte 22 of the line)"
    ]


def test_the_price_file_keeps_its_error_class(tmp_path: Path) -> None:
    from evalkit.judges.cost import PriceTable

    p = tmp_path / "prices.json"
    p.write_bytes(b'{"models": {\n"gpt-4o": {"input": 1,}}}')
    with pytest.raises(JudgeConfigError) as e:
        PriceTable.load(p)
    assert str(e.value) == f"{p}:2: --price-file: not valid JSON (trailing comma is not allowed, column 22)"


def test_the_reader_is_the_only_json_reader_of_the_importers() -> None:
    # the ad-hoc RecursionError handlers are gone: nothing there parses JSON but jsonio
    root = Path(jsonio.__file__).parent / "interop" / "importers"
    for path in sorted(root.glob("*.py")):
        text = path.read_text(encoding="utf-8")
        assert "json.loads" not in text and "RecursionError" not in text, path.name
