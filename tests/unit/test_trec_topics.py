"""TREC SGML topics in one linear scan (issue 38 item 11).

`<top>(.*?)</top>` searched the rest of the file again for every <top> without a </top>
(500 KB of them: over a minute), and each topic's line was counted from the start of the
file. The parser now finds the tags in one pass and reads each topic's text once. Checked
here by what it does, not how long it takes: the same topics as the old search on valid
files; an unclosed <top> said at its line; and the work counted (characters handed to the
regexes and to the line counting) is at most the file's length, however it is broken.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from evalkit.errors import MAX_PROBLEMS_SHOWN, InputError, Problem
from evalkit.interop.importers import import_cases, trec
from evalkit.interop.importers.trec import read_topics

# The parser before issue 38, as the reference for valid files.
_OLD_TOP = re.compile(r"<top>(.*?)</top>", re.S | re.I)


def _old_topics(text: str) -> list[tuple[str, str, int]]:
    out = []
    for m in _OLD_TOP.finditer(text):
        fields = {n.lower(): trec._LABEL.sub("", " ".join(v.split())).strip() for n, v in trec._FIELD.findall(m.group(1))}
        qid, question = fields.get("num", ""), fields.get("title") or fields.get("desc", "")
        if qid and question:
            out.append((qid, question, text.count("\n", 0, m.start()) + 1))
    return out


VALID = [
    # TREC-8 style: labels, several lines per field, a <narr>
    ("<top>\n\n<num> Number: 401\n<title> foreign minorities, Germany\n\n<desc> Description:\nWhat language and\n"
     "cultural differences impede?\n\n<narr> Narrative:\nA relevant document will focus on...\n\n</top>\n\n\n"
     "<top>\n<num> Number: 402\n<title> behavioral genetics\n</top>\n"),
    # upper case tags, CRLF line ends, a topic with a description only, text between topics
    "<TOP>\r\n<NUM> 7\r\n<DESC> Description: what is BM25?\r\n</TOP>\r\njunk between topics\r\n<top><num>8<title>x</top>",
    # Robust04 / TREC web style, one line per topic, a <topic> label
    "".join(f"<top> <num> {i} <title> Topic: query {i} <desc> d </top>\n" for i in range(1, 40)),
]


@pytest.mark.parametrize("text", VALID)
def test_valid_topics_read_as_the_old_search_read_them(tmp_path: Path, text: str) -> None:
    path = tmp_path / "topics.txt"
    path.write_bytes(text.encode())
    problems: list[Problem] = []
    got = read_topics(path, problems)
    assert problems == []
    assert got == _old_topics(text) and got


def test_an_unclosed_top_is_an_input_problem_at_its_line(tmp_path: Path) -> None:
    path = tmp_path / "topics.txt"
    path.write_text("<top>\n<num> 1\n<title> one\n</top>\n"  # lines 1-4
                    "<top>\n<num> 2\n<title> two\n"  # line 5: never closed before the next <top>
                    "<top>\n<num> 3\n<title> three\n</top>\n"  # lines 8-11
                    "</top>\n"  # line 12: nothing open
                    "<top>\n<num> 4\n")  # line 13: the end of the file comes first
    problems: list[Problem] = []
    got = read_topics(path, problems)
    assert got == [("1", "one", 1), ("3", "three", 8)]
    assert [(p.line, p.message) for p in problems] == [
        (5, "a <top> without </top>: another <top> opens at line 8"),
        (12, "a </top> without a <top> before it"),
        (13, "a <top> without </top> before the end of the file"),
    ]
    assert {p.path for p in problems} == {str(path)}


def test_500_kb_of_unclosed_tops_is_one_input_error_of_21_lines(tmp_path: Path) -> None:
    topics, qrels = tmp_path / "topics.txt", tmp_path / "qrels.txt"
    topics.write_text("<top>" * 100_000)
    qrels.write_text("1 0 D1 1\n")
    with pytest.raises(InputError) as caught:
        import_cases("trec", [topics, qrels])
    problems = caught.value.problems
    assert len(problems) == MAX_PROBLEMS_SHOWN + 1  # each shown one, then the count of the rest
    assert str(problems[0]) == f"{topics}:1: a <top> without </top>: another <top> opens at line 1"
    assert str(problems[-1]) == f"{topics}: … and {100_000 - MAX_PROBLEMS_SHOWN} more <top> or </top> out of place"


class _Counted:
    """A compiled pattern that adds up the characters each call is given."""

    def __init__(self, pattern: re.Pattern[str]) -> None:
        self.pattern, self.calls, self.chars = pattern, 0, 0

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.pattern, name)

        def counted(text: str, *args: Any) -> Any:
            self.calls += 1
            self.chars += len(text)
            return method(text, *args)

        return counted


class _Text(str):
    """The file's text, adding up the characters `count` scans (the line numbering)."""

    scanned = 0

    def count(self, sub: str, start: Any = None, end: Any = None) -> int:  # type: ignore[override]
        lo, hi, _ = slice(start, end).indices(len(self))
        _Text.scanned += max(hi - lo, 0)
        return super().count(sub, start, end)


BROKEN_AND_LARGE = {
    "500 KB of <top> without </top>": "<top>" * 100_000,
    "unclosed, each with fields": "<top> <num> 1 <title> t\n" * 20_000,
    "20,000 valid topics": "".join(f"<top>\n<num> {i}\n<title> query {i}\n</top>\n" for i in range(20_000)),
    "one <top>, then 500 KB": "<top>\n" + "x" * 500_000,
}


@pytest.mark.parametrize("name", sorted(BROKEN_AND_LARGE))
def test_the_work_is_linear_in_the_file(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    text = _Text(BROKEN_AND_LARGE[name])
    _Text.scanned = 0
    tags, fields = _Counted(trec._TAG), _Counted(trec._FIELD)
    monkeypatch.setattr(trec, "_TAG", tags)
    monkeypatch.setattr(trec, "_FIELD", fields)
    problems: list[Problem] = []
    trec._sgml_topics(text, "topics.txt", problems)
    # The tags are found in one pass over the file, by a pattern of fixed width (no backtracking:
    # each place is tried once, in constant time); each topic's fields are read from its own
    # text (the texts do not overlap); the lines are counted from the last place counted.
    assert tags.calls == 1 and tags.chars == len(text)
    assert re._parser.parse(trec._TAG.pattern.pattern).getwidth() in ((5, 6), (5, 6.0))  # <top> or </top>
    assert fields.chars <= len(text)
    assert _Text.scanned <= len(text)
