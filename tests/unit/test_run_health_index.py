"""The run warnings' "was this gold ever retrieved" by lookups (issue 39 item 1).

`RunHealth.warnings` used to check every gold support never matched against every chunk of
its file with `anchors.match_support` (`_ever_matched`), and every gold path never retrieved
against every retrieved path (`_other_path_forms`): minutes at 100,000 cases. It now indexes
each file's chunks once (`_SeenChunks`) and the retrieved paths by their tails. The warnings
must read exactly as before, so the scan is kept here, verbatim, as the oracle, and random
runs over tricky anchors (heading normalisation and boundaries, block-id-like components,
line ranges that touch or are reversed, path forms, falsy and non-string ids, values that
are not plain JSON) are warned about both ways.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

import pytest

import evalkit.derive.health as health
from evalkit.derive.health import RunHealth
from evalkit.evalset.anchors import match_support, normalize_rel_path

# --------------------------------------------------------------------------- the oracle: the scan as it was


def _scan_ever_matched(support: Any, seen_by_file: Mapping[str, list], seen_ids: set[str]) -> bool:
    if support.chunk_id is not None and str(support.chunk_id) in seen_ids:
        return True
    for rel_path, heading_path, start, end, chunk_id in seen_by_file.get(normalize_rel_path(support.rel_path), ()):
        chunk = {"rel_path": rel_path, "heading_path": heading_path, "start_line": start, "end_line": end, "chunk_id": chunk_id}
        if match_support(support, chunk):
            return True
    return False


def _scan_other_path_forms(gold: Mapping[str, tuple], seen_by_file: Mapping[str, list]) -> dict[str, str]:
    seen = [p for p in seen_by_file if p]
    out: dict[str, str] = {}
    for supports in gold.values():
        for s in supports:
            g = normalize_rel_path(s.rel_path)
            if not g or g in seen_by_file or g in out:
                continue
            bare = g.casefold().removesuffix(".md")
            for p in seen:
                q = p.casefold().removesuffix(".md")
                if q == bare or q.endswith("/" + bare) or bare.endswith("/" + q):
                    out[g] = seen_by_file[p][0][0]
                    break
    return out


class _ScanSeen:
    def __init__(self, seen_by_file: Mapping[str, list], seen_ids: set[str]) -> None:
        self.seen_by_file, self.seen_ids = seen_by_file, seen_ids

    def matched(self, support: Any) -> bool:
        return _scan_ever_matched(support, self.seen_by_file, self.seen_ids)


def _scanned_warnings(h: RunHealth, monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    with monkeypatch.context() as m:
        m.setattr(health, "_SeenChunks", _ScanSeen)
        m.setattr(health, "_other_path_forms", _scan_other_path_forms)
        return h.warnings()


# --------------------------------------------------------------------------- tricky values

NFC, NFD = "caf\u00e9.md", "cafe\u0301.md"
PATHS = ["notes/a.md", "./notes/a.md", "notes//a.md", "notes\\a.md", "/notes/a.md/", "Notes/A.md", "notes/a",
         "x/notes/a.md", "a.md", "A.MD", NFC, NFD, "notes/../a.md", ".md", "x/.md", "b/a.md", "notes/b.md", "x/a",
         " notes/a.md ", "", None]
HEADINGS = [None, "", "# A", "#A", "# A > ## B", "#  A  >##  B ", "# A > ## B > ### C", "# AB", "# A ##", "## A",
            "# A > ^block1", "# A > ## B ^b2", "# A > ^block1 > ## C", "a>b", "x -> y", "# Caf\u00e9", "# Cafe\u0301",
            "# A >## B", "# A > #### deep", " > # A"]
LINES = [None, 0, 1, 2, 3, 5, 8, 10, 12, 20, -1]
ODD_LINES = [True, False, 2.0, 3.7, "3", "x"]  # not plain JSON integers: the files holding them are scanned
IDS = [None, "c1", "c2", "c3", "", 0, 5, "5", "0", False]


def _chunk(rng: random.Random, odd: bool) -> dict[str, Any]:
    lines = LINES + ODD_LINES if odd else LINES
    c: dict[str, Any] = {"rel_path": rng.choice(PATHS), "heading_path": rng.choice(HEADINGS)}
    if rng.random() < 0.7:
        c["start_line"], c["end_line"] = rng.choice(lines), rng.choice(lines)
    elif rng.random() < 0.5:
        c["start_line"] = rng.choice(lines)
    c["chunk_id"] = rng.choice(IDS)
    return {k: v for k, v in c.items() if v is not None or rng.random() < 0.5}


def _support(rng: random.Random) -> dict[str, Any]:
    s: dict[str, Any] = {}
    if rng.random() < 0.8:
        s["rel_path"] = rng.choice(PATHS)
    if rng.random() < 0.6:
        s["heading_path"] = rng.choice(HEADINGS)
    if rng.random() < 0.5:
        s["start_line"], s["end_line"] = rng.choice(LINES), rng.choice(LINES)
    if rng.random() < 0.25:
        s["chunk_id"] = rng.choice(IDS)
    return s


def _run(rng: random.Random, odd: bool) -> list[dict[str, Any]]:
    records = []
    for i in range(rng.randint(1, 40)):
        case = {"id": f"q{i}", "answerable": rng.random() < 0.9,
                "gold_supports": [_support(rng) for _ in range(rng.randint(0, 3))]}
        rec: dict[str, Any] = {"test_case_id": f"q{i}", "case": case,
                               "retrieved_chunks": [_chunk(rng, odd) for _ in range(rng.randint(0, 6))]}
        if rng.random() < 0.05:
            rec["error"] = {"kind": "http_500"}
        records.append(rec)
    return records


@pytest.mark.parametrize("odd", [False, True], ids=["plain", "odd-values"])
def test_the_warnings_read_as_the_scan_made_them(odd: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(39 + odd)
    kinds: set[str] = set()
    for _ in range(600):
        h = RunHealth()
        for rec in _run(rng, odd):
            h.add(rec)
        got = h.warnings()
        assert got == _scanned_warnings(h, monkeypatch)
        kinds.update(w["kind"] for w in got)
    # The runs reach every warning the index decides.
    assert {"gold_never_retrieved", "gold_path_forms", health.UNMEASURABLE} <= kinds


def _h(chunks: list[dict[str, Any]], supports: list[dict[str, Any]]) -> RunHealth:
    h = RunHealth()
    h.add({"test_case_id": "r", "case": {"id": "r", "answerable": False}, "retrieved_chunks": chunks})
    for i, s in enumerate(supports):
        h.add({"test_case_id": f"q{i}", "case": {"id": f"q{i}", "gold_supports": [s]}, "retrieved_chunks": []})
    return h


def _never(h: RunHealth) -> list[str]:
    return next((w["ids"] for w in h.warnings() if w["kind"] == "gold_never_retrieved"), [])


def test_each_anchor_form_as_the_rule_states_it() -> None:
    chunks = [
        {"rel_path": "n.md", "heading_path": "# A > ## B > ### C", "start_line": 10, "end_line": 12},
        {"rel_path": "n.md", "heading_path": "# D"},  # no lines: the span form falls back to its anchor
        {"rel_path": "m.md", "heading_path": "# E", "start_line": 30, "end_line": 20},  # reversed
        {"rel_path": "k.md", "chunk_id": 0},  # a falsy id matches a support of its own file only
    ]
    supports = [
        {"rel_path": "./n.md", "heading_path": "#A  >##  B"},  # q0 heading prefix, normalised: matched
        {"rel_path": "n.md", "heading_path": "# A > ## BC"},  # q1 not at a heading boundary
        {"rel_path": "n.md", "start_line": 12, "end_line": 40},  # q2 touching at one line
        {"rel_path": "n.md", "start_line": 13, "end_line": 40},  # q3 after it (and no heading to fall back on)
        {"rel_path": "n.md", "start_line": 1, "end_line": 2, "heading_path": "# D"},  # q4 the chunk without lines
        {"rel_path": "m.md", "start_line": 25, "end_line": 25},  # q5 inside neither order of 30..20
        {"rel_path": "m.md", "start_line": 15, "end_line": 20},  # q6 reaches 20 >= 30? no: 30 <= 20 fails
        {"rel_path": "k.md", "chunk_id": "0"},  # q7
        {"rel_path": "j.md", "chunk_id": "0"},  # q8 the id is on k.md only
        {"rel_path": "N.md"},  # q9 paths are case-sensitive
    ]
    assert _never(_h(chunks, supports)) == ["q1", "q3", "q5", "q6", "q8", "q9"]


def test_no_support_is_matched_chunk_by_chunk(monkeypatch: pytest.MonkeyPatch) -> None:
    # 30 files of 50 chunks, 300 supports of which a third match nothing: no match_support
    # call at all (the scan made up to 50 per support), and the same warnings as the scan.
    chunks = [{"rel_path": f"f{f}.md", "heading_path": f"# F{f} > ## S{s}", "start_line": 10 * s, "end_line": 10 * s + 9,
               "chunk_id": f"c{f}-{s}"} for f in range(30) for s in range(50)]
    supports = [{"rel_path": f"f{i % 30}.md", "heading_path": f"# F{i % 30} > ## S{i % 75}"} for i in range(300)]
    h = _h(chunks, supports)
    calls = []
    real = health.match_support
    monkeypatch.setattr(health, "match_support", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    got = h.warnings()
    assert calls == []
    monkeypatch.undo()
    assert got == _scanned_warnings(h, monkeypatch)
    assert next(w for w in got if w["kind"] == "gold_never_retrieved")["n"] == 100


def test_other_path_forms_name_the_first_retrieved_form(monkeypatch: pytest.MonkeyPatch) -> None:
    chunks = [{"rel_path": p} for p in ("z/other.md", "vault/notes/a.md", "Notes/A", "a.md")]
    supports = [{"rel_path": "notes/a.md"}, {"rel_path": "deep/vault/notes/a.md"}, {"rel_path": "q/x.md"}]
    h = _h(chunks, supports)
    forms = next(w for w in h.warnings() if w["kind"] == "gold_path_forms")
    assert forms["n"] == 2
    assert "'notes/a.md' retrieved as 'vault/notes/a.md'" in forms["message"]
    assert "'deep/vault/notes/a.md' retrieved as 'vault/notes/a.md'" in forms["message"]
    assert h.warnings() == _scanned_warnings(h, monkeypatch)
