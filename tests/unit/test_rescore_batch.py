"""Re-scoring a stored run gives, bit for bit, what scoring each record on its own gives.

`evalkit.rescore.scoring._rescore_part` may score the "plain" records of results.jsonl (plain dict
chunks with integer, non-decreasing ranks and distinct, non-empty string ids; supports
without `graded_only`; no `recency_conflict_rule`) a block of `_BATCH_SIZE` records at a time, and every other record
with `score_case_retrieval`. The definition is the per-record one: for every record,
`score_case_retrieval` on the stored case, chunks, references and folder selection, its
metrics added to a RecordTable with `add_record({"case", "retrieval_metrics"})` and the
record fed to a WorstCases, in file order. The tests below hold `_rescore_part` to that
oracle on the whole table state (the float bytes, so NaN-for-None and rounding too), the
worst-case rows and the tallies.

The records mix, in one file, what run_eval writes (bench-like chunks, 32-hex ids, ranks
1..n) with messy paths and headings, every support form (anchor, chunk id, both, spans,
half spans, graded-only, snippets), support groups, recency rules, unanswerable and
unlabeled cases, references of every kind, folder selections, and chunk lists the batch
must leave to the per-record path (duplicates, unordered or non-integer ranks, odd ids,
non-dict chunks). Blocks are cut at 1 and 7 records as well as at the default size, so
block boundaries fall between plain and per-record records everywhere; the worst cases
are compared with the default ten rows (the heap's tie and skip logic) and with every
bad row kept (so each record's row is compared, not only the ten worst).
"""

from __future__ import annotations

import random
import unicodedata
from collections.abc import Callable
from functools import lru_cache
from itertools import product
from pathlib import Path

import orjson
import pytest

from evalkit.errors import InputError
from evalkit.metrics.aggregate import RecordTable
from evalkit.metrics.batch import RetrievalBatch
from evalkit.metrics.retrieval import score_case_retrieval
from evalkit.report.summary_md import WorstCases
from evalkit.rescore.scoring import _grouping, _rescore_part, _RescoreJob
from evalkit.store.runs import RunDir
from tests.unit.test_rescore_fast_paths import _table_state

# --------------------------------------------------------------------------- the corpus

# Files and heading chains the chunks come from. "projects/x" and "projects/xy" are folder
# prefixes of each other as strings, not as folders; "Note 3" and "Note 33" are heading
# prefixes as strings, not as components ("# Note 3" must never prefix "# Note 33").
FILES = ("notes/alpha.md", "notes/beta.md", "projects/x/plan.md", "projects/xy/plan.md", "Über/Straße.md", "root.md")
TOPS = ("# Note 3", "# Note 33", "# Note 4", "# Größe")
SECTIONS = ("## Section 1", "## Section 4", "## Straße", "## section 4")
PARTS = ("### Part 1", "### Part 2")
CHAINS = (
    *((t,) for t in TOPS),
    *((t, s) for t in TOPS for s in SECTIONS),
    *((t, s, p) for t in TOPS[:2] for s in SECTIONS[:2] for p in PARTS),
)
LOCATIONS = [(f, c) for f in FILES for c in CHAINS]
WORDS = ("alpha", "beta", "gamma", "delta", "retrieval", "anchor", "vault", "note")
DATES = ("2024-01-05", "2023-12-31T10:00:00", "2024-01-05T00:00:00+02:00", "2022-06-01", None)
FOLDERS = ("notes", "Notes", "projects", "projects/x", "./projects/x/", "", "/", "other", None, "Über")


def _hex(rng: random.Random) -> str:
    return f"{rng.getrandbits(128):032x}"


def _fact(loc: tuple[str, tuple[str, ...]]) -> str:
    """The phrase a location's text holds: what its supports' snippets ask for."""
    return f"fact {LOCATIONS.index(loc)} holds"


def _messy_path(rng: random.Random, p: str) -> object:
    """`p` as a chunk, a support or a reference may write it: the same file after
    normalize_rel_path (case aside), or no path at all."""
    r = rng.random()
    if r < 0.55:
        return p
    return rng.choice([
        f"./{p}", p.replace("/", "//"), p.replace("/", "\\"), f"/{p}/", f" {p} ", p.upper(), p.lower(),
        unicodedata.normalize("NFD", p), p.replace("/", "/./"), None, "",
    ])


def _messy_heading(rng: random.Random, comps: tuple[str, ...]) -> object:
    """A heading chain as written: canonical mostly, else a form that normalizes to it
    (or to its case-folded form), or one that does not."""
    canonical = " > ".join(comps)
    r = rng.random()
    if r < 0.6:
        return canonical
    return rng.choice([
        ">".join(c.replace("# ", "#", 1) for c in comps),  # "#Note 3>## Section 4"
        f"  {canonical}  ",
        " > ".join(f"{c} {c.split(' ')[0]}" for c in comps),  # closing hashes: "# Note 3 #"
        canonical.replace(" ", "  "),
        canonical.replace(" > ", "\t>\t"),
        canonical.upper(),
        canonical.lower(),
        unicodedata.normalize("NFD", canonical),
        canonical + " > ",
        None,
        "",
    ])


def _gold_heading(rng: random.Random, comps: tuple[str, ...]) -> object:
    """A support's heading for a chunk under `comps`: a prefix at a component boundary
    (matches), or a sibling, a string-but-not-component prefix, a deeper or a differently
    levelled heading (do not), or none at all (the whole file)."""
    r = rng.random()
    if r < 0.5:
        return _messy_heading(rng, comps[: rng.randint(1, len(comps))])
    return rng.choice([
        None,
        "",
        "   ",
        " > ",
        " > ".join((*comps[:-1], "## Other")),  # a sibling
        comps[0][:-1] if comps[0].endswith("3") else comps[0] + "3",  # "# Note 3" vs "# Note 33"
        " > ".join((*comps, "#### Deeper")),
        "#" + " > ".join(comps),  # one level deeper: "## Note 3" is not "# Note 3"
    ])


def _chunk(rng: random.Random, loc: tuple[str, tuple[str, ...]], rank: int) -> dict:
    """A retrieved chunk as run_eval stores it."""
    path, comps = loc
    start = rng.randint(1, 200)
    words = rng.sample(WORDS, rng.randint(1, 4))
    if rng.random() < 0.6:  # the location's fact, as written or spaced and cased differently
        words.insert(rng.randint(0, len(words)), rng.choice([_fact(loc), _fact(loc).upper(), _fact(loc).replace(" ", "  ")]))
    return {
        "chunk_id": _hex(rng),
        "rel_path": _messy_path(rng, path),
        "heading_path": _messy_heading(rng, comps),
        "start_line": start,
        "end_line": start + rng.randint(0, 30),
        "score_final": round(rng.random(), 6),
        "text": " ".join(words),
        "rank": rank,
        "text_truncated": rng.random() < 0.08,
    }


def _support(rng: random.Random, locs: list, chunks: list[dict], graded: bool) -> dict:
    """A gold support in one of the forms match_support knows (the per-record lane's
    forms included: spans, graded-only, odd relevance types)."""
    loc = rng.choice(locs)
    path, comps = loc
    ids = [c["chunk_id"] for c in chunks if type(c) is dict and type(c.get("chunk_id")) is str]
    s: dict = {}
    form = rng.random()
    if form < 0.55 or not ids:  # anchor
        s["rel_path"] = _messy_path(rng, path)
        s["heading_path"] = _gold_heading(rng, comps)
    elif form < 0.7:  # chunk id: one retrieved (maybe), or one never retrieved
        s["chunk_id"] = rng.choice(ids) if rng.random() < 0.7 else _hex(rng)
    elif form < 0.82:  # both forms on one support
        s["chunk_id"] = rng.choice(ids) if rng.random() < 0.5 else _hex(rng)
        s["rel_path"], s["heading_path"] = _messy_path(rng, path), _gold_heading(rng, comps)
    elif form < 0.86:  # a line span (the per-record lane), with or without a heading
        a = rng.randint(1, 200)
        s.update(rel_path=path, start_line=a, end_line=a + rng.randint(0, 20))
        if rng.random() < 0.5:
            s["heading_path"] = _gold_heading(rng, comps)
    else:  # half a span: the anchor form decides (batchable)
        s.update(rel_path=path, heading_path=_gold_heading(rng, comps))
        s[rng.choice(["start_line", "end_line"])] = rng.randint(1, 200)
    r = rng.random()
    if r < 0.5:
        s["relevance"] = rng.choice([None, 0, 1, 2, 3, 3, 2.5, True, False, "2", -1])
    if rng.random() < 0.15:
        s["snippets"] = rng.choice([[_fact(loc)], [_fact(loc).upper(), "alpha"], [" "], [], None, ["absent words"], [""]])
    if graded and rng.random() < 0.12:
        s["graded_only"] = True
    elif rng.random() < 0.05:
        s["graded_only"] = False  # not graded-only: batchable
    return s


def _groups(rng: random.Random, supports: list[dict]) -> object:
    """required_support_groups with valid indices only (a bad one raises; see below)."""
    eligible = [i for i, s in enumerate(supports) if not (isinstance(s, dict) and s.get("graded_only") is True)]
    if not eligible:
        return rng.choice([None, [], [[]]])
    groups = [rng.sample(eligible, rng.randint(1, min(3, len(eligible)))) for _ in range(rng.randint(1, 3))]
    if rng.random() < 0.3:
        groups.insert(rng.randint(0, len(groups)), [])  # skipped, never vacuously true
    return rng.choice([groups, groups, None, [], [[]]])


# The shapes the batch must leave to the per-record path, applied to a bench-like list.
def _dup_id(rng, chunks):
    c = dict(rng.choice(chunks))
    c["rank"] = chunks[-1]["rank"]
    chunks.append(c)


def _dup_id_elsewhere(rng, chunks):
    c = _chunk(rng, rng.choice(LOCATIONS), chunks[-1]["rank"] + 1)
    c["chunk_id"] = chunks[0]["chunk_id"]
    chunks.append(c)


def _swap_ranks(rng, chunks):
    if len(chunks) > 1:
        i = rng.randrange(len(chunks) - 1)
        chunks[i]["rank"], chunks[i + 1]["rank"] = chunks[i + 1]["rank"], chunks[i]["rank"]


def _float_ranks(rng, chunks):
    for c in chunks if rng.random() < 0.5 else [rng.choice(chunks)]:
        c["rank"] = float(c["rank"])


def _odd_rank(rng, chunks):
    c = rng.choice(chunks)
    if rng.random() < 0.4:
        del c["rank"]
    else:
        c["rank"] = rng.choice([str(c["rank"]), True, None])


def _odd_id(rng, chunks):
    c = rng.choice(chunks)
    if rng.random() < 0.2:
        del c["chunk_id"]
    else:
        c["chunk_id"] = rng.choice([int(c["chunk_id"][:8], 16), "", None])


def _idless_twins(rng, chunks):
    # Without ids, a repeat is told by its location (path, heading, lines, text).
    for c in chunks:
        c["chunk_id"] = None
    chunks.append({**chunks[-1], "rank": chunks[-1]["rank"]})


def _not_a_dict(rng, chunks):
    # null reads as {}; a list of pairs as the dict it spells (a dict-like chunk).
    odd = rng.choice([None, [["chunk_id", chunks[0]["chunk_id"]], ["rank", 0]], [["rel_path", "notes/alpha.md"]]])
    chunks.insert(rng.randint(0, len(chunks)), odd)


PER_RECORD_CHUNKS: tuple[Callable, ...] = (
    _dup_id, _dup_id_elsewhere, _swap_ranks, _float_ranks, _odd_rank, _odd_id, _idless_twins, _not_a_dict,
)


def _ranks(rng: random.Random, n: int) -> list[int]:
    """Integer, non-decreasing ranks (batchable): 1..n mostly, else 0-based, gapped, tied or negative."""
    r = rng.random()
    if r < 0.8:
        return list(range(1, n + 1))
    start = rng.choice([0, -3, 5])
    out, cur = [], start
    for _ in range(n):
        out.append(cur)
        cur += rng.choice([0, 1, 1, 3])
    return out


def _reference(rng: random.Random, chunks: list, locs: list, supports: list) -> object:
    kind = rng.random()
    dicts = [c for c in chunks if type(c) is dict]
    if kind < 0.35 and dicts:  # a retrieved chunk, cited
        c = rng.choice(dicts)
        return {k: c.get(k) for k in ("chunk_id", "rel_path", "heading_path")}
    if kind < 0.55:  # no id: matches by path and heading only
        path, comps = rng.choice(locs)
        return {"chunk_id": None, "rel_path": _messy_path(rng, path), "heading_path": _messy_heading(rng, comps)}
    if kind < 0.65:  # a numeric id: compared as its string form
        digits = [s["chunk_id"] for s in supports if isinstance(s, dict) and str(s.get("chunk_id", "")).isdigit()]
        return {"chunk_id": int(digits[0]) if digits else rng.randint(0, 99)}
    if kind < 0.75:
        return {"chunk_id": _hex(rng), "rel_path": "elsewhere.md"}
    if kind < 0.82:
        return {}
    if kind < 0.86:
        return None  # read as {} by the per-record path
    return {"rel_path": _messy_path(rng, rng.choice(locs)[0])}


def _case(rng: random.Random, i: int, chunks: list, locs: list) -> dict:
    case: dict = {"id": f"c{i}"}
    n = rng.choice([0, 0, 1, 1, 2, 2, 3, 4, 6])
    big = rng.random() < 0.01  # the batch keeps support sets as 62-bit masks: go around the edge
    if big:
        n = rng.choice([61, 62, 63, 70])
    graded = rng.random() < 0.3
    supports: list = [_support(rng, locs, chunks, graded and not big) for _ in range(n)]
    if supports and rng.random() < 0.05:
        # Per-record only: a null support (read as {}), a non-string id, path or heading.
        j = rng.randrange(len(supports))
        supports[j] = rng.choice([None, {"chunk_id": 12345}, {"rel_path": 7}, {"rel_path": locs[0][0], "heading_path": 3},
                                  {"chunk_id": "12345", "snippets": "fact"}])
    if supports or rng.random() < 0.5:
        case["gold_supports"] = supports if supports or rng.random() < 0.5 else None
    answerable = rng.random()
    if answerable < 0.1:
        case["answerable"] = False
        if rng.random() < 0.3:
            case["required_support_groups"] = [[n + 5]]  # never read: the case is not scored
    elif answerable < 0.15:
        case["answerable"] = rng.choice([None, 0, True])
    if "required_support_groups" not in case and supports and rng.random() < 0.4:
        case["required_support_groups"] = _groups(rng, supports)
    if not supports and rng.random() < 0.1:
        case["required_support_groups"] = [[3]]  # unlabeled: not scored, so not checked
    if big and n > 2:
        case["required_support_groups"] = [[n - 1], [0, n // 2, n - 2]]
    if supports and not any(isinstance(s, dict) and s.get("graded_only") is True for s in supports) and rng.random() < 0.1:
        case["recency_conflict_rule"] = rng.choice(["cite_newer", "cite_both", "acknowledge_both"])
        for s in supports:
            if isinstance(s, dict) and rng.random() < 0.7:
                s["date"] = rng.choice(DATES)
    if rng.random() < 0.6:
        case["tags"] = rng.choice([[], ["ops"], ["ops", "recency"], ["x", "x"], None])
    for key, values in (("category", ["factual", "reasoning", None]), ("difficulty", ["easy", "hard"]),
                        ("domain", ["ops", "hr", ""]), ("language", ["de", "en", None]), ("doc_language", ["de", "en"])):
        if rng.random() < 0.5:
            case[key] = rng.choice(values)
    if rng.random() < 0.5:
        case["question"] = f"question {i} of the case?"
    return case


def _record(rng: random.Random, i: int, chunk_counts: tuple[int, ...] = ()) -> dict:
    """One results.jsonl record: bench-like mostly, a shape for the per-record path sometimes."""
    locs = rng.sample(LOCATIONS, rng.randint(1, 4))  # where the case's gold lives
    n = rng.choice(chunk_counts) if chunk_counts else rng.choice([0, 1, 2, 3, 5, 8, 10, 12, 20, 20, 25])
    ranks = _ranks(rng, n)
    chunks: list = [_chunk(rng, rng.choice(locs) if rng.random() < 0.4 else rng.choice(LOCATIONS), r) for r in ranks]
    if chunks and not chunk_counts and rng.random() < 0.15:
        rng.choice(PER_RECORD_CHUNKS)(rng, chunks)
    case = _case(rng, i, chunks, locs)
    rec: dict = {"test_case_id": case["id"], "case": case, "question": f"q{i}: " + " ".join(rng.sample(WORDS, 3)) * 4}
    shape = rng.random()
    if shape < 0.03:
        rec["retrieved_chunks"] = None
    elif shape >= 0.06 or chunks:  # else no retrieved_chunks key at all
        rec["retrieved_chunks"] = chunks
    refs = [_reference(rng, chunks, locs, case.get("gold_supports") or []) for _ in range(rng.choice([0, 0, 1, 2, 3]))]
    r = rng.random()
    rec["references"] = refs if r < 0.9 else ([] if r < 0.95 else None)
    if rng.random() < 0.5:
        rec["folder_selection"] = rng.choice([
            None, {}, {"selected_folders": []}, {"selected_folders": None, "fallback_used": True},
            {"selected_folders": rng.sample(FOLDERS, rng.randint(1, 3)), "fallback_used": rng.random() < 0.3},
        ])
    if rng.random() < 0.1:
        rec["references_dropped"] = rng.choice([1, 3, True, 0])
    # What a judged run adds; the worst cases read some of it (errors, judges, abstention).
    if rng.random() < 0.1:
        rec["error"] = rng.choice([{"kind": "timeout"}, "boom", None])
    if rng.random() < 0.15:
        rec["abstention"] = {"abstained": rng.random() < 0.5, "hallucinated": rng.random() < 0.3,
                             "false_abstention": rng.random() < 0.2}
    if rng.random() < 0.15:
        rec["groundedness"] = {"score": rng.choice([1, 3, 5, None])}
    if rng.random() < 0.1:
        rec["correctness"] = {"score": rng.choice([2, 4])}
    if rng.random() < 0.05:
        rec["judge_errors"] = [{"judge": "correctness"}]
    if rng.random() < 0.05:
        del rec["test_case_id"]  # the worst row names the case's own id
    if rng.random() < 0.1:
        del rec["question"]  # the worst row takes the case's question, if any
    rec["answer"] = rng.choice(["yes [1]", "", None])
    rec["latency"] = {"total_ms": round(rng.random() * 100, 3)}
    return rec


@lru_cache(maxsize=None)
def _stored(seed: int, n: int, chunk_counts: tuple[int, ...] = ()) -> bytes:
    """results.jsonl of `n` records (cached: several settings re-score one file)."""
    rng = random.Random(seed)
    return b"".join(orjson.dumps(_record(rng, i, chunk_counts)) + b"\n" for i in range(n))


# --------------------------------------------------------------------------- oracle and check


def _plain(rec: dict, snippets: bool) -> bool:
    """The shape the batched lane is for (see the module docstring); used only to make
    sure a file holds both kinds in numbers."""
    case = rec["case"]
    chunks = rec.get("retrieved_chunks") or []
    if case.get("recency_conflict_rule") or any(type(c) is not dict for c in chunks):
        return False
    ranks = [c.get("rank") for c in chunks]
    ids = [c.get("chunk_id") for c in chunks]
    if any(type(r) is not int for r in ranks) or ranks != sorted(ranks):
        return False
    if any(type(x) is not str or not x for x in ids) or len(set(ids)) != len(ids):
        return False
    for s in case.get("gold_supports") or []:
        if type(s) is not dict or s.get("graded_only") is True:
            return False
    return all(type(r) is dict for r in rec.get("references") or [])


class _EveryWorstCase(WorstCases):
    """WorstCases keeping every case with a problem, so each record's row is compared."""

    def __init__(self, k: int | None, n: int = 10**9) -> None:
        super().__init__(k, n)


def _oracle(lines: list[dict], ks: list[int], snippets: bool, cs: bool, folder_mode: str | None):
    """The per-record definition: score_case_retrieval, add_record and WorstCases.add, in
    file order (the ten worst cases, and every one)."""
    table = RecordTable(ks)
    worst = {cls: cls(ks[0]) for cls in (WorstCases, _EveryWorstCase)}
    counts = {"records": 0, "cut_chunks": 0, "refs_dropped": 0}
    for rec in lines:
        case, chunks = rec["case"], rec.get("retrieved_chunks") or []
        rm = score_case_retrieval(
            case, chunks, rec.get("references") or [], rec.get("folder_selection"), folder_mode, ks,
            require_snippets=snippets, case_sensitive=cs,
        )
        table.add_record({"case": case, "retrieval_metrics": rm})
        for w in worst.values():
            w.add({**rec, "retrieval_metrics": rm})
        counts["records"] += 1
        counts["cut_chunks"] += sum(1 for c in chunks if snippets and isinstance(c, dict) and c.get("text_truncated"))
        counts["refs_dropped"] += bool(rec.get("references_dropped"))
    return table, worst, counts


def _folder(tmp_path: Path, data: bytes) -> Path:
    folder = tmp_path / f"run{len(list(tmp_path.iterdir()))}"
    folder.mkdir()
    (folder / "results.jsonl").write_bytes(data)
    return folder


# (batch size, worst cases kept): None leaves the module's own _BATCH_SIZE.
BLOCKINGS = ((None, WorstCases), (1, _EveryWorstCase), (7, _EveryWorstCase))


def _check(monkeypatch: pytest.MonkeyPatch, folder: Path, ks: list[int], snippets: bool, cs: bool,
           folder_mode: str | None, blockings=BLOCKINGS) -> list[dict]:
    """_rescore_part on `folder` equals the oracle under every blocking; the parsed lines back."""
    lines = [orjson.loads(line) for line in (folder / "results.jsonl").read_bytes().splitlines()]
    table, worsts, counts = _oracle(lines, ks, snippets, cs, folder_mode)
    for size, worst_cls in blockings:
        worst = worsts[worst_cls]
        with monkeypatch.context() as m:
            if size is not None:
                m.setattr("evalkit.rescore.scoring._BATCH_SIZE", size, raising=False)
            m.setattr("evalkit.rescore.scoring.WorstCases", worst_cls)
            job = _RescoreJob(run=RunDir(folder), given_cases=None, ks=ks, snippets=snippets, folder_mode=folder_mode,
                              case_sensitive=cs, lean=True)
            part = _rescore_part(job)
        where = f"batch size {size}, {worst_cls.__name__}"
        assert part.worst.n == worst.n, where  # the patched WorstCases is the one used
        assert _table_state(part.table) == _table_state(table), where
        assert part.worst.rows() == worst.rows(), where
        assert part.worst.seen == worst.seen == len(lines), where
        assert part.counts == counts, where
        assert (part.missing, part.regrouped) == ([], 0), where
    return lines


# --------------------------------------------------------------------------- tests

KS = ([10, 20], [3, 1], [5], [1], [20, 5, 10])  # 20 is more than most records' chunks
FOLDER_MODES = ("off", "on", "on_with_fallback", None)
# Every K set with every folder mode; snippets and case sensitivity alternate so that every
# pair of values of any two settings is run (a pairwise cover of the 80 combinations).
SETTINGS = [
    (ks, bool((i + j) % 2), bool((i + j // 2) % 2), mode) for (i, ks), (j, mode) in product(enumerate(KS), enumerate(FOLDER_MODES))
]


@pytest.mark.parametrize(("ks", "snippets", "cs", "folder_mode"), SETTINGS)
def test_rescore_part_equals_per_record_scoring(tmp_path, monkeypatch, ks, snippets, cs, folder_mode) -> None:
    # Four record files (seeds), each scored under a quarter of the settings.
    seed = SETTINGS.index((ks, snippets, cs, folder_mode)) % 4
    lines = _check(monkeypatch, _folder(tmp_path, _stored(seed, 800)), ks, snippets, cs, folder_mode)
    plain = sum(_plain(rec, snippets) for rec in lines)
    # Both lanes get records in numbers, and block boundaries fall between them.
    assert 0.4 * len(lines) < plain < 0.9 * len(lines)


def test_the_generated_records_reach_every_outcome(tmp_path) -> None:
    """The generator is not degenerate: the oracle sees every status and every value kind."""
    lines = [orjson.loads(line) for line in _stored(0, 600).splitlines()]
    seen: dict[str, set] = {}
    for rec in lines:
        rm = score_case_retrieval(rec["case"], rec.get("retrieved_chunks") or [], rec.get("references") or [],
                                  rec.get("folder_selection"), "on", [3, 1], require_snippets=True, case_sensitive=False)
        at = rm["at_k"]["3"]
        for key, value in (("status", rm["status"]), ("scope_miss", rm["scope_miss"]),
                           ("attribution", rm["attribution_hit"]), ("recall_all", at["recall_all"]),
                           ("recency", (rm["recency"] or {}).get("pass", "none")), ("dups", rm["n_duplicates"] > 0),
                           ("ndcg", None if at["ndcg"] is None else at["ndcg"] in (0.0, 1.0)),
                           ("frac", None if at["recall_frac"] is None else at["recall_frac"] in (0.0, 1.0))):
            seen.setdefault(key, set()).add(value)
    assert seen["status"] == {"scored", "unanswerable", "unlabeled"}
    for key in ("scope_miss", "attribution", "recall_all", "ndcg", "frac"):
        assert seen[key] == {None, True, False}, key  # (recall_all: 1.0 == True, 0.0 == False)
    assert {True, False} <= seen["recency"] and seen["dups"] == {True, False}


def test_rescore_part_equals_per_record_scoring_on_a_bench_sized_file(tmp_path, monkeypatch) -> None:
    """3,000 bench-shaped records (20 chunks each): several full default blocks and a partial one."""
    folder = _folder(tmp_path, _stored(77, 3000, (20,)))
    _check(monkeypatch, folder, [10, 20], False, True, "off", blockings=((None, WorstCases), (None, _EveryWorstCase)))


def test_a_block_flushes_early_when_its_match_tables_grow(tmp_path, monkeypatch) -> None:
    """With a large K and many supports a block is flushed by size in cells, not records (a
    few MB whatever K is): with K = 20 and a few supports a case, a 2,000-cell cap is crossed
    every few dozen records, and the numbers stay the oracle's."""
    monkeypatch.setattr("evalkit.rescore.scoring._BATCH_CELLS", 2_000)
    flushes = []
    real = RetrievalBatch.score
    monkeypatch.setattr(RetrievalBatch, "score", lambda self: (flushes.append(len(self)), real(self))[1])
    folder = _folder(tmp_path, _stored(5, 400))
    _check(monkeypatch, folder, [20, 5, 10], False, True, "off", blockings=((None, WorstCases),))
    assert len(flushes) >= 8 and max(flushes) < 100  # far below the 1,024 records of a full block


# A bad record in the middle of good ones: the error of score_case_retrieval, whichever lane
# the good ones took (and before a block holding the good ones before it is scored).
BAD_CASES = {
    "group index out of range": ({"gold_supports": [{"chunk_id": "a"}, {"chunk_id": "b"}], "required_support_groups": [[0], [2]]}, InputError),
    "group index a bool": ({"gold_supports": [{"chunk_id": "a"}, {"chunk_id": "b"}], "required_support_groups": [[True]]}, InputError),
    "group names a graded-only support": (
        {"gold_supports": [{"chunk_id": "a"}, {"chunk_id": "b", "graded_only": True}], "required_support_groups": [[1]]}, InputError),
    "unparseable date": ({"gold_supports": [{"chunk_id": "a", "date": "last week"}], "recency_conflict_rule": "cite_newer"}, InputError),
    "unknown recency rule": ({"gold_supports": [{"chunk_id": "a"}], "recency_conflict_rule": "cite_all"}, InputError),
    "recency with graded-only": (
        {"gold_supports": [{"chunk_id": "a", "graded_only": True}, {"chunk_id": "b"}], "recency_conflict_rule": "cite_both"}, InputError),
    "a string chunk": ({"gold_supports": [{"chunk_id": "a"}], "chunks": ["ab"]}, ValueError),
}


@pytest.mark.parametrize("name", list(BAD_CASES))
def test_a_bad_record_among_good_ones_raises_as_score_case_retrieval(tmp_path, monkeypatch, name) -> None:
    bad_case, error = BAD_CASES[name]
    bad_case = {"id": "bad", **bad_case}
    chunks = bad_case.pop("chunks", [{"chunk_id": "a", "rank": 1}, {"chunk_id": "b", "rank": 2}])
    bad = {"test_case_id": "bad", "case": bad_case, "retrieved_chunks": chunks, "references": [{"chunk_id": "a"}]}
    rng = random.Random(5)
    good = [_record(rng, i, (20,)) for i in range(20)]
    good = [r for r in good if _plain(r, False)][:16]
    data = b"".join(orjson.dumps(r) + b"\n" for r in (*good[:10], bad, *good[10:]))
    with pytest.raises(error) as expected:
        score_case_retrieval(bad_case, chunks, bad["references"], None, "off", [10, 20])
    monkeypatch.setattr("evalkit.rescore.scoring._BATCH_SIZE", 7, raising=False)
    job = _RescoreJob(run=RunDir(_folder(tmp_path, data)), given_cases=None, ks=[10, 20], snippets=False, folder_mode="off",
                      case_sensitive=True, lean=True)
    with pytest.raises(error) as got:
        _rescore_part(job)
    assert type(got.value) is type(expected.value)
    if isinstance(expected.value, InputError):
        assert [(p.message, p.field) for p in got.value.problems] == [(p.message, p.field) for p in expected.value.problems]


@pytest.mark.parametrize("lean", [True, False])
def test_rescore_part_with_given_cases_equals_per_record_scoring(tmp_path, monkeypatch, lean) -> None:
    """--eval-set: each record is scored with the given case of its test_case_id (a JSON
    line, as `_labels` keeps it), re-labelled or regrouped here; records whose id the eval
    set lacks are skipped and reported as missing."""
    rng = random.Random(31)
    stored = [orjson.loads(line) for line in _stored(3, 500).splitlines()]
    given: dict[str, str] = {}
    for i, rec in enumerate(stored):
        if i % 10 == 3:
            continue  # not in the eval set any more
        case = rec["case"] if rng.random() < 0.5 else _record(rng, i)["case"]  # re-labelled (new supports, groups, tags)
        given[rec["case"]["id"]] = orjson.dumps({**case, "id": rec["case"]["id"]}).decode()
    if stored:
        stored[1]["test_case_id"] = 17  # not a string: missing, named as "17"
    folder = _folder(tmp_path, b"".join(orjson.dumps(r) + b"\n" for r in stored))
    ks, snippets, cs, folder_mode = [5], True, False, "on"

    table, worst = RecordTable(ks), WorstCases(ks[0])
    counts = {"records": 0, "cut_chunks": 0, "refs_dropped": 0}
    missing, regrouped = [], 0
    for rec in stored:
        case_id = rec.get("test_case_id")
        raw = given.get(case_id) if isinstance(case_id, str) else None
        if raw is None:
            missing.append(str(case_id))
            continue
        case = orjson.loads(raw)
        regrouped += _grouping(rec.get("case") or {}) != _grouping(case)
        chunks = rec.get("retrieved_chunks") or []
        rm = score_case_retrieval(case, chunks, rec.get("references") or [], rec.get("folder_selection"), folder_mode, ks,
                                  require_snippets=snippets, case_sensitive=cs)
        full = {**rec, "case": case, "retrieval_metrics": rm}
        table.add_record({"case": case, "retrieval_metrics": rm} if lean else full)
        worst.add(full)
        counts["records"] += 1
        counts["cut_chunks"] += sum(1 for c in chunks if isinstance(c, dict) and c.get("text_truncated"))
        counts["refs_dropped"] += bool(rec.get("references_dropped"))
    assert missing and regrouped  # the test reaches both

    for size in (None, 7):
        with monkeypatch.context() as m:
            if size is not None:
                m.setattr("evalkit.rescore.scoring._BATCH_SIZE", size, raising=False)
            job = _RescoreJob(run=RunDir(folder), given_cases=given, ks=ks, snippets=snippets, folder_mode=folder_mode,
                              case_sensitive=cs, lean=lean)
            part = _rescore_part(job)
        assert _table_state(part.table) == _table_state(table), size
        assert part.worst.rows() == worst.rows(), size
        assert part.counts == counts, size
        assert (part.missing, part.regrouped) == (missing, regrouped), size

