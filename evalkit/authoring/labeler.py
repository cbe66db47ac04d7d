"""The interactive gold labeler: a plain `LabelSession` model and a thin Textual app over it.

`LabelSession` holds everything a labeling session knows (the cases to walk, the cursor,
each case's retrieved chunks and edited JSON) and has one pure method per key. It edits
the eval set through `labeling.EvalSetFile`, so a save is atomic and every case that was
not changed keeps its exact bytes. `LabelApp` (Textual, imported lazily) draws the session
and maps keys to its methods; the retrieval call is its only I/O besides saving.

Supports are stored as anchors `{rel_path, heading_path[, snippets]}`, never chunk ids.
A chunk is *selected* when a gold support covers it: same file, and the support's heading
path is a heading-boundary prefix of the chunk's (the anchor rule of `anchors.py`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalkit.authoring.labeling import REVIEW_SOURCES, EvalSetFile, check_writable, open_version
from evalkit.errors import BadConfig, Problem, TargetError
from evalkit.evalset.anchors import HEADING_DELIMITER, heading_components, normalize_heading_path, normalize_rel_path
from evalkit.notes.markdown import read_note
from evalkit.schema import PROMOTED

__all__ = ["LabelSession", "choose_cases", "question_words", "sentences", "open_session"]

DEFAULT_K = 20
_STOP = frozenset(
    "the a an and or of to in on at for is are was were be been my me i you your we our it its this that "
    "what which who whom whose when where why how do does did with from by as about into than then there "
    "their they them can could should would will shall may might have has had not no yes".split()
)
_WORD = re.compile(r"[\w][\w'-]*", re.UNICODE)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def question_words(question: str) -> list[str]:
    """The words of a question worth highlighting: 3+ characters, not a stop word, lower-cased."""
    out: list[str] = []
    for w in _WORD.findall(question.lower()):
        w = w.strip("'-")
        if len(w) >= 3 and w not in _STOP and w not in out:
            out.append(w)
    return out


def sentences(text: str) -> list[str]:
    """Snippet candidates of a chunk's text: its non-empty lines split into sentences.

    Each candidate is a verbatim substring of the text (list markers, `>` and `|` trimmed
    from its ends), so as a snippet it matches the chunk it came from. Heading lines (ATX
    or setext, as the Markdown reader finds them) are skipped: a heading is the anchor's
    job, not a snippet's; a `#tag` line or a `# comment` in a code block is text.
    """
    note = read_note(text, front_matter=False)
    heading_lines = {n for h in note.headings for n in range(h.line, h.end_line + 1)}
    out: list[str] = []
    for number, whole in enumerate(note.lines, start=1):
        if number in heading_lines:
            continue
        for line in whole.splitlines():  # other line breaks (\u2028, ...) still end a candidate
            for part in _SENTENCE_END.split(line):
                s = part.strip().lstrip("-*>#| ").rstrip("| ").strip()
                if len(s) >= 3 and s not in out:
                    out.append(s)
    return out


def _covers(support: dict[str, Any], chunk: dict[str, Any]) -> bool:
    """Anchor rule without snippets: same file, heading path a prefix at a heading boundary."""
    if not support.get("rel_path") or normalize_rel_path(support["rel_path"]) != normalize_rel_path(chunk.get("rel_path")):
        return False
    gold, got = heading_components(support.get("heading_path")), heading_components(chunk.get("heading_path"))
    return got[: len(gold)] == gold


@dataclass
class CaseState:
    """One case as the session edits it: its JSON object (key order kept) and its chunks."""

    case_id: str
    obj: dict[str, Any]
    chunks: list[dict[str, Any]] | None = None  # None until retrieved
    error: str | None = None
    changed: bool = False


@dataclass
class LabelSession:
    """A labeling session over one eval set file.

    Args:
        doc: the file, as an EvalSetFile.
        case_ids: the cases to walk, in order.
        output: where saves go (default: the file itself); the first save adopts it.
        corpus: an anchorcheck Corpus for the whole-section view (`o`); None = chunk text only.
        replace: the first save may replace an existing `output` (`--force`; the old file
            is copied to a `.bak` first, named in `backed_up`).
    """

    doc: EvalSetFile
    case_ids: list[str]
    output: Path | None = None
    corpus: Any = None
    replace: bool = False
    index: int = 0
    cursor: int = 0
    _states: dict[str, CaseState] = field(default_factory=dict)

    # ------------------------------------------------------------------ navigation

    @property
    def case(self) -> CaseState:
        """The case shown now (its state is created on first visit)."""
        cid = self.case_ids[self.index]
        if cid not in self._states:
            self._states[cid] = CaseState(cid, self.doc.case(cid))
        return self._states[cid]

    @property
    def supports(self) -> list[dict[str, Any]]:
        """The current case's gold supports (the live list)."""
        return self.case.obj.setdefault("gold_supports", [])

    @property
    def dirty(self) -> bool:
        """Some case was changed since the last save."""
        return any(s.changed for s in self._states.values())

    def next(self) -> bool:
        """Go to the next case; False at the last one."""
        if self.index + 1 >= len(self.case_ids):
            return False
        self.index, self.cursor = self.index + 1, 0
        return True

    def prev(self) -> bool:
        """Go to the previous case; False at the first one."""
        if self.index == 0:
            return False
        self.index, self.cursor = self.index - 1, 0
        return True

    def move(self, delta: int) -> None:
        """Move the chunk cursor, clamped to the retrieved chunks."""
        n = len(self.case.chunks or [])
        self.cursor = max(0, min(n - 1, self.cursor + delta)) if n else 0

    def set_chunks(self, chunks: Sequence[Any] | None, error: str | None = None, *, state: CaseState | None = None) -> None:
        """Store a case's retrieved chunks (dicts or RetrievedChunk) in rank order (default: the current case)."""
        state = state or self.case
        dicts = [c if isinstance(c, dict) else c.model_dump(mode="json") for c in (chunks or [])]
        for pos, d in enumerate(dicts, start=1):
            if d.get("rank") is None:
                d["rank"] = pos
        state.chunks = sorted(dicts, key=lambda d: d["rank"])
        state.error = error
        if state is self.case:
            self.cursor = 0

    # ------------------------------------------------------------------ key actions

    def chunk(self, pos: int | None = None) -> dict[str, Any] | None:
        """The chunk at list position `pos` (default: the cursor), or None."""
        chunks = self.case.chunks or []
        pos = self.cursor if pos is None else pos
        return chunks[pos] if 0 <= pos < len(chunks) else None

    def support_for(self, pos: int | None = None) -> int | None:
        """Index of the gold support covering the chunk at `pos`, or None (not selected)."""
        c = self.chunk(pos)
        if c is None:
            return None
        return next((i for i, s in enumerate(self.supports) if _covers(s, c)), None)

    def toggle(self, pos: int | None = None) -> None:
        """Space: select the chunk (adds anchor {rel_path, heading_path}) or drop its support.

        Selecting a chunk of an unanswerable case makes it answerable again.
        """
        c = self.chunk(pos)
        if c is None or not c.get("rel_path"):
            return
        i = self.support_for(pos)
        if i is not None:
            self._remove_support(i)
        else:
            self._set_answerable(True)
            self.supports.append({"rel_path": c["rel_path"], "heading_path": normalize_heading_path(c.get("heading_path") or "")})
        self._touch()

    def shallower(self, pos: int | None = None) -> None:
        """`d`: store the chunk's support one heading level up ("# A > ## B" -> "# A").

        An unselected chunk is selected first. Never goes above the note's top heading (a
        support with one component stays); a support that becomes equal to another one is
        merged into it (snippets joined).
        """
        if self.support_for(pos) is None:
            self.toggle(pos)
        i = self.support_for(pos)
        if i is None:
            return
        s = self.supports[i]
        comps = heading_components(s.get("heading_path"))
        if len(comps) <= 1:
            return
        s["heading_path"] = HEADING_DELIMITER.join(comps[:-1])
        twin = next((j for j, o in enumerate(self.supports) if j != i and o.get("rel_path") == s["rel_path"] and normalize_heading_path(o.get("heading_path")) == s["heading_path"]), None)
        if twin is not None:
            keep = self.supports[twin]
            for snip in s.get("snippets", []):
                if snip not in keep.setdefault("snippets", []):
                    keep["snippets"].append(snip)
            if not keep["snippets"]:
                del keep["snippets"]
            self._remove_support(i)
        self._touch()

    def add_snippet(self, text: str, pos: int | None = None) -> None:
        """`s`: add `text` to the snippets of the chunk's support (selecting the chunk first)."""
        text = text.strip()
        if not text:
            return
        if self.support_for(pos) is None:
            self.toggle(pos)
        i = self.support_for(pos)
        if i is None:
            return
        snippets = self.supports[i].setdefault("snippets", [])
        if text not in snippets:
            snippets.append(text)
        self._touch()

    def snippet_choices(self, pos: int | None = None) -> list[str]:
        """Sentences of the chunk's text, the ones holding most question words first (stable)."""
        c = self.chunk(pos)
        if c is None:
            return []
        words = question_words(self.case.obj.get("question", ""))
        cands = sentences(c.get("text") or "")
        return sorted(cands, key=lambda s: -sum(w in s.lower() for w in words))

    def unanswerable(self) -> None:
        """`u`: mark the case unanswerable (clears supports and groups); again: answerable."""
        if self.case.obj.get("answerable") is False:
            self._set_answerable(True)
        else:
            self._set_answerable(False)
            self.case.obj["gold_supports"] = []
            if "required_support_groups" in self.case.obj:
                self.case.obj["required_support_groups"] = None
        self._touch()

    def group(self) -> None:
        """`g`: toggle one required support group made of all the case's current supports.

        With supports 0..n-1, the group is [0, ..., n-1] (AND of all of them: multi-hop).
        If exactly that group is already there it is removed. Needs two or more supports.
        """
        n = len(self.supports)
        if n < 2:
            return
        wanted = list(range(n))
        groups = [g for g in (self.case.obj.get("required_support_groups") or [])]
        if wanted in groups:
            groups.remove(wanted)
        else:
            groups.append(wanted)
        self.case.obj["required_support_groups"] = groups or None
        self._touch()

    def drop_support(self, i: int) -> None:
        """Drop gold support `i` of the current case (its groups re-indexed, as `toggle` does);
        an index out of range changes nothing. The studio's "remove" on one support row."""
        if 0 <= i < len(self.supports):
            self._remove_support(i)
            self._touch()

    def set_key_facts(self, facts: Sequence[str]) -> None:
        """The current case's `expected_key_facts` (blank ones dropped; none: the field removed),
        as `label --review-auto`'s edit writes them (review.apply_edits)."""
        from evalkit.authoring.review import apply_edits

        kept = [f.strip() for f in facts if f.strip()]
        edited = apply_edits(self.case.obj, key_facts=kept)
        if edited != self.case.obj:
            self.case.obj.clear()
            self.case.obj.update(edited)
            self._touch()

    def section_text(self, pos: int | None = None) -> str:
        """`o`: the whole note section the chunk is in (its heading chain's lines), or the chunk text."""
        c = self.chunk(pos)
        if c is None:
            return ""
        outline = self.corpus.outline(c.get("rel_path", "")) if self.corpus is not None else None
        chain = outline.find_chain(c.get("heading_path"), case_sensitive=False) if outline is not None else None
        if outline is None or chain is None:
            return c.get("text") or ""
        start, end = outline.spans[chain]
        return "\n".join(outline.lines[start - 1 : end])

    # ------------------------------------------------------------------ saving

    def save(self) -> Path | None:
        """`w`: write every changed case through EvalSetFile (atomic; other lines byte-identical).

        Returns:
            The path written, or None when nothing changed.

        Raises:
            InputError: the file changed on disk since it was read.
        """
        changed = [s for s in self._states.values() if s.changed]
        if not changed:
            return None
        for s in changed:
            self.doc.replace(s.case_id, s.obj)
        dest = self.doc.write(self.output, adopt=True, replace=self.replace)
        self.output, self.replace = None, False  # adopted: later saves go to the same file
        for s in changed:
            s.changed = False
        return dest

    @property
    def backed_up(self) -> Path | None:
        """The `.bak` copy of the --output a `replace` save wrote over, if any."""
        return self.doc.backed_up

    def _touch(self) -> None:
        # A person edited the case: an accept_top label or a generated candidate is reviewed
        # now, a promoted question labeled.
        if self.case.obj.get("label_source") in (*REVIEW_SOURCES, PROMOTED):
            del self.case.obj["label_source"]
        self.case.changed = True

    def _set_answerable(self, value: bool) -> None:
        self.case.obj["answerable"] = value

    def _remove_support(self, i: int) -> None:
        del self.supports[i]
        groups = self.case.obj.get("required_support_groups")
        if groups:
            fixed = [[j - (j > i) for j in g if j != i] for g in groups]
            self.case.obj["required_support_groups"] = [g for g in fixed if g] or None


def choose_cases(
    path: str | Path,
    *,
    ids: Sequence[str] | None = None,
    all_cases: bool = False,
    category: Sequence[str] | None = None,
    tag: Sequence[str] | None = None,
) -> list[str]:
    """The case ids a session walks.

    `ids`: exactly those, in the order given. Otherwise: answerable cases without gold
    supports first, then (with `all_cases`) every other case in file order. `category` and
    `tag` filter (any of the given values).

    Raises:
        BadEvalSet: the file is invalid. BadConfig: an unknown id, or nothing to label.
    """
    from evalkit.evalset.load import load_eval_set

    cases = load_eval_set([path]).cases
    by_id = {c.id: c for c in cases}
    if ids:
        unknown = [i for i in ids if i not in by_id]
        if unknown:
            raise BadConfig([Problem(f"no case with id {i!r} in {path}", field="--ids") for i in unknown])
        chosen = [by_id[i] for i in ids]
    else:
        unlabeled = [c for c in cases if c.answerable and not c.gold_supports]
        chosen = unlabeled + ([c for c in cases if c not in unlabeled] if all_cases else [])
    if category:
        chosen = [c for c in chosen if c.category in category]
    if tag:
        chosen = [c for c in chosen if set(c.tags or []) & set(tag)]
    if not chosen:
        hint = "" if all_cases or ids else "; every answerable case has gold supports: pass --all (or --ids) to relabel"
        raise BadConfig(Problem(f"no case to label{hint}", path=str(path)))
    return [c.id for c in chosen]


def open_session(
    path: str | Path,
    *,
    output: str | Path | None = None,
    results_dir: str | Path = "results",
    corpus: Any = None,
    force: bool = False,
    **choose: Any,
) -> LabelSession:
    """Check the file may be written (the freeze rule), choose the cases, build the session.

    With `output`, saves go to that new version. When it exists and is a version of `path`
    (an earlier session of the same command saved it), the session goes on in it: the
    cases are chosen from it and saves edit it in place, so rerunning the same command
    continues and never replaces what was saved (`labeling.open_version`). With `force`
    the session starts again from `path`, and the first save replaces `output` after
    copying it to a `.bak`.

    Raises:
        BadConfig: the file to write is frozen (the message suggests --output), `output`
            exists and is not a version of `path` (without `force`), no case to label.
        BadEvalSet: the file is invalid.
    """
    source = Path(path)
    dest = Path(output) if output is not None else source
    check_writable(dest, results_dir, source=source)
    doc, write_to = open_version(source, output, force=force)
    ids = choose_cases(doc.path, **choose)
    return LabelSession(doc, ids, output=write_to, corpus=corpus, replace=force and write_to is not None)


async def retrieve(session: LabelSession, target: Any, k: int) -> None:
    """Ask the target for the current case's top `k` chunks (debug on) unless already cached."""
    from evalkit.config import RunSettings
    from evalkit.evalset.turns import reference_history
    from evalkit.run.records import build_request
    from evalkit.schema import EvalCase

    state = session.case
    if state.chunks is not None:
        return
    # The question as it is on disk: the session's edits do not change what is asked.
    case = EvalCase.model_validate(session.doc.case(state.case_id))
    try:
        request = build_request(case, RunSettings(k=[k]), history=reference_history(case))
        result = await target.ask(request, case_id=case.id)
    except TargetError as e:
        session.set_chunks([], error=str(e), state=state)
        return
    debug = result.response.debug
    session.set_chunks(debug.retrieved_chunks if debug else [], state=state)
