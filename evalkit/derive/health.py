"""Warnings about a run whose numbers measure less than they seem to.

A run can finish with exit 0 and a Recall of 0.000 because nothing was searched: the
request named a vault the server does not serve, the index is empty, the eval set's
paths are spelled for another layout. Those are not the chatbot's quality and must not
pass for it. These checks read the finished records (streamed, one pass) and return
warnings that metrics.json stores under `warnings` and the CLI prints:

- `no_chunks`: more than a third of the answerable cases that got an answer retrieved
  no chunk at all;
- `gold_never_retrieved`: answerable cases none of whose gold supports matched any
  chunk retrieved for *any* case of the run — their anchors point at something the
  target never returns (a wrong rel_path or heading, another vault, an unindexed file);
- `target_errors`: cases the target failed (the metrics count them as misses);
- `unreviewed_labels`: cases whose labels no person has reviewed (`label_source` "auto"
  from `label --accept-top`, "generated" from `evalkit generate`): their gold is a guess,
  and the numbers over them measure agreement with it (`evalkit label --review-auto`);
- `contract_<rule>`: answers that break a rule of the contract on what a chatbot returns
  (`evalkit.targets.contract`: heading path form, the section's own heading, unique chunk
  ids, ranks, relative paths), with an example from a response, the rule and the fix;
- `gold_path_forms`: gold notes never retrieved under their own path but retrieved under
  another form of it (absolute, another case, another folder prefix, no `.md`);
- `retrieval_unmeasurable` (severity "error"): answerable labeled cases got chunks, not one
  chunk of the whole run matched any gold support, and yet the answers were about the
  labels' notes (a gold note retrieved under its path or another form of it) or broke a
  contract rule that hides matches: the answers and the labels did not meet, and the run
  did not measure retrieval. run_eval exits 2 on it unless `--allow-format-mismatch`.

Each warning is `{"kind", "severity", "message", "n", "of", "ids"}`; ids are capped at 20.
`severity` is "warning" when the run as a whole is suspect, "info" when a few cases are
(a handful of never-retrieved gold supports is what hard questions look like too).
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from itertools import accumulate
from typing import Any, NamedTuple

from evalkit.evalset.anchors import (
    int_or_none,
    match_support,
    normalize_rel_path,
    path_components,
    support_form,
)
from evalkit.schema import REVIEW_SOURCES
from evalkit.store.runlog import Rec
from evalkit.targets.contract import ContractCheck, chunk_keys

__all__ = ["NO_CHUNKS_SHARE", "UNMEASURABLE", "RunHealth", "is_health_warning", "run_warnings"]

UNMEASURABLE = "retrieval_unmeasurable"
# The kinds `RunHealth.warnings` makes (besides `contract_<rule>`): a derive makes them
# again from the records, so a re-derive drops the stored ones of these kinds.
HEALTH_KINDS = frozenset({"no_chunks", "gold_never_retrieved", "target_errors", "unreviewed_labels",
                          "gold_path_forms", UNMEASURABLE})


def is_health_warning(warning: Mapping[str, Any]) -> bool:
    """Whether `warning` is one `RunHealth` makes from a run's records."""
    kind = str(warning.get("kind") or "")
    return kind in HEALTH_KINDS or kind.startswith("contract_")

NO_CHUNKS_SHARE = 1 / 3
_MAX_IDS = 20


class _Support(NamedTuple):
    """What `match_support` (without snippets) and the path checks read of a gold support:
    a tuple, read by attribute as match_support reads a model."""

    chunk_id: Any
    rel_path: Any
    heading_path: Any
    start_line: Any
    end_line: Any


# Values of these types are equal only to values of the same type (1 == True == 1.0 are not).
_PLAIN = frozenset({str, int, type(None)})


def _is_target_error(record: Mapping[str, Any]) -> bool:
    err = record.get("error")
    return bool(err) and err.get("kind") != "empty_answer"


def run_warnings(records: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The warnings for one run's records (see the module docstring). Empty = none."""
    health = RunHealth()
    for rec in records:
        health.add(rec)
    return health.warnings()


class RunHealth:
    """run_warnings as an accumulator, so the runner reads results.jsonl once for the
    aggregate and the warnings together: `add` each record, then `warnings()`."""

    def __init__(self) -> None:
        self.n_cases = 0
        self.errors: list[str] = []
        self.answered = 0  # answerable cases the target answered
        self.empty: list[str] = []
        # Every distinct location retrieved anywhere in the run, grouped by file, so a gold
        # support is checked only against chunks of its own file.
        # One set finds repeats; each file lists its own (thousands of small per-file sets
        # weighed more than the locations in them).
        self.seen_by_file: dict[str, list[tuple[Any, ...]]] = defaultdict(list)
        self._seen: set[tuple[Any, ...]] = set()
        self.seen_ids: set[str] = set()
        # Per answerable labeled case, once (a --trials run asks each case N times): its
        # supports, reduced to what matching reads and shared between equal ones, since
        # the whole run's labels are held until `warnings()`.
        self.gold: dict[str, tuple[_Support, ...]] = {}
        self._supports: dict[tuple, _Support] = {}
        self._paths: dict[Any, Any] = {}  # one copy of each raw chunk path (a file has many chunks)
        self.unreviewed: dict[str, None] = {}  # ids, in order, once each (--trials)
        # Its memo of the run's chunks also tells `add` which answers hold only chunks
        # recorded before (`ContractCheck.seen_clean`): one lookup a chunk serves both.
        self.contract = ContractCheck()
        self.with_chunks = 0  # answerable, labeled cases that retrieved something
        self.bare_follow_ups: set[str] = set()  # later turns sent without their history

    def add(self, rec: Mapping[str, Any]) -> None:
        self.n_cases += 1
        case = rec.get("case") or {}
        cid = str(rec.get(Rec.CASE_ID))
        if case.get("label_source") in REVIEW_SOURCES:
            self.unreviewed[cid] = None
        if _is_target_error(rec):
            self.errors.append(cid)
            return
        chunks = rec.get("retrieved_chunks") or []
        keys = chunk_keys(chunks) if chunks else None
        self.contract.add(chunks, cid, keys)
        # An answer of chunks the contract check's memo held, all clean (ids str or None, so
        # equal keys are equal ids), was recorded when they entered it: every key enters the
        # memo through this `add`, and an answer with a new one is recorded whole below.
        if chunks and not self.contract.seen_clean:
            for c in chunks:
                if c.get("chunk_id"):
                    self.seen_ids.add(str(c["chunk_id"]))
                raw = c.get("rel_path")
                if type(raw) is str:
                    raw = self._paths.setdefault(raw, raw)
                location = (raw, c.get("heading_path"), c.get("start_line"), c.get("end_line"), c.get("chunk_id"))
                if location not in self._seen:
                    self._seen.add(location)
                    self.seen_by_file[normalize_rel_path(raw)].append(location)
        if case.get("answerable", True):
            self.answered += 1
            if not chunks:
                self.empty.append(cid)
            supports = case.get("gold_supports") or []
            if supports and cid not in self.gold:  # a --trials run asks each case N times
                self.gold[cid] = tuple(map(self._support, supports))
                self.with_chunks += bool(chunks)
                conversation = case.get("conversation")
                if isinstance(conversation, Mapping) and (conversation.get("turn") or 1) > 1 and not rec.get("history"):
                    self.bare_follow_ups.add(cid)  # asked without the turns before it (--history none)

    def _support(self, support: Mapping[str, Any]) -> _Support:
        """A support as `_Support`, one object per distinct support."""
        values = _Support._make(map(support.get, _Support._fields))
        # Equal tuples must mean equal supports: 1, True and 1.0 are different line numbers
        # or ids (str() differs), so other types join the key.
        key: tuple = values if all(type(v) in _PLAIN for v in values) else (values, tuple(map(type, values)))
        try:
            return self._supports.setdefault(key, values)
        except TypeError:  # an unhashable value: not shared
            return values

    def warnings(self) -> list[dict[str, Any]]:
        n_cases, errors, answered, empty = self.n_cases, self.errors, self.answered, self.empty
        gold = self.gold  # case id -> its supports
        seen_by_file, seen_ids = self.seen_by_file, self.seen_ids
        out: list[dict[str, Any]] = []
        if errors:
            out.append(
                {
                    "kind": "target_errors",
                    "severity": "warning",
                    "n": len(errors),
                    "of": n_cases,
                    "ids": list(dict.fromkeys(errors))[:_MAX_IDS],
                    "message": f"the target failed {len(errors)} of {n_cases} cases; they count as misses in every metric",
                }
            )
        if answered and len(empty) > answered * NO_CHUNKS_SHARE:
            out.append(
                {
                    "kind": "no_chunks",
                    "severity": "warning",
                    "n": len(empty),
                    "of": answered,
                    "ids": list(dict.fromkeys(empty))[:_MAX_IDS],
                    "message": (
                        f"{len(empty)} of {answered} answerable cases retrieved no chunk at all: is the index "
                        "empty, does the request name a vault or folder the target does not serve "
                        "(--send-scope), or does the target leave out debug.retrieved_chunks?"
                    ),
                }
            )
        if self.unreviewed:
            ids = list(self.unreviewed)
            out.append(
                {
                    "kind": "unreviewed_labels",
                    "severity": "warning",
                    "n": len(ids),
                    "of": n_cases,
                    "ids": ids[:_MAX_IDS],
                    "message": (
                        f"{len(ids)} case(s) ({', '.join(ids[:5])}{', …' if len(ids) > 5 else ''}) carry labels no person "
                        "has reviewed (label_source auto / generated): their gold is a guess; review them with "
                        "`evalkit label --review-auto`"
                    ),
                }
            )
        matched = _SeenChunks(seen_by_file, seen_ids).matched
        never = [cid for cid, supports in gold.items() if not any(map(matched, supports))]
        if never:
            # A follow-up asked without its history ("and the action items?") may name nothing
            # to search by: a miss of its own, not a sign the anchors and the target disagree.
            bare = sum(1 for cid in never if cid in self.bare_follow_ups)
            # Gold that did match shows the target's paths and headings in the anchors' form:
            # with a third or more of the cases' gold retrieved the rest are retrieval misses,
            # however many (a LangChain run at --k 1 missed 4 of 10 with a right mapping, and
            # was told its anchors and target disagree: issue 43).
            n_matched = len(gold) - len(never)
            many = len(never) - bare > len(gold) * NO_CHUNKS_SHARE and n_matched < len(gold) * NO_CHUNKS_SHARE
            out.append(
                {
                    "kind": "gold_never_retrieved",
                    "severity": "warning" if many else "info",
                    "n": len(never),
                    "of": len(gold),
                    "ids": never[:_MAX_IDS],
                    "message": (
                        f"{len(never)} of {len(gold)} answerable cases ({', '.join(never[:5])}"
                        f"{', …' if len(never) > 5 else ''}) {'has' if len(never) == 1 else 'have'} gold supports "
                        "that match no chunk retrieved "
                        "for any question of this run: "
                        + (
                            "so many that the anchors and the target probably disagree: check rel_path / "
                            "heading_path against the target's index (evalkit validate --vault), the vault it "
                            "serves, and whether those files were indexed"
                            if many
                            else "retrieval misses, or anchors the target cannot return (evalkit validate --vault "
                            "checks them against the notes)"
                        )
                        + (
                            f"; {bare} of them {'is a follow-up turn' if bare == 1 else 'are follow-up turns'} asked "
                            "without the turns before it (--history none), whose question may name nothing to search by"
                            if bare else ""
                        )
                    ),
                    **({"n_without_history": bare} if bare else {}),
                }
            )
        out += [f.to_warning(_MAX_IDS) for f in self.contract.findings()]
        forms = _other_path_forms(gold, seen_by_file)
        if forms:
            shown = "; ".join(f"{g!r} retrieved as {o!r}" for g, o in list(forms.items())[:3])
            out.append(
                {
                    "kind": "gold_path_forms",
                    "severity": "warning",
                    "n": len(forms),
                    "of": len({normalize_rel_path(s.rel_path) for ss in gold.values() for s in ss}),
                    "ids": [],
                    "message": (
                        f"{len(forms)} gold note(s) were never retrieved under their own path but were under "
                        f"another form of it: {shown}. rel_path must be relative to the notes folder, as in "
                        "the eval set (docs/api-contract.md)"
                    ),
                }
            )
        # Nothing matched, and the answers were about the labels' notes (a gold note retrieved
        # under its path or another form of it) or broke a contract rule that hides matches:
        # the two sides did not meet. A chatbot that only ever retrieved other notes was
        # measured (its 0 is true): that is gold_never_retrieved, not this.
        contract_errors = any(f.rule.severity == "error" for f in self.contract.findings())
        met_a_gold_note = any(normalize_rel_path(s.rel_path) in seen_by_file for ss in gold.values() for s in ss)
        if gold and self.with_chunks and len(never) == len(gold) and (met_a_gold_note or forms or contract_errors):
            out.insert(
                0,
                {
                    "kind": UNMEASURABLE,
                    "severity": "error",
                    "n": len(gold),
                    "of": len(gold),
                    "ids": [],
                    "message": (
                        f"not one retrieved chunk of this run matched any gold support of its {len(gold)} "
                        "labeled cases: retrieval was not measured, and every retrieval metric is 0 because "
                        "the answers and the labels do not meet, not because of the chatbot's quality. "
                        "Check the contract findings above, rel_path and heading_path against the notes "
                        "(evalkit check-target; evalkit validate --vault); --allow-format-mismatch accepts "
                        "the run as it is"
                    ),
                },
            )
        return out


def _other_path_forms(gold: Mapping[str, tuple[_Support, ...]], seen_by_file: Mapping[str, list]) -> dict[str, str]:
    """Gold paths never retrieved as such, each with a retrieved path that is another form of
    it: equal case-folded or without `.md`, or one ending with the other at a `/`. The
    retrieved path given is the first such one in the run (as the target first wrote it).

    Lookups, not a scan of every retrieved path per gold path: each retrieved form `q` is
    indexed whole and by every tail after a `/` (`q` ends with "/" + tail), and a gold form
    looks up itself in both and each of its own tails in the first."""
    whole: dict[str, int] = {}  # retrieved form -> its first position among the retrieved paths
    tails: dict[str, int] = {}  # tail after a "/" of a retrieved form -> first position
    seen = [p for p in seen_by_file if p]
    for pos, p in enumerate(seen):
        q = p.casefold().removesuffix(".md")
        whole.setdefault(q, pos)
        at = q.find("/")
        while at >= 0:
            tails.setdefault(q[at + 1 :], pos)
            at = q.find("/", at + 1)
    out: dict[str, str] = {}
    for supports in gold.values():
        for s in supports:
            g = normalize_rel_path(s.rel_path)
            if not g or g in seen_by_file or g in out:
                continue
            bare = g.casefold().removesuffix(".md")
            # q == bare, q ends with "/" + bare, bare ends with "/" + q: the first q of the three.
            found = [x for x in (whole.get(bare), tails.get(bare)) if x is not None]
            at = bare.find("/")
            while at >= 0:
                x = whole.get(bare[at + 1 :])
                if x is not None:
                    found.append(x)
                at = bare.find("/", at + 1)
            if found:
                out[g] = seen_by_file[seen[min(found)]][0][0]  # as the target first wrote it
    return out


class _FileIndex(NamedTuple):
    """What the chunks retrieved from one file offer `match_support` (without snippets,
    case-sensitive), so a support costs a few lookups instead of a pass over them:

    - `ids`: str() of the chunk ids that are not None but falsy (0, ""): the run-wide id set
      holds the others, and these match only a support of their own file;
    - `headings`: every prefix of every chunk's heading components, () included (the anchor
      form: the chunk's components start with the support's);
    - `loose`: the same for the chunks without both line numbers (the span form falls back
      to the anchor form on them);
    - `starts`, `reach`: the chunks with both line numbers, by start line, and the largest end
      line up to each (the span form: some chunk starts at or before the support's end and
      ends at or after its start).
    """

    ids: frozenset[str]
    headings: frozenset[tuple[str, ...]]
    loose: frozenset[tuple[str, ...]]
    starts: list[int]
    reach: list[int]


def _file_index(locations: Sequence[tuple[Any, ...]]) -> _FileIndex:
    ids: set[str] = set()
    headings: set[tuple[str, ...]] = set()
    loose: set[tuple[str, ...]] = set()
    spans: list[tuple[int, int]] = []
    for _, heading_path, start, end, chunk_id in locations:
        if chunk_id is not None and not chunk_id:
            ids.add(str(chunk_id))
        comps = path_components(heading_path, True)
        prefixes = [comps[:i] for i in range(len(comps) + 1)]
        headings.update(prefixes)
        start, end = int_or_none(start), int_or_none(end)
        if start is not None and end is not None:
            spans.append((start, end))
        else:
            loose.update(prefixes)
    spans.sort()
    reach = list(accumulate((e for _, e in spans), max))
    return _FileIndex(frozenset(ids), frozenset(headings), frozenset(loose), [s for s, _ in spans], reach)


class _SeenChunks:
    """Whether a gold support matches any chunk retrieved in the run, by lookups: the answer
    of `match_support(support, chunk)` over every chunk of its file, and its id over the
    run's ids (see `_ever_matched`), with each file's chunks indexed once (`_FileIndex`)."""

    def __init__(self, seen_by_file: Mapping[str, list], seen_ids: set[str]) -> None:
        self.seen_by_file, self.seen_ids = seen_by_file, seen_ids
        self.files: dict[str, _FileIndex | None] = {}  # None: the file's values are not plain; scan it
        # By identity: equal supports are one object (`RunHealth._support`), and many cases
        # share one (100,000 cases of a few thousand notes), all held until the warnings are made.
        self.known: dict[int, bool] = {}

    def matched(self, support: _Support) -> bool:
        known = self.known.get(id(support))
        if known is None:
            known = self.known[id(support)] = self._matched(support)
        return known

    def _matched(self, support: _Support) -> bool:
        gold_id = support.chunk_id
        if gold_id is not None and str(gold_id) in self.seen_ids:
            return True
        file = normalize_rel_path(support.rel_path)
        locations = self.seen_by_file.get(file)
        if not locations:
            return False
        index = self.files.get(file, False)
        if index is False:
            index = self.files[file] = _file_index(locations) if all(map(_plain, locations)) else None
        if index is None:
            return _ever_matched(support, self.seen_by_file, self.seen_ids)
        if gold_id is not None and str(gold_id) != "" and str(gold_id) in index.ids:
            return True
        if not file:
            return False  # no file: matched by id only (match_support)
        span, heading_given, heading, _ = support_form(support, True)
        if span is not None:
            at = bisect_right(index.starts, span[1])  # chunks starting at or before the support's end
            if at and index.reach[at - 1] >= span[0]:
                return True
            return heading_given and heading in index.loose
        return heading in index.headings


# The values a stored run's chunks carry (JSON strings, integers, null): on them the index
# is exactly the scan. Other types (a float line number, a bool) are left to the scan.
def _plain(location: tuple[Any, ...]) -> bool:
    _, heading_path, start, end, _ = location
    return (type(heading_path) is str or heading_path is None) and type(start) in _LINE and type(end) in _LINE


_LINE = frozenset({int, type(None)})


def _ever_matched(support: _Support, seen_by_file: Mapping[str, list], seen_ids: set[str]) -> bool:
    """The scan `_SeenChunks` answers by lookups: kept for files whose values are not plain."""
    if support.chunk_id is not None and str(support.chunk_id) in seen_ids:
        return True
    for rel_path, heading_path, start, end, chunk_id in seen_by_file.get(normalize_rel_path(support.rel_path), ()):
        chunk = {"rel_path": rel_path, "heading_path": heading_path, "start_line": start, "end_line": end, "chunk_id": chunk_id}
        if match_support(support, chunk):
            return True
    return False
